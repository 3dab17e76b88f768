//! The speaker's own routes beside the metrics and health endpoints (on `--pprof-port`):
//! `GET /bgp/routes?peer=<address>` (one peer's exact routes with their attributes, JSON) and
//! `GET /bgp/peers` (the sessions, JSON). Read by `kube-ovn-speaker routes` through the API
//! server's pod proxy; the shapes are [`super::routes_view`]'s.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::RawQuery;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;

use super::routes_view::{self, SessionFacts, SessionView};
use super::{PeerSet, RunningPeer};
use crate::policy::Evaluation;

/// The last evaluation the routes task handed to the peers.
pub type Published = watch::Receiver<Arc<Evaluation>>;

/// `/bgp/routes` and `/bgp/peers`.
pub fn router(peers: Arc<PeerSet>, evaluation: Published) -> axum::Router {
    let p = peers.clone();
    axum::Router::new()
        .route(
            "/bgp/routes",
            get(move |RawQuery(query): RawQuery| {
                let (peers, evaluation) = (p.clone(), evaluation.clone());
                async move { routes(&peers, &evaluation, query.as_deref()) }
            }),
        )
        .route(
            "/bgp/peers",
            get(move || {
                let peers = peers.clone();
                async move { json(&sessions(&peers.all())) }
            }),
        )
}

fn json<T: serde::Serialize>(value: &T) -> Response {
    match serde_json::to_string_pretty(value) {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

fn routes(peers: &PeerSet, evaluation: &Published, query: Option<&str>) -> Response {
    let Some(text) = query_value(query.unwrap_or_default(), "peer") else {
        return (StatusCode::BAD_REQUEST, "the query needs peer=<address>\n").into_response();
    };
    let Ok(address) = text.parse::<IpAddr>() else {
        return (
            StatusCode::BAD_REQUEST,
            format!("peer={text:?} is not an IP address\n"),
        )
            .into_response();
    };
    let all = peers.all();
    let Some(peer) = all.iter().find(|p| p.plan.config.address == address) else {
        let known: Vec<String> = all.iter().map(|p| p.plan.config.address.to_string()).collect();
        return (
            StatusCode::NOT_FOUND,
            format!(
                "no peer {address} on this speaker (its peers: {})\n",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        )
            .into_response();
    };
    let session = &peer.plan.config.session;
    let facts = SessionFacts {
        internal: session.local_as == session.peer_as,
        local_address: peer.handle.status().local_address,
    };
    let evaluation = evaluation.borrow().clone();
    let rows = evaluation
        .peers
        .get(&address)
        .map(|rib| routes_view::routes(rib, facts))
        .unwrap_or_default();
    json(&rows)
}

/// Every running peer as `/bgp/peers` shows it.
pub fn sessions(peers: &[Arc<RunningPeer>]) -> Vec<SessionView> {
    peers
        .iter()
        .map(|p| {
            let status = p.handle.status();
            let session = &p.plan.config.session;
            SessionView {
                peer: p.plan.config.address.to_string(),
                bgp_peer: p.name.clone(),
                peer_as: session.peer_as,
                local_as: session.local_as,
                state: format!("{:?}", status.state),
                local_address: status.local_address.map(|a| a.to_string()),
                prefixes_sent: status.prefixes_sent as u64,
                prefixes_desired: status.prefixes_desired as u64,
                last_error: status.last_error,
            }
        })
        .collect()
}

/// The value of `key` in a query string, percent-decoded (`peer=2001%3Adb8%3A%3A1`).
fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_comes_from_the_query_percent_decoded() {
        assert_eq!(query_value("peer=10.0.0.1", "peer").as_deref(), Some("10.0.0.1"));
        assert_eq!(
            query_value("x=1&peer=2001%3adb8%3A%3A1", "peer").as_deref(),
            Some("2001:db8::1")
        );
        assert_eq!(query_value("peers=1", "peer"), None);
    }
}
