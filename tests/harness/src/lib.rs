//! Test harness for wasmgpu: a real Kubernetes control plane for tests.
//!
//! ```text
//!  test process                                 control-plane child (Go)
//!  ┌──────────────────────────────────┐ spawn   ┌──────────────────────────────┐
//!  │ cluster() ── once per process ───┼───────▶ │ kube-apiserver + etcd        │
//!  │   &'static Cluster (kubeconfig)  │ stdin   │ stops when stdin closes,     │
//!  │ TestContext::new("name")         │ ◀─pipe─ │ i.e. when this process exits │
//!  │   fresh namespace + admin Client │         └──────────────────────────────┘
//!  └──────────────────────────────────┘
//! ```
//!
//! Every test calls [`TestContext::new`], which starts the control plane the
//! first time (all tests of the process share it) and creates a namespace of
//! the test's own. No kubelet or scheduler runs, and of kube-controller-manager
//! only the resourceclaim controller, the garbage collector and the namespace
//! controller: tests make their nodes with [`FakeNode`] and play the kubelet
//! with [`set_pod_phase`] (and by deleting a terminating pod with no grace
//! period, as a kubelet confirms a deletion).
//! [`TestContext::service_account`] gives a client and a kubeconfig for a
//! restricted identity, to exercise RBAC. [`ApiProxy`] stands between a
//! client and the server, to cut and restore its traffic. [`Registry`]
//! starts an OCI registry (TLS, basic auth) to push policy components to.
//!
//! The binary comes from `make control-plane` (see `docs/CONTROL-PLANE.md`);
//! `WASMGPU_CONTROL_PLANE` names it. A test that runs kube-scheduler finds
//! it with [`kube_scheduler_binary`] (`make kube-scheduler`). Set
//! `WASMGPU_TEST_KUBECONFIG` to run the tests against a cluster that is
//! already running (e.g. `make cluster`) instead, and
//! `WASMGPU_CONTROL_PLANE_LOG` to keep the server's whole log.

#![forbid(unsafe_code)]

mod identity;
mod locate;
mod node;
mod pod;
mod process;
mod proxy;
mod registry;
mod wait;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, Resource};

pub use identity::ServiceAccountIdentity;
pub use locate::{
    CONTROL_PLANE_ENV, KUBE_SCHEDULER_ENV, KUBECTL_ENV, control_plane_binary,
    kube_scheduler_binary, kubectl_binary,
};
pub use node::FakeNode;
pub use pod::{PodPhase, set_pod_phase};
pub use proxy::ApiProxy;
pub use registry::{ORAS_ENV, REGISTRY_ENV, Registry, oras_binary, registry_binary};
pub use wait::{DEFAULT_WAIT, wait_for};

/// Use this running cluster instead of starting one.
pub const EXTERNAL_KUBECONFIG_ENV: &str = "WASMGPU_TEST_KUBECONFIG";
/// Also write the control plane's whole log to this file.
pub const LOG_FILE_ENV: &str = "WASMGPU_CONTROL_PLANE_LOG";
/// Seconds to wait for the control plane to be ready (default 180).
pub const START_TIMEOUT_ENV: &str = "WASMGPU_CONTROL_PLANE_TIMEOUT";

const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(180);

/// The control plane the tests of this process share.
pub struct Cluster {
    kubeconfig: Kubeconfig,
    kubeconfig_path: PathBuf,
    /// `None` when the cluster was already running ([`EXTERNAL_KUBECONFIG_ENV`]).
    process: Option<process::ControlPlane>,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The shared control plane, started on first use. A failed start is
/// reported to every test of the process without trying again.
pub async fn cluster() -> Result<&'static Cluster> {
    let cluster = tokio::task::spawn_blocking(|| {
        CLUSTER.get_or_init(|| Cluster::start().map_err(|e| format!("{e:#}")))
    })
    .await
    .context("starting the control plane")?;
    cluster.as_ref().map_err(|e| anyhow!("{e}"))
}

// === impl Cluster ===

impl Cluster {
    fn start() -> Result<Self> {
        if let Some(path) = std::env::var_os(EXTERNAL_KUBECONFIG_ENV).filter(|p| !p.is_empty()) {
            let kubeconfig_path = PathBuf::from(path);
            let kubeconfig = Kubeconfig::read_from(&kubeconfig_path).with_context(|| {
                format!(
                    "reading {EXTERNAL_KUBECONFIG_ENV}={}",
                    kubeconfig_path.display()
                )
            })?;
            return Ok(Self {
                kubeconfig,
                kubeconfig_path,
                process: None,
            });
        }
        let binary = control_plane_binary()?;
        let timeout = match std::env::var(START_TIMEOUT_ENV) {
            Ok(secs) => Duration::from_secs(secs.parse().with_context(|| {
                format!("{START_TIMEOUT_ENV}={secs} is not a number of seconds")
            })?),
            Err(_) => DEFAULT_START_TIMEOUT,
        };
        let log_file = std::env::var_os(LOG_FILE_ENV).map(PathBuf::from);
        let process = process::ControlPlane::start(&binary, timeout, log_file.as_deref())?;
        eprintln!(
            "control plane {} ready at {} in {:.1?}",
            process.version, process.server, process.ready_in
        );
        let kubeconfig = Kubeconfig::read_from(&process.kubeconfig_path)
            .with_context(|| format!("reading {}", process.kubeconfig_path.display()))?;
        Ok(Self {
            kubeconfig,
            kubeconfig_path: process.kubeconfig_path.clone(),
            process: Some(process),
        })
    }

    /// A client with the admin identity (group `system:masters`).
    ///
    /// A `Client` belongs to the Tokio runtime it was made in: make one per test.
    pub async fn client(&self) -> Result<Client> {
        client_from(self.kubeconfig.clone()).await
    }

    /// The admin kubeconfig, all key material inline.
    pub fn kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }

    /// Where the admin kubeconfig is on disk, for subprocesses (kubectl, the
    /// controller). It is deleted when the control plane stops.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        self.kubeconfig
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.server.as_deref())
            .unwrap_or_default()
    }

    /// The last lines of the control plane's log, for error messages.
    pub fn log_tail(&self) -> String {
        match &self.process {
            Some(process) => process.log.tail(),
            None => format!("  (the cluster of {EXTERNAL_KUBECONFIG_ENV} logs elsewhere)\n"),
        }
    }

    /// A `kubectl` command (built from the same Kubernetes modules) with the
    /// admin identity.
    pub fn kubectl(&self) -> Result<std::process::Command> {
        let mut command = std::process::Command::new(kubectl_binary()?);
        command.env("KUBECONFIG", &self.kubeconfig_path);
        Ok(command)
    }

    /// Runs `kubectl ARGS` with the admin identity in `dir`, bounded by
    /// [`DEFAULT_WAIT`]; its standard output, or an error with its stderr.
    pub async fn run_kubectl(&self, dir: &Path, args: &[&str]) -> Result<String> {
        let mut command = self.kubectl()?;
        command.args(args).current_dir(dir);
        let output = tokio::time::timeout(
            DEFAULT_WAIT,
            tokio::process::Command::from(command)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .with_context(|| format!("kubectl {args:?} did not finish within {DEFAULT_WAIT:?}"))??;
        anyhow::ensure!(
            output.status.success(),
            "kubectl {args:?}: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8(output.stdout)?)
    }
}

/// A client for a kubeconfig.
pub async fn client_from(kubeconfig: Kubeconfig) -> Result<Client> {
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("loading the kubeconfig")?;
    Client::try_from(config).context("building a client")
}

// === TestContext ===

/// What a test gets: an admin client and a namespace of its own.
pub struct TestContext {
    /// Admin identity (`system:masters`).
    pub client: Client,
    /// Fresh, named after the test, with a unique suffix.
    pub namespace: String,
    cluster: &'static Cluster,
}

impl TestContext {
    /// Starts the shared control plane if needed and creates a namespace
    /// `<name>-<suffix>` for this test. It is not deleted when the test ends
    /// (a bound pod would keep it terminating, with no kubelet to confirm
    /// the pod's deletion, and the next test's controller would see the
    /// deletions); it goes with the server.
    pub async fn new(name: &str) -> Result<Self> {
        let cluster = cluster().await?;
        let client = cluster.client().await?;
        let prefix: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        let namespace = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-", prefix.trim_matches('-'))),
                labels: Some([("wasmgpu.io/test".to_owned(), "true".to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let created = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| {
                format!(
                    "creating a namespace for {name}; server log:\n{}",
                    cluster.log_tail()
                )
            })?;
        let namespace = created
            .metadata
            .name
            .context("the server named no namespace")?;
        Ok(Self {
            client,
            namespace,
            cluster,
        })
    }

    /// The shared control plane.
    pub fn cluster(&self) -> &'static Cluster {
        self.cluster
    }

    /// An API for namespaced objects in this test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// An API for cluster-scoped objects.
    pub fn cluster_api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::ClusterResourceScope>,
        K::DynamicType: Default,
    {
        Api::all(self.client.clone())
    }

    /// Creates (if needed) the ServiceAccount `name` in this test's namespace
    /// and mints a token for it: a restricted identity that RBAC applies to,
    /// as `system:serviceaccount:<namespace>:<name>`. It has no permissions
    /// until the test binds it to a role.
    pub async fn service_account(&self, name: &str) -> Result<ServiceAccountIdentity> {
        ServiceAccountIdentity::create(self.cluster, &self.client, &self.namespace, name).await
    }
}
