//! # The controller
//!
//! Wires the watches, the index, the policies and the applier together:
//!
//! ```text
//!  watch Node ─────────┐
//!  watch GPUNode ──────┤  apply / delete / reset    ┌─────────┐
//!  watch GPUResource ──┼───────────────────────────▶│  Index  │◀── begin/end_binding (bindings
//!  watch Pod ──────────┘  (schedulerName=wasmgpu)   └────┬────┘     in flight hold their GPUs)
//!                                                         │ snapshot per policy
//!  watch policy ConfigMaps ─▶ check, compile, canary ─▶ Policies (swapped per name)
//!  Rounds: after a change (+ gather window) or resync ────┤
//!    old ledgers moved onto pods → bindings to finish      ▼
//!    per policy: allocate (Wasm, blocking pool) → validate → Applier
//!                     binding + allocation annotations, streamed (one write per pod)
//!                then its shadows (`shadows.rs`), in the background: allocate →
//!                     validate → compare → metrics, shadow status annotation
//!    Reporter: Events; the status each GPUResource should show ─▶
//!      StatusWriter (`status.rs`): written in the background, coalesced
//! ```
//!
//! Rounds run one at a time; a round's bindings stream on in the background
//! while the next round is built, their GPUs held in the index from the
//! moment they are validated. Each policy call looks its
//! policy up when it starts: a ConfigMap swap takes effect at the next call.
//!
//! With several replicas (`leader.rs`), every replica watches, keeps its
//! index warm and loads policies; only the holder of the Lease runs rounds.
//! `http.rs` serves `/metrics` (`metrics.rs`), `/healthz` and `/readyz`;
//! `connection.rs` tells `/readyz` and the log how each watch stands with
//! the API server (`watch.rs` retries within a second of its return).
//!
//! Crate `wasmgpu-controller`: below it the index, the engine, the OCI client,
//! the API types and the contract; only the CLI is above it.
#![forbid(unsafe_code)]

mod apply;
mod configmaps;
mod connection;
mod events;
mod http;
mod leader;
mod load_plan;
mod metrics;
mod payload;
mod policies;
mod recorder;
mod registry;
mod report;
mod round;
mod round_plan;
mod shadows;
mod status;
mod wanted_status;
mod wanted_tenant_status;
mod watch;
mod write_error;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use kube::runtime::events::Reporter as EventReporter;
use kube::runtime::watcher;
use kube::{Api, Client};

pub use apply::{FIELD_MANAGER, WriteSettings};
pub use configmaps::fingerprint;
pub use events::Reason;
pub use leader::{Leadership, LeaseConfig};
pub use metrics::Metrics;
pub use payload::{ComponentSource, MAX_POLICY_BYTES, Payload, RejectError, canary_snapshot};
pub use policies::{ActivePolicy, LoadError, Policies, PolicySet, PolicySource};
pub use registry::RegistrySettings;
pub use round::OnPolicyFailure;

use apply::Applier;
use configmaps::Loader;
use connection::Links;
use events::EventSink;
use report::Reporter;
use round::Rounds;
use shadows::Shadows;
use status::StatusWriter;
use wasmgpu_api::{GPUNode, GPUResource, GPUTenant, POD_GROUP_LABEL, PodGroup, SCHEDULER_NAME};
use wasmgpu_engine::{Engine, Limits};
use wasmgpu_index::Index;
use watch::{WatchedIndex, feed};

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Policies to load from files, by name (a policy ConfigMap of the
    /// same name overrides).
    pub policies: Vec<PolicySource>,
    /// The namespace whose policy ConfigMaps are watched.
    pub policy_namespace: String,
    /// What a round does when a policy fails at run time.
    pub on_policy_failure: OnPolicyFailure,
    /// The policy of GPUResources that name none.
    pub default_policy: String,
    /// How long pending pods are gathered after a change before a round.
    pub gather_window: Duration,
    /// A round runs at least this often.
    pub resync: Duration,
    /// Limits of each policy call.
    pub limits: Limits,
    /// Names this replica in Events.
    pub instance: Option<String>,
    /// Where to serve `/metrics`, `/healthz` and `/readyz`; `None`: nowhere.
    pub http_address: Option<std::net::SocketAddr>,
    /// Leader election; `None`: this replica always leads.
    pub lease: Option<LeaseConfig>,
    /// Concurrency and timeout of API writes.
    pub writes: WriteSettings,
    /// `Allocated` and `Waiting` Events (one per pod) sent per second at most.
    pub allocated_events_per_second: u32,
    /// Components named by OCI reference: cache, CAs, size cap.
    pub registry: RegistrySettings,
    /// How long a bound pod keeps its GPUs before it may be preempted or
    /// reclaimed, unless its GPUTenant sets `minRuntimeSeconds`.
    pub min_runtime: Duration,
    /// Read DRA's ResourceSlices and ResourceClaims where the API server
    /// serves `resource.k8s.io/v1`; false: GPUNodes only.
    pub dra: bool,
}

/// Whether the API server serves scheduler-plugins PodGroups (their CRD is
/// installed). A failure other than "not found" counts as served: the watch
/// then reports it like any other.
async fn podgroups_served(client: &Client) -> bool {
    served(Api::<PodGroup>::all(client.clone()), "PodGroups").await
}

/// Whether the API server serves DRA's `resource.k8s.io/v1` (ResourceSlices).
async fn dra_served(client: &Client) -> bool {
    served(Api::<ResourceSlice>::all(client.clone()), "ResourceSlices").await
}

/// Whether the API server serves the kind `api` lists.
async fn served<K>(api: Api<K>, kind: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => true,
        // An unknown resource type is a bare 404 ("404 page not found"),
        // without a Status body whose reason says NotFound.
        Err(kube::Error::Api(status)) if status.code == 404 || status.is_not_found() => false,
        Err(error) => {
            tracing::warn!(%error, "Cannot tell whether {kind} are served; watching them");
            true
        }
    }
}

/// Runs the controller against the API server of `kube` until `shutdown`
/// completes or a watch ends.
pub async fn run(
    kube: kube::Config,
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let server = kube.cluster_url.to_string();
    let (client, eviction_client) = clients(kube)?;
    let engine = Arc::new(Engine::new(config.limits.clone())?);
    let policies = Policies::new(PolicySet::from_files(&engine, &config.policies)?);
    let mut index = Index::new(config.default_policy.clone());
    index.set_min_runtime(config.min_runtime);
    let shared = WatchedIndex::new(index);
    let metrics = Metrics::new();
    let leadership = match &config.lease {
        Some(lease) => Leadership::elect(client.clone(), lease).await?,
        None => Leadership::always(),
    };
    let links = Links::new(server, metrics.clone());
    let (events, events_task) = EventSink::start(
        client.clone(),
        EventReporter {
            controller: FIELD_MANAGER.into(),
            instance: config.instance.clone(),
        },
        metrics.clone(),
        config.allocated_events_per_second,
    );
    // Tracked, not detached: on shutdown they stop before the Lease is
    // released (the loader holds a leadership receiver).
    let mut watches = tokio::task::JoinSet::new();
    watch_cluster(&client, &shared, &links, config.dra, &mut watches).await;
    let (shadows, shadow_writer) = Shadows::new(
        Api::<ConfigMap>::namespaced(client.clone(), &config.policy_namespace),
        metrics.clone(),
        leadership.subscribe(),
    );
    let shadow_writer = tokio::spawn(
        shadow_writer
            .run()
            .instrument(tracing::info_span!("shadow_writer")),
    );
    let recorder = recorder::Recorder::new();
    let loader = Loader {
        api: Api::<ConfigMap>::namespaced(client.clone(), &config.policy_namespace),
        engine,
        policies: Arc::clone(&policies),
        shared: shared.clone(),
        events: events.clone(),
        name_to_tried: HashMap::new(),
        name_to_status: HashMap::new(),
        metrics: metrics.clone(),
        leader: leadership.subscribe(),
        puller: registry::Puller::new(
            client.clone(),
            &config.policy_namespace,
            config.registry.clone(),
            metrics.clone(),
        ),
        recorder: Arc::clone(&recorder),
        shadows: shadows.clone(),
    };
    tracing::info!(namespace = %config.policy_namespace, "Watching policy ConfigMaps");
    let span = tracing::info_span!("policy_loader", namespace = %config.policy_namespace);
    watches.spawn(loader.run(links.link("ConfigMap")).instrument(span));
    let watched_kinds = watches.len();
    // Every watch has its link: `/readyz` waits for all of them.
    let http = config.http_address.map(|address| {
        let serve = http::serve(address, metrics.clone(), links, Arc::clone(&recorder));
        tokio::spawn(serve.instrument(tracing::info_span!("http", %address)))
    });
    let applier = Applier::new(
        client.clone(),
        eviction_client,
        shared.clone(),
        events.clone(),
        metrics.clone(),
        config.writes,
    );
    let status = StatusWriter::start(applier.status_api());
    let tenant_status = StatusWriter::start(applier.tenant_status_api());
    let rounds = Rounds {
        watched_kinds,
        reporter: Reporter::new(
            shared.clone(),
            events.clone(),
            status,
            tenant_status,
            metrics.clone(),
        ),
        applier,
        shared: shared.clone(),
        events,
        policies,
        shadows,
        on_failure: config.on_policy_failure,
        default_policy: config.default_policy.clone(),
        gather_window: config.gather_window,
        resync: config.resync,
        metrics,
        leader: leadership.subscribe(),
        waits_told: Default::default(),
        recorder,
    };
    let mut rounds = tokio::spawn(rounds.run().instrument(tracing::info_span!("rounds")));
    until_stopped(http, shutdown, &mut watches, &mut rounds).await?;
    rounds.abort();
    let _ = rounds.await;
    shadow_writer.abort();
    watches.shutdown().await;
    events_task.abort();
    leadership.step_down().await;
    Ok(())
}

/// The client for every request, and one for evictions that does not
/// retry 429: there it is the answer (a PodDisruptionBudget refuses), not a
/// request to wait.
fn clients(kube: kube::Config) -> anyhow::Result<(Client, Client)> {
    let server = kube.cluster_url.to_string();
    let mut answers_429 = kube.clone();
    answers_429.default_retry = false;
    let client = Client::try_from(kube)
        .with_context(|| format!("cannot make a client for the API server at {server}"))?;
    let eviction_client = Client::try_from(answers_429)
        .with_context(|| format!("cannot make a client for the API server at {server}"))?;
    Ok((client, eviction_client))
}

/// Waits until `shutdown` completes (`Ok`) or a part of the controller
/// stops: the metrics and health server, a watch, the round loop (`Err`
/// naming it).
async fn until_stopped(
    http: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    shutdown: impl std::future::Future<Output = ()>,
    watches: &mut tokio::task::JoinSet<&'static str>,
    rounds: &mut tokio::task::JoinHandle<()>,
) -> anyhow::Result<()> {
    let http_failed = async {
        match http {
            Some(task) => match task.await {
                Ok(Err(error)) => error.to_string(),
                Ok(Ok(())) => "it stopped".to_string(),
                Err(error) => error.to_string(),
            },
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        error = http_failed => anyhow::bail!("cannot serve metrics and health: {error}"),
        () = shutdown => tracing::info!("Shutting down"),
        ended = watches.join_next() => match ended {
            Some(Ok(kind)) => anyhow::bail!("the {kind} watch ended unexpectedly"),
            Some(Err(error)) => anyhow::bail!("a watch task failed: {error}"),
            None => anyhow::bail!("no watch runs"),
        },
        result = rounds => {
            result?;
            anyhow::bail!("the round loop ended unexpectedly");
        }
    }
    Ok(())
}

/// Starts the watches that feed the index: Nodes, GPUNodes, GPUResources,
/// GPUTenants, the pods of this scheduler, PodDisruptionBudgets; and, when
/// the API server serves them, ResourceSlices and ResourceClaims (DRA) and
/// PodGroups.
async fn watch_cluster(
    client: &Client,
    shared: &Arc<WatchedIndex>,
    links: &Arc<Links>,
    dra: bool,
    watches: &mut tokio::task::JoinSet<&'static str>,
) {
    let pods = watcher::Config::default().fields(&format!("spec.schedulerName={SCHEDULER_NAME}"));
    watches.spawn(feed(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        shared.clone(),
        links.link("Node"),
    ));
    watches.spawn(feed(
        Api::<GPUNode>::all(client.clone()),
        watcher::Config::default(),
        shared.clone(),
        links.link("GPUNode"),
    ));
    watches.spawn(feed(
        Api::<GPUResource>::all(client.clone()),
        watcher::Config::default(),
        shared.clone(),
        links.link("GPUResource"),
    ));
    watches.spawn(feed(
        Api::<Pod>::all(client.clone()),
        pods,
        shared.clone(),
        links.link("Pod"),
    ));
    // Which namespaces share a quota (`snapshot.tenants`).
    watches.spawn(feed(
        Api::<GPUTenant>::all(client.clone()),
        watcher::Config::default(),
        shared.clone(),
        links.link("GPUTenant"),
    ));
    // Which running pods a preemption may evict now (`running.evictable`).
    watches.spawn(feed(
        Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::all(client.clone()),
        watcher::Config::default(),
        shared.clone(),
        links.link("PodDisruptionBudget"),
    ));
    if !dra {
        tracing::info!("DRA is turned off (--no-dra): only GPUNodes are read");
    } else if dra_served(client).await {
        tracing::info!(
            "Watching ResourceSlices, ResourceClaims, DeviceClasses and DeviceTaintRules (resource.k8s.io/v1): GPUs a DRA driver publishes are counted with the GPUNodes' (one GPU per UUID), devices any claim holds are held, devices tainted and not tolerated are kept from claims, and pods asking through spec.resourceClaims are placed"
        );
        watches.spawn(feed(
            Api::<ResourceSlice>::all(client.clone()),
            watcher::Config::default(),
            shared.clone(),
            links.link("ResourceSlice"),
        ));
        watches.spawn(feed(
            Api::<ResourceClaim>::all(client.clone()),
            watcher::Config::default(),
            shared.clone(),
            links.link("ResourceClaim"),
        ));
        watches.spawn(feed(
            Api::<DeviceClass>::all(client.clone()),
            watcher::Config::default(),
            shared.clone(),
            links.link("DeviceClass"),
        ));
        // Served from Kubernetes 1.37 (resource.k8s.io/v1); before that,
        // the slices' own taints are all there is.
        if served(
            Api::<DeviceTaintRule>::all(client.clone()),
            "DeviceTaintRules",
        )
        .await
        {
            watches.spawn(feed(
                Api::<DeviceTaintRule>::all(client.clone()),
                watcher::Config::default(),
                shared.clone(),
                links.link("DeviceTaintRule"),
            ));
        } else {
            tracing::info!(
                "The API server does not serve DeviceTaintRules (resource.k8s.io/v1, Kubernetes 1.37+): only the taints ResourceSlices carry keep devices from claims"
            );
        }
    } else {
        tracing::info!(
            "The API server does not serve resource.k8s.io/v1 (DRA, Kubernetes 1.34+): only GPUNodes are read"
        );
    }
    if podgroups_served(client).await {
        tracing::info!(
            "Watching PodGroups (scheduling.x-k8s.io/v1alpha1): gangs are placed all or nothing"
        );
        watches.spawn(feed(
            Api::<PodGroup>::all(client.clone()),
            watcher::Config::default(),
            shared.clone(),
            links.link("PodGroup"),
        ));
    } else {
        tracing::info!(
            "The API server does not serve PodGroups (scheduling.x-k8s.io/v1alpha1): pods labelled {POD_GROUP_LABEL} wait (PodGroupNotFound) until the CRD is installed and the controller restarted"
        );
    }
}
