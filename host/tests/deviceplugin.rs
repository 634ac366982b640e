//! The device plugin end to end: the `wasmgpu agent` process serves the
//! kubelet device plugin API on Unix sockets, the `wasmgpu controller`
//! binds pods on a real API server, and the test plays the kubelet over the
//! real gRPC protocol: a Registration server, ListAndWatch,
//! GetPreferredAllocation and Allocate as the kubelet's device manager calls
//! them.

use wasmgpu_test_support as common;
use wasmgpu_test_support::controller as support;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use wasmgpu::agent::deviceplugin::RESOURCE_NAME;
use wasmgpu::agent::deviceplugin::kubelet::{Kubelet, PluginConnection};
use wasmgpu::agent::deviceplugin::proto::ContainerAllocateResponse;
use wasmgpu::api::{PodAllocation, Sharing};
use wasmgpu_test_harness::{FakeNode, PodPhase, TestContext, set_pod_phase};

use support::{ACT, Controller, GROUP_LABEL, gpuresource};

const GPUS: usize = 8;
const GPU_MIB: u64 = 81559;
/// `--min-share-mib`: 81559 / 16384 = 4 replicas per GPU.
const MIN_SHARE_MIB: u64 = 16384;
const REPLICAS: usize = 4;

// === the agent ===

fn inventory(node: &str, unhealthy: Option<usize>) -> Value {
    let gpus: Vec<Value> = (0..GPUS)
        .map(|i| {
            json!({
                "index": i,
                "uuid": format!("GPU-{node}-{i}"),
                "name": support::H100,
                "memoryTotalMiB": GPU_MIB,
                "memoryUsedMiB": 0,
                "pciBusId": format!("00000000:{:02X}:00.0", 0x18 + i),
                "numaNode": i / 4,
                "events": if Some(i) == unhealthy { json!([{ "xid": 79 }]) } else { json!([]) },
            })
        })
        .collect();
    json!({ "driverVersion": "570.124.06", "cudaVersion": "12.8", "gpus": gpus })
}

/// `wasmgpu agent` with its device plugin; killed when dropped.
struct Agent {
    _child: Child,
    log: PathBuf,
}

impl Agent {
    async fn start(ctx: &TestContext, node: &str, inventory: &Path, dir: &Path) -> Result<Self> {
        let kubeconfig = common::rbac::identity(
            ctx,
            "agent.yaml",
            "wasmgpu-agent",
            Path::new(env!("CARGO_TARGET_TMPDIR")),
        )
        .await?;
        let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("agent-{node}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
            .args(["agent", "--node-name", node, "--interval", "1s"])
            .arg("--inventory")
            .arg(inventory)
            .arg("--device-plugin-dir")
            .arg(dir)
            .args(["--min-share-mib", &MIN_SHARE_MIB.to_string()])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("spawning wasmgpu agent")?;
        Ok(Self { _child: child, log })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

// === pods ===

/// A pod of GPUResource `resource` asking for `count` wasmgpu.io/gpu.
async fn create_pod(ctx: &TestContext, name: &str, resource: &str, count: u32) -> Result<Pod> {
    let mut pod = support::pod(ctx, name, resource);
    pod.spec.as_mut().unwrap().containers[0].resources = Some(ResourceRequirements {
        limits: Some(BTreeMap::from([(
            RESOURCE_NAME.to_string(),
            Quantity(count.to_string()),
        )])),
        ..Default::default()
    });
    Ok(ctx
        .api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await?)
}

fn allocation(pod: &Pod) -> Option<PodAllocation> {
    PodAllocation::from_annotations(pod.metadata.annotations.as_ref()).and_then(Result::ok)
}

/// When a pod was bound (its PodScheduled condition), milliseconds.
fn bound_ms(pod: &Pod) -> i64 {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_millisecond())
        .unwrap_or(i64::MAX)
}

/// Bound pods with an allocation, not yet started, in the kubelet's
/// admission order (as bound; oldest first among those bound together).
async fn bound_waiting(ctx: &TestContext, started: &HashSet<String>) -> Result<Vec<Pod>> {
    let mut pods: Vec<Pod> = ctx
        .api::<Pod>()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| !started.contains(&p.name_any()))
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .filter(|p| allocation(p).is_some())
        .collect();
    pods.sort_by_key(|p| {
        (
            bound_ms(p),
            p.creation_timestamp().map(|t| t.0),
            p.name_any(),
        )
    });
    Ok(pods)
}

fn cdi_names(response: &ContainerAllocateResponse) -> Vec<String> {
    response
        .cdi_devices
        .iter()
        .map(|d| d.name.clone())
        .collect()
}

/// A small deterministic generator, so that a failure can be replayed.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A node of the test's namespace with 8 GPUs, its agent serving the
/// device plugin and registered with the test's kubelet.
struct GpuNode {
    node: String,
    /// Unix socket paths are short (108 bytes): a directory of its own in
    /// /tmp, removed when dropped.
    dir: tempfile::TempDir,
    plugin_dir: PathBuf,
    inventory_file: PathBuf,
    kubelet: Kubelet,
    agent: Agent,
    registration: wasmgpu::agent::deviceplugin::proto::RegisterRequest,
}

impl GpuNode {
    async fn start(ctx: &TestContext) -> Result<Self> {
        common::install_crds(ctx).await?;
        let node = format!("{}-n1", ctx.namespace);
        FakeNode::new(&node)
            .label(GROUP_LABEL, &ctx.namespace)
            .create(&ctx.client)
            .await?;
        let dir = tempfile::Builder::new().prefix("wgdp").tempdir_in("/tmp")?;
        let plugin_dir = dir.path().join("device-plugins");
        std::fs::create_dir(&plugin_dir)?;
        let inventory_file = dir.path().join("inventory.json");
        std::fs::write(&inventory_file, inventory(&node, None).to_string())?;
        let mut kubelet = Kubelet::start(&plugin_dir)?;
        let agent = Agent::start(ctx, &node, &inventory_file, &plugin_dir).await?;
        let registration = kubelet
            .registration(Duration::from_secs(30))
            .await
            .with_context(|| agent.log())?;
        Ok(Self {
            node,
            dir,
            plugin_dir,
            inventory_file,
            kubelet,
            agent,
            registration,
        })
    }
}

#[tokio::test]
async fn the_kubelet_gets_exactly_the_policys_gpus_through_the_device_plugin() -> Result<()> {
    let _turn = support::exclusive().await;
    let ctx = TestContext::new("devplugin").await?;
    // Registration: the agent finds the kubelet's socket and registers.
    let GpuNode {
        node,
        dir: _dir,
        plugin_dir,
        inventory_file,
        kubelet,
        agent,
        registration,
    } = GpuNode::start(&ctx).await?;
    assert_eq!(registration.resource_name, "wasmgpu.io/gpu");
    assert_eq!(registration.version, "v1beta1");
    assert_eq!(registration.endpoint, "wasmgpu.sock");
    let mut plugin = PluginConnection::open(&plugin_dir, &registration).await?;
    let devices = plugin
        .wait_devices(ACT, "every GPU healthy", |d| {
            d.len() == GPUS * (1 + REPLICAS) && d.iter().all(|d| d.health == "Healthy")
        })
        .await
        .with_context(|| agent.log())?;
    assert!(devices.iter().any(|d| d.id == format!("GPU-{node}-0::3")));

    // 50 pods of three kinds, in random order; the kubelet starts them two
    // at a time, oldest first, as they are bound.
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "two", 2, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "slice", 1, Sharing::Shared, 20000, Some("spread")).await?;
    let controller = Controller::start(&ctx).await?;
    let kinds = [("one", 1), ("two", 2), ("slice", 1)];
    let mut random = Lcg(0x5eed);
    let mut count_of = BTreeMap::new();
    for i in 0..50 {
        let (resource, count) = kinds[random.below(3) as usize];
        let name = format!("p{i:02}-{resource}");
        create_pod(&ctx, &name, resource, count).await?;
        count_of.insert(name, count as usize);
    }
    let pods: Api<Pod> = ctx.api();
    let mut started: HashSet<String> = HashSet::new();
    let (mut exclusive, mut shared) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(240);
    while started.len() < 50 {
        ensure!(
            Instant::now() < deadline,
            "only {} of 50 pods started; controller log:\n{}",
            started.len(),
            controller.log_tail()
        );
        let waiting = bound_waiting(&ctx, &started).await?;
        let left = 50 - started.len();
        if waiting.len() < 2.min(left) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        // Start once the controller has bound what it will for now (a
        // kubelet receives pods as they are bound; this one looks at a
        // settled list so that its order is the one the plugin sees).
        tokio::time::sleep(Duration::from_millis(400)).await;
        let again = bound_waiting(&ctx, &started).await?;
        let names = |pods: &[Pod]| pods.iter().map(|p| p.name_any()).collect::<Vec<_>>();
        if names(&again) != names(&waiting) {
            continue;
        }
        let pair = &waiting[..2.min(left)];
        let mut in_use: HashSet<String> = HashSet::new();
        let mut pair_gpus: Vec<BTreeSet<String>> = Vec::new();
        for pod in pair {
            let name = pod.name_any();
            let given = allocation(pod).expect("filtered");
            let (ids, response) = plugin
                .admit(&in_use, count_of[&name])
                .await
                .with_context(|| format!("admitting {name}:\n{}", agent.log()))?;
            let expected: Vec<String> = given
                .devices
                .iter()
                .map(|d| format!("nvidia.com/gpu={}", d.uuid))
                .collect();
            assert_eq!(cdi_names(&response), expected, "{name}");
            assert!(
                !response.envs.contains_key("NVIDIA_VISIBLE_DEVICES"),
                "{:?}",
                response.envs
            );
            for id in &ids {
                assert!(in_use.insert(id.clone()), "{id} given twice");
            }
            match given.sharing {
                Sharing::Exclusive => exclusive += 1,
                Sharing::Shared => shared += 1,
            }
            pair_gpus.push(given.devices.iter().map(|d| d.uuid.clone()).collect());
            started.insert(name);
        }
        if let [a, b] = &pair_gpus[..]
            && !a.is_disjoint(b)
        {
            // Only shared pods may meet on a GPU.
            let kinds: Vec<Sharing> = pair
                .iter()
                .filter_map(|p| allocation(p).map(|a| a.sharing))
                .collect();
            assert_eq!(kinds, [Sharing::Shared, Sharing::Shared], "{pair_gpus:?}");
        }
        for pod in pair {
            set_pod_phase(&pods, &pod.name_any(), PodPhase::Succeeded).await?;
        }
    }
    assert!(
        exclusive > 0 && shared > 0,
        "{exclusive} exclusive, {shared} shared"
    );
    eprintln!("50 pods started two at a time: {exclusive} exclusive, {shared} shared");
    // Each hand-over is recorded on its pod.
    let recorded = pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| p.annotations().contains_key("wasmgpu.io/handoff"))
        .count();
    assert!(recorded >= 48, "{recorded} pods carry their hand-over");

    // An offer of other GPUs than the pod was given is refused, naming pod,
    // expected and offered devices, with an Event on the pod.
    create_pod(&ctx, "mismatch", "one", 1).await?;
    let pod = loop {
        let waiting = bound_waiting(&ctx, &started).await?;
        if let Some(pod) = waiting.into_iter().find(|p| p.name_any() == "mismatch") {
            break pod;
        }
        ensure!(Instant::now() < deadline + ACT, "mismatch never bound");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let given = allocation(&pod).expect("bound").devices[0].uuid.clone();
    let other = (0..GPUS)
        .map(|i| format!("GPU-{node}-{i}"))
        .find(|u| *u != given)
        .expect("8 GPUs");
    let preferred = plugin
        .preferred(plugin.available(&HashSet::new()), 1)
        .await?;
    assert_eq!(preferred, [given.as_str()]);
    let refused = plugin
        .allocate(std::slice::from_ref(&other))
        .await
        .expect_err("another GPU than the pod's is refused");
    let message = refused.message();
    assert!(
        message.contains(&format!("{}/mismatch", ctx.namespace))
            && message.contains(&format!("given {given}"))
            && message.contains(&format!("offered {other}")),
        "{message}"
    );
    let events: Api<Event> = ctx.api();
    let event_deadline = Instant::now() + ACT;
    loop {
        let found = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .any(|e| {
                e.reason.as_deref() == Some("AllocationMismatch")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("mismatch")
                    && e.note.as_deref().is_some_and(|n| n.contains(&other))
            });
        if found {
            break;
        }
        ensure!(
            Instant::now() < event_deadline,
            "no AllocationMismatch Event on the pod"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A GPU turning unhealthy is reported Unhealthy within one interval (1s;
    // the inventory file is checked every second, so allow for both).
    std::fs::write(&inventory_file, inventory(&node, Some(5)).to_string())?;
    let sick = format!("GPU-{node}-5");
    let before = Instant::now();
    plugin
        .wait_devices(Duration::from_secs(3), "GPU 5 unhealthy", |d| {
            d.iter()
                .filter(|d| d.id == sick || d.id.starts_with(&format!("{sick}::")))
                .all(|d| d.health == "Unhealthy")
                && d.iter().filter(|d| d.health == "Unhealthy").count() == 1 + REPLICAS
        })
        .await
        .with_context(|| agent.log())?;
    eprintln!("unhealthy reported after {:?}", before.elapsed());

    // A kubelet restart (its socket and the plugins' removed and created
    // again): the plugin registers again and serves the devices.
    let mut kubelet = kubelet.restart()?;
    let registration = kubelet
        .registration(Duration::from_secs(15))
        .await
        .with_context(|| agent.log())?;
    assert_eq!(registration.resource_name, "wasmgpu.io/gpu");
    let mut plugin = PluginConnection::open(&plugin_dir, &registration).await?;
    plugin
        .wait_devices(ACT, "the devices again", |d| {
            d.len() == GPUS * (1 + REPLICAS)
        })
        .await?;
    assert!(agent.log().contains("registering again"), "{}", agent.log());
    drop(controller);
    support::remove_nodes(&ctx, std::slice::from_ref(&node)).await?;
    Ok(())
}

/// A container of `name` asking for `gpus` wasmgpu.io/gpu.
fn gpu_container(name: &str, gpus: u32) -> k8s_openapi::api::core::v1::Container {
    k8s_openapi::api::core::v1::Container {
        name: name.into(),
        image: Some("cuda:latest".into()),
        resources: Some(ResourceRequirements {
            limits: Some(BTreeMap::from([(
                RESOURCE_NAME.to_string(),
                Quantity(gpus.to_string()),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn init_containers_and_sidecars_get_their_pods_gpus_as_the_kubelet_reuses_them() -> Result<()>
{
    use wasmgpu::api::{container_gpus, pod_gpus};
    let _turn = support::exclusive().await;
    let ctx = TestContext::new("devinit").await?;
    let GpuNode {
        node,
        dir: _dir,
        plugin_dir,
        inventory_file: _,
        kubelet: _kubelet,
        agent,
        registration,
    } = GpuNode::start(&ctx).await?;
    let mut plugin = PluginConnection::open(&plugin_dir, &registration).await?;
    plugin
        .wait_devices(ACT, "every GPU", |d| d.len() == GPUS * (1 + REPLICAS))
        .await
        .with_context(|| agent.log())?;
    gpuresource(&ctx, "two", 2, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "three", 3, Sharing::Exclusive, 0, None).await?;
    let controller = Controller::start(&ctx).await?;

    // (pod, GPUResource, init containers, app containers); `s…` are
    // sidecars (restartPolicy: Always).
    type Containers = &'static [(&'static str, u32)];
    let shapes: [(&str, &str, Containers, Containers); 3] = [
        ("init", "two", &[("prepare", 2)], &[("train", 2)]),
        (
            "sidecar",
            "three",
            &[("i1", 1), ("s1", 1), ("i2", 2)],
            &[("a", 2)],
        ),
        ("multi", "two", &[], &[("a", 1), ("b", 1)]),
    ];
    for (name, resource, init, app) in shapes {
        let mut pod = support::pod(&ctx, name, resource);
        let spec = pod.spec.as_mut().unwrap();
        spec.init_containers = Some(
            init.iter()
                .map(|(c, n)| {
                    let mut container = gpu_container(c, *n);
                    if c.starts_with('s') {
                        container.restart_policy = Some("Always".into());
                    }
                    container
                })
                .collect(),
        );
        spec.containers = app.iter().map(|(c, n)| gpu_container(c, *n)).collect();
        ctx.api::<Pod>()
            .create(&PostParams::default(), &pod)
            .await?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let waiting = loop {
        let waiting = bound_waiting(&ctx, &HashSet::new()).await?;
        if waiting.len() == 3 {
            break waiting;
        }
        ensure!(
            Instant::now() < deadline,
            "{} of 3 pods bound; controller log:\n{}",
            waiting.len(),
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut in_use = HashSet::new();
    for pod in &waiting {
        let name = pod.name_any();
        let given: BTreeSet<String> = allocation(pod)
            .expect("bound")
            .devices
            .iter()
            .map(|d| format!("nvidia.com/gpu={}", d.uuid))
            .collect();
        let containers = container_gpus(pod.spec.as_ref().unwrap())?;
        assert_eq!(
            Some(given.len() as u64),
            pod_gpus(&containers),
            "{name}: the controller gave what the containers ask for"
        );
        let admitted = plugin
            .admit_pod(&mut in_use, &containers)
            .await
            .with_context(|| format!("admitting {name}:\n{}", agent.log()))?;
        assert_eq!(admitted.len(), containers.len(), "{name}");
        let mut seen = BTreeSet::new();
        for ((_, response), asked) in admitted.iter().zip(&containers) {
            let names = cdi_names(response);
            assert_eq!(names.len(), asked.count as usize, "{name}: {names:?}");
            for cdi in names {
                assert!(given.contains(&cdi), "{name} was not given {cdi}");
                seen.insert(cdi);
            }
        }
        assert_eq!(seen, given, "{name}: every GPU it holds is used");
    }
    drop(controller);
    support::remove_nodes(&ctx, std::slice::from_ref(&node)).await?;
    Ok(())
}
