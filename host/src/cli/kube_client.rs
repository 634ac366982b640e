//! The async runtime and API client of commands that talk to a cluster.

use anyhow::Context;
use kube::Client;

/// Runs `work` to completion on a runtime of its own.
pub(crate) fn block_on<T>(
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::runtime::Runtime::new()
        .context("cannot start the async runtime")?
        .block_on(work)
}

/// A client for the cluster of the current kubeconfig (or in-cluster).
pub(crate) async fn client() -> anyhow::Result<Client> {
    Client::try_default()
        .await
        .context("cannot reach the Kubernetes API (set KUBECONFIG)")
}
