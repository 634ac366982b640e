//! What stops the controller: the one error [`run`](crate::run) returns.
//!
//! The errors of single operations stay with them and never stop the
//! controller: a write ([`ApplyError`](crate::write_error::ApplyError), an
//! Event and a metric), a policy ConfigMap's version
//! ([`RejectError`](crate::RejectError), its status annotation and an
//! Event). Those that stop it at start — a policy file, the Lease — are
//! this error's sources.

use crate::leader::LeaseError;
use crate::policies::LoadError;

/// Why the controller stopped (or could not start).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No client can be made from the kubeconfig.
    #[error("cannot make a client for the API server at {server}: {source}")]
    Client {
        /// The API server's URL.
        server: String,
        /// Why.
        source: kube::Error,
    },
    /// The Wasm engine could not be set up.
    #[error("cannot set up the Wasm engine: {0}")]
    Engine(#[source] wasmgpu_engine::PolicyError),
    /// A policy given by file (`--policy`) cannot be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Leader election could not be set up.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// `/metrics`, `/healthz` and `/readyz` cannot be served.
    #[error("cannot serve metrics and health: {0}")]
    Serve(#[source] std::io::Error),
    /// A watch returned: the index would go stale.
    #[error("the {0} watch ended unexpectedly")]
    WatchEnded(&'static str),
    /// A task panicked or was cancelled.
    #[error("the {task} task failed: {source}")]
    Task {
        /// Which: `watch`, `rounds`, `http`.
        task: &'static str,
        /// Why.
        source: tokio::task::JoinError,
    },
    /// The round loop returned.
    #[error("the round loop ended unexpectedly")]
    RoundsEnded,
}

impl Error {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Client { .. } => "client",
            Error::Engine(_) => "engine",
            Error::Load(error) => error.kind(),
            Error::Lease(_) => "lease",
            Error::Serve(_) => "serve",
            Error::WatchEnded(_) => "watch-ended",
            Error::Task { .. } => "task",
            Error::RoundsEnded => "rounds-ended",
        }
    }
}
