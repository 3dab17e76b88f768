//! The speaker's side of `BgpPeer` (the kind itself is [`kube_ovn_api::bgp_peer`], re-exported
//! here): [`ValidateSpec::validate`], the checks that turn a spec into a [`ValidatedPeer`] with
//! parsed addresses, communities and selector, and the merge patches each speaker writes to
//! `status.nodes.<node>` ([`status_patch`], [`advertised_entry`], [`remove_node_patch`]). No
//! I/O here: reading the password Secret and running the session is the caller's.

mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube_ovn_api::bgp_advertisement::AdvertiseKind;
use serde_json::{Value, json};

use crate::driver::PeerStatus;

pub use kube_ovn_api::bgp_peer::*;
pub use kube_ovn_api::selector::{Operator, Requirement, Selector};
pub use validate::{
    CrdError, PasswordRef, PeerTarget, ValidateSpec, ValidatedPeer, parse_communities, parse_community,
    parse_large_communities, parse_large_community,
};

/// The body of a JSON merge patch (RFC 7386) to `bgppeers/<name>/status` that sets `node`'s
/// entry from a peer task's status and leaves every other node's entry alone. Absent values are
/// sent as `null`, so an error or an establishment time from an earlier session is cleared.
pub fn status_patch(node: &str, peer: &PeerStatus) -> Value {
    status_patch_at(node, peer, SystemTime::now())
}

/// [`status_patch`] with the `updatedAt` time given.
pub fn status_patch_at(node: &str, peer: &PeerStatus, now: SystemTime) -> Value {
    json!({ "status": { "nodes": { node: node_entry(peer, now) } } })
}

/// [`status_patch`] that also rewrites `status.established` from `current` (the object as last
/// read, with this node's entry replaced) and carries `current`'s resourceVersion, so the API
/// server refuses it with 409 Conflict if another speaker wrote in between: re-read and retry.
pub fn status_patch_with_summary(node: &str, peer: &PeerStatus, current: &BgpPeer, now: SystemTime) -> Value {
    let entry = node_entry(peer, now);
    let mut status = current.status.clone().unwrap_or_default();
    status.nodes.insert(
        node.to_owned(),
        serde_json::from_value(entry.clone()).unwrap_or_default(),
    );
    json!({
        "metadata": { "resourceVersion": current.metadata.resource_version },
        "status": { "nodes": { node: entry }, "established": status.summary() },
    })
}

/// A community as people write it: its well-known name (RFC 1997, RFC 7999), else `A:B`; the
/// inverse of [`parse_community`].
pub fn format_community(value: u32) -> String {
    validate::WELL_KNOWN
        .iter()
        .find(|(_, v)| *v == value)
        .map_or_else(
            || format!("{}:{}", value >> 16, value & 0xFFFF),
            |(name, _)| (*name).to_owned(),
        )
}

/// Prefixes sent to one peer, counted by kind (`status.nodes.<node>.advertised`).
pub type AdvertisedCounts = BTreeMap<AdvertiseKind, u64>;

/// The value of `status.nodes.<node>.advertised` in a merge patch: every kind, those with no
/// prefix as `null`, so a kind that dropped to none disappears from the stored map (RFC 7386
/// merges maps key by key).
pub fn advertised_entry(counts: &AdvertisedCounts) -> Value {
    let map: serde_json::Map<String, Value> = AdvertiseKind::ALL
        .iter()
        .map(|kind| {
            let n = counts.get(kind).copied().filter(|n| *n > 0);
            (kind.as_str().to_owned(), n.map_or(Value::Null, Value::from))
        })
        .collect();
    Value::Object(map)
}

/// The body of a merge patch that removes `node`'s entry (the node no longer peers with this
/// router, or its speaker is going away for good).
pub fn remove_node_patch(node: &str) -> Value {
    json!({ "status": { "nodes": { node: null } } })
}

fn node_entry(peer: &PeerStatus, now: SystemTime) -> Value {
    json!({
        "state": format!("{:?}", peer.state),
        "establishedAt": peer.established_at.filter(|_| peer.is_established()).and_then(time),
        "prefixesSent": peer.prefixes_sent,
        "lastError": peer.last_error,
        "updatedAt": time(now),
    })
}

/// RFC 3339 in whole seconds, as Kubernetes writes `metav1.Time`.
fn time(at: SystemTime) -> Option<Time> {
    let ts = Timestamp::try_from(at).ok()?;
    Timestamp::from_second(ts.as_second()).ok().map(Time)
}
