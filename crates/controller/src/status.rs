//! Object status (GPUResources, GPUTenants), written off the round's path.
//!
//! ```text
//!  round ─▶ Reporter: the status each object should show
//!             └─▶ StatusWriter::want (queued; a newer one replaces it) ─┐
//!  next round starts at once                                            │
//!                                                                       ▼
//!                        one task per kind: write what is queued, one
//!                        object at a time; remember what the server holds
//! ```
//!
//! A round never waits for a status write: with thousands of bindings in
//! flight the API server may take a while to answer, and the pods that
//! arrive meanwhile must not wait for it. The statuses later rounds want
//! replace each other while a write is in flight and for `--status-interval`
//! after each batch begins, so an object's status is written
//! at most once per interval, not once per round: under a steady stream of
//! pods a round may run every few milliseconds, and a status write each
//! would cost the API server as much as the bindings. After a quiet spell
//! the first status is written at once. A status wanted while another is
//! in flight is compared with the one in flight, not with the one the
//! server held before, so going back to that one is written too. A failed
//! write is not retried by itself: the next round (at the latest the
//! `--resync` one) wants the same status again and queues it.

use std::collections::{HashMap, HashSet};
use std::fmt::Display;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use tracing::Instrument;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::wanted_status::Conditions;
use super::write_error::ApplyError;

/// A kind whose status the writer writes: how to patch it and where.
pub trait StatusTarget: Send + Sync + 'static {
    /// Names one object.
    type Key: Clone + Eq + Hash + Display + Send + Sync + 'static;
    /// The status it should show.
    type Wanted: Conditions + Clone + PartialEq + Send + Sync + 'static;
    /// The kind, for logs.
    const KIND: &'static str;
    /// The merge patch of `wanted` with its `conditions`.
    fn patch(wanted: &Self::Wanted, conditions: &[Condition]) -> serde_json::Value;
    /// Writes `patch` on `key`'s status subresource.
    fn write(
        &self,
        key: &Self::Key,
        patch: &serde_json::Value,
    ) -> impl Future<Output = Result<(), ApplyError>> + Send;
}

/// Queues statuses of one kind; one task writes them. Dropping it stops
/// the task once the write in flight (if any) ends.
pub struct StatusWriter<T: StatusTarget> {
    shared: Arc<Queue<T>>,
    task: tokio::task::JoinHandle<()>,
}

/// What the rounds and the writing task share.
struct Queue<T: StatusTarget> {
    state: Mutex<State<T>>,
    wake: tokio::sync::Notify,
}

struct State<T: StatusTarget> {
    /// What the API server holds, as this controller last wrote it, with
    /// the conditions written (their transition times are kept while their
    /// status does not change).
    written: HashMap<T::Key, (T::Wanted, Vec<Condition>)>,
    /// Being written now: once written, what the server holds.
    in_flight: HashMap<T::Key, T::Wanted>,
    /// To write next, newest only.
    queued: HashMap<T::Key, T::Wanted>,
}

// === impl StatusWriter ===

impl<T: StatusTarget> StatusWriter<T> {
    /// Starts the task that writes through `api`, one batch of what is
    /// queued at most every `interval`.
    pub fn start(api: T, interval: std::time::Duration) -> Self {
        let shared = Arc::new(Queue {
            state: Mutex::new(State {
                written: HashMap::new(),
                in_flight: HashMap::new(),
                queued: HashMap::new(),
            }),
            wake: tokio::sync::Notify::new(),
        });
        let writing = write_queued(Arc::clone(&shared), api, interval);
        let task =
            tokio::spawn(writing.instrument(tracing::info_span!("status_writer", kind = T::KIND)));
        Self { shared, task }
    }

    /// Asks for `wanted` to be the status of `key`: queued unless it is
    /// what the server will hold once the write in flight (if any) ends.
    pub fn want(&self, key: &T::Key, wanted: T::Wanted) {
        let mut state = self.shared.state();
        // Compared with what is in flight first: a status that goes back
        // to what was written before, while another is being written, is
        // written again after it.
        let will_hold = match state.in_flight.get(key) {
            Some(in_flight) => Some(in_flight),
            None => state.written.get(key).map(|(s, _)| s),
        };
        if will_hold == Some(&wanted) {
            state.queued.remove(key);
            return;
        }
        state.queued.insert(key.clone(), wanted);
        drop(state);
        self.shared.wake.notify_one();
    }

    /// Forgets every object but `keys` (the others are gone).
    pub fn retain(&self, keys: &HashSet<&T::Key>) {
        let mut state = self.shared.state();
        state.written.retain(|key, _| keys.contains(key));
        state.in_flight.retain(|key, _| keys.contains(key));
        state.queued.retain(|key, _| keys.contains(key));
    }
}

impl<T: StatusTarget> Drop for StatusWriter<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// === impl Queue ===

impl<T: StatusTarget> Queue<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        wasmgpu_support::lock(&self.state)
    }
}

/// One status to write: the key, what it should show, the conditions the
/// server holds.
type Batch<T> = Vec<(
    <T as StatusTarget>::Key,
    <T as StatusTarget>::Wanted,
    Vec<Condition>,
)>;

/// Writes what is queued, whenever something is, batches at least
/// `interval` apart.
async fn write_queued<T: StatusTarget>(
    queue: Arc<Queue<T>>,
    api: T,
    interval: std::time::Duration,
) {
    let mut failing = false;
    let mut last_batch: Option<tokio::time::Instant> = None;
    loop {
        queue.wake.notified().await;
        loop {
            // What later rounds want meanwhile replaces what is queued.
            if let Some(last) = last_batch {
                tokio::time::sleep_until(last + interval).await;
            }
            let batch: Batch<T> = {
                let mut state = queue.state();
                let queued = std::mem::take(&mut state.queued);
                let State {
                    written, in_flight, ..
                } = &mut *state;
                queued
                    .into_iter()
                    .map(|(key, wanted)| {
                        let previous = written
                            .get(&key)
                            .map(|(_, c)| c.clone())
                            .unwrap_or_default();
                        in_flight.insert(key.clone(), wanted.clone());
                        (key, wanted, previous)
                    })
                    .collect()
            };
            if batch.is_empty() {
                break;
            }
            last_batch = Some(tokio::time::Instant::now());
            let mut failed = Vec::new();
            for (key, wanted, previous) in batch {
                let conditions = to_conditions(&wanted, &previous);
                let result = api.write(&key, &T::patch(&wanted, &conditions)).await;
                let mut state = queue.state();
                state.in_flight.remove(&key);
                match result {
                    Ok(()) => {
                        state.written.insert(key, (wanted, conditions));
                    }
                    Err(error) => failed.push((key, error)),
                }
            }
            // One line when writes start failing and one when they work
            // again, however many objects and rounds: during an outage
            // every write fails, and the log must not grow with either.
            let kind = T::KIND;
            match failed.first() {
                Some((first, error)) if !failing => {
                    failing = true;
                    tracing::warn!(
                        kind,
                        failed = failed.len(),
                        first = %first,
                        %error,
                        "Cannot write the status of {} {kind}(s); retrying each round",
                        failed.len()
                    );
                }
                Some((first, error)) => {
                    tracing::debug!(kind, failed = failed.len(), first = %first, %error, "Status writes still fail");
                }
                None if failing => {
                    failing = false;
                    tracing::info!(kind, "Status writes work again");
                }
                None => {}
            }
        }
    }
}

/// The wanted conditions, keeping the transition time of those whose status
/// did not change.
fn to_conditions(wanted: &impl Conditions, previous: &[Condition]) -> Vec<Condition> {
    let now = Time(Timestamp::now());
    let observed_generation = wanted.observed_generation();
    wanted
        .conditions()
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
                observed_generation,
                last_transition_time,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    /// A status that is a number.
    #[derive(Clone, PartialEq, Debug)]
    struct Count(u32);

    impl Conditions for Count {
        fn conditions(&self) -> &[super::super::wanted_status::Condition] {
            &[]
        }

        fn observed_generation(&self) -> Option<i64> {
            None
        }
    }

    /// Records each write and when it was made; each takes 2 ms.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<(Instant, serde_json::Value)>>>);

    impl StatusTarget for Recorded {
        type Key = String;
        type Wanted = Count;
        const KIND: &'static str = "Test";

        fn patch(wanted: &Count, _: &[Condition]) -> serde_json::Value {
            serde_json::json!(wanted.0)
        }

        async fn write(&self, _: &String, patch: &serde_json::Value) -> Result<(), ApplyError> {
            tokio::time::sleep(Duration::from_millis(2)).await;
            wasmgpu_support::lock(&self.0).push((Instant::now(), patch.clone()));
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_wanted_every_round_is_written_once_per_interval_and_the_newest_last() {
        let target = Recorded::default();
        let writer = StatusWriter::start(target.clone(), Duration::from_secs(1));
        let key = "one-gpu".to_string();
        let start = Instant::now();
        // A round every 10 ms for 2.5 s, each wanting a new count.
        for count in 0..250 {
            writer.want(&key, Count(count));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let writes = wasmgpu_support::lock(&target.0).clone();
        let at: Vec<u128> = writes
            .iter()
            .map(|(when, _)| (*when - start).as_millis())
            .collect();
        // The first at once, then one a second, each the newest wanted.
        assert_eq!(at, [2, 1002, 2002, 3002], "writes at (ms): {at:?}");
        assert_eq!(writes[0].1, serde_json::json!(0));
        assert_eq!(writes.last().unwrap().1, serde_json::json!(249));

        // After a quiet spell, a new status is written at once.
        let quiet = Instant::now();
        writer.want(&key, Count(1000));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (when, value) = wasmgpu_support::lock(&target.0).last().cloned().unwrap();
        assert_eq!(value, serde_json::json!(1000));
        assert!(when - quiet < Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_that_goes_back_while_another_is_in_flight_is_written_again() {
        let target = Recorded::default();
        let writer = StatusWriter::start(target.clone(), Duration::from_secs(1));
        let key = "one-gpu".to_string();
        writer.want(&key, Count(1));
        tokio::time::sleep(Duration::from_millis(1100)).await;
        // After a quiet spell 2 is written at once; while it is in flight
        // (2 ms) the rounds want 1 again, which the server held before.
        writer.want(&key, Count(2));
        tokio::time::sleep(Duration::from_millis(1)).await;
        writer.want(&key, Count(1));
        tokio::time::sleep(Duration::from_secs(3)).await;
        let written: Vec<serde_json::Value> = wasmgpu_support::lock(&target.0)
            .iter()
            .map(|(_, value)| value.clone())
            .collect();
        assert_eq!(
            written,
            [
                serde_json::json!(1),
                serde_json::json!(2),
                serde_json::json!(1)
            ]
        );
    }
}
