//! 200 pods over 8 nodes × 8 GPUs, created at once; the test completes
//! bound pods as a kubelet would so the rest can fit, and checks on every
//! watch event — not only at the end — that no GPU is ever over-committed
//! by the pods still running, and that each pod was bound with its
//! allocation recorded in the same write. Once with the controller
//! running throughout, once killed (SIGKILL) in the middle and restarted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use wasmgpu::api::{GPUResource, Sharing};
use wasmgpu_test_harness::{PodPhase, TestContext, set_pod_phase};

use crate::support::*;

const NODES: usize = 8;
const GPUS: u32 = 8;
const PODS: usize = 200;
/// Shapes the pods cycle through: (GPUResource, count, sharing, MiB).
const SHAPES: [(&str, u32, Sharing, u64); 5] = [
    ("x1", 1, Sharing::Exclusive, 0),
    ("x2", 2, Sharing::Exclusive, 0),
    ("x4", 4, Sharing::Exclusive, 0),
    ("s1", 1, Sharing::Shared, 20000),
    ("s2", 2, Sharing::Shared, 16000),
];
/// The whole run must end within this (it takes seconds when healthy).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// What the checker saw.
#[derive(Default)]
struct Observed {
    violations: Vec<String>,
    /// Pod name → (UID, node, devices) when first seen bound.
    pod_to_binding: HashMap<String, (String, String, Vec<String>)>,
    pod_to_bound_at: HashMap<String, Instant>,
    /// Pods the kubelet has finished.
    finished: HashSet<String>,
    /// Pods the kubelet is finishing or has finished: from the moment it
    /// starts writing `Succeeded`, the controller may hand their GPUs on,
    /// and their ledger entries stop counting.
    finishing: HashSet<String>,
    /// Live pods (bound, not finished) → their devices and sharing.
    running: BTreeMap<String, (Vec<String>, Sharing, u64)>,
}

impl Observed {
    fn on_pod(&mut self, pod: &Pod) {
        let name = pod.name_any();
        let uid = pod.uid().unwrap_or_default();
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let devices: Vec<String> = pod
            .annotations()
            .get("wasmgpu.io/devices")
            .map(|d| d.split(',').map(str::to_string).collect())
            .unwrap_or_default();
        let Some(node) = node else { return };
        // Bound and recorded in one write: the allocation is there with the
        // node, and names the same GPUs.
        match allocation(pod) {
            Some(held)
                if held.node == node && held.devices.iter().map(|d| &d.uuid).eq(devices.iter()) => {
            }
            other => self.violations.push(format!(
                "pod {name} bound to {node} with devices {devices:?} but allocation {other:?}"
            )),
        }
        match self.pod_to_binding.get(&name) {
            None => {
                self.pod_to_binding
                    .insert(name.clone(), (uid, node.clone(), devices.clone()));
                self.pod_to_bound_at.insert(name.clone(), Instant::now());
            }
            Some(first) if first != &(uid.clone(), node.clone(), devices.clone()) => {
                self.violations.push(format!(
                    "pod {name} bound twice or its devices changed: {first:?} then {:?}",
                    (uid, node, devices.clone())
                ));
            }
            Some(_) => {}
        }
        if matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
            self.running.remove(&name);
            return;
        }
        let shape = SHAPES
            .iter()
            .find(|s| {
                pod.annotations()
                    .get("wasmgpu.io/gpuresource")
                    .map(String::as_str)
                    == Some(s.0)
            })
            .expect("a known shape");
        if devices.len() != shape.1 as usize {
            self.violations.push(format!(
                "pod {name} has {} devices, wants {}",
                devices.len(),
                shape.1
            ));
        }
        self.running.insert(name, (devices, shape.2, shape.3));
        self.check_running();
    }

    /// Bound pods that have not finished never share an exclusive GPU, and
    /// shared GPUs never promise more than they have.
    fn check_running(&mut self) {
        let mut gpu_to_holders: HashMap<&str, (usize, usize, u64)> = HashMap::new();
        for (devices, sharing, mib) in self.running.values() {
            for gpu in devices {
                let entry = gpu_to_holders.entry(gpu).or_default();
                match sharing {
                    Sharing::Exclusive => entry.0 += 1,
                    Sharing::Shared => {
                        entry.1 += 1;
                        entry.2 += mib;
                    }
                }
            }
        }
        for (gpu, (exclusive, shared, mib)) in gpu_to_holders {
            if exclusive > 1 || (exclusive == 1 && shared > 0) || mib > H100_MIB {
                self.violations.push(format!(
                    "running pods over-commit {gpu}: {exclusive} exclusive, {shared} shared taking {mib} MiB"
                ));
            }
        }
    }
}

/// Figures of one run.
pub struct Figures {
    pub pods_per_second: f64,
    pub median: Duration,
    pub p99: Duration,
}

pub async fn run(kill_midway: bool) -> Result<Figures> {
    let _turn = exclusive().await;
    let ctx = TestContext::new(if kill_midway {
        "ctl-crash"
    } else {
        "ctl-scale"
    })
    .await?;
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
    let mut controller = Controller::start(&ctx).await?;
    let observed = Arc::new(Mutex::new(Observed::default()));

    // The kubelet: a bound pod runs a little while, then succeeds.
    let kubelet = {
        let observed = observed.clone();
        let api = ctx.api::<Pod>();
        tokio::spawn(async move {
            let mut started = HashSet::new();
            let mut stream = watcher(api.clone(), Default::default())
                .applied_objects()
                .boxed();
            while let Ok(Some(pod)) = stream.try_next().await {
                observed.lock().unwrap().on_pod(&pod);
                let name = pod.name_any();
                let bound = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some();
                if bound && started.insert(name.clone()) {
                    let api = api.clone();
                    let observed = observed.clone();
                    let hold = Duration::from_millis(100 + (name.len() as u64 * 37 % 5) * 50);
                    tokio::spawn(async move {
                        let result = async {
                            set_pod_phase(&api, &name, PodPhase::Running).await?;
                            // The workload's run time.
                            tokio::time::sleep(hold).await;
                            observed.lock().unwrap().finishing.insert(name.clone());
                            set_pod_phase(&api, &name, PodPhase::Succeeded).await
                        }
                        .await;
                        match result {
                            Ok(_) => {
                                observed.lock().unwrap().finished.insert(name);
                            }
                            Err(error) => observed
                                .lock()
                                .unwrap()
                                .violations
                                .push(format!("kubelet could not run {name}: {error:#}")),
                        }
                    });
                }
            }
        })
    };

    let started = Instant::now();
    let mut pod_to_created: HashMap<String, Instant> = HashMap::new();
    let created: Vec<(String, Instant)> = futures::stream::iter(0..PODS)
        .map(|i| {
            let ctx = &ctx;
            async move {
                let name = format!("pod-{i:03}");
                create_pod(ctx, &name, SHAPES[i % SHAPES.len()].0).await?;
                anyhow::Ok((name, Instant::now()))
            }
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    pod_to_created.extend(created);

    let mut killed = !kill_midway;
    loop {
        let (bound, finished, violations) = {
            let o = observed.lock().unwrap();
            (
                o.pod_to_binding.len(),
                o.finished.len(),
                o.violations.clone(),
            )
        };
        if !violations.is_empty() {
            bail!(
                "violations:\n{}\ncontroller log:\n{}",
                violations.join("\n"),
                controller.log_tail()
            );
        }
        if !killed && bound >= PODS / 3 {
            let log = controller.kill().await?;
            eprintln!("killed the controller with {bound} pods bound; its last lines:\n{log}");
            controller = Controller::start(&ctx).await?;
            killed = true;
        }
        if finished == PODS {
            break;
        }
        controller.check_alive()?;
        if started.elapsed() > RUN_LIMIT {
            bail!(
                "only {bound} of {PODS} pods bound, {finished} finished after {RUN_LIMIT:?}\n{}",
                controller.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every pod bound exactly once, to the GPUs its allocation names.
    let pods: Api<Pod> = ctx.api();
    let all = pods.list(&ListParams::default()).await?.items;
    assert_eq!(all.len(), PODS);
    let (last_bound, mut latencies) = {
        let o = observed.lock().unwrap();
        for pod in &all {
            let name = pod.name_any();
            let (uid, node, devices) = o.pod_to_binding.get(&name).expect("bound");
            let held = allocation(pod).unwrap_or_else(|| panic!("{name} has no allocation"));
            assert_eq!(Some(uid), pod.metadata.uid.as_ref(), "{name}");
            assert_eq!(&held.node, node, "{name}");
            let held_devices: Vec<String> = held.devices.iter().map(|d| d.uuid.clone()).collect();
            assert_eq!(&held_devices, devices, "{name}");
        }
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        let last_bound = o.pod_to_bound_at.values().max().copied().expect("pods");
        let latencies: Vec<Duration> = o
            .pod_to_bound_at
            .iter()
            .map(|(name, at)| at.saturating_duration_since(pod_to_created[name]))
            .collect();
        (last_bound, latencies)
    };
    latencies.sort();
    let figures = Figures {
        pods_per_second: PODS as f64 / last_bound.duration_since(started).as_secs_f64(),
        median: latencies[latencies.len() / 2],
        p99: latencies[latencies.len() * 99 / 100],
    };
    eprintln!(
        "{PODS} pods over {NODES}x{GPUS} GPUs{}: {:.1} pods bound/s, creation→binding median {:?}, p99 {:?}",
        if kill_midway {
            " (controller killed mid-run)"
        } else {
            ""
        },
        figures.pods_per_second,
        figures.median,
        figures.p99
    );

    // Finished pods give their GPUs back: every GPUResource says none of
    // its pods holds any, and no object grew a ledger.
    let deadline = Instant::now() + ACT;
    loop {
        let resources = ctx
            .api::<GPUResource>()
            .list(&ListParams::default())
            .await?
            .items;
        let held: Vec<(String, Option<i32>, usize)> = resources
            .iter()
            .filter_map(|r| {
                let status = r.status.as_ref();
                let holding = status.and_then(|s| s.holding);
                let ledger = status.map_or(0, |s| s.allocations.len());
                (holding != Some(0) || ledger > 0).then(|| (r.name_any(), holding, ledger))
            })
            .collect();
        if held.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "GPUResources still report holdings after every pod finished: {held:?}\n{}",
                controller.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    kubelet.abort();
    drop(controller);
    remove_nodes(&ctx, &nodes).await?;
    Ok(figures)
}

#[tokio::test]
async fn two_hundred_pods_are_each_bound_once_and_no_gpu_is_over_committed() -> Result<()> {
    run(false).await.map(|_| ())
}

#[tokio::test]
async fn the_controller_killed_mid_run_and_restarted_keeps_every_guarantee() -> Result<()> {
    run(true).await.map(|_| ())
}
