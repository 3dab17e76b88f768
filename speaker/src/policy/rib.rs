//! The per-peer tables, from the candidates and the annotation path: every prefix with the set
//! of advertisements that put it there (interned: 100,000 prefixes share a few dozen sets), then
//! per peer each set filtered by `peerSelector` and merged once, the result shared by every
//! route with that set.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use kube_ovn_api::bgp_advertisement::AdvertiseKind;

use super::aggregate::{self, Target};
use super::candidates::{Candidate, Candidates};
use super::select::AdIndex;
use super::{
    AdvertisedRoute, PeerRib, PeerView, PolicyInputs, Source, ValidatedAdvertisement, kind_of, merge,
};
use crate::announce::{Desired, Origin};
use crate::bgp::rib_out::RouteAttributes;
use crate::bgp::wire::Family;
use crate::crd::CrdError;

/// What [`build`] gives [`super::evaluate`].
pub struct Built {
    pub peers: BTreeMap<IpAddr, PeerRib>,
    pub conflicts: BTreeMap<String, String>,
    pub refused: BTreeMap<String, CrdError>,
}

/// Sets of advertisements (ranks in name order, sorted), each stored once.
#[derive(Default)]
struct Sets {
    ids: HashMap<Vec<u32>, u32>,
    sets: Vec<Vec<u32>>,
}

/// The id of the empty set.
const EMPTY: u32 = 0;

impl Sets {
    fn new() -> Self {
        let mut sets = Sets::default();
        sets.intern(&[]);
        sets
    }

    fn intern(&mut self, set: &[u32]) -> u32 {
        if let Some(id) = self.ids.get(set) {
            return *id;
        }
        let id = u32::try_from(self.sets.len()).unwrap_or(u32::MAX);
        self.sets.push(set.to_vec());
        self.ids.insert(set.to_vec(), id);
        id
    }

    /// The id of `sets[id] ∪ add` (`add` sorted).
    fn union(&mut self, id: u32, add: &[u32]) -> u32 {
        let have = &self.sets[id as usize];
        if add.iter().all(|a| have.binary_search(a).is_ok()) {
            return id;
        }
        let mut merged: Vec<u32> = have.iter().chain(add).copied().collect();
        merged.sort_unstable();
        merged.dedup();
        self.intern(&merged)
    }
}

/// What is known of one prefix before it is split by peer.
struct Slot {
    /// The advertisements that select it (or aggregate into it).
    set: u32,
    /// Announced by the annotation path.
    annotation: bool,
    kind: AdvertiseKind,
    origin: Arc<Origin>,
}

impl Slot {
    fn new(c: &Candidate) -> Self {
        Slot {
            set: EMPTY,
            annotation: false,
            kind: c.kind,
            origin: c.origin.clone(),
        }
    }

    /// Takes the smallest kind and origin, so the result does not depend on object order.
    fn note(&mut self, c: &Candidate) {
        self.kind = self.kind.min(c.kind);
        if c.origin < self.origin {
            self.origin = c.origin.clone();
        }
    }
}

/// The advertisements whose aggregation would leave an allocation for some member, each with
/// the error of its smallest such member; and per advertisement whether it is applied (not
/// refused).
fn refusals(
    candidates: &Candidates,
    ads: &[ValidatedAdvertisement],
    index: &[AdIndex],
) -> (BTreeMap<String, (IpNet, CrdError)>, Vec<bool>) {
    let mut refused: BTreeMap<String, (IpNet, CrdError)> = BTreeMap::new();
    let mut applied = vec![true; ads.len()];
    let aggregating: Vec<usize> = (0..ads.len())
        .filter(|a| ads[*a].aggregation_length_v4.is_some() || ads[*a].aggregation_length_v6.is_some())
        .collect();
    if aggregating.is_empty() {
        return (refused, applied);
    }
    for c in &candidates.items {
        for &a in &aggregating {
            if !index[a].selects(c) {
                continue;
            }
            if let Target::Refused(e) = aggregate::target(&ads[a], c) {
                applied[a] = false;
                let slot = refused
                    .entry(ads[a].name.clone())
                    .or_insert((c.prefix, e.clone()));
                if c.prefix < slot.0 {
                    *slot = (c.prefix, e);
                }
            }
        }
    }
    (refused, applied)
}

/// Builds every peer's table.
pub fn build(
    candidates: &Candidates,
    desired: &Desired,
    inputs: &PolicyInputs<'_>,
    index: &[AdIndex],
) -> Built {
    let ads = inputs.advertisements;
    // Advertisements are referred to by rank in name order, so every list of them is sorted by
    // name whatever order they came in.
    let mut by_name: Vec<usize> = (0..ads.len()).collect();
    by_name.sort_by(|a, b| ads[*a].name.cmp(&ads[*b].name));
    let mut rank = vec![0u32; ads.len()];
    for (r, a) in by_name.iter().enumerate() {
        rank[*a] = u32::try_from(r).unwrap_or(u32::MAX);
    }

    let (refused, applied) = refusals(candidates, ads, index);
    let mut sets = Sets::new();
    let mut slots: HashMap<IpNet, Slot> = HashMap::with_capacity(candidates.items.len());
    let mut same: Vec<u32> = Vec::new();
    for c in &candidates.items {
        same.clear();
        for (a, ad_index) in index.iter().enumerate() {
            if !applied[a] || !ad_index.selects(c) {
                continue;
            }
            let at = match aggregate::target(&ads[a], c) {
                // Refused cannot happen here: such an advertisement is not applied.
                Target::Same | Target::Refused(_) => {
                    same.push(rank[a]);
                    continue;
                }
                Target::Aggregate(p) => p,
            };
            let slot = slots.entry(at).or_insert_with(|| Slot::new(c));
            slot.note(c);
            slot.set = sets.union(slot.set, &[rank[a]]);
        }
        if same.is_empty() && !desired.prefixes.contains_key(&c.prefix) {
            continue;
        }
        same.sort_unstable();
        let slot = slots.entry(c.prefix).or_insert_with(|| Slot::new(c));
        slot.note(c);
        slot.set = sets.union(slot.set, &same);
    }
    for (prefix, origin) in &desired.prefixes {
        let slot = slots.entry(*prefix).or_insert_with(|| Slot {
            set: EMPTY,
            annotation: true,
            kind: kind_of(origin),
            origin: Arc::new(origin.clone()),
        });
        slot.annotation = true;
        // The annotation path's origin, as before advertisements existed.
        if *slot.origin != *origin {
            slot.origin = Arc::new(origin.clone());
        }
    }
    let mut slots: Vec<(IpNet, Slot)> = slots.into_iter().collect();
    slots.sort_unstable_by_key(|(p, _)| *p);

    let mut conflicts: BTreeMap<String, (IpNet, IpAddr, String)> = BTreeMap::new();
    let order = Order {
        by_name: &by_name,
        ads,
    };
    let peers = inputs
        .peers
        .iter()
        .enumerate()
        .map(|(p, peer)| {
            let rib = peer_rib(p, peer, &slots, &sets, index, &order, &mut conflicts);
            (peer.address, rib)
        })
        .collect();
    Built {
        peers,
        conflicts: conflicts.into_iter().map(|(k, (_, _, m))| (k, m)).collect(),
        refused: refused.into_iter().map(|(k, (_, e))| (k, e)).collect(),
    }
}

struct Order<'a> {
    by_name: &'a [usize],
    ads: &'a [ValidatedAdvertisement],
}

type Shared = (Arc<RouteAttributes>, Arc<[Source]>);

/// One peer's table; records each losing advertisement's smallest (prefix, peer) example.
fn peer_rib(
    p: usize,
    peer: &PeerView,
    slots: &[(IpNet, Slot)],
    sets: &Sets,
    index: &[AdIndex],
    order: &Order<'_>,
    conflicts: &mut BTreeMap<String, (IpNet, IpAddr, String)>,
) -> PeerRib {
    // Per set, and with or without the annotation: the shared attributes and sources, or
    // `None` when nothing sends the prefix to this peer.
    let mut cache: Vec<Option<Option<Shared>>> = vec![None; sets.sets.len() * 2];
    let mut routes = Vec::with_capacity(slots.len());
    for (prefix, slot) in slots {
        if !peer.families.contains(&Family::of(prefix)) {
            continue;
        }
        let at = slot.set as usize * 2 + usize::from(slot.annotation);
        let shared = if let Some(shared) = &cache[at] {
            shared.clone()
        } else {
            let shared = resolve(p, peer, *prefix, slot, sets, index, order, conflicts);
            cache[at] = Some(shared.clone());
            shared
        };
        let Some((attributes, sources)) = shared else {
            continue;
        };
        let route = AdvertisedRoute {
            attributes,
            kind: slot.kind,
            origin: slot.origin.clone(),
            sources,
        };
        routes.push((*prefix, route));
    }
    routes.into_iter().collect()
}

/// The attributes and sources of a slot's set to this peer (first met at `prefix`, the
/// smallest such prefix: slots are sorted), and its losers.
#[allow(clippy::too_many_arguments, reason = "one call site, the loop's state")]
fn resolve(
    p: usize,
    peer: &PeerView,
    prefix: IpNet,
    slot: &Slot,
    sets: &Sets,
    index: &[AdIndex],
    order: &Order<'_>,
    conflicts: &mut BTreeMap<String, (IpNet, IpAddr, String)>,
) -> Option<Shared> {
    let selecting: Vec<usize> = sets.sets[slot.set as usize]
        .iter()
        .map(|r| order.by_name[*r as usize])
        .filter(|a| index[*a].peers[p])
        .collect();
    if selecting.is_empty() && !slot.annotation {
        return None;
    }
    let ads = order.ads;
    let (attributes, losses) = merge::merge(&peer.defaults, &selecting, ads);
    for loss in losses {
        let message = format!(
            "{} {} lost to BgpAdvertisement {}'s {} for {prefix} to peer {} ({})",
            loss.field, loss.value, loss.winner, loss.winning, peer.address, loss.rule
        );
        let example = (prefix, peer.address, message);
        let slot = conflicts
            .entry(ads[loss.loser].name.clone())
            .or_insert(example.clone());
        if (example.0, example.1) < (slot.0, slot.1) {
            *slot = example;
        }
    }
    let mut sources = Vec::with_capacity(selecting.len() + 1);
    if slot.annotation {
        sources.push(Source::Annotation);
    }
    sources.extend(
        selecting
            .iter()
            .map(|a| Source::Advertisement(ads[*a].name.clone())),
    );
    Some((Arc::new(attributes), sources.into()))
}
