//! Leader election through a `coordination.k8s.io` Lease
//! (`kube-lease-manager`): every replica watches and keeps its index warm;
//! only the leader runs rounds, so only one replica writes.

use std::time::Duration;
use tracing::Instrument;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;

/// Where the Lease is and who this replica is.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// The Lease's name.
    pub name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long a lease lasts without renewal; a standby takes over within
    /// it after the leader dies.
    pub duration: Duration,
    /// The holder renews this long before expiry.
    pub grace: Duration,
}

/// Whether this replica leads, as it changes.
pub struct Leadership {
    receiver: watch::Receiver<bool>,
    /// Keeps an always-true channel open when election is off.
    _sender: Option<watch::Sender<bool>>,
    /// Holds or waits for the Lease; releases it and ends once every
    /// receiver is dropped.
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Why the Lease could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up leader election on Lease {namespace}/{name}: {source}")]
pub struct LeaseError {
    name: String,
    namespace: String,
    source: kube_lease_manager::LeaseManagerError,
}

// === impl Leadership ===

impl Leadership {
    /// This replica always leads (a single replica, or tests).
    pub fn always() -> Self {
        let (sender, receiver) = watch::channel(true);
        Self {
            receiver,
            _sender: Some(sender),
            task: None,
        }
    }

    /// Competes for the Lease in `config`.
    pub async fn elect(client: Client, config: &LeaseConfig) -> Result<Self, LeaseError> {
        let manager = manager(&client, config).await?;
        let (sender, receiver) = watch::channel(false);
        let span = tracing::info_span!("leader", lease = %config.name, identity = %config.identity);
        let task = tokio::spawn(campaign(client, config.clone(), manager, sender).instrument(span));
        tracing::info!(lease = %config.name, namespace = %config.namespace, identity = %config.identity, "Competing for leadership");
        Ok(Self {
            receiver,
            _sender: None,
            task: Some(task),
        })
    }

    /// A receiver of the current state and its changes.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.receiver.clone()
    }

    /// Releases the Lease (when held), so that a standby takes over at once
    /// instead of after the lease duration. Every other receiver must be
    /// dropped first: the campaign ends when the last one is.
    pub async fn step_down(self) {
        let Some(task) = self.task else {
            return;
        };
        drop(self.receiver);
        if let Err(error) = task.await {
            tracing::warn!(%error, "Leader election task failed");
        }
    }
}

async fn manager(client: &Client, config: &LeaseConfig) -> Result<LeaseManager, LeaseError> {
    LeaseManagerBuilder::new(client.clone(), &config.name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(config.duration.as_secs().max(1))
        .with_grace(config.grace.as_secs().max(1))
        .with_field_manager("wasmgpu-controller-lease")
        .build()
        .await
        .map_err(|source| LeaseError {
            name: config.name.clone(),
            namespace: config.namespace.clone(),
            source,
        })
}

/// What woke the campaign.
enum Wake {
    /// Every receiver is gone: release and stop.
    Closed,
    /// The Lease was released by its holder.
    Released,
    /// The manager saw this replica gain or lose the Lease.
    Changed(kube_lease_manager::Result<bool>),
}

/// Holds or waits for the Lease, publishing whether this replica leads,
/// until every receiver is dropped; then releases the Lease.
///
/// A standby's `LeaseManager` sleeps until the lease it last read expires,
/// even when the holder released it long before. So the campaign also
/// watches the Lease: when it shows no holder, a fresh manager (which reads
/// the Lease anew) takes it at once, instead of after the lease duration.
async fn campaign(
    client: Client,
    config: LeaseConfig,
    mut manager: LeaseManager,
    sender: watch::Sender<bool>,
) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let released = watcher(
        leases,
        watcher::Config::default().fields(&format!("metadata.name={}", config.name)),
    )
    .applied_objects()
    .filter_map(|lease| std::future::ready(lease.ok()))
    .filter(|lease| {
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_ref());
        std::future::ready(holder.is_none_or(String::is_empty))
    });
    let mut released = std::pin::pin!(released);
    loop {
        let leading = *sender.borrow();
        let wake = tokio::select! {
            biased;
            () = sender.closed() => Wake::Closed,
            Some(_) = released.next(), if !leading => Wake::Released,
            result = manager.changed() => Wake::Changed(result),
        };
        match wake {
            Wake::Closed => break,
            Wake::Released => match self::manager(&client, &config).await {
                Ok(fresh) => {
                    tracing::debug!(lease = %config.name, "The Lease was released; competing for it now");
                    manager = fresh;
                }
                Err(error) => tracing::warn!(%error, "Cannot read the released Lease"),
            },
            Wake::Changed(Ok(leads)) => {
                if sender.send(leads).is_err() {
                    break;
                }
            }
            Wake::Changed(Err(error)) => {
                tracing::warn!(%error, "Leader election failed; retrying");
                tokio::select! {
                    () = sender.closed() => break,
                    () = tokio::time::sleep(RETRY) => {}
                }
            }
        }
    }
    match manager.release().await {
        Ok(()) => tracing::info!(lease = %config.name, "Released the lease"),
        Err(error) => tracing::warn!(%error, "Cannot release the lease"),
    }
}

/// How long the campaign waits after an error of the API server.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);
