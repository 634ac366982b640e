//! The fairshare policy over many rounds, through the real Wasm engine and
//! the host's validator: the cluster between rounds is what applying the
//! validated decisions leaves (GPUs held, the pods running), some running
//! pods finish every round and new ones replace them, and at each quiet point
//! the tenants hold their fair shares. The native build of the policy decides
//! the same every round.
//!
//! `cargo test --release -p wasmgpu --test fairshare -- --nocapture` prints
//! the holdings per round.

use wasmgpu_test_support as common;

use std::collections::BTreeMap;
use std::path::Path;

use common::policy_bytes;
use wasmgpu::engine::types::{Decision, Snapshot as HostSnapshot};
use wasmgpu::engine::{Engine, LoadedPolicy, PolicyError};
use wasmgpu_contract::Sharing::Exclusive;
use wasmgpu_contract::Snapshot;
use wasmgpu_contract::testing::{
    namespace, node, refresh_tables, request, snapshot, with_full_nvlink,
};
use wasmgpu_contract::validate::validate;

const TENANTS: [&str; 3] = ["team-a", "team-b", "team-c"];
const PENDING_PER_TENANT: usize = 100;
const ROUNDS: u64 = 20;

/// A pod holding GPUs, as the validated decision placed it.
struct Running {
    pod: String,
    tenant: usize,
    node: usize,
    gpus: Vec<u32>,
}

/// The simulated cluster: 8 nodes of 8 GPUs, three tenants each keeping
/// `PENDING_PER_TENANT` one-GPU pods pending.
struct Simulation {
    snapshot: Snapshot,
    running: Vec<Running>,
    /// Per tenant: the state of its xorshift generator, which picks the
    /// running pods that finish.
    rng: [u64; 3],
    /// Per tenant: the chance in percent that a running pod finishes in a round.
    finish_percent: [u64; 3],
    created: u64,
}

impl Simulation {
    fn new(config: &str) -> Self {
        let nodes = (0..8)
            .map(|n| {
                with_full_nvlink(node(
                    &format!("gpu-node-{n}"),
                    8,
                    "NVIDIA H100 80GB HBM3",
                    81559,
                ))
            })
            .collect();
        let mut snapshot = snapshot(nodes, Vec::new());
        snapshot.config = config.into();
        Simulation {
            snapshot,
            running: Vec::new(),
            rng: [
                0x9e37_79b9_7f4a_7c15,
                0xd1b5_4a32_d192_ed03,
                0x2545_f491_4f6c_dd1d,
            ],
            finish_percent: [20, 30, 40],
            created: 1_700_000_000_000,
        }
    }

    /// Some running pods of each tenant finish; returns how many per tenant.
    fn finish_some(&mut self) -> [usize; 3] {
        let mut finished = [0; 3];
        let mut keep = Vec::new();
        for pod in std::mem::take(&mut self.running) {
            let rng = &mut self.rng[pod.tenant];
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            if *rng % 100 < self.finish_percent[pod.tenant] {
                for &g in &pod.gpus {
                    let gpu = &mut self.snapshot.nodes[pod.node].gpus[g as usize];
                    assert!(gpu.held, "{} finished on a GPU nobody held", pod.pod);
                    gpu.held = false;
                    gpu.allocated_mib = 0;
                }
                finished[pod.tenant] += 1;
            } else {
                keep.push(pod);
            }
        }
        self.running = keep;
        finished
    }

    /// New pods so each tenant again has `PENDING_PER_TENANT` pending, and
    /// the usage per namespace of what runs.
    fn top_up(&mut self) {
        for tenant in TENANTS {
            let pending = self
                .snapshot
                .pending
                .iter()
                .filter(|r| self.snapshot.namespace(r.namespace) == tenant)
                .count();
            for _ in pending..PENDING_PER_TENANT {
                self.created += 1;
                let mut r = request(&format!("{tenant}/job-{}", self.created), 1, Exclusive, 0);
                r.created_ms = self.created;
                self.snapshot.pending.push(r);
            }
        }
        self.snapshot.running = self
            .running
            .iter()
            .map(|r| wasmgpu_contract::Running {
                pod: r.pod.clone(),
                namespace: namespace(TENANTS[r.tenant]),
                tenant: None,
                priority: 0,
                node: r.node as u32,
                gpus: r.gpus.clone(),
                shared_mib: 0,
                started_ms: 0,
                gang: None,
                evictable: true,
                protected_ms: 0,
            })
            .collect();
        refresh_tables(&mut self.snapshot);
    }

    /// One round: the Wasm policy decides, the host validates, the accepted
    /// placements are applied. The native build must decide the same.
    fn round(&mut self, round: u64, policy: &LoadedPolicy) {
        self.snapshot.round = round;
        let host: HostSnapshot = self.snapshot.clone();
        let wasm = policy
            .allocate(&host)
            .expect("the policy decides")
            .decisions;
        let native: Vec<Decision> = wasmgpu_fairshare::allocate(&self.snapshot);
        assert_eq!(wasm, native, "round {round}: Wasm and native builds differ");
        let verdict = validate(&host, &wasm);
        assert!(
            verdict.refused.is_empty(),
            "round {round}: {:?}",
            verdict.refused
        );
        assert!(verdict.rejected.is_empty(), "round {round}");
        let mut placed = vec![false; self.snapshot.pending.len()];
        for placement in &verdict.accepted {
            let (node, gpus) = placement.at.clone();
            for &g in &gpus {
                let gpu = &mut self.snapshot.nodes[node].gpus[g as usize];
                assert!(!gpu.held, "round {round}: a GPU given twice");
                gpu.held = true;
                gpu.allocated_mib = gpu.memory_mib;
            }
            let request = &self.snapshot.pending[placement.request];
            assert_eq!(request.pod, placement.pod);
            let tenant = TENANTS
                .iter()
                .position(|t| *t == self.snapshot.namespace(request.namespace))
                .expect("a known tenant");
            self.running.push(Running {
                pod: placement.pod.clone(),
                tenant,
                node,
                gpus,
            });
            placed[placement.request] = true;
        }
        let mut position = 0;
        self.snapshot.pending.retain(|_| {
            position += 1;
            !placed[position - 1]
        });
    }

    /// GPUs held per tenant, from the cluster's state: each held GPU is
    /// traced to the running pod the validated decisions put on it.
    fn holdings(&self) -> [u32; 3] {
        let held: u32 = self
            .snapshot
            .nodes
            .iter()
            .flat_map(|n| &n.gpus)
            .filter(|g| g.held)
            .count() as u32;
        let mut per = [0u32; 3];
        for pod in &self.running {
            per[pod.tenant] += pod.gpus.len() as u32;
        }
        assert_eq!(per.iter().sum::<u32>(), held, "held GPUs without a pod");
        per
    }
}

fn engine() -> Engine {
    Engine::new(Default::default()).expect("engine")
}

/// Runs `ROUNDS` rounds; after each, `check` gets the round and the holdings.
fn simulate(name: &str, config: &str, check: impl Fn(u64, [u32; 3])) {
    let engine = engine();
    let policy = engine.load(&policy_bytes("fairshare")).expect("loads");
    assert_eq!(policy.info().name, "fairshare");
    let mut sim = Simulation::new(config);
    println!("{name}: {config}");
    println!("round  finished (a/b/c)  holds: team-a team-b team-c");
    for round in 1..=ROUNDS {
        let finished = if round > 1 { sim.finish_some() } else { [0; 3] };
        sim.top_up();
        sim.round(round, &policy);
        let held = sim.holdings();
        println!(
            "{round:5}  {:>17}  {:>13} {:>6} {:>6}",
            format!("{}/{}/{}", finished[0], finished[1], finished[2]),
            held[0],
            held[1],
            held[2]
        );
        check(round, held);
    }
}

fn within_one(held: [u32; 3], want: [u32; 3]) -> bool {
    held.iter().zip(want).all(|(&h, w)| h.abs_diff(w) <= 1)
}

#[test]
fn weights_1_2_1_hold_16_32_16_at_every_quiet_point() {
    simulate(
        "weights 1:2:1",
        r#"{"tenants": [{"name": "team-a", "weight": 1}, {"name": "team-b", "weight": 2},
                        {"name": "team-c", "weight": 1}]}"#,
        |round, held| {
            assert!(
                within_one(held, [16, 32, 16]),
                "round {round}: {held:?} is not 16/32/16 ± 1"
            );
        },
    );
}

#[test]
fn a_quota_of_40_is_held_at_every_quiet_point() {
    // team-a is guaranteed 40 of the 64 GPUs; the 24 beyond the quota are
    // shared 1:2:1, so 40 + 6, 12 and 6.
    simulate(
        "quota 40 for team-a, weights 1:2:1",
        r#"{"tenants": [{"name": "team-a", "quota": 40, "weight": 1},
                        {"name": "team-b", "weight": 2}, {"name": "team-c", "weight": 1}]}"#,
        |round, held| {
            assert!(held[0] >= 40, "round {round}: team-a holds {}", held[0]);
            assert!(
                within_one(held, [46, 12, 6]),
                "round {round}: {held:?} is not 46/12/6 ± 1"
            );
        },
    );
}

#[test]
fn a_limit_holds_a_tenant_back_and_says_so() {
    let config = r#"{"tenants": [{"name": "team-a", "limit": 10, "weight": 4}]}"#;
    let mut sim = Simulation::new(config);
    sim.top_up();
    let host: HostSnapshot = sim.snapshot.clone();
    let policy = engine().load(&policy_bytes("fairshare")).expect("loads");
    let decisions = policy.allocate(&host).expect("decides").decisions;
    let verdict = validate(&host, &decisions);
    let team_a = verdict
        .accepted
        .iter()
        .filter(|p| p.pod.starts_with("team-a/"))
        .count();
    assert_eq!(team_a, 10);
    assert_eq!(verdict.accepted.len(), 64);
    let reason = &verdict
        .waiting
        .iter()
        .find(|w| w.pod.starts_with("team-a/"))
        .expect("team-a waits")
        .reason;
    assert_eq!(
        reason,
        "tenant team-a holds 10 of its limit 10 GPUs (fairshare config tenants[0].limit); this pod needs 1 more"
    );
}

// === the shipped ConfigMap and the canary ===

fn configmap(config: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("fairshare".into()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "policy.wasm".to_string(),
            k8s_openapi::ByteString(policy_bytes("fairshare")),
        )])),
        data: Some(BTreeMap::from([("config.json".to_string(), config.into())])),
        ..Default::default()
    }
}

#[test]
fn the_shipped_config_passes_the_canary_and_a_bad_one_is_refused() {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/policies/fairshare.config.json"),
    )
    .expect("deploy/policies/fairshare.config.json");
    let engine = engine();
    let payload =
        wasmgpu::controller::Payload::from_configmap(&configmap(&shipped)).expect("a payload");
    let active = payload.load(&engine).expect("the canary passes");
    assert_eq!(active.config, shipped);

    for (config, field) in [
        (
            r#"{"tenants": [{"name": "a", "wieght": 2}]}"#,
            "unknown field `wieght`",
        ),
        (
            r#"{"tenants": [{"name": "a", "weight": 0}]}"#,
            "tenants[0].weight is 0",
        ),
    ] {
        let payload =
            wasmgpu::controller::Payload::from_configmap(&configmap(config)).expect("a payload");
        let error = payload.load(&engine).err().expect("the canary refuses it");
        let wasmgpu::controller::RejectError::Canary(PolicyError::Trap { log_tail, .. }) = &error
        else {
            panic!("{config}: {error}");
        };
        assert!(
            log_tail.iter().any(|l| l.contains(field)) && error.to_string().contains(field),
            "{config}: {error}"
        );
    }
}
