//! The controller's HTTP endpoints: `/metrics` (Prometheus), `/healthz`
//! (the process serves), `/readyz` (every watch is connected: each kind was
//! listed and its last list or watch succeeded, so the index is warm and
//! current and this replica could lead at once; otherwise 503 and why).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::connection::Links;
use super::metrics::Metrics;

#[derive(Clone)]
struct Endpoints {
    metrics: Metrics,
    links: Arc<Links>,
}

/// Serves the endpoints on `address` until the task is dropped.
pub async fn serve(
    address: SocketAddr,
    metrics: Metrics,
    links: Arc<Links>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(address = %listener.local_addr()?, "Serving /metrics, /healthz, /readyz");
    axum::serve(listener, router(Endpoints { metrics, links })).await
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
    match endpoints.links.unready() {
        None => (StatusCode::OK, "ok\n".to_string()),
        Some(reasons) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready:\n{reasons}\n"),
        ),
    }
}
