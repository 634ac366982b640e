//! Shadow policies at run time: called after their primary, off the
//! round's path; compared (`wasmgpu_api::shadow`), counted, and reported on
//! their ConfigMap.
//!
//! ```text
//!  round: primary allocate ─▶ validate ─▶ Applier::assign (bindings start)
//!                                               │ then, per shadow of the primary:
//!                       previous call running? ─┴─ yes: skipped (counted)
//!                                                  no: ─▶ blocking pool: allocate (own Store,
//!                                                         fuel, deadline) ─▶ validate ─▶ compare
//!                                                      ─▶ metrics, ShadowStatus ─▶ StatusWriter
//!  StatusWriter (one task): the latest status per shadow ─▶ annotation wasmgpu.io/shadow-status
//! ```
//!
//! The round never waits for a shadow: it hands over the snapshot (which it
//! no longer needs) and the primary's accepted placements, and goes on.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::{Notify, watch};

use super::connection::error_chain;
use super::load_plan::config_digest;
use super::metrics::Metrics;
use super::policies::ActivePolicy;
use wasmgpu_api::policy::{SHADOW_STATUS_ANNOTATION, ShadowStatus};
use wasmgpu_api::shadow::{Comparison, Outcome, RoundMeta, compare};
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::validate::{Placement, validate_host};

/// Runs the shadows of the policies that decide.
#[derive(Clone)]
pub(super) struct Shadows {
    metrics: Metrics,
    name_to_state: Arc<Mutex<HashMap<String, State>>>,
    writer: Arc<StatusWriter>,
}

/// One shadow's state in this process.
#[derive(Default)]
struct State {
    /// A call of it is running.
    running: bool,
    /// Its counts, for the version it has now.
    status: Option<ShadowStatus>,
}

/// What one shadow call gave.
type Outcomes = Vec<(
    Arc<ActivePolicy>,
    wasmgpu_engine::Result<(Duration, Comparison)>,
)>;

// === impl Shadows ===

impl Shadows {
    /// Shadows whose status goes to the ConfigMaps of `api`, written while
    /// `leader` says this replica leads; the writer must be run
    /// ([`StatusWriter::run`]).
    pub(super) fn new(
        api: Api<ConfigMap>,
        metrics: Metrics,
        leader: watch::Receiver<bool>,
    ) -> (Self, Arc<StatusWriter>) {
        let writer = Arc::new(StatusWriter {
            api,
            leader,
            name_to_status: Mutex::new(BTreeMap::new()),
            dirty: Notify::new(),
        });
        let shadows = Shadows {
            metrics,
            name_to_state: Arc::default(),
            writer: Arc::clone(&writer),
        };
        (shadows, writer)
    }

    /// Takes up the counts `written` on shadow `name`'s ConfigMap (by this
    /// process before a restart, or by the replica that led before) when
    /// this process has none of its own yet; they go on only while they are
    /// about the version and primary being shadowed ([`status_for`]).
    pub(super) fn resume(&self, name: &str, written: ShadowStatus) {
        let mut name_to_state = self.lock();
        let state = name_to_state.entry(name.to_owned()).or_default();
        if state.status.is_none() {
            tracing::debug!(shadow = %name, rounds_compared = written.rounds_compared, since = %written.since, "Shadow counts resumed");
            state.status = Some(written);
        }
    }

    /// Calls `shadows` (of `primary`) on `snapshot` in the background and
    /// compares their verdicts with `accepted`, the primary's. Call it once
    /// the primary's verdict went to the applier. A shadow whose previous
    /// call still runs skips this round.
    pub(super) fn start(
        &self,
        primary: &ActivePolicy,
        shadows: Vec<Arc<ActivePolicy>>,
        snapshot: HostSnapshot,
        accepted: Vec<Placement>,
    ) {
        let mut chosen = Vec::new();
        {
            let mut name_to_state = self.lock();
            for shadow in shadows {
                let state = name_to_state.entry(shadow.name.clone()).or_default();
                if state.running {
                    self.metrics
                        .shadow_round(&shadow.name, &primary.name, "skipped");
                    let status = status_for(state, &shadow, &primary.name);
                    status.skipped();
                    self.writer.put(&shadow.name, status);
                    tracing::debug!(shadow = %shadow.name, primary = %primary.name, "Shadow still running; round skipped");
                } else {
                    state.running = true;
                    chosen.push(shadow);
                }
            }
        }
        if chosen.is_empty() {
            return;
        }
        let this = self.clone();
        let primary_name = primary.name.clone();
        let meta = RoundMeta {
            round: snapshot.snapshot.round,
            at: String::new(),
            primary_digest: primary.loaded.digest().to_string(),
            pending: snapshot.snapshot.pending.len(),
            call: None,
        };
        tokio::spawn(async move {
            let running = Running {
                shadows: this.clone(),
                names: chosen.iter().map(|s| s.name.clone()).collect(),
            };
            let call = tokio::task::spawn_blocking(move || call_all(chosen, snapshot, &accepted));
            match call.await {
                Ok(outcomes) => this.record(&primary_name, meta, outcomes),
                Err(error) => {
                    tracing::error!(%error, primary = %primary_name, "Shadow call panicked")
                }
            }
            drop(running);
        });
    }

    /// Counts what the calls gave and hands the statuses to the writer.
    fn record(&self, primary: &str, meta: RoundMeta, outcomes: Outcomes) {
        let at = now();
        let mut name_to_state = self.lock();
        for (shadow, result) in outcomes {
            let name = &shadow.name;
            let state = name_to_state.entry(name.clone()).or_default();
            let status = status_for(state, &shadow, primary);
            match result {
                Ok((call, comparison)) => {
                    self.metrics.shadow_call(name, primary, call);
                    self.metrics.shadow_round(name, primary, "compared");
                    for outcome in Outcome::ALL {
                        let count = comparison.counts.get(outcome);
                        if count > 0 {
                            self.metrics
                                .shadow_placements(name, primary, outcome.label(), count);
                        }
                    }
                    tracing::debug!(shadow = %name, %primary, round = meta.round, differing = comparison.counts.differing(), same = comparison.counts.same, "Shadow compared");
                    let meta = RoundMeta {
                        at: at.clone(),
                        call: Some(call),
                        ..meta.clone()
                    };
                    status.compared(meta, comparison);
                }
                Err(error) => {
                    self.metrics.shadow_round(name, primary, "failed");
                    tracing::info!(shadow = %name, %primary, digest = %shadow.loaded.digest(), kind = error.kind(), %error, "Shadow policy failed; nothing applied depends on it");
                    let meta = RoundMeta {
                        at: at.clone(),
                        ..meta.clone()
                    };
                    status.failed(
                        meta,
                        format!("{} ({}): {error}", shadow.loaded.digest(), error.kind()),
                    );
                }
            }
            self.writer.put(name, status);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, State>> {
        // Each update is a few field writes: a panic leaves nothing half-done.
        wasmgpu_support::lock(&self.name_to_state)
    }
}

/// Clears the running mark of its shadows when dropped, panics included.
struct Running {
    shadows: Shadows,
    names: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut name_to_state = self.shadows.lock();
        for name in &self.names {
            if let Some(state) = name_to_state.get_mut(name) {
                state.running = false;
            }
        }
    }
}

/// The counts of `shadow` in `state`, started afresh when they are about
/// another version (component or config) or another primary.
fn status_for<'a>(
    state: &'a mut State,
    shadow: &ActivePolicy,
    primary: &str,
) -> &'a mut ShadowStatus {
    let digest = shadow.loaded.digest().to_string();
    let config = config_digest(&shadow.config);
    let current = state
        .status
        .as_ref()
        .is_some_and(|s| s.is_about(primary, &digest, config.as_deref()));
    if !current {
        state.status = Some(ShadowStatus::start(primary, &digest, config, now()));
    }
    state.status.as_mut().expect("just set")
}

/// Calls each shadow on the snapshot (with its own config), validates and
/// compares. Blocking.
fn call_all(
    shadows: Vec<Arc<ActivePolicy>>,
    snapshot: HostSnapshot,
    accepted: &[Placement],
) -> Outcomes {
    let mut snapshot = Some(snapshot);
    let last = shadows.len().saturating_sub(1);
    let mut outcomes = Vec::with_capacity(shadows.len());
    for (i, shadow) in shadows.into_iter().enumerate() {
        let Some(mut theirs) = (if i == last {
            snapshot.take()
        } else {
            snapshot.clone()
        }) else {
            break;
        };
        theirs.snapshot.config = shadow.config.clone();
        let given = theirs.for_policy(&shadow.loaded.info().label_keys);
        let result = shadow.loaded.allocate(given).map(|round| {
            let verdict = validate_host(&theirs, &round.decisions);
            (round.stats.call, compare(accepted, &verdict))
        });
        outcomes.push((shadow, result));
    }
    outcomes
}

/// Now, to the second, in RFC 3339.
fn now() -> String {
    Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or_else(|_| Timestamp::now())
        .to_string()
}

/// Writes the latest status of each shadow to its ConfigMap, one write at
/// a time: statuses that change while a write is out are coalesced.
pub(super) struct StatusWriter {
    api: Api<ConfigMap>,
    leader: watch::Receiver<bool>,
    /// Statuses not written yet, as JSON, by shadow.
    name_to_status: Mutex<BTreeMap<String, String>>,
    dirty: Notify,
}

// === impl StatusWriter ===

impl StatusWriter {
    /// Queues `status` for shadow `name` (replacing one not yet written).
    fn put(&self, name: &str, status: &ShadowStatus) {
        let json = serde_json::to_string(status).expect("a status serializes");
        wasmgpu_support::lock(&self.name_to_status).insert(name.to_string(), json);
        self.dirty.notify_one();
    }

    /// Writes queued statuses until the task is dropped.
    pub(super) async fn run(self: Arc<Self>) {
        loop {
            self.dirty.notified().await;
            let batch = std::mem::take(&mut *wasmgpu_support::lock(&self.name_to_status));
            if !*self.leader.borrow() {
                continue;
            }
            for (name, status) in batch {
                let patch =
                    json!({ "metadata": { "annotations": { SHADOW_STATUS_ANNOTATION: status } } });
                match self
                    .api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.is_not_found() => {
                        tracing::debug!(shadow = %name, "The shadow's ConfigMap is gone; status not written");
                    }
                    Err(error) => {
                        tracing::warn!(kind = "ConfigMap", shadow = %name, error = %error_chain(&error), "Cannot write the shadow status annotation");
                    }
                }
            }
        }
    }
}
