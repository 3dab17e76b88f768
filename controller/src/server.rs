//! `/metrics`, `/healthz` (the process is up), `/readyz` (leader, caches synced, serving), and
//! `/debug/ipam` (every allocation IPAM holds, by subnet and NIC key, as JSON; 503 until IPAM is
//! rebuilt) — for operators asking who holds an address, and for the crash drill, which checks
//! that a fresh controller rebuilds the same IPAM as the one it replaces.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::ipam::Allocation;
use crate::metrics::Metrics;

/// IPAM's allocations by subnet and NIC key, read when asked; provided once the controller has
/// its IPAM (the server starts before it).
pub type IpamView =
    Arc<OnceLock<Box<dyn Fn() -> BTreeMap<String, BTreeMap<String, Allocation>> + Send + Sync>>>;

#[derive(Clone)]
pub struct Health {
    pub metrics: Metrics,
    pub ready: Arc<AtomicBool>,
    pub enable_metrics: bool,
    pub ipam: IpamView,
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

/// `{"<subnet>": {"<key>": {"ips": [...], "mac": "...", "pool": "..."}}}`.
pub fn ipam_json(allocations: &BTreeMap<String, BTreeMap<String, Allocation>>) -> serde_json::Value {
    allocations
        .iter()
        .map(|(subnet, nics)| {
            let nics: serde_json::Map<String, serde_json::Value> = nics
                .iter()
                .map(|(key, a)| {
                    let ips: Vec<String> = a.addrs().map(|ip| ip.to_string()).collect();
                    let value = serde_json::json!({"ips": ips, "mac": a.mac.to_string(), "pool": a.pool});
                    (key.clone(), value)
                })
                .collect();
            (subnet.clone(), serde_json::Value::Object(nics))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

async fn debug_ipam(State(h): State<Health>) -> impl IntoResponse {
    match h.ipam.get() {
        Some(view) if h.ready.load(Ordering::Relaxed) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            ipam_json(&view()).to_string(),
        ),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain")],
            "IPAM is not rebuilt yet\n".to_owned(),
        ),
    }
}

pub fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/debug/ipam", get(debug_ipam))
        .with_state(health)
}

/// Serves on a bound listener until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, health: Health) -> std::io::Result<()> {
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "metrics and health endpoints");
    axum::serve(listener, router(health)).await
}
