//! Advertisement policy: which prefix goes to which peer with which attributes. Pure: the
//! cluster's objects, the accepted `BgpAdvertisement`s and the peers in; per peer, the exact
//! routes (the Adj-RIB-Out's input) with where each attribute came from out.
//!
//! - [`candidates`]: what this speaker MAY announce (today's trust rules), with the facts the
//!   selectors read.
//! - [`select`]: which candidates and peers each advertisement selects (selectors matched per
//!   object, not per prefix).
//! - [`aggregate`]: covering prefixes within their allocation.
//! - [`merge`]: the attributes of one prefix to one peer, and which advertisement's value lost.
//! - [`validate`]: a `BgpAdvertisement` checked whole, errors naming the field.
//!
//! A route goes to peer P when the annotation path (Kube-OVN's `ovn.kubernetes.io/bgp`,
//! [`announce::desired`], unchanged) announces it, to every peer as before; or when an
//! advertisement selects it and its `peerSelector` selects P. Either way only if P's session
//! carries the prefix's family ([`PeerView::families`]). With no advertisements the result is
//! exactly the annotation path's prefixes with each peer's own attributes.

pub mod aggregate;
pub mod candidates;
pub mod merge;
mod rib;
pub mod select;
pub mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Namespace;
use kube_ovn_api::bgp_advertisement::AdvertiseKind;
use kube_ovn_api::selector::Selector;

use crate::announce::{self, Desired, Origin};
use crate::bgp::rib_out::RouteAttributes;
use crate::bgp::wire::{Family, LargeCommunity};
use crate::crd::CrdError;

pub use validate::validate;

/// Who a peer is, for `peerSelector`, and what its routes carry by default.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerView {
    /// The session's peer address (the key of every per-peer result).
    pub address: IpAddr,
    /// The BgpPeer's name; `None` for a `--neighbor-address` peer.
    pub name: Option<String>,
    /// The BgpPeer's labels (empty for a flag peer: only a selector that selects everything
    /// picks it).
    pub labels: BTreeMap<String, String>,
    /// The peer's own attributes: the defaults of every route to it.
    pub defaults: RouteAttributes,
    /// The families its session carries.
    pub families: Vec<Family>,
}

/// An advertisement that passed validation, in the speaker's types.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedAdvertisement {
    /// `metadata.name`.
    pub name: String,
    pub kinds: Vec<AdvertiseKind>,
    /// Absent selectors are `Selector::default()` (selects everything).
    pub subnet_selector: Selector,
    pub namespace_selector: Selector,
    pub service_selector: Selector,
    pub peer_selector: Selector,
    pub communities: Vec<u32>,
    pub large_communities: Vec<LargeCommunity>,
    pub local_pref: Option<u32>,
    pub med: Option<u32>,
    /// `None` when the spec does not set it (then it takes no part in "fewest wins").
    pub as_path_prepend: Option<u8>,
    pub aggregation_length_v4: Option<u8>,
    pub aggregation_length_v6: Option<u8>,
}

/// Why a route is in a peer's table: the annotation path (Kube-OVN's), or an advertisement.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// The object's `ovn.kubernetes.io/bgp` annotation (or its subnet's, or the Service's).
    Annotation,
    /// A `BgpAdvertisement`, by name.
    Advertisement(String),
}

/// One route to one peer. Its parts are shared (`Arc`) between the routes and peers that have
/// the same: 100,000 routes to 4 peers with a handful of attribute sets hold a handful of
/// attribute and source lists, and one origin per object.
#[derive(Debug, Clone, PartialEq)]
pub struct AdvertisedRoute {
    pub attributes: Arc<RouteAttributes>,
    pub kind: AdvertiseKind,
    /// The object behind it: the annotation path's origin when it announces the prefix, else
    /// the smallest of the objects the advertisements selected (for an aggregate, of those it
    /// covers).
    pub origin: Arc<Origin>,
    /// Every reason it is announced, sorted: [`Source::Annotation`] first, then advertisement
    /// names.
    pub sources: Arc<[Source]>,
}

/// One peer's table.
pub type PeerRib = BTreeMap<IpNet, AdvertisedRoute>;

/// The result of one evaluation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evaluation {
    /// Per peer address.
    pub peers: BTreeMap<IpAddr, PeerRib>,
    /// Advertisements whose value lost to another's for some prefix and peer: name → message
    /// (for the `Conflict` condition), naming the field, the smallest such prefix and its peer,
    /// and the winner.
    pub conflicts: BTreeMap<String, String>,
    /// Advertisements not applied because an aggregate would leave its allocation for some
    /// member: name → the error, naming `spec.aggregationLengthV4` (`V6`) and the smallest such
    /// member ([`aggregate`]). Such an advertisement announces nothing (the peers keep what
    /// they have without it). For the run loop: `Accepted=False` with this message (as for an
    /// invalid spec, though it depends on the cluster's allocations: it clears when they or
    /// the spec change) and a Warning event naming the field.
    pub refused: BTreeMap<String, CrdError>,
    /// The annotation path's result (its skipped objects and refusals are reported as before).
    pub desired: Desired,
}

/// What else the evaluation reads beside [`announce::Objects`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PolicyInputs<'a> {
    pub namespaces: &'a [Arc<Namespace>],
    pub advertisements: &'a [ValidatedAdvertisement],
    pub peers: &'a [PeerView],
}

/// The kind of prefix an origin stands for, when no candidate tells (a Service's address kind is
/// not in its origin, so a Service address counts as a LoadBalancer IP here).
pub fn kind_of(origin: &Origin) -> AdvertiseKind {
    match origin {
        Origin::Subnet(_) => AdvertiseKind::SubnetCidrs,
        Origin::Pod(_) => AdvertiseKind::PodIps,
        Origin::Service(_) => AdvertiseKind::LoadBalancerIps,
        Origin::Eip(_) | Origin::OvnEip(_) => AdvertiseKind::Eips,
    }
}

/// How many routes of each kind one peer's table holds, by the API's spelling (`PodIPs`, ...),
/// only kinds with at least one: `BgpPeer.status.nodes.<node>.advertised`.
pub fn kind_counts(rib: &PeerRib) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for route in rib.values() {
        *counts.entry(route.kind.as_str()).or_insert(0) += 1;
    }
    counts
}

/// Every peer's table: see the module's documentation for the rules.
pub fn evaluate(
    objects: &announce::Objects<'_>,
    scope: &announce::Scope<'_>,
    inputs: &PolicyInputs<'_>,
) -> Evaluation {
    let mut pod_addresses = Vec::new();
    let (desired, subnets) =
        announce::desired_visiting_pods(objects, scope, &mut |address| pod_addresses.push(address));
    let candidates = candidates::collect(objects, scope, &subnets, &pod_addresses, inputs.namespaces);
    drop(pod_addresses);
    let index: Vec<select::AdIndex> = inputs
        .advertisements
        .iter()
        .map(|ad| select::AdIndex::new(ad, objects, inputs.namespaces, inputs.peers))
        .collect();
    let built = rib::build(&candidates, &desired, inputs, &index);
    Evaluation {
        peers: built.peers,
        conflicts: built.conflicts,
        refused: built.refused,
        desired,
    }
}
