//! `wasmgpu agent` as it runs on a node: spawned processes with inventory
//! files, publishing GPUNodes to a real API server under exactly the RBAC
//! of `deploy/rbac/agent.yaml`.

use wasmgpu_test_support as common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use wasmgpu::api::GPUNode;
use wasmgpu_test_harness::{DEFAULT_WAIT, TestContext, wait_for};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// A ServiceAccount with exactly the permissions of
/// `deploy/rbac/agent.yaml`, as a kubeconfig file.
async fn agent_identity(ctx: &TestContext, dir: &Path) -> Result<PathBuf> {
    common::rbac::identity(ctx, "agent.yaml", "wasmgpu-agent", dir).await
}

/// A running `wasmgpu agent`; killed when dropped.
struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    fn start(node: &str, inventory: &Path, kubeconfig: &Path, log: PathBuf) -> Result<Self> {
        Self::start_every(Duration::from_secs(1), node, inventory, kubeconfig, log)
    }

    fn start_every(
        interval: Duration,
        node: &str,
        inventory: &Path,
        kubeconfig: &Path,
        log: PathBuf,
    ) -> Result<Self> {
        let stderr = std::fs::File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
            .args(["agent", "--node-name", node, "--interval"])
            .arg(format!("{}ms", interval.as_millis()))
            .arg("--inventory")
            .arg(inventory)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .context("spawning wasmgpu agent")?;
        Ok(Self { child, log })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the agent's log has `line`.
    async fn wait_for_log(&mut self, line: &str) -> Result<()> {
        let start = Instant::now();
        while start.elapsed() < DEFAULT_WAIT {
            if self.log().contains(line) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the agent exited ({status}) before logging {line:?}:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "the agent did not log {line:?} within {DEFAULT_WAIT:?}:\n{}",
            self.log()
        )
    }

    async fn stop(mut self) -> Result<()> {
        self.child.kill().await?;
        Ok(())
    }
}

fn read_yaml(path: &Path) -> Result<Value> {
    Ok(serde_norway::from_str(&std::fs::read_to_string(path)?)?)
}

/// Waits until GPUNode `name` satisfies `cond`, explaining with the agent's log.
async fn wait_node(
    api: &Api<GPUNode>,
    name: &str,
    agent: &Agent,
    what: &str,
    cond: impl Fn(&GPUNode) -> bool,
) -> Result<GPUNode> {
    match wait_for(api, name, DEFAULT_WAIT, what, |n| n.is_some_and(&cond)).await {
        Ok(Some(node)) => Ok(node),
        Ok(None) => bail!("{name} vanished"),
        Err(error) => Err(error.context(format!("agent log:\n{}", agent.log()))),
    }
}

#[tokio::test]
async fn two_agents_publish_follow_their_files_and_do_not_rewrite_after_a_restart() -> Result<()> {
    let ctx = TestContext::new("agent-publish").await?;
    common::install_crds(&ctx).await?;
    let dir = std::env::temp_dir().join(format!("wasmgpu-agent-test-{}", ctx.namespace));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = agent_identity(&ctx, &dir).await?;

    let (node_a, node_b) = (
        format!("{}-a", ctx.namespace),
        format!("{}-b", ctx.namespace),
    );
    let (file_a, file_b) = (dir.join("a.yaml"), dir.join("b.yaml"));
    std::fs::copy(repo("deploy/inventory/a100-4.yaml"), &file_a)?;
    std::fs::copy(repo("deploy/inventory/mig.yaml"), &file_b)?;
    let agent_a = Agent::start(&node_a, &file_a, &kubeconfig, dir.join("a.log"))?;
    let agent_b = Agent::start(&node_b, &file_b, &kubeconfig, dir.join("b.log"))?;

    let api: Api<GPUNode> = ctx.cluster_api();
    let published = |n: &GPUNode, total: u32, healthy: u32| {
        n.status
            .as_ref()
            .is_some_and(|s| s.gpus_total == total && s.gpus_healthy == healthy)
    };
    let a = wait_node(&api, &node_a, &agent_a, "4 healthy GPUs", |n| {
        published(n, 4, 4)
    })
    .await?;
    let b = wait_node(&api, &node_b, &agent_b, "2 healthy GPUs", |n| {
        published(n, 2, 2)
    })
    .await?;
    let status_a = a.status.as_ref().unwrap();
    assert_eq!(status_a.model.as_deref(), Some("NVIDIA A100-SXM4-40GB"));
    assert_eq!(status_a.gpus[0].nvlink_peers.len(), 3);
    assert!(status_a.last_updated.is_some());
    let ready = status_a
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    assert!(ready.message.contains("a.yaml"), "{}", ready.message);
    let status_b = b.status.as_ref().unwrap();
    assert_eq!(
        status_b.gpus[0].mig_mode,
        Some(wasmgpu::api::MigMode::Enabled)
    );
    // The MIG instances of the inventory, under their GPU, and counted.
    let instances = &status_b.gpus[0].mig_instances;
    let profiles: Vec<&str> = instances.iter().map(|m| m.profile.as_str()).collect();
    assert_eq!(profiles, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]);
    assert_eq!(
        instances[0].uuid,
        "MIG-4f1a6c2e-8b3d-5e7f-9a0b-1c2d3e4f5a60"
    );
    assert_eq!(
        (
            instances[0].memory_total_mib,
            instances[0].gpu_instance_id,
            instances[0].compute_instance_id
        ),
        (40192, Some(2), Some(0))
    );
    assert!(status_b.gpus[1].mig_instances.is_empty());
    assert_eq!(status_b.mig_instances_total, 4);
    let shown = ctx
        .cluster()
        .run_kubectl(&repo(""), &["get", "gpun", &node_b, &node_a])
        .await?;
    let rows: Vec<Vec<&str>> = shown
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(&rows[0][..4], ["NAME", "GPUS", "HEALTHY", "MIG"], "{shown}");
    let row = |name: &str| {
        rows.iter()
            .find(|r| r.first() == Some(&name))
            .map(|r| r[..4].to_vec())
            .unwrap_or_default()
    };
    assert_eq!(row(&node_b), [node_b.as_str(), "2", "2", "4"], "{shown}");
    assert_eq!(row(&node_a), [node_a.as_str(), "4", "4", "0"], "{shown}");
    let managers: Vec<String> = a
        .managed_fields()
        .iter()
        .filter_map(|f| f.manager.clone())
        .collect();
    assert!(
        managers.iter().all(|m| m == "wasmgpu-agent"),
        "{managers:?}"
    );

    // An XID 79 on GPU 2 makes it unhealthy; an application XID 31 on GPU 0 does not.
    let mut inventory = read_yaml(&file_a)?;
    inventory["gpus"][2]["events"] = json!([{ "xid": 79, "at": "2026-11-30T14:03:58Z" }]);
    inventory["gpus"][0]["events"] = json!([{ "xid": 31 }]);
    std::fs::write(&file_a, serde_json::to_vec_pretty(&inventory)?)?;
    let a = wait_node(&api, &node_a, &agent_a, "GPU 2 unhealthy", |n| {
        published(n, 4, 3)
    })
    .await?;
    let gpus = &a.status.as_ref().unwrap().gpus;
    assert_eq!(
        gpus[2].unhealthy_reason.as_deref(),
        Some("XID 79 at 2026-11-30T14:03:58Z")
    );
    assert!(!gpus[2].healthy);
    assert!(gpus[0].healthy && gpus[1].healthy && gpus[3].healthy);

    // An agent restarted on an unchanged inventory leaves the object alone.
    let before = api.get(&node_b).await?;
    agent_b.stop().await?;
    let mut agent_b = Agent::start(&node_b, &file_b, &kubeconfig, dir.join("b2.log"))?;
    agent_b
        .wait_for_log("GPUNode status already current")
        .await?;
    let after = api.get(&node_b).await?;
    assert_eq!(after.resource_version(), before.resource_version());
    assert_eq!(after.managed_fields(), before.managed_fields());
    assert_eq!(after.status, before.status);

    // Fixing the file brings the GPU back.
    inventory["gpus"][2]["events"] = json!([]);
    std::fs::write(&file_a, serde_json::to_vec_pretty(&inventory)?)?;
    wait_node(&api, &node_a, &agent_a, "all healthy again", |n| {
        published(n, 4, 4)
    })
    .await?;

    agent_a.stop().await?;
    agent_b.stop().await?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

#[tokio::test]
async fn a_deleted_gpunode_is_created_again_with_its_status_within_an_interval() -> Result<()> {
    let ctx = TestContext::new("agent-recreate").await?;
    common::install_crds(&ctx).await?;
    let dir = std::env::temp_dir().join(format!("wasmgpu-agent-test-{}", ctx.namespace));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = agent_identity(&ctx, &dir).await?;
    let node = format!("{}-n3", ctx.namespace);
    let file = dir.join("n3.yaml");
    std::fs::copy(repo("deploy/inventory/a100-4.yaml"), &file)?;
    let interval = Duration::from_secs(2);
    let mut agent = Agent::start_every(interval, &node, &file, &kubeconfig, dir.join("n3.log"))?;

    let api: Api<GPUNode> = ctx.cluster_api();
    let published = |n: &GPUNode| n.status.as_ref().is_some_and(|s| s.gpus_total == 4);
    let first = wait_node(&api, &node, &agent, "published", published).await?;
    // Quiet intervals (nothing changed) must not write.
    tokio::time::sleep(interval * 2).await;
    assert_eq!(
        api.get(&node).await?.resource_version(),
        first.resource_version(),
        "an unchanged node was written again:\n{}",
        agent.log()
    );

    // `kubectl delete gpunode`, as an operator would: the agent notices on
    // its next interval and publishes a new object with the same status.
    let deleted_at = Instant::now();
    ctx.cluster()
        .run_kubectl(&dir, &["delete", "gpunode", &node, "--wait=true"])
        .await?;
    let old_uid = first.uid();
    let back = wait_node(&api, &node, &agent, "created again, with its status", |n| {
        n.uid() != old_uid && published(n)
    })
    .await?;
    let took = deleted_at.elapsed();
    eprintln!("GPUNode back {took:.2?} after its deletion (interval {interval:?})");
    assert!(
        took < interval * 2,
        "the GPUNode came back only after {took:?} (interval {interval:?}):\n{}",
        agent.log()
    );
    assert_eq!(back.status.as_ref().unwrap().gpus_healthy, 4);
    assert_eq!(
        back.status.as_ref().unwrap().gpus,
        first.status.as_ref().unwrap().gpus
    );
    agent
        .wait_for_log("GPUNode was deleted; creating it again")
        .await?;

    // Deleted and at once created again by someone else, without a status:
    // the agent publishes its status to the new object too.
    api.delete(&node, &Default::default()).await?;
    let bare: GPUNode = serde_json::from_value(json!({
        "apiVersion": "wasmgpu.io/v1alpha1",
        "kind": "GPUNode",
        "metadata": { "name": node },
        "spec": {},
    }))?;
    match api.create(&Default::default(), &bare).await {
        // The agent's interval fell between the two calls: it made the object.
        Err(kube::Error::Api(status)) if status.is_already_exists() => {}
        result => {
            result?;
        }
    }
    let replaced_at = Instant::now();
    let again = wait_node(&api, &node, &agent, "the status on the new object", |n| {
        n.uid() != back.uid() && published(n)
    })
    .await?;
    let took = replaced_at.elapsed();
    eprintln!("status republished {took:.2?} after the GPUNode was replaced");
    assert!(took < interval * 2, "{took:?}:\n{}", agent.log());
    assert_eq!(again.status.as_ref().unwrap().gpus_healthy, 4);
    assert!(
        !agent.log().contains("Forbidden") && !agent.log().contains("forbidden"),
        "{}",
        agent.log()
    );

    agent.stop().await?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

fn nvml_installed() -> bool {
    std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libnvidia-ml.so.1"))
}

#[test]
fn without_nvml_or_an_inventory_the_agent_refuses_to_start_and_says_why() {
    if nvml_installed() {
        // A GPU machine: the library is there, so this refusal cannot happen.
        return;
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["agent", "--node-name", "x"])
        .env_remove("NODE_NAME")
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    for part in [
        "NVIDIA's management library (libnvidia-ml.so.1) was not found",
        "install the NVIDIA driver",
        "--inventory FILE",
    ] {
        assert!(stderr.contains(part), "missing {part:?} in:\n{stderr}");
    }
}

#[test]
fn once_prints_the_snapshot_without_an_api_server() {
    let inventory = repo("deploy/inventory/h100-nvlink-8.yaml");
    let run = |output: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
            .args(["agent", "--once", "--output", output, "--inventory"])
            .arg(&inventory)
            .env_remove("NODE_NAME")
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap()
    };
    let out = run("json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"]["gpusTotal"], 8);
    assert_eq!(
        json["status"]["gpus"][0]["nvlinkPeers"]
            .as_array()
            .unwrap()
            .len(),
        7
    );
    assert_eq!(
        json["reading"]["gpus"][0]["memoryTotalBytes"],
        81559u64 * 1024 * 1024
    );

    let out = run("table");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("Driver 570.124.06   CUDA 12.8   GPUs 8 (8 healthy)\n"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 10, "{text}");
    assert!(text.contains("1,2,3,4,5,6,7"), "{text}");
}

#[test]
fn a_broken_inventory_is_refused_naming_the_field() {
    let path = std::env::temp_dir().join(format!("wasmgpu-agent-bad-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        "gpus:\n  - index: 0\n    uuid: GPU-0\n    name: X\n    pciBusId: \"00000000:01:00.0\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["agent", "--once", "--inventory"])
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).ok();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("gpus[0]: missing field `memoryTotalMiB`"),
        "{stderr}"
    );
}
