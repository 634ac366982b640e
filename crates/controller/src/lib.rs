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
//!  Rounds: on a change (≥ gather window apart) or resync ─┤
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
mod clock;
mod configmaps;
mod connection;
mod error;
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
mod standing;
mod status;
mod wanted_status;
mod wanted_tenant_status;
mod watch;
mod write_error;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use kube::runtime::events::Reporter as EventReporter;
use kube::runtime::watcher;
use kube::{Api, Client};

pub use apply::{FIELD_MANAGER, WriteSettings};
pub use configmaps::fingerprint;
pub use error::Error;
pub use events::Reason;
pub use leader::{Leadership, LeaseConfig, LeaseError};
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
    /// The least time from one round's start to the next; pending pods
    /// that arrive meanwhile are decided together.
    pub gather_window: Duration,
    /// A round runs at least this often.
    pub resync: Duration,
    /// The least time between two status writes of one kind's objects;
    /// what rounds want meanwhile replaces what is queued.
    pub status_interval: Duration,
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
/// completes or a part of it stops.
pub async fn run(
    kube: kube::Config,
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let server = kube.cluster_url.to_string();
    let (client, eviction_client) = clients(kube)?;
    let engine = Arc::new(Engine::new(config.limits.clone()).map_err(Error::Engine)?);
    let policies = Policies::new(PolicySet::from_files(&engine, &config.policies)?);
    let mut index = Index::new(config.default_policy.clone());
    index.set_min_runtime(config.min_runtime);
    let metrics = Metrics::new();
    let leadership = match &config.lease {
        Some(lease) => Leadership::elect(client.clone(), lease).await?,
        None => Leadership::always(),
    };
    let (events, events_task) = EventSink::start(
        client.clone(),
        EventReporter {
            controller: FIELD_MANAGER.into(),
            instance: config.instance.clone(),
        },
        metrics.clone(),
        config.allocated_events_per_second,
    );
    let (shadows, shadow_writer) = Shadows::new(
        Api::<ConfigMap>::namespaced(client.clone(), &config.policy_namespace),
        metrics.clone(),
        leadership.subscribe(),
    );
    let parts = Parts {
        links: Links::new(server, metrics.clone()),
        shared: WatchedIndex::new(index),
        recorder: recorder::Recorder::new(),
        client,
        metrics,
        events,
        policies,
        shadows,
    };
    let shadow_writer = tokio::spawn(
        shadow_writer
            .run()
            .instrument(tracing::info_span!("shadow_writer")),
    );
    // Tracked, not detached: on shutdown they stop before the Lease is
    // released (the loader holds a leadership receiver).
    let mut watches = tokio::task::JoinSet::new();
    watch_cluster(&parts, config.dra, &mut watches).await;
    let span = tracing::info_span!("policy_loader", namespace = %config.policy_namespace);
    let loader = parts.loader(&config, engine, leadership.subscribe());
    tracing::info!(namespace = %config.policy_namespace, "Watching policy ConfigMaps");
    watches.spawn(loader.run(parts.links.link("ConfigMap")).instrument(span));
    // Every watch has its link: `/readyz` waits for all of them.
    let http = config.http_address.map(|address| {
        let serve = http::serve(
            address,
            parts.metrics.clone(),
            Arc::clone(&parts.links),
            Arc::clone(&parts.recorder),
        );
        tokio::spawn(serve.instrument(tracing::info_span!("http", %address)))
    });
    let rounds = parts.rounds(&config, eviction_client, watches.len(), &leadership);
    let mut rounds = tokio::spawn(rounds.run().instrument(tracing::info_span!("rounds")));
    let stopped = until_stopped(http, shutdown, &mut watches, &mut rounds).await;
    rounds.abort();
    let _ = rounds.await;
    shadow_writer.abort();
    watches.shutdown().await;
    events_task.abort();
    leadership.step_down().await;
    stopped
}

/// What the controller's long-lived tasks share.
struct Parts {
    client: Client,
    shared: Arc<WatchedIndex>,
    links: Arc<Links>,
    metrics: Metrics,
    events: EventSink,
    policies: Arc<Policies>,
    shadows: Shadows,
    recorder: Arc<recorder::Recorder>,
}

/// The tasks feeding the index, each returning its kind when it ends.
type Watches = tokio::task::JoinSet<&'static str>;

impl Parts {
    /// Starts feeding the index with the objects of `kind` that `config`
    /// selects, cluster-wide.
    fn watch<K>(&self, watches: &mut Watches, kind: &'static str, config: watcher::Config)
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
        Index: wasmgpu_index::IndexResource<K>,
    {
        let api = Api::<K>::all(self.client.clone());
        watches.spawn(feed(
            api,
            config,
            self.shared.clone(),
            self.links.link(kind),
        ));
    }

    /// The loader of the policy ConfigMaps of `config.policy_namespace`.
    fn loader(
        &self,
        config: &Config,
        engine: Arc<Engine>,
        leader: tokio::sync::watch::Receiver<bool>,
    ) -> Loader {
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), &config.policy_namespace);
        Loader {
            api,
            engine,
            policies: Arc::clone(&self.policies),
            shared: self.shared.clone(),
            events: self.events.clone(),
            name_to_tried: HashMap::new(),
            name_to_status: HashMap::new(),
            metrics: self.metrics.clone(),
            leader,
            puller: registry::Puller::new(
                self.client.clone(),
                &config.policy_namespace,
                config.registry.clone(),
                self.metrics.clone(),
            ),
            recorder: Arc::clone(&self.recorder),
            shadows: self.shadows.clone(),
        }
    }

    /// The round loop, which starts once `watched_kinds` watches listed;
    /// its applier and its status writers.
    fn rounds(
        self,
        config: &Config,
        eviction_client: Client,
        watched_kinds: usize,
        leadership: &Leadership,
    ) -> Rounds {
        let applier = Applier::new(
            self.client,
            eviction_client,
            self.shared.clone(),
            self.events.clone(),
            self.metrics.clone(),
            config.writes,
        );
        let status = StatusWriter::start(applier.status_api(), config.status_interval);
        let tenant_status =
            StatusWriter::start(applier.tenant_status_api(), config.status_interval);
        let reporter = Reporter::new(
            self.shared.clone(),
            self.events.clone(),
            status,
            tenant_status,
            self.metrics.clone(),
        );
        Rounds {
            watched_kinds,
            reporter,
            applier,
            shared: self.shared,
            events: self.events,
            policies: self.policies,
            shadows: self.shadows,
            on_failure: config.on_policy_failure,
            default_policy: config.default_policy.clone(),
            gather_window: config.gather_window,
            resync: config.resync,
            metrics: self.metrics,
            leader: leadership.subscribe(),
            waits_told: Default::default(),
            recorder: self.recorder,
        }
    }
}

/// The client for every request, and one for evictions that does not
/// retry 429: there it is the answer (a PodDisruptionBudget refuses), not a
/// request to wait.
fn clients(kube: kube::Config) -> Result<(Client, Client), Error> {
    let server = kube.cluster_url.to_string();
    let mut answers_429 = kube.clone();
    answers_429.default_retry = false;
    let client = |kube| {
        Client::try_from(kube).map_err(|source| Error::Client {
            server: server.clone(),
            source,
        })
    };
    Ok((client(kube)?, client(answers_429)?))
}

/// Waits until `shutdown` completes (`Ok`) or a part of the controller
/// stops: the metrics and health server, a watch, the round loop (`Err`
/// naming it).
async fn until_stopped(
    http: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    shutdown: impl std::future::Future<Output = ()>,
    watches: &mut Watches,
    rounds: &mut tokio::task::JoinHandle<()>,
) -> Result<(), Error> {
    let http_failed = async {
        match http {
            Some(task) => match task.await {
                Ok(Err(error)) => Error::Serve(error),
                Ok(Ok(())) => Error::Serve(std::io::Error::other("it stopped")),
                Err(source) => Error::Task {
                    task: "http",
                    source,
                },
            },
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        error = http_failed => Err(error),
        () = shutdown => {
            tracing::info!("Shutting down");
            Ok(())
        }
        ended = watches.join_next() => Err(match ended {
            Some(Ok(kind)) => Error::WatchEnded(kind),
            Some(Err(source)) => Error::Task { task: "watch", source },
            None => Error::WatchEnded("last"),
        }),
        result = rounds => Err(match result {
            Ok(()) => Error::RoundsEnded,
            Err(source) => Error::Task { task: "rounds", source },
        }),
    }
}

/// Starts the watches that feed the index: Nodes, GPUNodes, GPUResources,
/// GPUTenants and Namespaces, the pods of this scheduler, PodDisruptionBudgets; and, when
/// the API server serves them, ResourceSlices and ResourceClaims (DRA) and
/// PodGroups.
async fn watch_cluster(parts: &Parts, dra: bool, watches: &mut Watches) {
    let all = watcher::Config::default;
    parts.watch::<Node>(watches, "Node", all());
    parts.watch::<GPUNode>(watches, "GPUNode", all());
    parts.watch::<GPUResource>(watches, "GPUResource", all());
    let pods = all().fields(&format!("spec.schedulerName={SCHEDULER_NAME}"));
    parts.watch::<Pod>(watches, "Pod", pods);
    // Which namespaces share a quota (`snapshot.tenants`).
    parts.watch::<GPUTenant>(watches, "GPUTenant", all());
    // Namespaces' labels, for tenants choosing them by `namespaceSelector`.
    parts.watch::<Namespace>(watches, "Namespace", all());
    // Which running pods a preemption may evict now (`running.evictable`).
    parts.watch::<PodDisruptionBudget>(watches, "PodDisruptionBudget", all());
    if !dra {
        tracing::info!("DRA is turned off (--no-dra): only GPUNodes are read");
    } else if dra_served(&parts.client).await {
        tracing::info!(
            "Watching ResourceSlices, ResourceClaims, DeviceClasses and DeviceTaintRules (resource.k8s.io/v1): GPUs a DRA driver publishes are counted with the GPUNodes' (one GPU per UUID), devices any claim holds are held, devices tainted and not tolerated are kept from claims, and pods asking through spec.resourceClaims are placed"
        );
        parts.watch::<ResourceSlice>(watches, "ResourceSlice", all());
        parts.watch::<ResourceClaim>(watches, "ResourceClaim", all());
        parts.watch::<DeviceClass>(watches, "DeviceClass", all());
        // Served from Kubernetes 1.37 (resource.k8s.io/v1); before that,
        // the slices' own taints are all there is.
        let rules = Api::<DeviceTaintRule>::all(parts.client.clone());
        if served(rules, "DeviceTaintRules").await {
            parts.watch::<DeviceTaintRule>(watches, "DeviceTaintRule", all());
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
    if podgroups_served(&parts.client).await {
        tracing::info!(
            "Watching PodGroups (scheduling.x-k8s.io/v1alpha1): gangs are placed all or nothing"
        );
        parts.watch::<PodGroup>(watches, "PodGroup", all());
    } else {
        tracing::info!(
            "The API server does not serve PodGroups (scheduling.x-k8s.io/v1alpha1): pods labelled {POD_GROUP_LABEL} wait (PodGroupNotFound) until the CRD is installed and the controller restarted"
        );
    }
}
