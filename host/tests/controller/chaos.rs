//! Chaos, bounded and seeded: random pod creations (of two priorities),
//! deletions and completions, GPUResource deletions, GPUNode deletions,
//! controller SIGKILLs and policy swaps; the test plays the kubelet (pods
//! evicted by a preemption finish). After every burst it waits for a quiet
//! point and checks, from the API objects alone, that
//!
//! * no GPU is held twice (exclusive twice, or exclusive and shared), and
//!   shared memory fits;
//! * every bound live pod carries one allocation equal to its devices
//!   annotation and its node;
//! * no pod waits while GPUs that fit it are free;
//! * no pod waits while it could preempt: an exclusive pod of the higher
//!   priority whose count of GPUs on one node are free or held only by pods
//!   of the lower priority.
//!
//! The seed is printed; `WASMGPU_CHAOS_SEED=N` replays one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use wasmgpu::api::policy::POLICY_KEY;
use wasmgpu::api::{GPUNode, GPUResource, Sharing};
use wasmgpu_test_harness::{PodPhase, TestContext, set_pod_phase};

use crate::common::policy_bytes;
use crate::configmaps::put_policy;
use crate::preemption::{finish_evicted, pod_of_class, priority_class, remove_priority_classes};
use crate::support::*;

const NODES: usize = 4;
const GPUS: u32 = 4;
const BURSTS: usize = 30;
/// Shapes: (GPUResource, count, sharing, MiB).
const SHAPES: [(&str, u32, Sharing, u64); 4] = [
    ("x1", 1, Sharing::Exclusive, 0),
    ("x2", 2, Sharing::Exclusive, 0),
    ("s1", 1, Sharing::Shared, 30000),
    ("x4", 4, Sharing::Exclusive, 0),
];
/// How long the controller may take to place what fits at a quiet point
/// (a few rounds; `--resync 2s`).
const SETTLE: Duration = Duration::from_secs(20);

fn shape(name: &str) -> (&'static str, u32, Sharing, u64) {
    *SHAPES.iter().find(|s| s.0 == name).expect("a known shape")
}

/// `(node, GPU uuid)` → (exclusive holders, shared holders, shared MiB,
/// the highest priority among the holders).
type GpuUse = BTreeMap<(String, String), (u32, u32, u64, i32)>;

/// The two PriorityClasses' values: most pods are of the lower.
const LOW: i32 = 100;
const HIGH: i32 = 1000;

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// What the API objects say at one moment.
struct World {
    pods: Vec<Pod>,
    resources: BTreeSet<String>,
    /// Nodes whose GPUNode exists.
    published: BTreeSet<String>,
}

impl World {
    async fn read(ctx: &TestContext) -> Result<Self> {
        let pods = ctx.api::<Pod>().list(&ListParams::default()).await?.items;
        let resources = ctx
            .api::<GPUResource>()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect();
        let published = ctx
            .cluster_api::<GPUNode>()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .filter(|n| n.starts_with(&ctx.namespace))
            .collect();
        Ok(Self {
            pods,
            resources,
            published,
        })
    }

    /// `(node, gpu)` → (exclusive holders, shared holders, shared MiB), from
    /// live bound pods; and the safety violations.
    fn holdings(&self) -> (GpuUse, Vec<String>) {
        let mut use_ = GpuUse::new();
        let mut violations = Vec::new();
        for pod in &self.pods {
            let name = pod.name_any();
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            if finished(pod) {
                continue;
            }
            let Some(held) = allocation(pod) else {
                violations.push(format!("{name} is bound to {node} without an allocation"));
                continue;
            };
            let devices: Vec<String> = pod
                .annotations()
                .get("wasmgpu.io/devices")
                .map(|d| d.split(',').map(str::to_string).collect())
                .unwrap_or_default();
            let recorded: Vec<String> = held.devices.iter().map(|d| d.uuid.clone()).collect();
            if held.node != node || recorded != devices {
                violations.push(format!(
                    "{name}: bound to {node} with devices {devices:?}, allocation says {} {recorded:?}",
                    held.node
                ));
            }
            for device in &held.devices {
                let entry = use_
                    .entry((held.node.clone(), device.uuid.clone()))
                    .or_default();
                entry.3 = entry.3.max(priority(pod));
                match held.sharing {
                    Sharing::Exclusive => entry.0 += 1,
                    Sharing::Shared => {
                        entry.1 += 1;
                        entry.2 += device.memory_mib;
                    }
                }
            }
        }
        for ((node, gpu), (exclusive, shared, mib, _)) in &use_ {
            if *exclusive > 1 || (*exclusive == 1 && *shared > 0) || *mib > H100_MIB {
                violations.push(format!(
                    "{gpu} on {node} held twice: {exclusive} exclusive, {shared} shared taking {mib} MiB"
                ));
            }
        }
        (use_, violations)
    }

    /// Pods that wait although GPUs that fit them are free now, or
    /// although they could preempt pods of lower priority for them.
    fn starved(&self, nodes: &[String]) -> Vec<String> {
        let (use_, _) = self.holdings();
        let held = |node: &str, i: u32| {
            use_.get(&(node.to_string(), format!("GPU-{node}-{i}")))
                .copied()
                .unwrap_or_default()
        };
        let free = |node: &str, sharing: Sharing, mib: u64| {
            (0..GPUS)
                .filter(|&i| {
                    let held = held(node, i);
                    match sharing {
                        Sharing::Exclusive => (held.0, held.1) == (0, 0),
                        Sharing::Shared => held.0 == 0 && held.2 + mib <= H100_MIB,
                    }
                })
                .count() as u32
        };
        // Exclusive requests preempt: GPUs free or held only by pods of
        // lower priority are theirs to take.
        let preemptible = |node: &str, priority: i32| {
            (0..GPUS)
                .filter(|&i| {
                    let held = held(node, i);
                    (held.0, held.1) == (0, 0) || held.3 < priority
                })
                .count() as u32
        };
        self.pods
            .iter()
            .filter(|pod| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_none()
                    && !finished(pod)
                    && pod.metadata.deletion_timestamp.is_none()
            })
            .filter_map(|pod| {
                let resource = pod.annotations().get("wasmgpu.io/gpuresource")?.clone();
                if !self.resources.contains(&resource) {
                    return None;
                }
                let (_, count, sharing, mib) = shape(&resource);
                let published = || nodes.iter().filter(|n| self.published.contains(*n));
                if published().any(|n| free(n, sharing, mib) >= count) {
                    return Some(format!(
                        "{} ({resource}) waits while GPUs fit it",
                        pod.name_any()
                    ));
                }
                let priority = priority(pod);
                (sharing == Sharing::Exclusive
                    && published().any(|n| preemptible(n, priority) >= count))
                .then(|| {
                    format!(
                        "{} ({resource}, priority {priority}) waits while it could preempt",
                        pod.name_any()
                    )
                })
            })
            .collect()
    }
}

fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

#[tokio::test]
async fn chaos_never_double_books_and_never_starves() -> Result<()> {
    let _turn = exclusive().await;
    let seed = std::env::var("WASMGPU_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1)
        });
    eprintln!("chaos seed {seed} (replay: WASMGPU_CHAOS_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let ctx = TestContext::new("chaos").await?;
    install_crds(&ctx).await?;
    let nodes: Vec<String> = (0..NODES)
        .map(|i| format!("{}-n{i}", ctx.namespace))
        .collect();
    for node in &nodes {
        gpu_node(&ctx, node, GPUS).await?;
    }
    for (name, count, sharing, mib) in SHAPES {
        gpuresource(&ctx, name, count, sharing, mib, None).await?;
    }
    let classes = [
        priority_class(&ctx, "low", LOW, false).await?,
        priority_class(&ctx, "high", HIGH, false).await?,
    ];
    let (binpack, spread) = (policy_bytes("binpack"), policy_bytes("spread"));
    put_policy(&ctx, "binpack", POLICY_KEY, binpack.clone(), None, None).await?;
    let mut controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();
    let started = Instant::now();
    let mut next_pod = 0usize;
    let mut swapped = false;
    let mut log = Vec::new();
    let mut evicted = 0;

    for burst in 0..BURSTS {
        for _ in 0..rng.random_range(5..14usize) {
            let world = World::read(&ctx).await?;
            let bound: Vec<&Pod> = world
                .pods
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .filter(|p| !finished(p))
                .collect();
            match rng.random_range(0..100u32) {
                0..45 => {
                    let resource = SHAPES[rng.random_range(0..SHAPES.len())].0;
                    let name = format!("p-{next_pod:03}");
                    next_pod += 1;
                    // One pod in four is of the higher priority.
                    let class = &classes[usize::from(rng.random_range(0..4u8) == 0)];
                    if world.resources.contains(resource) {
                        pod_of_class(&ctx, &name, resource, class).await?;
                        log.push(format!("create {name} ({resource}, {class})"));
                    }
                }
                45..65 if !bound.is_empty() => {
                    let name = bound[rng.random_range(0..bound.len())].name_any();
                    let _ = set_pod_phase(&pods, &name, PodPhase::Running).await;
                    let _ = set_pod_phase(&pods, &name, PodPhase::Succeeded).await;
                    log.push(format!("finish {name}"));
                }
                65..80 if !world.pods.is_empty() => {
                    let name = world.pods[rng.random_range(0..world.pods.len())].name_any();
                    let _ = pods
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await;
                    log.push(format!("delete {name}"));
                }
                80..86 => {
                    let (resource, count, sharing, mib) = SHAPES[rng.random_range(0..SHAPES.len())];
                    if world.resources.contains(resource) {
                        ctx.api::<GPUResource>()
                            .delete(resource, &DeleteParams::default())
                            .await?;
                        log.push(format!("delete gpuresource {resource}"));
                    } else {
                        gpuresource(&ctx, resource, count, sharing, mib, None).await?;
                        log.push(format!("recreate gpuresource {resource}"));
                    }
                }
                86..92 => {
                    let node = &nodes[rng.random_range(0..nodes.len())];
                    if world.published.contains(node) {
                        ctx.cluster_api::<GPUNode>()
                            .delete(node, &DeleteParams::default())
                            .await?;
                        log.push(format!("delete gpunode {node}"));
                    } else {
                        publish_gpunode(&ctx, node, GPUS).await?;
                        log.push(format!("publish gpunode {node}"));
                    }
                }
                92..96 => {
                    controller.kill().await?;
                    controller = Controller::start(&ctx).await?;
                    log.push("kill the controller".into());
                }
                _ => {
                    swapped = !swapped;
                    let bytes = if swapped { &spread } else { &binpack };
                    put_policy(&ctx, "binpack", POLICY_KEY, bytes.clone(), None, None).await?;
                    log.push(format!(
                        "swap the policy to {}",
                        if swapped { "spread" } else { "binpack" }
                    ));
                }
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..150))).await;
        }

        // Quiet point: the world must be safe at once, and settle.
        let deadline = Instant::now() + SETTLE;
        loop {
            controller.check_alive()?;
            evicted += finish_evicted(&pods).await?.len();
            let world = World::read(&ctx).await?;
            let (_, violations) = world.holdings();
            if !violations.is_empty() {
                bail!(
                    "seed {seed}, burst {burst}: {}\nafter: {}\n{}",
                    violations.join("\n"),
                    log.join(", "),
                    controller.log_tail()
                );
            }
            let starved = world.starved(&nodes);
            if starved.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "seed {seed}, burst {burst}: {}\nafter: {}\n{}",
                    starved.join("\n"),
                    log.join(", "),
                    controller.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        eprintln!(
            "burst {burst}: quiet after {:?} ({} operations so far)",
            started.elapsed(),
            log.len()
        );
    }
    let mut kinds = BTreeMap::<&str, usize>::new();
    for entry in &log {
        let kind = entry.split(' ').take(2).collect::<Vec<_>>();
        let kind = match kind.as_slice() {
            ["delete" | "recreate" | "publish", object] if object.starts_with("gpu") => {
                entry.as_str().split(' ').take(2).last().unwrap_or("")
            }
            [verb, ..] => verb,
            [] => "",
        };
        *kinds.entry(kind).or_default() += 1;
    }
    eprintln!(
        "chaos seed {seed}: {} operations {kinds:?}, {evicted} pods evicted by preemptions, {:?}",
        log.len(),
        started.elapsed()
    );
    drop(controller);
    remove_priority_classes(&ctx, classes).await?;
    remove_nodes(&ctx, &nodes).await
}
