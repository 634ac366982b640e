//! wasmgpu and kube-scheduler in one cluster: the controller (shipped
//! binpack) places the DRA pods that name it, and kube-scheduler v1.37 (the
//! binary `make bench-e2e` compares with, DRA on, its own leader election
//! off) the ones that name `default-scheduler`, on NVIDIA-shaped nodes. Each
//! pod has its own claim (by name or from a ResourceClaimTemplate, 1 or 2
//! GPUs); the pods of a wave ask more than is free; after each wave some
//! bound pods of both are deleted or finish, so that devices go round. Every
//! few hundred milliseconds every claim of the namespace is read: no device
//! is in two allocated claims, whoever wrote them; every bound pod is on the
//! node of its claim's devices, in its `reservedFor`, and on a node of its
//! scheduler. At the end of each wave no pod of it waits that the free
//! devices of its scheduler's nodes could hold (the rest give up and are
//! deleted); at the end both schedulers bound pods and upstream's checker
//! agrees. The test plays the kubelet (a deleted pod is gone at once, a
//! finished one says so); kube-controller-manager's resourceclaim
//! controller makes the templates' claims and releases finished pods'.
//!
//! Nothing serialises two schedulers (docs/DRA.md, "Which nodes"): pods of
//! both placed in the same instant can get the same free device, each
//! scheduler deciding before the other's allocation reaches it. So:
//!
//! * on the same nodes they take turns, a wave of one scheduler's pods and
//!   then of the other's, and devices serve both;
//!   `WASMGPU_DRA_CHURN_TOGETHER=1` makes each turn both schedulers' and
//!   shows a device allocated twice;
//! * on nodes kept apart as docs/DRA.md prints it (its YAML read from the
//!   page: wasmgpu's nodes labelled and tainted, wasmgpu's pods selecting
//!   and tolerating them), both schedulers' pods come at once, every wave.
//!
//! The seed is printed; `WASMGPU_DRA_CHURN_SEED=N` replays its choices (not
//! the schedulers' timing).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::future::try_join_all;
use k8s_openapi::api::core::v1::{Pod, Taint};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, PostParams};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Map, Value, json};
use wasmgpu_test_harness::{FakeNode, PodPhase, TestContext, kube_scheduler_binary, set_pod_phase};

use super::dra::nvidia_slice;
use super::dra_claims::{claim, nvidia_class, upstream_agrees};
use super::node_of;
use crate::support::*;

/// GPUs of each node: 28, one node smaller than the others.
const NODE_GPUS: [u32; 4] = [8, 8, 8, 4];
/// Waves: a turn of each scheduler, or both schedulers' pods at once.
const WAVES: usize = 6;
/// Pods of a turn (1 or 2 GPUs each: about 18 GPUs).
const PODS_PER_TURN: usize = 12;
/// The odds that a bound pod goes after a wave.
const CHURN: f64 = 0.4;
/// Between two reads of every claim and pod.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// How long a wave may take to settle.
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

    /// The first letter of its pods' names.
    fn prefix(self) -> &'static str {
        match self {
            Scheduler::Kube => "k",
            Scheduler::Wasmgpu => "w",
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

/// A node of the test: its GPUs and the scheduler it is for (`None`: both).
struct TestNode {
    name: String,
    gpus: u32,
    only: Option<Scheduler>,
}

impl TestNode {
    fn serves(&self, scheduler: Scheduler) -> bool {
        self.only.is_none_or(|only| only == scheduler)
    }
}

/// Whether node `name` is one of `scheduler`'s.
fn serves(nodes: &[TestNode], name: &str, scheduler: Scheduler) -> bool {
    nodes.iter().any(|n| n.name == name && n.serves(scheduler))
}

// === what docs/DRA.md prints ===

/// What docs/DRA.md prints under "Which nodes" to give GPU nodes to wasmgpu
/// alone, read from the page: each such node's labels and taints, and what
/// each of wasmgpu's pods adds to its spec.
struct Separation {
    node_labels: BTreeMap<String, String>,
    node_taints: Vec<Taint>,
    pod_spec: Map<String, Value>,
}

impl Separation {
    fn documented() -> Result<Self> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/DRA.md");
        let doc = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let block = doc
            .split_once("**Which nodes.**")
            .and_then(|(_, rest)| rest.split_once("```yaml\n"))
            .and_then(|(_, rest)| rest.split_once("\n```"))
            .map(|(block, _)| block)
            .context("docs/DRA.md: no YAML under **Which nodes.**")?;
        let (node, pod) = block
            .split_once("\n# in each pod")
            .and_then(|(node, rest)| Some((node, rest.split_once('\n')?.1)))
            .context("docs/DRA.md: the YAML under **Which nodes.** has no `# in each pod` line")?;
        let node: Value = serde_norway::from_str(node).context("docs/DRA.md: the node's YAML")?;
        let pod: Value = serde_norway::from_str(pod).context("docs/DRA.md: the pod's YAML")?;
        let separation = Self {
            node_labels: serde_json::from_value(node["metadata"]["labels"].clone())?,
            node_taints: serde_json::from_value(node["spec"]["taints"].clone())?,
            pod_spec: serde_json::from_value(pod["spec"].clone())?,
        };
        ensure!(
            !separation.node_labels.is_empty()
                && !separation.node_taints.is_empty()
                && !separation.pod_spec.is_empty(),
            "docs/DRA.md: the YAML under **Which nodes.** lacks the nodes' labels or taints or \
             the pods' spec"
        );
        Ok(separation)
    }

    /// `node` as one of wasmgpu's.
    fn node(&self, node: FakeNode) -> FakeNode {
        let node = self
            .node_labels
            .iter()
            .fold(node, |node, (key, value)| node.label(key, value));
        self.node_taints.iter().fold(node, |node, taint| {
            node.taint(&taint.key, taint.value.as_deref(), &taint.effect)
        })
    }

    /// A spec of one of wasmgpu's pods: each documented field added, maps
    /// (its `nodeSelector`) merged with the pod's own.
    fn pod(&self, spec: &mut Value) {
        for (key, value) in &self.pod_spec {
            match (spec.get_mut(key), value) {
                (Some(Value::Object(own)), Value::Object(added)) => {
                    own.extend(added.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                _ => spec[key] = value.clone(),
            }
        }
    }
}

// === objects ===

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
/// restricted to the test's nodes, and to wasmgpu's as `apart` prints it
/// when it is wasmgpu's.
async fn create_asking_pod(
    ctx: &TestContext,
    name: &str,
    ask: &Ask,
    apart: Option<&Separation>,
) -> Result<()> {
    let source = if ask.named {
        claim(ctx, name, ask.count, H100_SELECTOR, "gpu.nvidia.com").await?;
        json!({"name": "gpus", "resourceClaimName": name})
    } else {
        json!({"name": "gpus", "resourceClaimTemplateName": template(ask.count)})
    };
    let mut spec = json!({
        "schedulerName": ask.scheduler.name(),
        "restartPolicy": "Never",
        "nodeSelector": {GROUP_LABEL: ctx.namespace},
        "resourceClaims": [source],
        "containers": [{
            "name": "main",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"claims": [{"name": "gpus"}]},
        }],
    });
    if let Some(apart) = apart.filter(|_| ask.scheduler == Scheduler::Wasmgpu) {
        apart.pod(&mut spec);
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": spec,
    }))?;
    ctx.api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    Ok(())
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
/// in two allocated claims, a claim holding devices off its pod's
/// scheduler's nodes, a bound pod off them, or whose claim is not allocated
/// on its node or not reserved for it.
async fn sample(
    ctx: &TestContext,
    asks: &BTreeMap<String, Ask>,
    nodes: &[TestNode],
) -> Result<Sample> {
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
        let pod = pod_of(claim);
        let scheduler = asks.get(&pod).map(|a| a.scheduler);
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
            ensure!(
                scheduler.is_none_or(|s| serves(nodes, &result.pool, s)),
                "{} holds {device}, on a node not its scheduler's",
                who(name)
            );
            *sample.held.entry(result.pool.clone()).or_default() += 1;
            devices.push(device);
        }
        sample
            .allocations
            .push((claim.uid().unwrap_or_default(), scheduler, devices));
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
        if let Some(ask) = asks.get(&name) {
            ensure!(
                serves(nodes, &node, ask.scheduler),
                "pod {name} ({}) is bound to {node}, not one of its scheduler's nodes",
                ask.scheduler.name()
            );
        }
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
    /// Free devices on the node with the most of those that are
    /// `scheduler`'s (`own`) or not.
    fn most_free(&self, nodes: &[TestNode], scheduler: Scheduler, own: bool) -> u32 {
        nodes
            .iter()
            .filter(|n| n.serves(scheduler) == own)
            .map(|n| n.gpus - self.held.get(&n.name).copied().unwrap_or(0))
            .max()
            .unwrap_or(0)
    }

    /// Pending pods the free devices of one node of their scheduler's
    /// (`own`), or of another's, could hold.
    fn could_fit(
        &self,
        nodes: &[TestNode],
        asks: &BTreeMap<String, Ask>,
        own: bool,
    ) -> Vec<String> {
        self.pending
            .iter()
            .filter(|p| {
                asks.get(*p)
                    .is_some_and(|a| a.count <= self.most_free(nodes, a.scheduler, own))
            })
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
    /// Samples in which a pending pod of a scheduler would have fit on the
    /// free devices of a node not its scheduler's.
    kept_off: BTreeMap<Scheduler, usize>,
    most_held: u32,
}

// === impl Tally ===

impl Tally {
    fn add(&mut self, sample: &Sample, asks: &BTreeMap<String, Ask>, nodes: &[TestNode]) {
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
        let kept_off: BTreeSet<Scheduler> = sample
            .could_fit(nodes, asks, false)
            .iter()
            .filter_map(|p| asks.get(p).map(|a| a.scheduler))
            .collect();
        for scheduler in kept_off {
            *self.kept_off.entry(scheduler).or_default() += 1;
        }
        self.most_held = self.most_held.max(sample.held.values().sum());
    }

    fn count<T>(map: &BTreeMap<Scheduler, BTreeSet<T>>, scheduler: Scheduler) -> usize {
        map.get(&scheduler).map_or(0, BTreeSet::len)
    }

    /// Devices whose claims at some sample were `scheduler`'s.
    fn devices_of(&self, scheduler: Scheduler) -> usize {
        self.device_users
            .values()
            .filter(|users| users.contains(&scheduler))
            .count()
    }

    /// Devices that served both schedulers.
    fn shared(&self) -> usize {
        self.device_users
            .values()
            .filter(|users| users.len() == 2)
            .count()
    }
}

/// What went after the waves.
#[derive(Default)]
struct Gone {
    deleted: usize,
    finished: usize,
    gave_up: usize,
}

// === the cluster under churn ===

/// A namespace with [`NODE_GPUS`] nodes, both schedulers, and what the
/// test did and saw there so far.
struct Churn {
    ctx: TestContext,
    seed: u64,
    rng: StdRng,
    nodes: Vec<TestNode>,
    slices: Vec<String>,
    /// wasmgpu's nodes and pods kept apart as docs/DRA.md prints it
    /// (`None`: every node is both schedulers').
    apart: Option<Separation>,
    schedulers: Schedulers,
    asks: BTreeMap<String, Ask>,
    tally: Tally,
    gone: Gone,
    started: Instant,
}

impl Churn {
    /// The nodes (with `apart`, the first half kube-scheduler's, the rest
    /// wasmgpu's as it prints them), their slices, the claim templates,
    /// then the controller and kube-scheduler.
    async fn start(name: &str, apart: Option<Separation>) -> Result<Self> {
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
        let ctx = TestContext::new(name).await?;
        install_crds(&ctx).await?;
        nvidia_class(&ctx).await?;
        let mut nodes = Vec::new();
        let mut slices = Vec::new();
        for (i, gpus) in NODE_GPUS.iter().enumerate() {
            let name = format!("{}-n{i}", ctx.namespace);
            let only = apart.as_ref().map(|_| {
                if i < NODE_GPUS.len() / 2 {
                    Scheduler::Kube
                } else {
                    Scheduler::Wasmgpu
                }
            });
            let node = FakeNode::new(&name).label(GROUP_LABEL, &ctx.namespace);
            match (&apart, only) {
                (Some(apart), Some(Scheduler::Wasmgpu)) => {
                    let stored = apart.node(node).create(&ctx.client).await?;
                    let taints = stored.spec.and_then(|s| s.taints).unwrap_or_default();
                    ensure!(
                        taints == apart.node_taints,
                        "node {name} has taints {taints:?}, not {:?}",
                        apart.node_taints
                    );
                }
                _ => {
                    node.create(&ctx.client).await?;
                }
            }
            let slice = nvidia_slice(&name, *gpus)?;
            slices.push(slice.name_any());
            ctx.cluster_api::<ResourceSlice>()
                .create(&PostParams::default(), &slice)
                .await?;
            nodes.push(TestNode {
                name,
                gpus: *gpus,
                only,
            });
        }
        for count in [1, 2] {
            create_template(&ctx, count).await?;
        }
        let started = Instant::now();
        let schedulers = Schedulers {
            controller: Controller::start(&ctx).await?,
            kube: KubeScheduler::start(&ctx).await?,
        };
        Ok(Self {
            ctx,
            seed,
            rng: StdRng::seed_from_u64(seed),
            nodes,
            slices,
            apart,
            schedulers,
            asks: BTreeMap::new(),
            tally: Tally::default(),
            gone: Gone::default(),
            started,
        })
    }

    /// Wave `wave`'s pods: `each` of every one of `schedulers`, interleaved,
    /// 1 or 2 GPUs, by name or from a template.
    fn wave(&mut self, wave: usize, schedulers: &[Scheduler], each: usize) -> Vec<(String, Ask)> {
        (0..each * schedulers.len())
            .map(|i| {
                let scheduler = schedulers[i % schedulers.len()];
                let ask = Ask {
                    scheduler,
                    count: self.rng.random_range(1..=2),
                    named: self.rng.random_bool(0.5),
                };
                (format!("{}{wave}-{i}", scheduler.prefix()), ask)
            })
            .collect()
    }

    /// Creates `pods` at once, then samples every [`SAMPLE_EVERY`] until no
    /// claim is allocated for a pod that is not running and no pending pod
    /// could fit on the free devices of a node of its scheduler's; fails
    /// after [`SETTLE`].
    async fn place(&mut self, pods: Vec<(String, Ask)>) -> Result<Sample> {
        self.asks.extend(pods.iter().cloned());
        try_join_all(
            pods.iter()
                .map(|(name, ask)| create_asking_pod(&self.ctx, name, ask, self.apart.as_ref())),
        )
        .await?;
        let deadline = Instant::now() + SETTLE;
        loop {
            self.schedulers.controller.check_alive()?;
            self.schedulers.kube.check_alive()?;
            let now = sample(&self.ctx, &self.asks, &self.nodes)
                .await
                .map_err(|e| {
                    e.context(format!(
                        "after {} samples\n{}",
                        self.tally.samples,
                        self.schedulers.logs()
                    ))
                })?;
            self.tally.add(&now, &self.asks, &self.nodes);
            let waiting = now.could_fit(&self.nodes, &self.asks, true);
            if now.in_flight.is_empty() && waiting.is_empty() {
                return Ok(now);
            }
            ensure!(
                Instant::now() < deadline,
                "after {SETTLE:?}: pods {waiting:?} wait with GPUs free on one node of theirs \
                 (kube-scheduler {}, wasmgpu {}); claims {:?} are allocated for no running \
                 pod\n{}",
                now.most_free(&self.nodes, Scheduler::Kube, true),
                now.most_free(&self.nodes, Scheduler::Wasmgpu, true),
                now.in_flight,
                self.schedulers.logs()
            );
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    }

    /// After a wave: those that did not fit give up; some bound pods of both
    /// go: deleted (with their claim, when by name) or finished.
    async fn churn(&mut self, settled: &Sample) -> Result<()> {
        for pod in &settled.pending {
            delete_pod(&self.ctx, pod, &self.asks[pod]).await?;
            self.gone.gave_up += 1;
        }
        for pod in settled.bound.keys() {
            if !self.rng.random_bool(CHURN) {
                continue;
            }
            if self.rng.random_bool(0.5) {
                delete_pod(&self.ctx, pod, &self.asks[pod]).await?;
                self.gone.deleted += 1;
            } else {
                let pods = self.ctx.api::<Pod>();
                set_pod_phase(&pods, pod, PodPhase::Running).await?;
                set_pod_phase(&pods, pod, PodPhase::Succeeded).await?;
                self.gone.finished += 1;
            }
        }
        Ok(())
    }

    /// Both schedulers bound pods, and upstream's checker agrees with every
    /// allocation left.
    async fn both_bound(&self) -> Result<()> {
        for scheduler in Scheduler::BOTH {
            ensure!(
                Tally::count(&self.tally.bound, scheduler) > 0,
                "{} bound no pod\n{}",
                scheduler.name(),
                self.schedulers.logs()
            );
        }
        upstream_agrees(&self.ctx).await
    }

    /// The figures both tests print.
    fn figures(&self) -> String {
        let tally = &self.tally;
        format!(
            "pods bound: kube-scheduler {}, wasmgpu {}; claims allocated: kube-scheduler {}, \
             wasmgpu {}; devices used: kube-scheduler {}, wasmgpu {}, both {}; {} pods deleted, \
             {} finished, {} gave up; at most {} GPUs held; {} samples, no device twice; {:.1?}",
            Tally::count(&tally.bound, Scheduler::Kube),
            Tally::count(&tally.bound, Scheduler::Wasmgpu),
            Tally::count(&tally.allocated, Scheduler::Kube),
            Tally::count(&tally.allocated, Scheduler::Wasmgpu),
            tally.devices_of(Scheduler::Kube),
            tally.devices_of(Scheduler::Wasmgpu),
            tally.shared(),
            self.gone.deleted,
            self.gone.finished,
            self.gone.gave_up,
            tally.most_held,
            tally.samples,
            self.started.elapsed(),
        )
    }

    /// Stops both schedulers, then removes the pods, slices and nodes.
    async fn clean_up(self) -> Result<()> {
        drop(self.schedulers);
        self.ctx
            .api::<Pod>()
            .delete_collection(
                &DeleteParams::default().grace_period(0),
                &Default::default(),
            )
            .await?;
        for slice in &self.slices {
            self.ctx
                .cluster_api::<ResourceSlice>()
                .delete(slice, &DeleteParams::default())
                .await?;
        }
        let names: Vec<String> = self.nodes.into_iter().map(|n| n.name).collect();
        remove_nodes(&self.ctx, &names).await
    }
}

#[tokio::test]
async fn wasmgpu_and_kube_scheduler_taking_turns_on_the_same_devices_never_allocate_one_twice()
-> Result<()> {
    let _turn = exclusive().await;
    let turns: Vec<Vec<Scheduler>> =
        if std::env::var_os("WASMGPU_DRA_CHURN_TOGETHER").is_some_and(|v| !v.is_empty()) {
            vec![Scheduler::BOTH.to_vec()]
        } else {
            Scheduler::BOTH.iter().map(|s| vec![*s]).collect()
        };
    let mut churn = Churn::start("ctl-dra-churn", None).await?;
    let last = (WAVES - 1, turns.len() - 1);
    for wave in 0..WAVES {
        for (t, turn) in turns.iter().enumerate() {
            let pods = churn.wave(wave, turn, PODS_PER_TURN / turn.len());
            let settled = churn.place(pods).await?;
            if (wave, t) != last {
                churn.churn(&settled).await?;
            }
        }
    }

    // Both placed pods, on devices the other also held at another time.
    ensure!(churn.tally.shared() > 0, "no device served both schedulers");
    churn.both_bound().await?;
    println!(
        "DRA churn beside kube-scheduler (seed {}): {WAVES} waves of {} turns of {PODS_PER_TURN} \
         pods on {} GPUs; {}",
        churn.seed,
        turns.len(),
        NODE_GPUS.iter().sum::<u32>(),
        churn.figures(),
    );
    churn.clean_up().await
}

#[tokio::test]
async fn wasmgpu_and_kube_scheduler_at_once_on_nodes_kept_apart_never_allocate_a_device_twice()
-> Result<()> {
    let _turn = exclusive().await;
    let apart = Separation::documented()?;
    let mut churn = Churn::start("ctl-dra-apart", Some(apart)).await?;
    for wave in 0..WAVES {
        let pods = churn.wave(wave, &Scheduler::BOTH, PODS_PER_TURN);
        let settled = churn.place(pods).await?;
        if wave + 1 < WAVES {
            churn.churn(&settled).await?;
        }
    }

    // Each on its own nodes (checked at every sample), though a pod of each
    // waited at some sample that the other's free devices could hold; both
    // bound pods.
    ensure!(churn.tally.shared() == 0, "a device served both schedulers");
    for scheduler in Scheduler::BOTH {
        ensure!(
            churn.tally.kept_off.contains_key(&scheduler),
            "no pod of {} waited beside the other's free devices: its nodes went untested",
            scheduler.name()
        );
    }
    churn.both_bound().await?;
    let gpus = |scheduler| {
        churn
            .nodes
            .iter()
            .filter(|n| n.only == Some(scheduler))
            .map(|n| n.gpus)
            .sum::<u32>()
    };
    let kept_off = |scheduler| churn.tally.kept_off.get(&scheduler).copied().unwrap_or(0);
    println!(
        "DRA churn beside kube-scheduler, nodes kept apart as docs/DRA.md prints it (seed {}): \
         {WAVES} waves of {PODS_PER_TURN} pods of each at once, kube-scheduler's on {} GPUs, \
         wasmgpu's on {} (tainted); samples with a pod waiting that the other's free devices \
         could hold: kube-scheduler {}, wasmgpu {}; {}",
        churn.seed,
        gpus(Scheduler::Kube),
        gpus(Scheduler::Wasmgpu),
        kept_off(Scheduler::Kube),
        kept_off(Scheduler::Wasmgpu),
        churn.figures(),
    );
    churn.clean_up().await
}
