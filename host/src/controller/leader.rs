//! Leader election through a `coordination.k8s.io` Lease
//! (`kube-lease-manager`): every replica watches and keeps its index warm;
//! only the leader runs rounds, so only one replica writes.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
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
    /// Keeps the lease renewed (dropped: the lease task stops with the
    /// channel).
    _task: Option<
        tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
    >,
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
            _task: None,
        }
    }

    /// Competes for the Lease in `config`.
    pub async fn elect(client: Client, config: &LeaseConfig) -> Result<Self, LeaseError> {
        let manager = LeaseManagerBuilder::new(client, &config.name)
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
            })?;
        let (receiver, task) = manager.watch().await;
        tracing::info!(lease = %config.name, namespace = %config.namespace, identity = %config.identity, "Competing for leadership");
        Ok(Self {
            receiver,
            _sender: None,
            _task: Some(task),
        })
    }

    /// A receiver of the current state and its changes.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.receiver.clone()
    }

    /// Releases the Lease (when held), so that a standby takes over at once
    /// instead of after the lease duration. Every other receiver must be
    /// dropped first.
    pub async fn step_down(self) {
        let Some(task) = self._task else {
            return;
        };
        drop(self.receiver);
        match task.await {
            Ok(Ok(manager)) => match manager.release().await {
                Ok(()) => tracing::info!("Released the lease"),
                Err(error) => tracing::warn!(%error, "Cannot release the lease"),
            },
            Ok(Err(error)) => tracing::warn!(%error, "Leader election failed"),
            Err(error) => tracing::warn!(%error, "Leader election task failed"),
        }
    }
}
