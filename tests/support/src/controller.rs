//! What the controller tests share: CRDs, GPU nodes, the controller
//! process, objects.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::{Mutex, MutexGuard};
use wasmgpu::api::{GPUNode, GPUResource, GPUResourceSpec, GpuInfo, Sharing};
use wasmgpu_test_harness::{FakeNode, TestContext};

pub const H100: &str = "NVIDIA H100 80GB HBM3";
pub const H100_MIB: u64 = 81559;
/// Label on each test's nodes; its pods select it, so that a test's
/// controller never places another test's leftover pods.
pub const GROUP_LABEL: &str = "wasmgpu.io/test-group";

/// One controller per API server at a time: tests of this file take turns.
pub async fn exclusive() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::const_new(());
    TURN.lock().await
}

pub use crate::install_crds;

/// Creates Node `name` (Ready, in the test's group) and its GPUNode with
/// `gpus` H100s (UUIDs `GPU-<name>-<i>`, full NVLink), as an agent would.
pub async fn gpu_node(ctx: &TestContext, name: &str, gpus: u32) -> Result<()> {
    FakeNode::new(name)
        .label(GROUP_LABEL, &ctx.namespace)
        .create(&ctx.client)
        .await?;
    publish_gpunode(ctx, name, gpus).await
}

/// Publishes (or publishes again) the GPUNode of Node `name`, as its agent
/// would.
pub async fn publish_gpunode(ctx: &TestContext, name: &str, gpus: u32) -> Result<()> {
    publish_gpunode_with(ctx, name, gpus, &[]).await
}

/// [`publish_gpunode`] with the GPUs at `unhealthy` indices unhealthy (XID 79).
pub async fn publish_gpunode_with(
    ctx: &TestContext,
    name: &str,
    gpus: u32,
    unhealthy: &[u32],
) -> Result<()> {
    let uuids: Vec<String> = (0..gpus).map(|i| format!("GPU-{name}-{i}")).collect();
    let infos: Vec<GpuInfo> = (0..gpus)
        .map(|index| GpuInfo {
            uuid: uuids[index as usize].clone(),
            index,
            model: H100.into(),
            memory_total_mib: H100_MIB,
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
            nvlink_peers: uuids
                .iter()
                .filter(|u| **u != uuids[index as usize])
                .cloned()
                .collect(),
            healthy: !unhealthy.contains(&index),
            unhealthy_reason: unhealthy
                .contains(&index)
                .then(|| "XID 79 (GPU has fallen off the bus)".to_string()),
            ..Default::default()
        })
        .collect();
    publish_gpus(ctx, name, &infos).await
}

/// Publishes `gpus` as the GPUNode of Node `name`, with the summaries its
/// agent would write.
pub async fn publish_gpus(ctx: &TestContext, name: &str, gpus: &[GpuInfo]) -> Result<()> {
    let api: Api<GPUNode> = ctx.cluster_api();
    let patch = json!({
        "apiVersion": "wasmgpu.io/v1alpha1",
        "kind": "GPUNode",
        "metadata": { "name": name },
        "spec": {},
    });
    let params = PatchParams::apply("wasmgpu-test").force();
    api.patch(name, &params, &Patch::Apply(&patch)).await?;
    let status = json!({
        "apiVersion": "wasmgpu.io/v1alpha1",
        "kind": "GPUNode",
        "metadata": { "name": name },
        "status": {
            "gpus": gpus,
            "gpusTotal": gpus.len(),
            "gpusHealthy": gpus.iter().filter(|g| g.healthy).count(),
            "migInstancesTotal": gpus.iter().map(|g| g.mig_instances.len()).sum::<usize>(),
            "model": gpus.first().map(|g| g.model.as_str()),
        },
    });
    api.patch_status(name, &params, &Patch::Apply(&status))
        .await
        .with_context(|| format!("publishing GPUNode {name}"))?;
    Ok(())
}

/// A GPUResource in the test's namespace.
pub async fn gpuresource(
    ctx: &TestContext,
    name: &str,
    count: u32,
    sharing: Sharing,
    memory_mib: u64,
    policy: Option<&str>,
) -> Result<GPUResource> {
    let resource = GPUResource::new(
        name,
        GPUResourceSpec {
            mig_profile: None,
            count,
            model: None,
            memory_mib,
            sharing,
            policy: policy.map(Into::into),
        },
    );
    Ok(ctx
        .api::<GPUResource>()
        .create(&PostParams::default(), &resource)
        .await?)
}

/// A pod scheduled by wasmgpu, using GPUResource `resource`, restricted to
/// the test's nodes.
pub fn pod(ctx: &TestContext, name: &str, resource: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some(BTreeMap::from([(
                "wasmgpu.io/gpuresource".to_string(),
                resource.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            scheduler_name: Some("wasmgpu".into()),
            restart_policy: Some("Never".into()),
            node_selector: Some(BTreeMap::from([(
                GROUP_LABEL.to_string(),
                ctx.namespace.clone(),
            )])),
            containers: vec![Container {
                name: "main".into(),
                image: Some("cuda:latest".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// Creates the pod.
pub async fn create_pod(ctx: &TestContext, name: &str, resource: &str) -> Result<Pod> {
    Ok(ctx
        .api::<Pod>()
        .create(&PostParams::default(), &pod(ctx, name, resource))
        .await?)
}

/// A running `wasmgpu controller` process, killed when dropped. Its log is
/// kept under the test target's temporary directory, named after the test's
/// namespace.
pub struct Controller {
    child: tokio::process::Child,
    log: PathBuf,
}

impl Controller {
    /// Starts the controller with binpack (the default) and spread, as the
    /// ServiceAccount `wasmgpu-controller` with exactly the permissions of
    /// `deploy/rbac/controller.yaml`.
    pub async fn start(ctx: &TestContext) -> Result<Self> {
        Self::start_with(ctx, &[]).await
    }

    /// [`Controller::start`] with more flags.
    pub async fn start_with(ctx: &TestContext, flags: &[String]) -> Result<Self> {
        let kubeconfig = crate::rbac::identity(
            ctx,
            "controller.yaml",
            "wasmgpu-controller",
            &crate::scratch_dir(),
        )
        .await?;
        let log = crate::scratch_dir().join(format!(
            "controller-{}-{}.log",
            ctx.namespace,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis()
        ));
        let policies = crate::policy_dir();
        let child = tokio::process::Command::new(crate::wasmgpu_bin())
            .arg("controller")
            .arg(format!(
                "--policy=binpack={}",
                policies.join("wasmgpu_binpack.wasm").display()
            ))
            .arg(format!(
                "--policy=spread={}",
                policies.join("wasmgpu_spread.wasm").display()
            ))
            .args(["--default-policy", "binpack", "--resync", "2s"])
            .args(if flags.iter().any(|f| f == "--http-address") {
                &[][..]
            } else {
                &["--http-address", "off"][..]
            })
            .args(flags)
            .env("KUBECONFIG", &kubeconfig)
            // As the Deployment does: its namespace holds the policy ConfigMaps.
            .env("POD_NAMESPACE", &ctx.namespace)
            .env(
                "RUST_LOG",
                std::env::var("WASMGPU_TEST_RUST_LOG")
                    .unwrap_or_else(|_| "info,wasmgpu=debug".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("starting wasmgpu controller")?;
        Ok(Self { child, log })
    }

    /// Kills the process (SIGKILL: no graceful stop) and waits for it.
    pub async fn kill(mut self) -> Result<String> {
        self.child.kill().await?;
        Ok(self.log_tail())
    }

    /// The process id (to send it a signal).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The end of the controller's log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Waits until a line of the log holds every one of `words`; fails
    /// with the log's end after `within`.
    pub async fn wait_log(&self, words: &[&str], within: std::time::Duration) -> Result<()> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log
                .lines()
                .any(|line| words.iter().all(|w| line.contains(w)))
            {
                return Ok(());
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "no log line with {words:?} within {within:?}:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Fails with the log when the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!("the controller exited ({status}):\n{}", self.log_tail());
        }
        Ok(())
    }
}

/// Deletes the test's Nodes and GPUNodes, so later tests do not see them.
pub async fn remove_nodes(ctx: &TestContext, names: &[String]) -> Result<()> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = ctx.cluster_api();
    let gpunodes: Api<GPUNode> = ctx.cluster_api();
    for name in names {
        let _ = nodes.delete(name, &Default::default()).await;
        let _ = gpunodes.delete(name, &Default::default()).await;
    }
    Ok(())
}

/// How long the controller may take to act on something.
pub const ACT: Duration = Duration::from_secs(30);

/// The allocation the controller recorded on a pod (with its binding).
pub fn allocation(pod: &k8s_openapi::api::core::v1::Pod) -> Option<wasmgpu::api::PodAllocation> {
    wasmgpu::api::PodAllocation::from_annotations(pod.metadata.annotations.as_ref())
        .map(|read| read.expect("the controller writes readable allocations"))
}
