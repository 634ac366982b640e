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

use std::collections::BTreeSet;
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

// === The conformance suite: generated scenarios ===

/// How many scenarios [`scenarios`] generates.
const SCENARIOS: u64 = 24;

/// The configs the scenarios cycle through: every form of binpack's config.
const CONFIGS: &[&str] = &[
    "",
    r#"{"nvlink": "require"}"#,
    r#"{"nvlink": "prefer"}"#,
    r#"{"nvlink": "ignore"}"#,
    r#"{"preemption": false}"#,
    r#"{"preferNvlink": false, "nvlink": "require"}"#,
];

/// Scenario `seed`: 4 to 12 nodes of 8 GPUs with NVLink as a full mesh, a
/// ring or bridged pairs; MIG instances carved on some; running pods of
/// several priorities (some shared); 10 to 40 pending requests, whole,
/// shared and MIG, of several priorities; a gang that fits and one that
/// cannot; the config [`CONFIGS`]`[seed % 6]`.
fn scenario(seed: u64) -> Snapshot {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    use wasmgpu_contract::Sharing::Shared;
    use wasmgpu_contract::testing::{node, running, snapshot, with_full_nvlink, with_nvlink};

    let mut rng = StdRng::seed_from_u64(seed);
    let models = [
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA L4",
    ];
    let node_count = rng.random_range(4..=12u32);
    let mut nodes = Vec::new();
    for n in 0..node_count {
        let model = models[rng.random_range(0..models.len())];
        let memory = if model.contains("L4") { 23034 } else { 81559 };
        let base = node(&format!("n{n}"), 8, model, memory);
        let linked = match rng.random_range(0..3u32) {
            0 => with_full_nvlink(base),
            1 => with_nvlink(
                base,
                &[
                    (0, 1),
                    (1, 2),
                    (2, 3),
                    (3, 0),
                    (4, 5),
                    (5, 6),
                    (6, 7),
                    (7, 4),
                ],
            ),
            _ => with_nvlink(base, &[(0, 1), (2, 3), (4, 5), (6, 7)]),
        };
        nodes.push(linked);
    }
    // MIG last: carving shifts positions (see `with_mig`).
    for slot in nodes.iter_mut() {
        if rng.random_range(0..4u32) == 0 && !slot.gpus.is_empty() {
            let carved = with_mig(
                slot.clone(),
                7,
                &[("1g.10gb", 9856), ("1g.10gb", 9856), ("3g.40gb", 40192)],
            );
            *slot = carved;
        }
    }
    let mut snap = snapshot(nodes, Vec::new());
    // Running pods: some whole GPUs held at priorities 0..200, a few shared.
    let mut pods = 0;
    for n in 0..node_count {
        for g in 0..6u32 {
            match rng.random_range(0..10u32) {
                0..=2 => {
                    let priority = [0, 100, 200][rng.random_range(0..3usize)];
                    running(&mut snap, &format!("old/p{pods}"), priority, n, &[g], pods);
                    pods += 1;
                }
                3 => {
                    let gpu = &mut snap.nodes[n as usize].gpus[g as usize];
                    gpu.shared_owners = 1;
                    gpu.allocated_mib = gpu.memory_mib / 2;
                }
                _ => {}
            }
        }
    }
    let pending = rng.random_range(10..=40u32);
    for k in 0..pending {
        let mut r = match rng.random_range(0..10u32) {
            0..=4 => request(
                &format!("team/w{k}"),
                rng.random_range(1..=4u32),
                Exclusive,
                0,
            ),
            5..=7 => request(
                &format!("team/s{k}"),
                1,
                Shared,
                rng.random_range(4..=40u64) * 1000,
            ),
            _ => {
                let mut r = request(&format!("team/m{k}"), 1, Exclusive, 0);
                shape(&mut r).mig_profile =
                    Some(["1g.10gb", "3g.40gb"][rng.random_range(0..2usize)].into());
                r
            }
        };
        r.priority = [0, 50, 150, 1000][rng.random_range(0..4usize)];
        r.created_ms = 1_000 + u64::from(k);
        if rng.random_range(0..5u32) == 0 {
            shape(&mut r).model = Some("NVIDIA H100*".into());
        }
        snap.pending.push(r);
    }
    let at = snap.pending.len() as u32;
    for k in 0..5 {
        let mut r = request(&format!("gang/g{k}"), 2, Exclusive, 0);
        r.created_ms = 500 + k as u64;
        snap.pending.push(r);
    }
    gang(&mut snap, "gang/fits", 2, &[at, at + 1]);
    gang(&mut snap, "gang/never", 3, &[at + 2, at + 3, at + 4]);
    shape(&mut snap.pending[at as usize + 4]).count = 16;
    refresh_tables(&mut snap);
    snap.config = CONFIGS[(seed % CONFIGS.len() as u64) as usize].into();
    as_given(HostSnapshot::from_snapshot(snap))
}

fn scenarios() -> Vec<(String, Snapshot)> {
    (0..SCENARIOS)
        .map(|seed| {
            let snap = scenario(seed);
            (format!("scenario {seed} (config {:?})", snap.config), snap)
        })
        .collect()
}

#[test]
fn ports_decide_byte_for_byte_as_the_rust_binpack_on_24_generated_scenarios() {
    let (rust, ports) = policies();
    for (what, snap) in scenarios() {
        let want = rust.allocate(&snap).unwrap().decisions;
        assert!(
            validate(&snap, &want).refused.is_empty(),
            "the Rust binpack on {what}"
        );
        let want_json = serde_json::to_string(&want).unwrap();
        for (language, policy) in ports {
            let got = policy.allocate(&snap).unwrap().decisions;
            let got_json = serde_json::to_string(&got).unwrap();
            if got_json != want_json {
                let first = got.iter().zip(&want).position(|(g, w)| g != w);
                panic!(
                    "{language} on {what}: decisions differ (first at {first:?}: {:?} vs the Rust {:?}; \
                     {} vs {} decisions)",
                    first.map(|k| &got[k]),
                    first.map(|k| &want[k]),
                    got.len(),
                    want.len()
                );
            }
        }
    }
    if ports.is_empty() {
        eprintln!("no port was built; the scenarios ran through the Rust binpack only");
    }
}

#[test]
fn the_generated_scenarios_exercise_shared_mig_gangs_nvlink_require_and_preemption() {
    // The suite means something only if the Rust binpack, across the
    // scenarios, does each of these at least once.
    let (rust, _) = policies();
    let mut seen = BTreeSet::new();
    for (_, snap) in scenarios() {
        for d in rust.allocate(&snap).unwrap().decisions {
            let request = |pod: u32| &snap.pending[pod as usize];
            match &d {
                Decision::Assign(a) => {
                    let r = request(a.pod);
                    let shape = wasmgpu_policy_sdk::shape_of(r).unwrap();
                    if shape.sharing == wasmgpu_contract::Sharing::Shared {
                        seen.insert("shared assigned");
                    }
                    if shape.mig_profile.is_some() {
                        seen.insert("MIG assigned");
                    }
                    if r.gang.is_some() {
                        seen.insert("gang assigned");
                    }
                    if snap.config.contains("require") && shape.count > 1 {
                        seen.insert("NVLink clique assigned");
                    }
                }
                Decision::Wait(w) | Decision::Reject(w) => {
                    if w.reason.contains("NVLink peers") {
                        seen.insert("NVLink require waits or rejects");
                    }
                    if w.reason.contains("gang") {
                        seen.insert("gang held back");
                    }
                }
                Decision::Preempt(_) => {
                    seen.insert("preempt");
                }
            }
        }
    }
    let all = [
        "shared assigned",
        "MIG assigned",
        "gang assigned",
        "gang held back",
        "NVLink clique assigned",
        "NVLink require waits or rejects",
        "preempt",
    ];
    let missing: Vec<_> = all.iter().filter(|k| !seen.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "never seen: {missing:?} (seen {seen:?})"
    );
}
