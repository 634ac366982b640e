//! # The controller
//!
//! Wires the watches, the index, the policies and the applier together:
//!
//! ```text
//!  watch Node ─────────┐
//!  watch GPUNode ──────┤  apply / delete / reset    ┌─────────┐
//!  watch GPUResource ──┼───────────────────────────▶│  Index  │◀── record_write (own writes,
//!  watch Pod ──────────┘  (schedulerName=wasmgpu)   └────┬────┘     ahead of the watch)
//!                                                         │ snapshot per policy
//!  watch policy ConfigMaps ─▶ check, compile, canary ─▶ Policies (swapped per name)
//!  Rounds: after a change (+ gather window) or resync ────┤
//!    finalizers → releases → finish unbound holders       ▼
//!    per policy: allocate (Wasm, blocking pool) → validate → Applier
//!                                                  ledger → annotation → binding
//!    Reporter: GPUResource status (phase, pods, conditions), Events
//! ```
//!
//! Rounds run one at a time and are the only writers, so decisions of one
//! round are applied before the next is built. Each policy call looks its
//! policy up when it starts: a ConfigMap swap takes effect at the next call.
//!
//! With several replicas (`leader.rs`), every replica watches, keeps its
//! index warm and loads policies; only the holder of the Lease runs rounds.
//! `http.rs` serves `/metrics` (`metrics.rs`), `/healthz` and `/readyz`.

mod apply;
mod configmaps;
mod events;
mod http;
mod leader;
mod metrics;
mod payload;
mod policies;
mod report;
mod round;
mod watch;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::runtime::events::Reporter as EventReporter;
use kube::runtime::watcher;
use kube::{Api, Client};

pub use apply::FIELD_MANAGER;
pub use configmaps::fingerprint;
pub use leader::{Leadership, LeaseConfig};
pub use metrics::Metrics;
pub use payload::{MAX_POLICY_BYTES, Payload, RejectError, canary_snapshot};
pub use policies::{ActivePolicy, LoadError, Policies, PolicySet, PolicySource};
pub use round::OnPolicyFailure;

use crate::api::{GPUNode, GPUResource, SCHEDULER_NAME};
use crate::engine::{Engine, Limits};
use crate::index::Index;
use apply::Applier;
use configmaps::Loader;
use events::EventSink;
use report::Reporter;
use round::Rounds;
use watch::{Shared, feed};

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
}

/// Runs the controller until `shutdown` completes or a watch ends.
pub async fn run(
    client: Client,
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let engine = Arc::new(Engine::new(config.limits.clone())?);
    let policies = Policies::new(PolicySet::from_files(&engine, &config.policies)?);
    let shared = Shared::new(Index::new(config.default_policy.clone()));
    let metrics = Metrics::new();
    let leadership = match &config.lease {
        Some(lease) => Leadership::elect(client.clone(), lease).await?,
        None => Leadership::always(),
    };
    let (ready_sender, ready) = tokio::sync::watch::channel(false);
    let http = config
        .http_address
        .map(|address| tokio::spawn(http::serve(address, metrics.clone(), ready.clone())));
    {
        let shared = shared.clone();
        tokio::spawn(async move {
            shared.wait_listed(round::WATCHED_KINDS).await;
            let _ = ready_sender.send(true);
        });
    }
    let (events, events_task) = EventSink::start(
        client.clone(),
        EventReporter {
            controller: FIELD_MANAGER.into(),
            instance: config.instance.clone(),
        },
    );
    let pods = watcher::Config::default().fields(&format!("spec.schedulerName={SCHEDULER_NAME}"));
    // Tracked, not detached: on shutdown they stop before the Lease is
    // released (the loader holds a leadership receiver).
    let mut watches = tokio::task::JoinSet::new();
    watches.spawn(feed(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        shared.clone(),
        "Node",
    ));
    watches.spawn(feed(
        Api::<GPUNode>::all(client.clone()),
        watcher::Config::default(),
        shared.clone(),
        "GPUNode",
    ));
    watches.spawn(feed(
        Api::<GPUResource>::all(client.clone()),
        watcher::Config::default(),
        shared.clone(),
        "GPUResource",
    ));
    watches.spawn(feed(
        Api::<Pod>::all(client.clone()),
        pods,
        shared.clone(),
        "Pod",
    ));
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
    };
    tracing::info!(namespace = %config.policy_namespace, "Watching policy ConfigMaps");
    watches.spawn(loader.run());
    let rounds = Rounds {
        applier: Applier::new(client.clone(), shared.clone(), events.clone()),
        reporter: Reporter::new(client.clone(), shared.clone(), events.clone()),
        shared: shared.clone(),
        events,
        policies,
        on_failure: config.on_policy_failure,
        default_policy: config.default_policy.clone(),
        gather_window: config.gather_window,
        resync: config.resync,
        metrics,
        leader: leadership.subscribe(),
    };
    let mut rounds = tokio::spawn(rounds.run());
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
        _ = watches.join_next() => anyhow::bail!("a watch ended unexpectedly"),
        result = &mut rounds => {
            result?;
            anyhow::bail!("the round loop ended unexpectedly");
        }
    }
    rounds.abort();
    let _ = rounds.await;
    watches.shutdown().await;
    events_task.abort();
    leadership.step_down().await;
    Ok(())
}
