//! `/metrics`, `/healthz` (the process is up) and `/readyz` (leader, caches synced, serving).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

#[derive(Clone)]
pub struct Health {
    pub metrics: Metrics,
    pub ready: Arc<AtomicBool>,
    pub enable_metrics: bool,
}

async fn metrics(State(h): State<Health>) -> impl IntoResponse {
    if !h.enable_metrics {
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain")],
            "metrics are disabled\n".to_owned(),
        );
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.encode(),
    )
}

async fn ready(State(h): State<Health>) -> impl IntoResponse {
    if h.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

pub fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(health)
}

/// Serves on a bound listener until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, health: Health) -> std::io::Result<()> {
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "metrics and health endpoints");
    axum::serve(listener, router(health)).await
}
