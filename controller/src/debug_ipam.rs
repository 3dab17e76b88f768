//! `/debug/ipam`: every allocation IPAM holds, by subnet and NIC key, as JSON (503 until IPAM is
//! rebuilt) — for operators asking who holds an address, and for the crash drill, which checks
//! that a fresh controller rebuilds the same IPAM as the one it replaces.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;

use crate::ipam::Allocation;

/// IPAM's allocations by subnet and NIC key, read when asked; provided once the controller has
/// its IPAM (the endpoint starts before it).
pub type IpamView =
    Arc<OnceLock<Box<dyn Fn() -> BTreeMap<String, BTreeMap<String, Allocation>> + Send + Sync>>>;

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

/// The route; answers once `ready` (IPAM rebuilt) and the view is set.
pub fn router(view: IpamView, ready: Arc<AtomicBool>) -> Router {
    Router::new().route(
        "/debug/ipam",
        get(move || {
            let (view, ready) = (view.clone(), ready.clone());
            async move {
                match view.get() {
                    Some(view) if ready.load(Ordering::Relaxed) => (
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
        }),
    )
}
