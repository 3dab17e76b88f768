//! Advertisement policy: which prefix goes to which peer with which attributes. Pure: the
//! cluster's objects, the accepted `BgpAdvertisement`s and the peers in; per peer, the exact
//! routes (the Adj-RIB-Out's input) with where each attribute came from out.
//!
//! SKELETON (issue 27): the interface the run loop is written against. `evaluate` below gives
//! every peer the annotation-announced prefixes with the peer's own attributes, as before
//! advertisements existed; the selection by advertisements, the attribute merge, aggregation and
//! the validation replace it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Namespace;
use kube_ovn_api::bgp_advertisement::AdvertiseKind;
use kube_ovn_api::selector::Selector;

use crate::announce::{self, Desired, Origin};
use crate::bgp::rib_out::RouteAttributes;
use crate::bgp::wire::{Family, LargeCommunity};

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
    pub as_path_prepend: u8,
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

/// One route to one peer.
#[derive(Debug, Clone, PartialEq)]
pub struct AdvertisedRoute {
    pub attributes: RouteAttributes,
    pub kind: AdvertiseKind,
    /// The object behind it (for an aggregate, the first of those it covers).
    pub origin: Origin,
    /// Every reason it is announced, sorted.
    pub sources: Vec<Source>,
}

/// One peer's table.
pub type PeerRib = BTreeMap<IpNet, AdvertisedRoute>;

/// The result of one evaluation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evaluation {
    /// Per peer address.
    pub peers: BTreeMap<IpAddr, PeerRib>,
    /// Advertisements whose value lost to another's for some prefix and peer: name → message
    /// (for the `Conflict` condition).
    pub conflicts: BTreeMap<String, String>,
    /// The annotation path's result (its skipped objects and refusals are reported as before).
    pub desired: Desired,
}

/// What else the evaluation reads beside [`announce::Objects`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PolicyInputs<'a> {
    pub namespaces: &'a [std::sync::Arc<Namespace>],
    pub advertisements: &'a [ValidatedAdvertisement],
    pub peers: &'a [PeerView],
}

/// The kind of prefix an origin stands for (a Service's address kind is not in its origin, so
/// Service addresses count as LoadBalancer IPs here).
pub fn kind_of(origin: &Origin) -> AdvertiseKind {
    match origin {
        Origin::Subnet(_) => AdvertiseKind::SubnetCidrs,
        Origin::Pod(_) => AdvertiseKind::PodIps,
        Origin::Service(_) => AdvertiseKind::LoadBalancerIps,
        Origin::Eip(_) | Origin::OvnEip(_) => AdvertiseKind::Eips,
    }
}

/// Every peer's table.
pub fn evaluate(
    objects: &announce::Objects<'_>,
    scope: &announce::Scope<'_>,
    inputs: &PolicyInputs<'_>,
) -> Evaluation {
    let desired = announce::desired(objects, scope);
    let peers = inputs
        .peers
        .iter()
        .map(|peer| {
            let rib = desired
                .prefixes
                .iter()
                .filter(|(p, _)| peer.families.contains(&Family::of(p)))
                .map(|(p, origin)| {
                    let route = AdvertisedRoute {
                        attributes: peer.defaults.clone(),
                        kind: kind_of(origin),
                        origin: origin.clone(),
                        sources: vec![Source::Annotation],
                    };
                    (*p, route)
                })
                .collect();
            (peer.address, rib)
        })
        .collect();
    Evaluation {
        peers,
        conflicts: BTreeMap::new(),
        desired,
    }
}
