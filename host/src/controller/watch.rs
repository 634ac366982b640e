//! Watches that feed the index: one task per kind, all through
//! [`IndexResource`].

use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_stream};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};

use crate::index::{Index, IndexResource};

/// The index, and the signals around it that rounds wait on.
pub struct Shared {
    index: Mutex<Index>,
    /// Something in the index changed: a round may have work.
    pub changed: Notify,
    /// How many watches have listed their kind once.
    listed: watch::Sender<usize>,
}

// === impl Shared ===

impl Shared {
    /// Wraps an empty index.
    pub fn new(index: Index) -> Arc<Self> {
        Arc::new(Self {
            index: Mutex::new(index),
            changed: Notify::new(),
            listed: watch::Sender::new(0),
        })
    }

    /// The index, locked. Hold it briefly: watches wait on it.
    pub fn index(&self) -> MutexGuard<'_, Index> {
        // A panic while holding the lock leaves the index as the last
        // complete call left it: every call is a small synchronous update.
        self.index.lock().unwrap_or_else(|p| p.into_inner())
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

/// Feeds one kind into the index until the stream ends. Objects from a
/// (re)list are gathered and handed over at once (`reset`), so the index
/// never sees half a list.
pub async fn feed<K>(api: Api<K>, config: watcher::Config, shared: Arc<Shared>, kind: &'static str)
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    Index: IndexResource<K>,
{
    let mut stream = watch_stream(api, config).default_backoff().boxed();
    let mut buffer: Vec<K> = Vec::new();
    let mut listed = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => buffer.clear(),
            Ok(Event::InitApply(object)) => buffer.push(object),
            Ok(Event::InitDone) => {
                shared.index().reset(&buffer);
                tracing::debug!(kind, objects = buffer.len(), "Listed");
                buffer.clear();
                if !listed {
                    listed = true;
                    shared.mark_listed();
                }
                shared.changed.notify_one();
            }
            Ok(Event::Apply(object)) => {
                shared.index().apply(&object);
                shared.changed.notify_one();
            }
            Ok(Event::Delete(object)) => {
                shared.index().delete(&object);
                shared.changed.notify_one();
            }
            Err(error) => tracing::warn!(kind, %error, "Watch failed; retrying"),
        }
    }
}
