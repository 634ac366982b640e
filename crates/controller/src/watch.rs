//! Watches: one task per kind, all through [`follow`], which gathers each
//! (re)list and hands it over at once, retries failures within a second of
//! the API server's return, and reports how it stands through its [`Link`].
//!
//! ```text
//!  list ──▶ Init, InitApply… ──▶ InitDone ──▶ Sink::reset (whole list), Link::connected
//!  watch ─▶ Apply / Delete ─────────────────▶ Sink::apply / Sink::delete
//!  error ─▶ Link::failed ──▶ wait (250 ms, doubling, at most 1 s) ──▶ list again
//! ```
//!
//! After an error the watch lists again rather than resuming: a resumed
//! watch says nothing until an object changes, and only a fresh list tells
//! that the API server answers again (so `/readyz` can say so) and brings
//! what changed while it did not.

use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tracing::Instrument;

use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher::{self, Event, watcher as watch_stream};
use serde::de::DeserializeOwned;
use tokio::runtime::RuntimeFlavor;
use tokio::sync::{Notify, watch};

use super::connection::Link;
use wasmgpu_index::{Index, IndexResource};

/// The index, and the signals around it that rounds wait on.
pub struct WatchedIndex {
    index: Mutex<Index>,
    /// Something in the index changed: a round may have work.
    pub changed: Notify,
    /// How many watches have listed their kind once.
    listed: watch::Sender<usize>,
}

// === impl WatchedIndex ===

impl WatchedIndex {
    /// Wraps an empty index.
    pub fn new(index: Index) -> Arc<Self> {
        Arc::new(Self {
            index: Mutex::new(index),
            changed: Notify::new(),
            listed: watch::Sender::new(0),
        })
    }

    /// The index, locked. Hold it briefly: watches wait on it.
    ///
    /// A task that finds it held (a round building its snapshot, up to a
    /// hundred milliseconds at 10,000 nodes) waits off the runtime's worker
    /// threads: on two cores, a watch waiting on one worker while the round
    /// builds on the other would stall every other task meanwhile (the
    /// bindings' answers, the other watches' streams, `/healthz`).
    pub fn index(&self) -> MutexGuard<'_, Index> {
        // A panic while holding the lock leaves the index as the last
        // complete call left it: every call is a small synchronous update.
        if let Ok(index) = self.index.try_lock() {
            return index;
        }
        wait_off_the_workers(|| wasmgpu_support::lock(&self.index))
    }

    /// Counts one more kind as listed.
    pub fn mark_listed(&self) {
        self.listed.send_modify(|n| *n += 1);
    }

    /// Waits until `kinds` watches have each listed their objects once.
    pub async fn wait_listed(&self, kinds: usize) {
        let mut listed = self.listed.subscribe();
        // The sender lives in `self`: the wait cannot fail.
        let _ = listed.wait_for(|n| *n >= kinds).await;
    }
}

/// Runs `wait` (which blocks) so that the runtime's other tasks go on:
/// on a worker of a multi-threaded runtime, after handing the worker's
/// tasks to another thread; elsewhere (a blocking thread, a
/// single-threaded runtime, no runtime) as it is.
fn wait_off_the_workers<R>(wait: impl FnOnce() -> R) -> R {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(wait)
    } else {
        wait()
    }
}

/// Where a watch delivers: each (re)list whole, then single changes.
pub trait Sink<K>: Send {
    /// The objects of a list: all there are, replacing what came before.
    fn reset(&mut self, objects: Vec<K>) -> impl Future<Output = ()> + Send;
    /// An object was added or changed.
    fn apply(&mut self, object: K) -> impl Future<Output = ()> + Send;
    /// An object was deleted.
    fn delete(&mut self, object: K) -> impl Future<Output = ()> + Send;
}

/// Feeds one kind into the index: [`follow`] with the index as the sink.
pub async fn feed<K>(
    api: Api<K>,
    config: watcher::Config,
    shared: Arc<WatchedIndex>,
    link: Link,
) -> &'static str
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    Index: IndexResource<K>,
{
    let sink = IndexSink(Arc::clone(&shared));
    let span = tracing::info_span!("watch", kind = link.kind());
    follow(api, config, shared, link, sink)
        .instrument(span)
        .await
}

/// The index as a [`Sink`]: every change wakes the rounds.
struct IndexSink(Arc<WatchedIndex>);

impl<K> Sink<K> for IndexSink
where
    K: Send + Sync,
    Index: IndexResource<K>,
{
    async fn reset(&mut self, objects: Vec<K>) {
        self.0.index().reset(&objects);
        self.0.changed.notify_one();
    }

    async fn apply(&mut self, object: K) {
        self.0.index().apply(&object);
        self.0.changed.notify_one();
    }

    async fn delete(&mut self, object: K) {
        self.0.index().delete(&object);
        self.0.changed.notify_one();
    }
}

/// Watches one kind into `sink` until the watch ends (it does not, short of
/// a bug); returns the kind. Marks the kind listed in `shared` after its
/// first list reached the sink.
pub async fn follow<K, S>(
    api: Api<K>,
    config: watcher::Config,
    shared: Arc<WatchedIndex>,
    mut link: Link,
    mut sink: S,
) -> &'static str
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    S: Sink<K>,
{
    let kind = link.kind();
    let mut delay = RetryDelay::default();
    let mut listed = false;
    loop {
        let mut stream = watch_stream(api.clone(), config.clone()).boxed();
        let mut buffer: Vec<K> = Vec::new();
        let error = loop {
            match stream.next().await {
                Some(Ok(Event::Init)) => buffer.clear(),
                Some(Ok(Event::InitApply(object))) => buffer.push(object),
                Some(Ok(Event::InitDone)) => {
                    link.connected();
                    delay.reset();
                    let objects = std::mem::take(&mut buffer);
                    tracing::debug!(kind, objects = objects.len(), "Listed");
                    sink.reset(objects).await;
                    if !listed {
                        listed = true;
                        shared.mark_listed();
                    }
                }
                Some(Ok(Event::Apply(object))) => sink.apply(object).await,
                Some(Ok(Event::Delete(object))) => sink.delete(object).await,
                Some(Err(error)) => break error,
                None => {
                    tracing::error!(kind, "The watch ended");
                    return kind;
                }
            }
        };
        link.failed(&error);
        drop(stream);
        tokio::time::sleep(delay.next()).await;
    }
}

/// The wait before the next attempt after a failure.
const FIRST_RETRY: Duration = Duration::from_millis(250);
/// The longest wait between attempts: a watch lists again at most this
/// long after the API server is back. Five watches retrying once a second
/// are no burden on a server that answers.
const MAX_RETRY: Duration = Duration::from_secs(1);

/// Waits between failed attempts: [`FIRST_RETRY`], doubling up to
/// [`MAX_RETRY`]; back to the first after a success.
#[derive(Debug)]
struct RetryDelay {
    next: Duration,
}

impl Default for RetryDelay {
    fn default() -> Self {
        Self { next: FIRST_RETRY }
    }
}

// === impl RetryDelay ===

impl RetryDelay {
    fn next(&mut self) -> Duration {
        let delay = self.next;
        self.next = (delay * 2).min(MAX_RETRY);
        delay
    }

    fn reset(&mut self) {
        self.next = FIRST_RETRY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    /// On two workers: while one task holds the index (a round building a
    /// snapshot) and another waits for it (a watch), a third still runs.
    #[test]
    fn a_task_waiting_for_the_index_leaves_the_runtime_to_the_others() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let shared = WatchedIndex::new(Index::new("binpack"));
        let holding = Arc::new(AtomicBool::new(false));
        let ticks_while_held = Arc::new(AtomicU32::new(0));
        runtime.block_on(async {
            let ticker = {
                let (holding, ticks) = (Arc::clone(&holding), Arc::clone(&ticks_while_held));
                tokio::spawn(async move {
                    let mut every = tokio::time::interval(Duration::from_millis(5));
                    for _ in 0..200 {
                        every.tick().await;
                        if holding.load(Ordering::SeqCst) {
                            ticks.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            };
            let round = {
                let (shared, holding) = (Arc::clone(&shared), Arc::clone(&holding));
                tokio::spawn(async move {
                    let _index = shared.index();
                    holding.store(true, Ordering::SeqCst);
                    // Building a snapshot: the worker is busy, not waiting.
                    std::thread::sleep(Duration::from_millis(400));
                    holding.store(false, Ordering::SeqCst);
                })
            };
            while !holding.load(Ordering::SeqCst) {
                tokio::task::yield_now().await;
            }
            let watch = {
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    drop(shared.index());
                })
            };
            round.await.unwrap();
            watch.await.unwrap();
            ticker.abort();
        });
        // 400 ms at one tick per 5 ms: about 80 when the runtime goes on,
        // next to none when the waiting watch takes the second worker.
        let ticks = ticks_while_held.load(Ordering::SeqCst);
        assert!(ticks >= 20, "{ticks} ticks while the index was held");
    }

    #[test]
    fn retries_double_up_to_a_second_and_start_over_after_a_success() {
        let mut delay = RetryDelay::default();
        let waits: Vec<u128> = (0..5).map(|_| delay.next().as_millis()).collect();
        assert_eq!(waits, [250, 500, 1000, 1000, 1000]);
        delay.reset();
        assert_eq!(delay.next(), FIRST_RETRY);
    }
}
