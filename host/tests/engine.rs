//! The policy engine against real compiled components: the shipped policies
//! and a hostile one that misbehaves on request.

use wasmgpu_test_support as common;

use std::time::{Duration, Instant};

use common::policy_bytes;
use wasmgpu::engine::bounds::REASON_BYTES;
use wasmgpu::engine::types::{Decision, Snapshot};
use wasmgpu::engine::{Engine, Limits, LoadedPolicy, PolicyError};
use wasmgpu_contract::Sharing::{Exclusive, Shared};
use wasmgpu_contract::testing::{node, request, snapshot, with_full_nvlink};
use wasmgpu_contract::validate::{Invalid, validate};

fn small() -> Snapshot {
    let mut busy = node("a100", 4, "NVIDIA A100-SXM4-40GB", 40960);
    busy.gpus[0].held = true;
    busy.gpus[0].allocated_mib = 40960;
    snapshot(
        vec![
            with_full_nvlink(node("h100", 8, "NVIDIA H100 80GB HBM3", 81559)),
            busy,
        ],
        vec![
            request("ml/train-0", 4, Exclusive, 40000),
            request("ml/train-1", 2, Exclusive, 0),
            request("ml/notebook", 1, Shared, 8192),
        ],
    )
}

fn engine() -> Engine {
    Engine::new(Limits {
        deadline: Duration::from_millis(500),
        memory_bytes: 64 << 20,
        ..Limits::default()
    })
    .unwrap()
}

fn hostile(engine: &Engine) -> LoadedPolicy {
    engine.load(&policy_bytes("hostile_policy")).unwrap()
}

fn run_hostile(engine: &Engine, mode: &str) -> Result<wasmgpu::engine::Round, PolicyError> {
    let mut snap = small();
    snap.config = mode.into();
    hostile(engine).allocate(&snap)
}

/// The engine still works after whatever happened before.
fn assert_healthy(engine: &Engine) {
    let binpack = engine.load(&policy_bytes("binpack")).unwrap();
    let round = binpack.allocate(&small()).unwrap();
    assert_eq!(validate(&small(), &round.decisions).accepted.len(), 3);
}

#[test]
fn shipped_policies_load_describe_and_place_every_pod_validly() {
    let engine = engine();
    for name in ["binpack", "spread"] {
        let policy = engine.load(&policy_bytes(name)).unwrap();
        assert_eq!(policy.info().name, name);
        assert!(policy.digest().as_str().starts_with("sha256:"));
        assert!(policy.imports().iter().any(|i| i == "log"));
        let snap = small();
        let round = policy.allocate(&snap).unwrap();
        let verdict = validate(&snap, &round.decisions);
        assert!(verdict.refused.is_empty(), "{name}: {:?}", verdict.refused);
        assert_eq!(verdict.accepted.len(), 3, "{name}: {:?}", round.decisions);
        assert!(round.stats.fuel_used > 0);
        assert!(round.stats.peak_memory_bytes > 0);
    }
}

#[test]
fn wasm_and_native_builds_of_a_policy_decide_the_same() {
    let engine = engine();
    let snap = wasmgpu_contract::testing::large(60, 120);
    let host_snap: Snapshot = snap.clone();
    for (name, native) in [
        (
            "binpack",
            wasmgpu_binpack::allocate
                as fn(&wasmgpu_contract::Snapshot) -> Vec<wasmgpu_contract::Decision>,
        ),
        ("spread", wasmgpu_spread::allocate),
    ] {
        let wasm = engine
            .load(&policy_bytes(name))
            .unwrap()
            .allocate(&host_snap)
            .unwrap()
            .decisions;
        let native: Vec<Decision> = native(&snap);
        assert_eq!(wasm, native, "{name}");
        assert!(validate(&host_snap, &wasm).refused.is_empty(), "{name}");
    }
}

#[test]
fn binpack_and_spread_place_differently() {
    let engine = engine();
    let snap: Snapshot = snapshot(
        vec![
            node("n0", 4, "NVIDIA L4", 24000),
            node("n1", 4, "NVIDIA L4", 24000),
        ],
        vec![
            request("ns/a", 1, Exclusive, 0),
            request("ns/b", 1, Exclusive, 0),
        ],
    );
    let nodes = |name: &str| -> Vec<String> {
        let round = engine
            .load(&policy_bytes(name))
            .unwrap()
            .allocate(&snap)
            .unwrap();
        validate(&snap, &round.decisions)
            .accepted
            .into_iter()
            .map(|a| a.node)
            .collect()
    };
    assert_eq!(nodes("binpack"), ["n0", "n0"]);
    assert_eq!(nodes("spread"), ["n0", "n1"]);
}

#[test]
fn a_policy_is_compiled_once_per_digest() {
    let engine = engine();
    let bytes = policy_bytes("spread");
    let first = engine.load(&bytes).unwrap();
    let started = Instant::now();
    let second = engine.load(&bytes).unwrap();
    assert_eq!(first.digest(), second.digest());
    assert_eq!(engine.cached(), 1);
    // A cache hit only links and describes: far below a compile.
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_component_compiled_once_loads_from_the_disk_cache_in_another_engine() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = policy_bytes("binpack");
    let cwasm = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
            .collect()
    };
    let mut first = engine();
    first.use_disk_cache(dir.path()).unwrap();
    let decided = first
        .load(&bytes)
        .unwrap()
        .allocate(&small())
        .unwrap()
        .decisions;
    let files = cwasm();
    assert_eq!(files.len(), 1, "one compiled file per component: {files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    let digest = wasmgpu::engine::Digest::of(&bytes);
    assert!(
        name.starts_with(digest.as_str().trim_start_matches("sha256:")),
        "{name}"
    );

    // A second engine (another process, in effect) loads the compiled file.
    let mut second = engine();
    second.use_disk_cache(dir.path()).unwrap();
    let again = second
        .load(&bytes)
        .unwrap()
        .allocate(&small())
        .unwrap()
        .decisions;
    assert_eq!(again, decided);
    assert_eq!(cwasm(), files, "nothing compiled or written again");

    // A torn file is compiled again and replaced, never trusted.
    std::fs::write(&files[0], b"not a compiled component").unwrap();
    let mut third = engine();
    third.use_disk_cache(dir.path()).unwrap();
    let after = third
        .load(&bytes)
        .unwrap()
        .allocate(&small())
        .unwrap()
        .decisions;
    assert_eq!(after, decided);
    assert!(
        std::fs::metadata(&files[0]).unwrap().len() > 1000,
        "the file was rewritten"
    );
}

#[test]
fn an_infinite_loop_runs_out_of_fuel_or_time() {
    let engine = Engine::new(Limits {
        fuel: 50_000_000,
        ..Limits::default()
    })
    .unwrap();
    assert_eq!(
        run_hostile(&engine, "loop").unwrap_err(),
        PolicyError::OutOfFuel { fuel: 50_000_000 }
    );
    assert_healthy(&engine);

    let engine = Engine::new(Limits {
        fuel: u64::MAX / 2,
        deadline: Duration::from_millis(200),
        ..Limits::default()
    })
    .unwrap();
    let policy = hostile(&engine);
    let mut snap = small();
    snap.config = "loop".into();
    let started = Instant::now();
    let error = policy.allocate(&snap).unwrap_err();
    assert_eq!(
        error,
        PolicyError::Deadline {
            deadline: Duration::from_millis(200)
        }
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopped near its deadline, not much later"
    );
    assert_healthy(&engine);
}

#[test]
fn without_fuel_the_deadline_alone_stops_a_loop_and_transfers_stay_bounded() {
    let engine = Engine::new(Limits {
        fuel: 0,
        deadline: Duration::from_millis(200),
        memory_bytes: 64 << 20,
        ..Limits::default()
    })
    .unwrap();
    let started = Instant::now();
    assert_eq!(
        run_hostile(&engine, "loop").unwrap_err(),
        PolicyError::Deadline {
            deadline: Duration::from_millis(200)
        }
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // The bound on what one transfer copies is not fuel's: it holds too.
    let error = run_hostile(&engine, "huge-output").unwrap_err();
    assert!(
        matches!(&error, PolicyError::InvalidOutput(m) if m.starts_with("more than 262144 bytes")),
        "{error}"
    );
    let error = run_hostile(&engine, "memory-bomb").unwrap_err();
    assert!(matches!(&error, PolicyError::MemoryLimit(_)), "{error}");
    // A healthy call places its pods and reports no fuel used.
    let binpack = engine.load(&policy_bytes("binpack")).unwrap();
    let round = binpack.allocate(&small()).unwrap();
    assert_eq!(round.stats.fuel_used, 0);
    assert_healthy(&engine);
}

#[test]
fn a_memory_bomb_hits_the_memory_limit() {
    let engine = engine();
    let error = run_hostile(&engine, "memory-bomb").unwrap_err();
    assert!(
        matches!(&error, PolicyError::MemoryLimit(m) if m.contains("limit 64 MiB")),
        "{error}"
    );
    assert_eq!(error.kind(), "memory-limit");
    assert_healthy(&engine);
}

#[test]
fn a_panic_is_a_trap_with_its_message() {
    let engine = engine();
    let error = run_hostile(&engine, "trap").unwrap_err();
    let PolicyError::Trap { log_tail, .. } = &error else {
        panic!("{error:?}")
    };
    assert!(
        log_tail.iter().any(|l| l.contains("deliberate trap")),
        "{log_tail:?}"
    );
    assert!(error.to_string().contains("deliberate trap"), "{error}");
    assert_healthy(&engine);
}

#[test]
fn deep_recursion_is_a_stack_overflow_trap() {
    let engine = engine();
    let error = run_hostile(&engine, "recursion").unwrap_err();
    assert!(
        matches!(&error, PolicyError::Trap { message, .. } if message.contains("stack")),
        "{error}"
    );
    assert_healthy(&engine);
}

#[test]
fn a_huge_output_is_invalid_before_it_is_copied() {
    let engine = engine();
    // 200,000 decisions do not fit the bytes 3 pending pods may return:
    // refused while lifting, before the list's elements are read.
    let error = run_hostile(&engine, "huge-output").unwrap_err();
    assert!(
        matches!(&error, PolicyError::InvalidOutput(m) if m.starts_with("more than 262144 bytes passed to the host at once")),
        "{error}"
    );
    // 30 small decisions fit the bytes but not the count.
    let error = run_hostile(&engine, "decisions:30").unwrap_err();
    assert!(
        matches!(&error, PolicyError::InvalidOutput(m) if m.starts_with("30 decisions for 3 pending pods (at most 22 accepted)")),
        "{error}"
    );
    assert_eq!(
        run_hostile(&engine, "decisions:22")
            .unwrap()
            .decisions
            .len(),
        22
    );
    assert_healthy(&engine);
}

#[test]
fn long_reasons_are_cut_and_huge_ones_refused() {
    let engine = engine();
    let round = run_hostile(&engine, "long-reason:5000").unwrap();
    let [Decision::Wait(wait)] = round.decisions.as_slice() else {
        panic!("{:?}", round.decisions)
    };
    assert_eq!(wait.reason, format!("{}…", "x".repeat(REASON_BYTES)));
    let error = run_hostile(&engine, "long-reason:20000000").unwrap_err();
    assert!(
        matches!(&error, PolicyError::InvalidOutput(m) if m.contains("bytes passed to the host at once")),
        "{error}"
    );
    assert_healthy(&engine);
}

#[test]
fn an_assignment_of_no_gpus_is_refused() {
    let engine = engine();
    let mut snap = small();
    snap.config = "no-gpus".into();
    let round = hostile(&engine).allocate(&snap).unwrap();
    let verdict = validate(&snap, &round.decisions);
    assert!(verdict.accepted.is_empty());
    assert_eq!(verdict.refused[0].reason, Invalid::NoGpus);
}

#[test]
fn impossible_decisions_are_refused_by_the_validator() {
    let engine = engine();
    let snap = {
        let mut s = small();
        s.config = "ghost-gpu".into();
        s
    };
    let round = hostile(&engine).allocate(&snap).unwrap();
    let verdict = validate(&snap, &round.decisions);
    assert_eq!(
        verdict.refused[0].reason,
        Invalid::UnknownGpu {
            gpu: 1000,
            node: "h100".into()
        }
    );

    let mut snap = small();
    snap.config = "taken-gpu".into();
    let round = hostile(&engine).allocate(&snap).unwrap();
    let verdict = validate(&snap, &round.decisions);
    assert!(verdict.accepted.is_empty());
    assert!(
        matches!(&verdict.refused[0].reason, Invalid::GpuTaken { by, .. } if by == "a running pod")
    );

    let mut snap: Snapshot = snapshot(
        vec![node("n", 2, "NVIDIA L4", 23034)],
        vec![
            request("ns/a", 1, Exclusive, 0),
            request("ns/b", 1, Exclusive, 0),
        ],
    );
    snap.config = "same-gpu-twice".into();
    let round = hostile(&engine).allocate(&snap).unwrap();
    assert_eq!(round.decisions.len(), 2);
    let verdict = validate(&snap, &round.decisions);
    assert_eq!(verdict.accepted.len(), 1);
    assert_eq!(
        verdict.refused[0].reason,
        Invalid::GpuTaken {
            gpu: "GPU-n-0".into(),
            by: "ns/a".into()
        }
    );
    assert_healthy(&engine);
}

#[test]
fn clocks_and_randomness_are_deterministic() {
    let engine = engine();
    let first = run_hostile(&engine, "clock-random").unwrap().decisions;
    let second = run_hostile(&engine, "clock-random").unwrap().decisions;
    assert_eq!(first, second);
    let Decision::Wait(d) = &first[0] else {
        panic!("{first:?}")
    };
    assert!(
        d.reason.starts_with("wall=0 elapsed=0 random="),
        "{}",
        d.reason
    );
    let other_engine = Engine::new(Limits::default()).unwrap();
    assert_eq!(
        run_hostile(&other_engine, "clock-random")
            .unwrap()
            .decisions,
        first
    );
}

#[test]
fn fuel_use_is_deterministic() {
    let engine = engine();
    let binpack = engine.load(&policy_bytes("binpack")).unwrap();
    let snap = small();
    let a = binpack.allocate(&snap).unwrap().stats.fuel_used;
    let b = binpack.allocate(&snap).unwrap().stats.fuel_used;
    assert_eq!(a, b);
}

#[test]
fn sleeping_is_refused() {
    let engine = engine();
    let policy = hostile(&engine);
    let mut snap = small();
    snap.config = "sleep".into();
    let started = Instant::now();
    let error = policy.allocate(&snap).unwrap_err();
    assert!(error.to_string().contains("may not sleep"), "{error}");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "did not actually sleep"
    );
    assert_healthy(&engine);
}

#[test]
fn there_is_no_filesystem_environment_or_arguments() {
    let engine = engine();
    let round = run_hostile(&engine, "snoop").unwrap();
    let Decision::Wait(d) = &round.decisions[0] else {
        panic!()
    };
    assert!(d.reason.starts_with("file=Err("), "{}", d.reason);
    assert!(d.reason.contains("dir=Err("), "{}", d.reason);
    assert!(d.reason.contains("env=[] args=[]"), "{}", d.reason);
}

#[test]
fn the_log_is_bounded() {
    let engine = engine();
    let round = run_hostile(&engine, "log-flood").unwrap();
    assert_eq!(round.stats.log.len(), 100);
    assert_eq!(round.stats.log_dropped, 9_900);
    assert_eq!(round.decisions.len(), 1, "logging costs no decision");
    assert_eq!(round.stats.log[0].len(), 1024 + '…'.len_utf8());
}

#[test]
fn stderr_is_bounded_like_the_log_and_never_fails_the_call() {
    let engine = engine();
    let round = run_hostile(&engine, "stderr-flood").expect("a flood of stderr is no failure");
    assert_eq!(round.decisions.len(), 1);
    let log = &round.stats.log;
    assert_eq!(log.len(), 100, "the same line limit as log");
    assert_eq!(round.stats.log_dropped, 9_900);
    assert!(log.iter().all(|l| l.starts_with("stderr: ")), "{log:?}");
    assert_eq!(log[0].len(), "stderr: ".len() + 1024 + '…'.len_utf8());
    assert!(
        log.last().unwrap().starts_with("stderr: line 9999 "),
        "the last lines are kept: {:?}",
        log.last()
    );
}

#[test]
fn what_is_not_a_policy_is_refused_with_the_reason() {
    let engine = engine();
    assert!(matches!(
        engine.load(b"hello"),
        Err(PolicyError::NotWasm(_))
    ));
    let core = wat::parse_str("(module (func (export \"allocate\")))").unwrap();
    assert_eq!(engine.load(&core).unwrap_err(), PolicyError::CoreModule);
    let empty = wat::parse_str("(component)").unwrap();
    let error = engine.load(&empty).unwrap_err();
    assert!(
        matches!(&error, PolicyError::WrongWorld(m) if m.contains("no export") && std::error::Error::source(&error).is_some()),
        "{error}"
    );
    let foreign =
        wat::parse_str(r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance (export "handle" (func)))))"#)
            .unwrap();
    let error = engine.load(&foreign).unwrap_err();
    assert!(
        matches!(&error, PolicyError::WrongWorld(m) if m.contains("wasi:http")),
        "{error}"
    );
    let mut truncated = policy_bytes("binpack");
    truncated.truncate(truncated.len() / 2);
    assert!(matches!(
        engine.load(&truncated),
        Err(PolicyError::Compile(_))
    ));
    assert_healthy(&engine);
}

#[test]
fn every_call_has_its_own_store() {
    // A round that fails does not leak into the next: every call has its own store.
    let engine = engine();
    let _ = run_hostile(&engine, "memory-bomb");
    let round = engine
        .load(&policy_bytes("spread"))
        .unwrap()
        .allocate(&small())
        .unwrap();
    assert!(round.stats.peak_memory_bytes < 64 << 20);
}

/// The SDK's allocator serves a round from the arena it keeps in the initial
/// memory (8 MiB, `policies/sdk/src/round_alloc.rs`): a round that fits in
/// it never grows the memory, which would cost the next instance of the
/// policy an `mprotect` of every page grown into. A round that outgrows the
/// arena still grows as before.
#[test]
fn a_round_that_fits_the_sdk_arena_never_grows_memory() {
    const ARENA: usize = 8 << 20;
    let engine = engine();
    let binpack = engine.load(&policy_bytes("binpack")).unwrap();
    let peak = |snapshot: &Snapshot| binpack.allocate(snapshot).unwrap().stats.peak_memory_bytes;
    let initial = peak(&small());
    assert!(
        initial > ARENA,
        "the arena is in the initial memory: {initial} bytes"
    );
    let medium = wasmgpu_contract::testing::large(300, 300);
    assert_eq!(
        peak(&medium),
        initial,
        "300 nodes x 8 GPUs, 300 pods fit the arena"
    );
    let big = wasmgpu_contract::testing::large(3000, 3000);
    assert!(
        peak(&big) > initial,
        "3,000 nodes x 8 GPUs, 3,000 pods outgrow it"
    );
}

// === policy ConfigMaps: the canary round before activation ===

fn policy_configmap(policy: &str, config: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    use std::collections::BTreeMap;
    k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(policy.into()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "policy.wasm".to_string(),
            k8s_openapi::ByteString(policy_bytes(policy)),
        )])),
        data: Some(BTreeMap::from([("config.json".to_string(), config.into())])),
        ..Default::default()
    }
}

#[test]
fn the_canary_accepts_the_shipped_policies_and_a_policy_that_waits() {
    let engine = engine();
    for (policy, config) in [
        ("binpack", ""),
        ("spread", ""),
        ("hostile-policy", "\"noop\""),
    ] {
        let payload =
            wasmgpu::controller::Payload::from_configmap(&policy_configmap(policy, config))
                .expect("payload");
        let active = payload
            .load(&engine)
            .unwrap_or_else(|e| panic!("{policy}: {e}"));
        assert_eq!(active.name, policy);
        assert_eq!(active.config, config);
    }
}

#[test]
fn the_canary_rejects_policies_that_fail_or_decide_invalidly() {
    use wasmgpu::controller::RejectError;
    let engine = engine();
    for config in [
        "\"trap\"",
        "\"loop\"",
        "\"memory-bomb\"",
        "\"ghost-gpu\"",
        "\"same-gpu-twice\"",
    ] {
        let payload = wasmgpu::controller::Payload::from_configmap(&policy_configmap(
            "hostile-policy",
            config,
        ))
        .expect("payload");
        let error = match payload.load(&engine) {
            Ok(_) => panic!("{config}: passed the canary"),
            Err(error) => error,
        };
        let expected = matches!(
            (config, &error),
            ("\"trap\"", RejectError::Canary(PolicyError::Trap { .. }))
                | (
                    "\"loop\"",
                    RejectError::Canary(
                        PolicyError::OutOfFuel { .. } | PolicyError::Deadline { .. }
                    )
                )
                | ("\"memory-bomb\"", RejectError::Canary(_))
                | (
                    "\"ghost-gpu\"" | "\"same-gpu-twice\"",
                    RejectError::CanaryRefused(_)
                )
        );
        assert!(expected, "{config}: {error}");
    }
}

/// `bytes` with every `from` replaced by `to` (of the same length).
fn patched(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = bytes.to_vec();
    let mut found = 0;
    let mut i = 0;
    while let Some(at) = out[i..]
        .windows(from.len())
        .position(|w| w == from.as_bytes())
    {
        out[i + at..i + at + to.len()].copy_from_slice(to.as_bytes());
        i += at + to.len();
        found += 1;
    }
    assert!(found > 0, "{from:?} is not in the component");
    out
}

#[test]
fn a_component_of_another_contract_version_is_refused_naming_both() {
    let engine = engine();
    let bytes = policy_bytes("binpack");
    // A component built for the previous contract, as 0.2 SDKs built them.
    let old = patched(
        &bytes,
        "wasmgpu:policy/types@0.3.0",
        "wasmgpu:policy/types@0.2.0",
    );
    let error = engine.load(&old).expect_err("0.2.0 is refused");
    assert_eq!(error.kind(), "wrong-contract");
    let message = error.to_string();
    assert!(
        message.contains("wasmgpu:policy@0.2.0") && message.contains("wasmgpu:policy@0.3.0"),
        "{message}"
    );
    // This version loads.
    engine.load(&bytes).expect("0.3.0 loads");
}
