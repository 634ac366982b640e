//! `wasmgpu controller`: place pods on GPUs, decided by Wasm policies.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::policy::BoundArgs;
use wasmgpu_controller::{self as controller, OnPolicyFailure, PolicySource};

/// Run the allocating controller against the cluster in KUBECONFIG (or the
/// in-cluster service account).
///
/// It watches GPUResources, GPUNodes, Nodes, PodGroups (when their CRD is
/// installed), policy ConfigMaps and pods with `schedulerName: wasmgpu`;
/// every round it hands the pending pods of each policy to that policy in
/// one call, checks every decision, and applies the valid ones. Each pod is
/// bound by one write: a Binding whose annotations (`wasmgpu.io/allocation`,
/// `wasmgpu.io/devices`, `wasmgpu.io/node`) the API server copies onto the
/// pod, so a pod is bound with its GPUs recorded or not at all (a gang's
/// members are first reserved on their PodGroup). GPUResource status
/// (phase, pod counts, conditions) is written off the round's path, by a
/// background writer. A restarted controller reads every allocation back
/// from the pods (and binds the members a gang's reservation still names),
/// and never hands a GPU to two pods.
///
/// Policies come from `--policy` files and from ConfigMaps labelled
/// `wasmgpu.io/policy=true` in `--policy-namespace` (named after the policy;
/// `binaryData["policy.wasm"]` or `["policy.wasm.gz"]`, optional
/// `data["config.json"]`, optional `wasmgpu.io/sha256` digest pin). A
/// ConfigMap's version is checked, compiled and tried on a canary round
/// before it replaces the active one; a ConfigMap overrides a file policy of
/// the same name, and deleting it unloads its version. See docs/POLICIES.md.
#[derive(Debug, Args)]
pub struct ControllerCommand {
    /// A policy to load from a file: NAME=PATH to a `.wasm` component.
    /// Repeat for several; GPUResources pick one by `spec.policy`. A policy
    /// ConfigMap of the same name overrides it while it exists.
    #[arg(long = "policy", value_name = "NAME=PATH", value_parser = parse_named_path)]
    policies: Vec<(String, PathBuf)>,

    /// The namespace whose policy ConfigMaps (label `wasmgpu.io/policy=true`)
    /// are loaded [default: $POD_NAMESPACE, else wasmgpu-system].
    #[arg(long, value_name = "NAMESPACE")]
    policy_namespace: Option<String>,

    /// What a round does when the active policy fails at run time (trap,
    /// fuel, deadline, invalid output): `wait` keeps its pods pending;
    /// `last-good` retries the round with the version active before the
    /// latest swap, when there is one (else the pods wait).
    #[arg(long, value_enum, default_value_t)]
    on_policy_failure: OnPolicyFailure,

    /// Parameters for a policy: NAME=PATH to a JSON file, handed to the
    /// policy as `snapshot.config`.
    #[arg(long = "policy-config", value_name = "NAME=PATH", value_parser = parse_named_path)]
    policy_configs: Vec<(String, PathBuf)>,

    /// The policy of GPUResources that name none.
    #[arg(long, value_name = "NAME", default_value = "binpack")]
    default_policy: String,

    /// The least time from one round's start to the next (e.g. `10ms`,
    /// `1s`): pods that arrive during a round and the rest of its window are
    /// decided together by the next one; after a quiet spell, a change is
    /// decided at once. Under a steady stream of pods it is what a pod
    /// waits at most before its round; a shorter one spends more CPU on
    /// rounds (docs/BENCHMARKS.md, "Pods at a steady rate").
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = humantime::parse_duration)]
    gather_window: Duration,

    /// A round runs at least this often, even when nothing changed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    resync: Duration,

    /// The least time between two status writes of GPUResources (and of
    /// GPUTenants): an object's `status` (its pods, GPUs and conditions)
    /// is written at most this often, the newest wins, and after a quiet
    /// spell at once. Under a steady stream of pods a round may run every
    /// few milliseconds; a status write each would cost the API server
    /// as much as the bindings.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    status_interval: Duration,

    /// Bindings sent to the API server at once. Each pod is one write (the
    /// binding carries its allocation); a DRA pod is its claims' writes (its
    /// finalizer, its status; the claim read again only after a conflict),
    /// then the binding.
    /// Writes start as soon as a decision is validated and do not hold back
    /// the next round.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1024))]
    write_concurrency: u16,

    /// `Allocated` Events (one per pod bound) and `Waiting` Events (one per
    /// pod and reason a policy gives) sent per second at most, together, in
    /// bursts of as many. An Event is a write like a binding: under a burst
    /// of pods, one Event per pod would halve the API server's budget for
    /// bindings. Past the rate, pods still carry their allocation
    /// (annotation `wasmgpu.io/allocation`); Events not sent are counted in
    /// `wasmgpu_events_unsent_total`. 0 sends none. Warnings are never
    /// rate-limited.
    #[arg(long, value_name = "N", default_value_t = 50)]
    allocated_events_per_second: u32,

    /// How long one API write (a binding, a gang reservation, a status; an
    /// earlier version's ledger entry or finalizer) may take before its
    /// outcome counts as unknown: a binding is then read back, its GPUs held
    /// meanwhile, and sent again if it did not happen.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    write_timeout: Duration,

    /// Where to serve `/metrics` (Prometheus), `/healthz` and `/readyz`
    /// (ready once every watched kind was listed, and while every watch is
    /// connected; else 503 and why). `off` serves nothing.
    #[arg(long, value_name = "ADDRESS", default_value = "0.0.0.0:8080", value_parser = parse_address)]
    http_address: HttpAddress,

    /// Compete for a `coordination.k8s.io` Lease and apply decisions only
    /// while holding it (for several replicas). Every replica keeps its
    /// index warm, so a standby takes over within the lease duration.
    #[arg(long)]
    leader_elect: bool,

    /// How long a bound pod keeps its GPUs before a preemption or a
    /// reclaim may take them (`running.protected-ms` in the snapshot; the
    /// host refuses such a victim). A GPUTenant's `minRuntimeSeconds`
    /// overrides it for the tenant's pods. 0s: no minimum.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = humantime::parse_duration)]
    min_runtime: Duration,

    /// Read only GPUNodes, never DRA's ResourceSlices, ResourceClaims,
    /// DeviceClasses and DeviceTaintRules. By default they are read wherever
    /// the API server serves `resource.k8s.io/v1` (DeviceTaintRules where
    /// served, 1.37+): GPUs a DRA driver publishes count with the GPUNodes'
    /// (the same UUID is one GPU), devices any claim's allocation holds stay
    /// held, tainted devices go only to claims that tolerate the taint, and
    /// pods asking through `spec.resourceClaims` are placed and their claims
    /// allocated (see docs/DRA.md).
    #[arg(long)]
    no_dra: bool,

    /// Name of the Lease.
    #[arg(long, value_name = "NAME", default_value = "wasmgpu-controller")]
    lease_name: String,

    /// Namespace of the Lease (the controller's own).
    #[arg(
        long,
        value_name = "NAMESPACE",
        env = "POD_NAMESPACE",
        default_value = "wasmgpu-system"
    )]
    lease_namespace: String,

    /// How long the Lease lasts without renewal: the longest a dead
    /// leader's work waits for a standby.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    lease_duration: Duration,

    /// This replica's identity in the Lease and in Events (default: the
    /// host name and process id).
    #[arg(long, value_name = "NAME", env = "POD_NAME")]
    identity: Option<String>,

    /// Log format.
    #[arg(long, value_enum, default_value_t)]
    log_format: LogFormat,

    /// Where components pulled from OCI registries are kept, by digest,
    /// across restarts (a writable directory; the Deployment mounts an
    /// emptyDir) [default: $TMPDIR/wasmgpu-components]. `off` keeps them in
    /// memory only.
    #[arg(long, value_name = "DIR")]
    component_cache: Option<PathBuf>,

    /// A PEM bundle of CAs to trust for every registry, besides the system's
    /// (repeat for several). A pull Secret's `ca.crt` adds CAs for the
    /// ConfigMaps that name it.
    #[arg(long = "registry-ca", value_name = "FILE")]
    registry_cas: Vec<PathBuf>,

    /// The largest component pulled from a registry, in bytes; a larger
    /// layer is refused before it is read (and a registry that sends more
    /// than it announced is cut off).
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    max_component_bytes: usize,

    /// Fuel per policy call (about one unit per Wasm instruction). 0, the
    /// default: no fuel metering, and the deadline (`--deadline-ms`) alone
    /// bounds a call: metering costs about 10% of a call, and the default
    /// fuel of `wasmgpu policy run` outlasts the deadline anyway. Set it
    /// (e.g. 20000000000, `policy run`'s default) for a limit that is the
    /// same on every machine; `policy run` on an exported snapshot reports
    /// the fuel a round uses.
    #[arg(long, default_value_t = 0)]
    fuel: u64,

    #[command(flatten)]
    limits: BoundArgs,
}

/// How logs are written (to stderr); `RUST_LOG` sets the level (default `info`).
#[derive(Clone, Copy, Debug, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl ControllerCommand {
    /// Runs until SIGINT or SIGTERM.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        init_tracing(self.log_format);
        let identity = self.identity.clone().unwrap_or_else(default_identity);
        let mut sources: Vec<PolicySource> = self
            .policies
            .iter()
            .map(|(name, wasm)| PolicySource {
                name: name.clone(),
                wasm: wasm.clone(),
                config: None,
            })
            .collect();
        for (name, path) in &self.policy_configs {
            let source = sources
                .iter_mut()
                .find(|s| &s.name == name)
                .with_context(|| {
                    format!("--policy-config {name}=…: no --policy {name}=… to configure")
                })?;
            source.config = Some(path.clone());
        }
        let mut ca_pem = Vec::new();
        for path in &self.registry_cas {
            let pem = std::fs::read(path)
                .with_context(|| format!("--registry-ca {}: cannot read it", path.display()))?;
            wasmgpu_oci::check_pem(&pem, &format!("--registry-ca {}", path.display()))?;
            ca_pem.push(pem);
        }
        let cache_dir = match &self.component_cache {
            Some(dir) if dir.as_os_str() == "off" => None,
            Some(dir) => Some(dir.clone()),
            None => Some(std::env::temp_dir().join("wasmgpu-components")),
        };
        let config = controller::Config {
            policies: sources,
            policy_namespace: self
                .policy_namespace
                .or_else(|| std::env::var("POD_NAMESPACE").ok())
                .unwrap_or_else(|| "wasmgpu-system".into()),
            on_policy_failure: self.on_policy_failure,
            default_policy: self.default_policy,
            gather_window: self.gather_window,
            resync: self.resync,
            status_interval: self.status_interval,
            limits: self.limits.limits(self.fuel)?,
            instance: Some(identity.clone()),
            http_address: self.http_address.0,
            lease: self.leader_elect.then(|| controller::LeaseConfig {
                name: self.lease_name.clone(),
                namespace: self.lease_namespace.clone(),
                identity: identity.clone(),
                duration: self.lease_duration,
                grace: (self.lease_duration / 3).max(Duration::from_secs(1)),
            }),
            writes: controller::WriteSettings {
                concurrency: usize::from(self.write_concurrency),
                timeout: self.write_timeout,
            },
            allocated_events_per_second: self.allocated_events_per_second,
            registry: controller::RegistrySettings {
                cache_dir,
                ca_pem,
                max_component_bytes: self.max_component_bytes,
            },
            dra: !self.no_dra,
            min_runtime: self.min_runtime,
        };
        let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
        runtime.block_on(async {
            let kube = kube::Config::infer().await.context(
                "cannot find how to reach the Kubernetes API (set KUBECONFIG, or run in a pod)",
            )?;
            Ok::<(), anyhow::Error>(controller::run(kube, config, shutdown_signal()).await?)
        })?;
        Ok(ExitCode::SUCCESS)
    }
}

/// An address to serve on, or none.
#[derive(Clone, Copy, Debug)]
struct HttpAddress(Option<std::net::SocketAddr>);

/// `host:port`, or `off`.
fn parse_address(value: &str) -> Result<HttpAddress, String> {
    if value == "off" {
        return Ok(HttpAddress(None));
    }
    value
        .parse()
        .map(|address| HttpAddress(Some(address)))
        .map_err(|e| format!("expected HOST:PORT or off, got {value:?}: {e}"))
}

/// The host name and process id.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "wasmgpu".into());
    format!("{host}-{}", std::process::id())
}

/// `NAME=PATH`.
fn parse_named_path(value: &str) -> Result<(String, PathBuf), String> {
    match value.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!("expected NAME=PATH, got {value:?}")),
    }
}

/// kube's client logs every failed request at `error`, without its URL or
/// cause (`failed with error client error (Connect)`): a line per retry
/// while the API server is away. The controller logs its failures itself,
/// naming the server, the object and the cause, at a bounded rate.
const KUBE_REQUEST_LOG: &str = "kube_client::client::builder";

/// Logs to stderr at `RUST_LOG` (default `info`). kube's per-request
/// failure lines are off unless `RUST_LOG` names `kube_client`.
pub(crate) fn init_tracing(format: LogFormat) {
    let asked = std::env::var("RUST_LOG").unwrap_or_default();
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if !asked.contains("kube_client")
        && let Ok(directive) = format!("{KUBE_REQUEST_LOG}=off").parse()
    {
        filter = filter.add_directive(directive);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours only on a terminal: not in files or `kubectl logs`.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(error) => {
                    tracing::warn!(%error, "Cannot listen for SIGTERM");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
