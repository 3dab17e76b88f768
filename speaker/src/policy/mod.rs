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
pub mod select;
pub mod validate;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
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
    /// Advertisements whose aggregation was refused for some member: name → the error, naming
    /// `spec.aggregationLengthV4` (`V6`) and the smallest such member ([`aggregate`]). The member
    /// is announced unaggregated; the rest of the advertisement applies. For the `Accepted`
    /// condition's message (still True: the spec is valid, the cluster's allocation is what
    /// the length does not fit) and a Warning event.
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

/// Every peer's table: see the module's documentation for the rules.
pub fn evaluate(
    objects: &announce::Objects<'_>,
    scope: &announce::Scope<'_>,
    inputs: &PolicyInputs<'_>,
) -> Evaluation {
    let (desired, subnets, records) = announce::desired_with_views(objects, scope);
    let candidates = candidates::collect(objects, scope, &subnets, &records, inputs.namespaces);
    let ads = inputs.advertisements;
    let index: Vec<select::AdIndex> = ads
        .iter()
        .map(|ad| select::AdIndex::new(ad, objects, inputs.namespaces, inputs.peers))
        .collect();
    // Advertisements are referred to by rank in name order, so every list of them is sorted by
    // name whatever order they came in.
    let mut by_name: Vec<usize> = (0..ads.len()).collect();
    by_name.sort_by(|a, b| ads[*a].name.cmp(&ads[*b].name));
    let mut rank = vec![0u32; ads.len()];
    for (r, a) in by_name.iter().enumerate() {
        rank[*a] = u32::try_from(r).unwrap_or(u32::MAX);
    }

    let mut entries: HashMap<IpNet, Entry> = HashMap::new();
    let mut refused: BTreeMap<String, (IpNet, CrdError)> = BTreeMap::new();
    for c in &candidates.items {
        if desired.prefixes.contains_key(&c.prefix) {
            entries.entry(c.prefix).or_default().note(c);
        }
        for (a, ad_index) in index.iter().enumerate() {
            if !ad_index.selects(c) {
                continue;
            }
            let at = match aggregate::target(&ads[a], c) {
                aggregate::Target::Same => c.prefix,
                aggregate::Target::Aggregate(p) => p,
                aggregate::Target::Refused(e) => {
                    let slot = refused
                        .entry(ads[a].name.clone())
                        .or_insert((c.prefix, e.clone()));
                    if c.prefix < slot.0 {
                        *slot = (c.prefix, e);
                    }
                    c.prefix
                }
            };
            let entry = entries.entry(at).or_default();
            entry.note(c);
            entry.ads.push(rank[a]);
        }
    }
    for (prefix, origin) in &desired.prefixes {
        let entry = entries.entry(*prefix).or_default();
        entry.annotation = true;
        entry.kind.get_or_insert(kind_of(origin));
        entry.origin = Some(Arc::new(origin.clone()));
    }
    let mut entries: Vec<(IpNet, Entry)> = entries.into_iter().collect();
    entries.sort_unstable_by_key(|(p, _)| *p);
    for (_, e) in &mut entries {
        e.ads.sort_unstable();
        e.ads.dedup();
    }

    let mut conflicts: BTreeMap<String, (IpNet, IpAddr, String)> = BTreeMap::new();
    let peers = inputs
        .peers
        .iter()
        .enumerate()
        .map(|(p, peer)| {
            let rib = peer_rib(p, peer, &entries, &index, &by_name, ads, &mut conflicts);
            (peer.address, rib)
        })
        .collect();
    Evaluation {
        peers,
        conflicts: conflicts.into_iter().map(|(k, (_, _, m))| (k, m)).collect(),
        refused: refused.into_iter().map(|(k, (_, e))| (k, e)).collect(),
        desired,
    }
}

/// What is known of one prefix before it is split by peer.
#[derive(Debug, Default)]
struct Entry {
    /// Ranks (name order) of the advertisements that select it (or aggregate into it).
    ads: Vec<u32>,
    /// Announced by the annotation path.
    annotation: bool,
    kind: Option<AdvertiseKind>,
    origin: Option<Arc<Origin>>,
}

impl Entry {
    /// Takes the smallest kind and origin, so the result does not depend on object order.
    fn note(&mut self, c: &candidates::Candidate) {
        if self.kind.is_none_or(|k| c.kind < k) {
            self.kind = Some(c.kind);
        }
        if self.origin.as_ref().is_none_or(|o| c.origin < *o) {
            self.origin = Some(c.origin.clone());
        }
    }
}

/// Marks the annotation path in a cache key (no advertisement has this rank).
const ANNOTATION: u32 = u32::MAX;

type Shared = (Arc<RouteAttributes>, Arc<[Source]>);

/// One peer's table; records each losing advertisement's smallest (prefix, peer) example.
fn peer_rib(
    p: usize,
    peer: &PeerView,
    entries: &[(IpNet, Entry)],
    index: &[select::AdIndex],
    by_name: &[usize],
    ads: &[ValidatedAdvertisement],
    conflicts: &mut BTreeMap<String, (IpNet, IpAddr, String)>,
) -> PeerRib {
    let mut cache: HashMap<Vec<u32>, Shared> = HashMap::new();
    let mut key: Vec<u32> = Vec::new();
    let mut routes = Vec::new();
    for (prefix, e) in entries {
        if !peer.families.contains(&Family::of(prefix)) {
            continue;
        }
        key.clear();
        key.extend(e.ads.iter().filter(|r| index[by_name[**r as usize]].peers[p]));
        if key.is_empty() && !e.annotation {
            continue;
        }
        if e.annotation {
            key.push(ANNOTATION);
        }
        let (attributes, sources) = if let Some(shared) = cache.get(key.as_slice()) {
            shared.clone()
        } else {
            let selecting: Vec<usize> = key
                .iter()
                .filter(|r| **r != ANNOTATION)
                .map(|r| by_name[*r as usize])
                .collect();
            let (attributes, losses) = merge::merge(&peer.defaults, &selecting, ads);
            for loss in losses {
                let message = format!(
                    "{} {} lost to BgpAdvertisement {}'s {} for {prefix} to peer {} ({})",
                    loss.field, loss.value, loss.winner, loss.winning, peer.address, loss.rule
                );
                let example = (*prefix, peer.address, message);
                let slot = conflicts
                    .entry(ads[loss.loser].name.clone())
                    .or_insert(example.clone());
                if (example.0, example.1) < (slot.0, slot.1) {
                    *slot = example;
                }
            }
            let mut sources = Vec::with_capacity(selecting.len() + 1);
            if e.annotation {
                sources.push(Source::Annotation);
            }
            sources.extend(
                selecting
                    .iter()
                    .map(|a| Source::Advertisement(ads[*a].name.clone())),
            );
            let shared: Shared = (Arc::new(attributes), sources.into());
            cache.insert(key.clone(), shared.clone());
            shared
        };
        let route = AdvertisedRoute {
            attributes,
            kind: e.kind.unwrap_or(AdvertiseKind::PodIps),
            origin: e
                .origin
                .clone()
                .unwrap_or_else(|| Arc::new(Origin::Subnet(String::new()))),
            sources,
        };
        routes.push((*prefix, route));
    }
    routes.into_iter().collect()
}
