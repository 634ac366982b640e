//! GPUResource status, written off the round's path.
//!
//! ```text
//!  round ─▶ Reporter: the status each GPUResource should show
//!             └─▶ StatusWriter::want (queued; a newer one replaces it) ─┐
//!  next round starts at once                                            │
//!                                                                       ▼
//!                        one task: write what is queued, one GPUResource
//!                        at a time; remember what the server now holds
//! ```
//!
//! A round never waits for a status write: with thousands of bindings in
//! flight the API server may take a while to answer, and the pods that
//! arrive meanwhile must not wait for it. While a write is in flight, the
//! statuses later rounds want replace each other, so a GPUResource's
//! status is written as often as the server answers, not once per round.
//! A failed write is not retried by itself: the next round wants the same
//! status again and queues it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tracing::Instrument;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use tokio::sync::Notify;

use super::apply::StatusApi;
use super::wanted_status::WantedStatus;
use wasmgpu_index::ObjectKey;

/// Queues GPUResource statuses; one task writes them. Dropping it stops
/// the task once the write in flight (if any) ends.
pub struct StatusWriter {
    shared: Arc<Queue>,
    task: tokio::task::JoinHandle<()>,
}

/// What the rounds and the writing task share.
#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Default)]
struct State {
    /// What the API server holds, as this controller last wrote it, with
    /// the conditions written (their transition times are kept while their
    /// status does not change).
    written: HashMap<ObjectKey, (WantedStatus, Vec<Condition>)>,
    /// To write next, newest only.
    queued: HashMap<ObjectKey, WantedStatus>,
}

// === impl StatusWriter ===

impl StatusWriter {
    /// Starts the task that writes through `api`.
    pub fn start(api: StatusApi) -> Self {
        let shared = Arc::new(Queue::default());
        let writing = write_queued(Arc::clone(&shared), api);
        let task = tokio::spawn(writing.instrument(tracing::info_span!("status_writer")));
        Self { shared, task }
    }

    /// Asks for `summary` to be the status of `key`: queued unless it is
    /// what the server holds already.
    pub fn want(&self, key: &ObjectKey, summary: WantedStatus) {
        let mut state = self.shared.state();
        if state.written.get(key).map(|(s, _)| s) == Some(&summary) {
            state.queued.remove(key);
            return;
        }
        state.queued.insert(key.clone(), summary);
        drop(state);
        self.shared.wake.notify_one();
    }

    /// Forgets every GPUResource but `keys` (the others are gone).
    pub fn retain(&self, keys: &HashSet<&ObjectKey>) {
        let mut state = self.shared.state();
        state.written.retain(|key, _| keys.contains(key));
        state.queued.retain(|key, _| keys.contains(key));
    }
}

impl Drop for StatusWriter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// === impl Queue ===

impl Queue {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        wasmgpu_support::lock(&self.state)
    }
}

/// Writes what is queued, whenever something is.
async fn write_queued(queue: Arc<Queue>, api: StatusApi) {
    let mut failing = false;
    loop {
        queue.wake.notified().await;
        loop {
            let batch: Vec<(ObjectKey, WantedStatus, Vec<Condition>)> = {
                let mut state = queue.state();
                let queued = std::mem::take(&mut state.queued);
                queued
                    .into_iter()
                    .map(|(key, summary)| {
                        let previous = state
                            .written
                            .get(&key)
                            .map(|(_, c)| c.clone())
                            .unwrap_or_default();
                        (key, summary, previous)
                    })
                    .collect()
            };
            if batch.is_empty() {
                break;
            }
            let mut failed = Vec::new();
            for (key, summary, previous) in batch {
                let conditions = to_conditions(&summary, &previous);
                match api.write_status(&key, &patch(&summary, &conditions)).await {
                    Ok(()) => {
                        queue.state().written.insert(key, (summary, conditions));
                    }
                    Err(error) => failed.push((key, error)),
                }
            }
            // One line when writes start failing and one when they work
            // again, however many GPUResources and rounds: during an
            // outage every write fails, and the log must not grow with
            // either.
            match failed.first() {
                Some((first, error)) if !failing => {
                    failing = true;
                    tracing::warn!(
                        kind = "GPUResource",
                        failed = failed.len(),
                        first = %first,
                        %error,
                        "Cannot write the status of {} GPUResource(s); retrying each round",
                        failed.len()
                    );
                }
                Some((first, error)) => {
                    tracing::debug!(kind = "GPUResource", failed = failed.len(), first = %first, %error, "Status writes still fail");
                }
                None if failing => {
                    failing = false;
                    tracing::info!(kind = "GPUResource", "Status writes work again");
                }
                None => {}
            }
        }
    }
}

/// The status patch of `summary`.
fn patch(summary: &WantedStatus, conditions: &[Condition]) -> serde_json::Value {
    json!({
        "status": {
            "phase": summary.phase,
            "holding": summary.counts.holding,
            "asking": summary.counts.referencing,
            "pods": format!("{}/{}", summary.counts.holding, summary.counts.referencing),
            "observedGeneration": summary.observed_generation,
            "conditions": conditions,
        },
    })
}

/// The summary's conditions, keeping the transition time of those whose
/// status did not change.
fn to_conditions(summary: &WantedStatus, previous: &[Condition]) -> Vec<Condition> {
    let now = Time(Timestamp::now());
    summary
        .conditions
        .iter()
        .map(|(type_, status, reason, message)| {
            let status = if *status { "True" } else { "False" };
            let last_transition_time = previous
                .iter()
                .find(|c| c.type_ == *type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: (*type_).into(),
                status: status.into(),
                reason: reason.clone(),
                message: message.clone(),
                observed_generation: summary.observed_generation,
                last_transition_time,
            }
        })
        .collect()
}
