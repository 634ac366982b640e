//! wasmgpu and kube-scheduler in one cluster, on the same devices: the
//! controller (shipped binpack) places the DRA pods that name it, and
//! kube-scheduler v1.37 (the binary `make bench-e2e` compares with, DRA on,
//! its own leader election off) the ones that name `default-scheduler`, on
//! the same NVIDIA-shaped nodes. Turns of pods of one scheduler and then of
//! the other, each pod with its own claim (by name or from a
//! ResourceClaimTemplate, 1 or 2 GPUs), ask more than is free; after each
//! turn some bound pods of both are deleted or finish, so that the devices
//! one scheduler's pods held go to the other's next turn. Every few hundred
//! milliseconds every claim of the namespace is read: no device is in two
//! allocated claims, whoever wrote them; every bound pod is on the node of
//! its claim's devices and in its `reservedFor`. At the end of each turn no
//! pod of it waits that the free devices could hold (the rest give up and
//! are deleted); at the end both schedulers bound pods, devices served
//! both, and upstream's checker agrees. The test plays the kubelet (a
//! deleted pod is gone at once, a finished one says so);
//! kube-controller-manager's resourceclaim controller makes the templates'
//! claims and releases finished pods'.
//!
//! Turns, because nothing serialises two schedulers (docs/DRA.md): pods of
//! both placed in the same instant can get the same free device, each
//! scheduler deciding before the other's allocation reaches it.
//! `WASMGPU_DRA_CHURN_TOGETHER=1` makes each turn both schedulers' and shows
//! it. The seed is printed; `WASMGPU_DRA_CHURN_SEED=N` replays its choices
//! (not the schedulers' timing).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::future::try_join_all;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, PostParams};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;
use wasmgpu_test_harness::{FakeNode, PodPhase, TestContext, kube_scheduler_binary, set_pod_phase};

use super::dra::nvidia_slice;
use super::dra_claims::{claim, nvidia_class, upstream_agrees};
use super::node_of;
use crate::support::*;

/// GPUs of each node: 28, one node smaller than the others.
const NODE_GPUS: [u32; 4] = [8, 8, 8, 4];
/// Waves: a turn of each scheduler.
const WAVES: usize = 6;
/// Pods of a turn (1 or 2 GPUs each: about 18 GPUs).
const PODS_PER_TURN: usize = 12;
/// The odds that a bound pod goes after a turn.
const CHURN: f64 = 0.4;
/// Between two reads of every claim and pod.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// How long a turn may take to settle.
const SETTLE: Duration = Duration::from_secs(30);
/// The selector of every claim.
const H100_SELECTOR: &str =
    "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')";

/// Which scheduler a pod names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scheduler {
    Kube,
    Wasmgpu,
}

impl Scheduler {
    const BOTH: [Scheduler; 2] = [Scheduler::Kube, Scheduler::Wasmgpu];

    /// Its `schedulerName`.
    fn name(self) -> &'static str {
        match self {
            Scheduler::Kube => "default-scheduler",
            Scheduler::Wasmgpu => "wasmgpu",
        }
    }
}

/// How a pod asks for its GPUs.
#[derive(Clone, Debug)]
struct Ask {
    scheduler: Scheduler,
    count: u32,
    /// Its claim is made by name (named after the pod), else from a
    /// template by the resourceclaim controller.
    named: bool,
}

/// The claim templates, by count.
fn template(count: u32) -> String {
    format!("gpus-{count}")
}

async fn create_template(ctx: &TestContext, count: u32) -> Result<()> {
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template(count)},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "count": count,
            "selectors": [{"cel": {"expression": H100_SELECTOR}}],
        }}]}}},
    }))?;
    ctx.api::<ResourceClaimTemplate>()
        .create(&PostParams::default(), &template)
        .await?;
    Ok(())
}

/// Creates pod `name` (and its claim, when by name) for `ask.scheduler`,
/// restricted to the test's nodes.
async fn create_asking_pod(ctx: &TestContext, name: &str, ask: &Ask) -> Result<()> {
    let source = if ask.named {
        claim(ctx, name, ask.count, H100_SELECTOR, "gpu.nvidia.com").await?;
        json!({"name": "gpus", "resourceClaimName": name})
    } else {
        json!({"name": "gpus", "resourceClaimTemplateName": template(ask.count)})
    };
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": ask.scheduler.name(),
            "restartPolicy": "Never",
            "nodeSelector": {GROUP_LABEL: ctx.namespace},
            "resourceClaims": [source],
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"claims": [{"name": "gpus"}]},
            }],
        },
    }))?;
    ctx.api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    Ok(())
}

// === kube-scheduler ===

/// kube-scheduler v1.37 on the shared API server (admin identity), its
/// default profile (`default-scheduler`, DRA on) and no leader election;
/// killed when dropped. Its log is kept under the test target's temporary
/// directory.
struct KubeScheduler {
    child: tokio::process::Child,
    log: PathBuf,
}

impl KubeScheduler {
    async fn start(ctx: &TestContext) -> Result<Self> {
        let dir = wasmgpu_test_support::scratch_dir();
        let config = dir.join(format!("kube-scheduler-{}.yaml", ctx.namespace));
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\n\
                 kind: KubeSchedulerConfiguration\n\
                 clientConnection:\n  kubeconfig: {:?}\n  qps: 100\n  burst: 200\n\
                 leaderElection:\n  leaderElect: false\n",
                ctx.cluster().kubeconfig_path()
            ),
        )?;
        let log = dir.join(format!("kube-scheduler-{}.log", ctx.namespace));
        let output = std::fs::File::create(&log)?;
        let child = tokio::process::Command::new(kube_scheduler_binary()?)
            .arg("kube-scheduler")
            .arg("--config")
            .arg(&config)
            .args(["--secure-port=0", "-v=2"])
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .kill_on_drop(true)
            .spawn()
            .context("starting kube-scheduler")?;
        Ok(Self { child, log })
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("kube-scheduler exited ({status}):\n{}", self.log_tail());
        }
        Ok(())
    }
}

// === one reading of the namespace ===

/// What one read of every pod and claim of the namespace shows, checked.
#[derive(Debug, Default)]
struct Sample {
    /// Pods bound and not finished, and their nodes.
    bound: BTreeMap<String, String>,
    /// Pods neither bound nor finished.
    pending: BTreeSet<String>,
    /// Devices held by allocated claims, per pool (node).
    held: BTreeMap<String, u32>,
    /// Allocated claims whose pod is not (or no longer) bound and running:
    /// a binding under way or a release the resourceclaim controller has
    /// still to make.
    in_flight: BTreeSet<String>,
    /// Each allocated claim's uid, the scheduler of its pod and its devices
    /// (`driver/pool/device`).
    allocations: Vec<(String, Option<Scheduler>, Vec<String>)>,
}

/// The pod a claim belongs to: its owner (a template's claim), else the
/// pod it is named after.
fn pod_of(claim: &ResourceClaim) -> String {
    claim
        .owner_references()
        .iter()
        .find(|o| o.kind == "Pod")
        .map(|o| o.name.clone())
        .unwrap_or_else(|| claim.name_any())
}

fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The name of the claim a pod's `gpus` claim is: by name, or the one the
/// resourceclaim controller made and recorded (none yet: `None`).
fn claim_name(pod: &Pod) -> Option<String> {
    let source = pod.spec.as_ref()?.resource_claims.as_ref()?.first()?;
    if let Some(name) = &source.resource_claim_name {
        return Some(name.clone());
    }
    pod.status
        .as_ref()?
        .resource_claim_statuses
        .iter()
        .flatten()
        .find(|s| s.name == source.name)?
        .resource_claim_name
        .clone()
}

/// Reads every pod, then every claim, of the namespace (a pod bound when
/// the pods are read had its claims allocated before), failing on a device
/// in two allocated claims, a bound pod whose claim is not allocated on its
/// node or not reserved for it.
async fn sample(ctx: &TestContext, asks: &BTreeMap<String, Ask>) -> Result<Sample> {
    let pods = ctx.api::<Pod>().list(&ListParams::default()).await?.items;
    let claims: BTreeMap<String, ResourceClaim> = ctx
        .api::<ResourceClaim>()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|c| (c.name_any(), c))
        .collect();
    let mut sample = Sample::default();
    let mut holder: BTreeMap<String, String> = BTreeMap::new();
    let who = |claim: &str| {
        let found = claims.get(claim);
        let pod = found.map(pod_of).unwrap_or_default();
        let scheduler = asks.get(&pod).map_or("?", |a| a.scheduler.name());
        let version = found.and_then(|c| c.resource_version()).unwrap_or_default();
        format!("claim {claim} of pod {pod} ({scheduler}, resourceVersion {version})")
    };
    for (name, claim) in &claims {
        let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
            continue;
        };
        let mut devices = Vec::new();
        for result in allocation
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .filter(|r| r.admin_access != Some(true))
        {
            let device = format!("{}/{}/{}", result.driver, result.pool, result.device);
            if let Some(other) = holder.insert(device.clone(), name.clone()) {
                bail!(
                    "{device} is allocated twice: to {} and to {}",
                    who(&other),
                    who(name)
                );
            }
            *sample.held.entry(result.pool.clone()).or_default() += 1;
            devices.push(device);
        }
        let pod = pod_of(claim);
        sample.allocations.push((
            claim.uid().unwrap_or_default(),
            asks.get(&pod).map(|a| a.scheduler),
            devices,
        ));
        let running = pods
            .iter()
            .any(|p| p.name_any() == pod && !finished(p) && node_of(p).is_some());
        if !running {
            sample.in_flight.insert(name.clone());
        }
    }
    for pod in pods.iter().filter(|p| !finished(p)) {
        let name = pod.name_any();
        let Some(node) = node_of(pod) else {
            sample.pending.insert(name);
            continue;
        };
        let claim = claim_name(pod)
            .and_then(|c| claims.get(&c))
            .with_context(|| format!("pod {name} is bound to {node} without its claim"))?;
        let allocation = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .with_context(|| {
                format!(
                    "pod {name} is bound to {node}, {} is not allocated",
                    who(&claim.name_any())
                )
            })?;
        for result in allocation
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
        {
            ensure!(
                result.pool == node,
                "pod {name} is bound to {node}, {} holds {}/{}",
                who(&claim.name_any()),
                result.pool,
                result.device
            );
        }
        let reserved = claim
            .status
            .iter()
            .flat_map(|s| s.reserved_for.iter().flatten())
            .any(|r| Some(&r.uid) == pod.metadata.uid.as_ref());
        ensure!(
            reserved,
            "pod {name} is bound, {} is not reserved for it",
            who(&claim.name_any())
        );
        sample.bound.insert(name, node);
    }
    Ok(sample)
}

// === impl Sample ===

impl Sample {
    /// Free devices on the node with the most.
    fn most_free(&self, nodes: &[(String, u32)]) -> u32 {
        nodes
            .iter()
            .map(|(node, gpus)| gpus - self.held.get(node).copied().unwrap_or(0))
            .max()
            .unwrap_or(0)
    }

    /// Pending pods the free devices of one node could hold.
    fn could_fit(&self, nodes: &[(String, u32)], asks: &BTreeMap<String, Ask>) -> Vec<String> {
        let free = self.most_free(nodes);
        self.pending
            .iter()
            .filter(|p| asks.get(*p).is_some_and(|a| a.count <= free))
            .cloned()
            .collect()
    }
}

/// What the samples added up to.
#[derive(Default)]
struct Tally {
    samples: usize,
    /// Claims (by uid) seen allocated, by the scheduler of their pod.
    allocated: BTreeMap<Scheduler, BTreeSet<String>>,
    /// Pods seen bound, by scheduler.
    bound: BTreeMap<Scheduler, BTreeSet<String>>,
    /// The schedulers whose claims held each device at some sample.
    device_users: BTreeMap<String, BTreeSet<Scheduler>>,
    most_held: u32,
}

// === impl Tally ===

impl Tally {
    fn add(&mut self, sample: &Sample, asks: &BTreeMap<String, Ask>) {
        self.samples += 1;
        for (uid, scheduler, devices) in &sample.allocations {
            let Some(scheduler) = scheduler else { continue };
            self.allocated
                .entry(*scheduler)
                .or_default()
                .insert(uid.clone());
            for device in devices {
                self.device_users
                    .entry(device.clone())
                    .or_default()
                    .insert(*scheduler);
            }
        }
        for pod in sample.bound.keys() {
            if let Some(ask) = asks.get(pod) {
                self.bound
                    .entry(ask.scheduler)
                    .or_default()
                    .insert(pod.clone());
            }
        }
        self.most_held = self.most_held.max(sample.held.values().sum());
    }

    fn count<T>(map: &BTreeMap<Scheduler, BTreeSet<T>>, scheduler: Scheduler) -> usize {
        map.get(&scheduler).map_or(0, BTreeSet::len)
    }
}

/// The processes under test, checked alive at each sample.
struct Schedulers {
    controller: Controller,
    kube: KubeScheduler,
}

impl Schedulers {
    fn logs(&self) -> String {
        format!(
            "wasmgpu:\n{}\nkube-scheduler:\n{}",
            self.controller.log_tail(),
            self.kube.log_tail()
        )
    }
}

/// Samples every [`SAMPLE_EVERY`] until no claim is allocated for a pod
/// that is not running and no pending pod could fit on the free devices of
/// a node; fails after [`SETTLE`].
async fn settle(
    ctx: &TestContext,
    asks: &BTreeMap<String, Ask>,
    nodes: &[(String, u32)],
    schedulers: &mut Schedulers,
    tally: &mut Tally,
) -> Result<Sample> {
    let deadline = Instant::now() + SETTLE;
    loop {
        schedulers.controller.check_alive()?;
        schedulers.kube.check_alive()?;
        let now = sample(ctx, asks).await.map_err(|e| {
            e.context(format!(
                "after {} samples\n{}",
                tally.samples,
                schedulers.logs()
            ))
        })?;
        tally.add(&now, asks);
        let waiting = now.could_fit(nodes, asks);
        if now.in_flight.is_empty() && waiting.is_empty() {
            return Ok(now);
        }
        ensure!(
            Instant::now() < deadline,
            "after {SETTLE:?}: pods {waiting:?} wait with {} GPUs free on one node; claims {:?} \
             are allocated for no running pod\n{}",
            now.most_free(nodes),
            now.in_flight,
            schedulers.logs()
        );
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

/// Deletes pod `name` (no kubelet: at once) and its claim when by name.
async fn delete_pod(ctx: &TestContext, name: &str, ask: &Ask) -> Result<()> {
    ctx.api::<Pod>()
        .delete(name, &DeleteParams::default().grace_period(0))
        .await?;
    if ask.named {
        ctx.api::<ResourceClaim>()
            .delete(name, &DeleteParams::default())
            .await?;
    }
    Ok(())
}

/// What went after the turns.
#[derive(Default)]
struct Gone {
    deleted: usize,
    finished: usize,
    gave_up: usize,
}

#[tokio::test]
async fn wasmgpu_and_kube_scheduler_taking_turns_on_the_same_devices_never_allocate_one_twice()
-> Result<()> {
    let _turn = exclusive().await;
    let seed = std::env::var("WASMGPU_DRA_CHURN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1)
        });
    eprintln!("DRA churn seed {seed} (replay: WASMGPU_DRA_CHURN_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let turns: Vec<Vec<Scheduler>> =
        if std::env::var_os("WASMGPU_DRA_CHURN_TOGETHER").is_some_and(|v| !v.is_empty()) {
            vec![Scheduler::BOTH.to_vec()]
        } else {
            Scheduler::BOTH.iter().map(|s| vec![*s]).collect()
        };
    let ctx = TestContext::new("ctl-dra-churn").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let mut nodes = Vec::new();
    let mut slices = Vec::new();
    for (i, gpus) in NODE_GPUS.iter().enumerate() {
        let node = format!("{}-n{i}", ctx.namespace);
        FakeNode::new(&node)
            .label(GROUP_LABEL, &ctx.namespace)
            .create(&ctx.client)
            .await?;
        let slice = nvidia_slice(&node, *gpus)?;
        slices.push(slice.name_any());
        ctx.cluster_api::<ResourceSlice>()
            .create(&PostParams::default(), &slice)
            .await?;
        nodes.push((node, *gpus));
    }
    for count in [1, 2] {
        create_template(&ctx, count).await?;
    }
    let started = Instant::now();
    let mut schedulers = Schedulers {
        controller: Controller::start(&ctx).await?,
        kube: KubeScheduler::start(&ctx).await?,
    };
    let mut asks: BTreeMap<String, Ask> = BTreeMap::new();
    let mut tally = Tally::default();
    let mut gone = Gone::default();

    let last = (WAVES - 1, turns.len() - 1);
    for wave in 0..WAVES {
        for (t, turn) in turns.iter().enumerate() {
            // The turn's pods, more than is free, created at once.
            let mut batch = Vec::new();
            for i in 0..PODS_PER_TURN {
                let scheduler = turn[i % turn.len()];
                let prefix = match scheduler {
                    Scheduler::Kube => "k",
                    Scheduler::Wasmgpu => "w",
                };
                let ask = Ask {
                    scheduler,
                    count: rng.random_range(1..=2),
                    named: rng.random_bool(0.5),
                };
                batch.push((format!("{prefix}{wave}-{i}"), ask));
            }
            asks.extend(batch.iter().cloned());
            try_join_all(
                batch
                    .iter()
                    .map(|(name, ask)| create_asking_pod(&ctx, name, ask)),
            )
            .await?;
            let settled = settle(&ctx, &asks, &nodes, &mut schedulers, &mut tally).await?;
            if (wave, t) == last {
                break;
            }

            // Those that did not fit give up; some bound pods of both go:
            // deleted (with their claim, when by name) or finished.
            for pod in &settled.pending {
                delete_pod(&ctx, pod, &asks[pod]).await?;
                gone.gave_up += 1;
            }
            for pod in settled.bound.keys() {
                if !rng.random_bool(CHURN) {
                    continue;
                }
                if rng.random_bool(0.5) {
                    delete_pod(&ctx, pod, &asks[pod]).await?;
                    gone.deleted += 1;
                } else {
                    let pods = ctx.api::<Pod>();
                    set_pod_phase(&pods, pod, PodPhase::Running).await?;
                    set_pod_phase(&pods, pod, PodPhase::Succeeded).await?;
                    gone.finished += 1;
                }
            }
        }
    }
    let took = started.elapsed();

    // Both placed pods, on devices the other also held at another time.
    let shared = tally
        .device_users
        .values()
        .filter(|users| users.len() == 2)
        .count();
    for scheduler in Scheduler::BOTH {
        ensure!(
            Tally::count(&tally.bound, scheduler) > 0,
            "{} bound no pod\n{}",
            scheduler.name(),
            schedulers.logs()
        );
    }
    ensure!(shared > 0, "no device served both schedulers");
    upstream_agrees(&ctx).await?;
    println!(
        "DRA churn beside kube-scheduler (seed {seed}): {WAVES} waves of {} turns of {PODS_PER_TURN} \
         pods on {} GPUs; pods bound: kube-scheduler {}, wasmgpu {}; claims allocated: \
         kube-scheduler {}, wasmgpu {}; {shared} devices served both; {} pods deleted, {} \
         finished, {} gave up; at most {} GPUs held; {} samples, no device twice; {took:.1?}",
        turns.len(),
        NODE_GPUS.iter().sum::<u32>(),
        Tally::count(&tally.bound, Scheduler::Kube),
        Tally::count(&tally.bound, Scheduler::Wasmgpu),
        Tally::count(&tally.allocated, Scheduler::Kube),
        Tally::count(&tally.allocated, Scheduler::Wasmgpu),
        gone.deleted,
        gone.finished,
        gone.gave_up,
        tally.most_held,
        tally.samples,
    );

    drop(schedulers);
    ctx.api::<Pod>()
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &Default::default(),
        )
        .await?;
    for slice in &slices {
        ctx.cluster_api::<ResourceSlice>()
            .delete(slice, &DeleteParams::default())
            .await?;
    }
    let names: Vec<String> = nodes.into_iter().map(|(n, _)| n).collect();
    remove_nodes(&ctx, &names).await
}
