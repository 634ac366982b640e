//! The controller's HTTP endpoints: `/metrics` (Prometheus), `/healthz`
//! (the process serves), `/readyz` (the index is warm: every watched kind
//! was listed once, so this replica could lead at once).

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

use super::metrics::Metrics;

#[derive(Clone)]
struct Endpoints {
    metrics: Metrics,
    ready: watch::Receiver<bool>,
}

/// Serves the endpoints on `address` until the task is dropped.
pub async fn serve(
    address: SocketAddr,
    metrics: Metrics,
    ready: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(address = %listener.local_addr()?, "Serving /metrics, /healthz, /readyz");
    axum::serve(listener, router(Endpoints { metrics, ready })).await
}

fn router(endpoints: Endpoints) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(endpoints)
}

async fn metrics(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        endpoints.metrics.encode(),
    )
}

async fn readyz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    if *endpoints.ready.borrow() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the index is not warm yet: waiting for the first list of every watched kind\n",
        )
    }
}
