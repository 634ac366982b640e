//! The controller while the API server is away: its traffic cut by a proxy
//! (the controller talks to the server only through it), a pod created
//! meanwhile, the traffic restored; and credentials the server refuses.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::config::Kubeconfig;
use serde_json::Value;
use wasmgpu::api::Sharing;
use wasmgpu_test_harness::{ApiProxy, TestContext};

use crate::operate::{free_port, get};
use crate::support::*;

/// How long the traffic stays cut.
const OUTAGE: Duration = Duration::from_secs(15);
/// The bound on binding again after the traffic is back: the watches retry
/// at least once a second, so about a second is expected; this leaves room
/// for a loaded machine.
const RECOVERY_BOUND: Duration = Duration::from_secs(10);
/// The watches an outage may not leave unnamed in /readyz: the controller's
/// own (Node, GPUNode, GPUResource, GPUTenant, Pod, PodDisruptionBudget, the
/// policy ConfigMaps). Where `resource.k8s.io/v1` is served there are the
/// DRA watches too, and PodGroup once its CRD is installed (the gang tests
/// install it on the same API server): an outage shorter than 30 s costs
/// each watch one line (its first failure; then a summary each 30 s).
const OWN_WATCHES: usize = 7;
/// All lines the outage may cost: the watches', kube's notice of each
/// watch stream cut, and the rounds' failed writes (a round each 2 s
/// resync). Retried requests logged one by one would be ~100.
const OUTAGE_LINES: usize = 50;

/// A `wasmgpu controller` process on a kubeconfig of the test's choosing,
/// serving `/readyz` on `port`; killed when dropped.
struct Process {
    _child: tokio::process::Child,
    log: PathBuf,
    port: u16,
}

impl Process {
    async fn start(ctx: &TestContext, kubeconfig: &Path) -> Result<Self> {
        let port = free_port()?;
        let log = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("controller-{}-{port}.log", ctx.namespace));
        let policies = crate::common::policy_dir();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
            .arg("controller")
            .arg(format!(
                "--policy=binpack={}",
                policies.join("wasmgpu_binpack.wasm").display()
            ))
            .args(["--resync", "2s", "--http-address"])
            .arg(format!("127.0.0.1:{port}"))
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAMESPACE", &ctx.namespace)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("starting wasmgpu controller")?;
        Ok(Self {
            _child: child,
            log,
            port,
        })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/readyz`: status and body.
    async fn readyz(&self) -> Result<(u16, String)> {
        get(self.port, "/readyz").await
    }

    /// Waits until `/readyz` answers `status`; its body.
    async fn wait_readyz(&self, status: u16, within: Duration) -> Result<String> {
        let deadline = Instant::now() + within;
        loop {
            let last = self.readyz().await;
            if let Ok((code, body)) = &last
                && *code == status
            {
                return Ok(body.clone());
            }
            if Instant::now() > deadline {
                bail!(
                    "/readyz is not {status} after {within:?}: {last:?}\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The controller's kubeconfig (deployed RBAC) as JSON, to change.
async fn controller_kubeconfig(ctx: &TestContext) -> Result<Value> {
    let path = crate::common::rbac::identity(
        ctx,
        "controller.yaml",
        "wasmgpu-controller",
        Path::new(env!("CARGO_TARGET_TMPDIR")),
    )
    .await?;
    Ok(serde_json::from_slice(&std::fs::read(&path)?)?)
}

/// Writes `kubeconfig` next to the test's logs; its path.
fn write_kubeconfig(ctx: &TestContext, name: &str, kubeconfig: &Value) -> Result<PathBuf> {
    let path =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{name}.kubeconfig", ctx.namespace));
    std::fs::write(&path, serde_json::to_vec_pretty(kubeconfig)?)?;
    Ok(path)
}

#[tokio::test]
async fn binds_within_seconds_after_the_api_server_returns_and_is_unready_meanwhile() -> Result<()>
{
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-outage").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 4).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    let proxy = ApiProxy::start(ctx.cluster().server()).await?;
    let direct: Kubeconfig = serde_json::from_value(controller_kubeconfig(&ctx).await?)?;
    let kubeconfig = write_kubeconfig(
        &ctx,
        "proxied",
        &serde_json::to_value(proxy.kubeconfig(&direct))?,
    )?;
    let controller = Process::start(&ctx, &kubeconfig).await?;
    controller.wait_readyz(200, ACT).await?;
    create_pod(&ctx, "before", "one").await?;
    crate::wait_bound(&ctx, "before").await?;
    // Pods other tests left on the shared API server may have problems; a
    // problem is told a second after the controller first finds it. Told
    // before the cut, they are not counted as lines the outage cost.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let logged_before = controller.log().len();
    proxy.cut();
    let cut_at = Instant::now();
    let why = controller.wait_readyz(503, Duration::from_secs(10)).await?;
    eprintln!(
        "/readyz went unready {:?} after the cut:\n{why}",
        cut_at.elapsed()
    );
    assert!(why.contains("watch is not connected"), "{why}");
    assert!(why.contains(&proxy.url()), "{why}");
    // Straight to the server: the controller cannot see it yet.
    create_pod(&ctx, "during", "one").await?;
    tokio::time::sleep(OUTAGE.saturating_sub(cut_at.elapsed())).await;
    let (status, why) = controller.readyz().await?;
    assert_eq!(status, 503, "{why}");
    let watches = why
        .lines()
        .filter(|l| l.contains("watch is not connected"))
        .count();
    assert!(watches >= OWN_WATCHES, "{watches} watches named:\n{why}");
    // Lines about this test's objects and the controller's own: other
    // tests leave GPUResources on the shared API server, and the round
    // writes each one's status.
    let own = format!("resource={}/", ctx.namespace);
    let all = controller.log()[logged_before..].to_string();
    // Failed status writes: one line when they start failing, however many
    // rounds and GPUResources the shared API server holds.
    let status_lines = all
        .lines()
        .filter(|l| l.contains("Cannot write the status of"))
        .count();
    assert!(
        status_lines <= 1,
        "{status_lines} status-write lines during the outage:\n{all}"
    );
    let during: String = all
        .lines()
        .filter(|line| !line.contains("resource=") || line.contains(&own))
        .map(|line| format!("{line}\n"))
        .collect();

    proxy.restore();
    let restored_at = Instant::now();
    crate::wait_bound(&ctx, "during").await?;
    let recovery = restored_at.elapsed();
    controller.wait_readyz(200, Duration::from_secs(10)).await?;
    eprintln!(
        "after {OUTAGE:?} without the API server, the pod created meanwhile was bound {recovery:?} after its return; \
         /readyz ready {:?} after; the outage cost {} log lines:\n{during}",
        restored_at.elapsed(),
        during.lines().count()
    );
    assert!(
        recovery < RECOVERY_BOUND,
        "bound {recovery:?} after the server returned:\n{}",
        controller.log()
    );
    assert!(
        during.contains(&proxy.address().to_string()),
        "the log does not name the server:\n{during}"
    );
    let watch_lines = during.lines().filter(|l| l.contains("Watch ")).count();
    assert!(
        watch_lines <= watches,
        "{watch_lines} watch lines logged during the outage, for {watches} watches:\n{during}"
    );
    assert!(
        during.lines().count() <= OUTAGE_LINES,
        "{} lines logged during the outage:\n{during}",
        during.lines().count()
    );
    let after = controller.log()[logged_before + during.len()..].to_string();
    for kind in [
        "Node",
        "GPUNode",
        "GPUResource",
        "Pod",
        "PodDisruptionBudget",
        "ConfigMap",
    ] {
        assert!(
            after.contains(&format!("Watch connected again kind=\"{kind}\"")),
            "no reconnection of the {kind} watch logged:\n{after}"
        );
    }
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}

#[tokio::test]
async fn readyz_says_when_the_api_server_refuses_the_credentials() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-credentials").await?;
    install_crds(&ctx).await?;

    // A token the server does not know: 401.
    let mut bad_token = controller_kubeconfig(&ctx).await?;
    bad_token["users"][0]["user"]["token"] = Value::from("not-a-token");
    let controller =
        Process::start(&ctx, &write_kubeconfig(&ctx, "bad-token", &bad_token)?).await?;
    let why = controller.wait_readyz(503, ACT).await?;
    let deadline = Instant::now() + ACT;
    let mut why = why;
    while !why.contains("401 Unauthorized") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        why = controller.readyz().await?.1;
    }
    assert!(
        why.contains("rejects the controller's credentials (401 Unauthorized"),
        "{why}"
    );
    assert!(why.contains(ctx.cluster().server()), "{why}");
    drop(controller);

    // A valid identity without the controller's permissions: 403.
    let nobody = ctx.service_account("nobody").await?;
    let path =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-nobody.kubeconfig", ctx.namespace));
    nobody.write_kubeconfig(&path)?;
    let controller = Process::start(&ctx, &path).await?;
    let mut why = controller.wait_readyz(503, ACT).await?;
    let deadline = Instant::now() + ACT;
    while !why.contains("403 Forbidden") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        why = controller.readyz().await?.1;
    }
    assert!(
        why.contains("forbids the controller to list and watch Pod (403 Forbidden"),
        "{why}"
    );
    assert!(why.contains("deploy/rbac/controller.yaml"), "{why}");
    Ok(())
}
