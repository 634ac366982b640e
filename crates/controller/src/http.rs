//! The controller's HTTP endpoints: `/metrics` (Prometheus), `/healthz`
//! (the process serves), `/readyz` (every watch is connected: each kind was
//! listed and its last list or watch succeeded, so the index is warm and
//! current and this replica could lead at once; otherwise 503 and why),
//! `/debug/rounds` (the rounds recorded per policy, see
//! [`super::recorder`]) and `/debug/rounds/{policy}[/{round}]` (a recorded
//! snapshot file, the latest without a round).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::connection::Links;
use super::metrics::Metrics;
use super::recorder::Recorder;

#[derive(Clone)]
struct Endpoints {
    metrics: Metrics,
    links: Arc<Links>,
    recorder: Arc<Recorder>,
}

/// Serves the endpoints on `address` until the task is dropped.
pub async fn serve(
    address: SocketAddr,
    metrics: Metrics,
    links: Arc<Links>,
    recorder: Arc<Recorder>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(address = %listener.local_addr()?, "Serving /metrics, /healthz, /readyz, /debug/rounds");
    axum::serve(
        listener,
        router(Endpoints {
            metrics,
            links,
            recorder,
        }),
    )
    .await
}

fn router(endpoints: Endpoints) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/debug/rounds", get(rounds))
        .route("/debug/rounds/{policy}", get(latest_round))
        .route("/debug/rounds/{policy}/{round}", get(round))
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

async fn rounds(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string(&endpoints.recorder.list()).unwrap_or_default(),
    )
}

async fn latest_round(
    State(endpoints): State<Endpoints>,
    Path(policy): Path<String>,
) -> impl IntoResponse {
    recorded(&endpoints, &policy, None)
}

async fn round(
    State(endpoints): State<Endpoints>,
    Path((policy, round)): Path<(String, u64)>,
) -> impl IntoResponse {
    recorded(&endpoints, &policy, Some(round))
}

fn recorded(endpoints: &Endpoints, policy: &str, round: Option<u64>) -> axum::response::Response {
    match endpoints.recorder.snapshot_file(policy, round) {
        Some(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        None => {
            let what = round.map_or("no round".to_string(), |r| format!("no round {r}"));
            (
                StatusCode::NOT_FOUND,
                format!(
                    "{what} of policy {policy} is recorded (recorded: {}); annotate its ConfigMap with wasmgpu.io/record-rounds: \"N\" to record its last N rounds\n",
                    serde_json::to_string(&endpoints.recorder.list()).unwrap_or_default()
                ),
            )
                .into_response()
        }
    }
}
