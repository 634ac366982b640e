//! Policies written with the JavaScript, Python and Go SDKs (policies/js,
//! policies/python, policies/go), run through the real engine: their binpack ports decide
//! exactly what the Rust binpack decides, on the demo snapshot, on the
//! snapshot `wasmgpu policy generate-snapshot --nodes 200 --pods 200` writes,
//! and on a smaller one with MIG instances, gangs and a config.
//!
//! `make policies-all` (and so `make test`) builds the components. When they
//! are absent the tests fail and say how to build them, unless
//! `WASMGPU_SKIP_LANGUAGES=1` says the other languages are deliberately not
//! built (then they pass, saying so).

use wasmgpu_test_support as common;

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{policy_bytes, policy_dir};
use wasmgpu::engine::types::{Decision, Snapshot};
use wasmgpu::engine::{Engine, Limits, LoadedPolicy};
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::Sharing::Exclusive;
use wasmgpu_contract::testing::{gang, large, refresh_tables, request, shape, with_mig};
use wasmgpu_contract::validate::validate;

/// The components of the other languages' binpack ports, by language.
const PORTS: &[(&str, &str)] = &[
    ("JavaScript", "binpack_js.wasm"),
    ("Python", "binpack_py.wasm"),
    ("Go", "binpack_go.wasm"),
];

/// The bytes of a port, or `None` when it is absent and the environment says
/// the other languages are not built.
fn port(language: &str, file: &str) -> Option<Vec<u8>> {
    let path = policy_dir().join(file);
    match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(_) if std::env::var_os("WASMGPU_SKIP_LANGUAGES").is_some_and(|v| v == "1") => {
            eprintln!(
                "skipping the {language} port: {} is absent and WASMGPU_SKIP_LANGUAGES=1",
                path.display()
            );
            None
        }
        Err(e) => panic!(
            "cannot read the {language} port {} ({e}): build it with `make policies-all` \
             (or set WASMGPU_SKIP_LANGUAGES=1 to skip the other languages)",
            path.display()
        ),
    }
}

/// Interpreted policies need more time and fuel than the defaults give at a
/// few hundred nodes on a loaded 2-core machine; the decisions do not depend
/// on either.
fn engine() -> Engine {
    Engine::new(Limits {
        deadline: Duration::from_secs(120),
        fuel: u64::MAX / 4,
        ..Limits::default()
    })
    .unwrap()
}

/// A snapshot as binpack is given it: without node labels (it asks for none).
fn as_given(mut host: HostSnapshot) -> Snapshot {
    host.for_policy(&[]).clone()
}

fn demo() -> Snapshot {
    let text = include_str!("../../policies/snapshots/demo.json");
    let read = wasmgpu_contract::snapshot_file::read(text);
    as_given(
        read.expect("policies/snapshots/demo.json is a snapshot")
            .snapshot,
    )
}

/// What `wasmgpu policy generate-snapshot --nodes 200 --pods 200` writes.
fn generated_200() -> Snapshot {
    let out = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args([
            "policy",
            "generate-snapshot",
            "--nodes",
            "200",
            "--pods",
            "200",
        ])
        .output()
        .expect("run wasmgpu policy generate-snapshot");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let read = wasmgpu_contract::snapshot_file::read(&text);
    as_given(read.expect("generate-snapshot writes a snapshot").snapshot)
}

/// A generated snapshot with what it lacks: MIG instances on a few nodes
/// (some held), MIG requests, two gangs (one that fits, one too large), and
/// NVLink preference off.
fn varied() -> Snapshot {
    let mut snap = large(40, 120);
    for n in [3usize, 8, 13] {
        // Carve GPUs 1 and 4 into instances (inserted after each parent);
        // NVLink names GPUs by index, so the links stay as they are.
        let node = with_mig(
            snap.nodes[n].clone(),
            1,
            &[("1g.10gb", 9856), ("1g.10gb", 9856), ("3g.40gb", 40192)],
        );
        let four = node
            .gpus
            .iter()
            .position(|g| g.mig.is_none() && g.index == 4)
            .unwrap();
        let mut node = with_mig(node, four, &[("3g.40gb", 40192), ("3g.40gb", 40192)]);
        let position_of_index: Vec<u32> = (0..8)
            .map(|index| {
                let at = node
                    .gpus
                    .iter()
                    .position(|g| g.mig.is_none() && g.index == index);
                at.unwrap() as u32
            })
            .collect();
        for gpu in [1, position_of_index[4] as usize] {
            // A carved GPU is not used whole.
            node.gpus[gpu].held = false;
            node.gpus[gpu].shared_owners = 0;
            node.gpus[gpu].allocated_mib = 0;
        }
        // One instance held on one node.
        node.gpus[2].held = n == 8;
        snap.nodes[n] = node;
    }
    refresh_tables(&mut snap);
    for (i, profile) in [
        (5usize, "1g.10gb"),
        (17, "3g.40gb"),
        (29, "1g.10gb"),
        (41, "7g.80gb"),
    ] {
        let shape = shape(&mut snap.pending[i]);
        shape.mig_profile = Some(profile.into());
        shape.sharing = Exclusive;
        shape.count = 1 + (i as u32 % 2);
    }
    let at = snap.pending.len() as u32;
    for k in 0..7 {
        let mut r = request(&format!("train/w-{k}"), 2, Exclusive, 0);
        r.created_ms = 5 + k as u64;
        snap.pending.push(r);
    }
    gang(&mut snap, "train/small", 3, &[at, at + 1, at + 2]);
    gang(
        &mut snap,
        "train/huge",
        4,
        &[at + 3, at + 4, at + 5, at + 6],
    );
    shape(&mut snap.pending[at as usize + 6]).count = 16;
    refresh_tables(&mut snap);
    snap.config = r#"{"preferNvlink": false}"#.into();
    as_given(HostSnapshot::from_snapshot(snap))
}

/// The Rust binpack and every port that is built, loaded once per test
/// process (compiling an interpreter takes a while).
fn policies() -> &'static (LoadedPolicy, Vec<(&'static str, LoadedPolicy)>) {
    static POLICIES: OnceLock<(LoadedPolicy, Vec<(&'static str, LoadedPolicy)>)> = OnceLock::new();
    POLICIES.get_or_init(|| {
        let engine = engine();
        let rust = engine.load(&policy_bytes("binpack")).unwrap();
        let ports = PORTS
            .iter()
            .filter_map(|&(language, file)| {
                let bytes = port(language, file)?;
                let started = Instant::now();
                let policy = engine.load(&bytes).unwrap();
                assert_eq!(policy.info().name, "binpack", "{language}");
                eprintln!("{language}: loaded in {:?}", started.elapsed());
                Some((language, policy))
            })
            .collect();
        (rust, ports)
    })
}

/// Every port decides on `snap` exactly what the Rust binpack decides, and
/// the host accepts every decision.
fn assert_ports_agree(what: &str, snap: &Snapshot) {
    let (rust, ports) = policies();
    let want = rust.allocate(snap).unwrap().decisions;
    for (language, policy) in ports {
        let started = Instant::now();
        let round = policy.allocate(snap).unwrap();
        eprintln!(
            "{language} on {what}: {} decisions in {:?}, fuel {}",
            round.decisions.len(),
            started.elapsed(),
            round.stats.fuel_used
        );
        let verdict = validate(snap, &round.decisions);
        assert!(
            verdict.refused.is_empty(),
            "{language} on {what}: {:?}",
            verdict.refused
        );
        assert_eq!(round.decisions.len(), want.len(), "{language} on {what}");
        for (k, (got, want)) in round.decisions.iter().zip(&want).enumerate() {
            assert_eq!(got, want, "{language} on {what}: decision {k}");
        }
    }
    if ports.is_empty() {
        eprintln!("no port was built; nothing compared on {what}");
    }
}

#[test]
fn ports_decide_as_the_rust_binpack_on_the_demo_snapshot() {
    assert_ports_agree("the demo snapshot", &demo());
}

#[test]
fn ports_decide_as_the_rust_binpack_on_a_generated_200_node_snapshot() {
    assert_ports_agree("a generated 200-node snapshot", &generated_200());
}

#[test]
fn ports_decide_as_the_rust_binpack_with_mig_gangs_and_a_config() {
    assert_ports_agree("a snapshot with MIG and gangs", &varied());
}

#[test]
fn the_snapshots_compared_exercise_every_kind_of_decision() {
    // The comparison above means something only if the Rust binpack places,
    // defers and rejects, places MIG instances and gangs on these snapshots.
    let (rust, _) = policies();
    let snap = varied();
    let decisions = rust.allocate(&snap).unwrap().decisions;
    let count = |f: &dyn Fn(&Decision) -> bool| decisions.iter().filter(|d| f(d)).count();
    assert!(count(&|d| matches!(d, Decision::Assign(_))) > 20);
    assert!(count(&|d| matches!(d, Decision::Wait(_))) > 0);
    assert!(count(&|d| matches!(d, Decision::Reject(_))) > 0);
    let mig_assigned = decisions.iter().any(|d| match d {
        Decision::Assign(a) => a
            .gpus
            .iter()
            .any(|&g| snap.nodes[a.node as usize].gpus[g as usize].mig.is_some()),
        _ => false,
    });
    assert!(mig_assigned, "a MIG instance is assigned");
    let gang_decision = |pod: &str, assign: bool| {
        decisions.iter().any(|d| match d {
            Decision::Assign(a) if assign => snap.pending[a.pod as usize].pod == pod,
            Decision::Wait(w) | Decision::Reject(w) if !assign => {
                snap.pending[w.pod as usize].pod == pod && w.reason.contains("gang")
            }
            _ => false,
        })
    };
    assert!(gang_decision("train/w-0", true), "the small gang is placed");
    assert!(gang_decision("train/w-3", false), "the huge gang is not");
}
