//! Adj-RIB-Out for one peer (RFC 4271 §3.2): the prefixes we want the peer to have, what it was
//! sent, and the UPDATEs that take it from one to the other. Pure: the driver feeds changes and
//! session events in and writes the [`Update`]s that come out.
//!
//! - Desired routes change by [`AdjRibOut::announce`], [`AdjRibOut::withdraw`] or
//!   [`AdjRibOut::replace_all`]; [`AdjRibOut::take_updates`] returns only the differences from
//!   what the peer holds, prefixes grouped by identical attributes and packed into UPDATEs of at
//!   most 4096 bytes (see `pack.rs`).
//! - Nothing is sent until the session is up ([`AdjRibOut::session_up`]) and the caller's data
//!   is complete ([`AdjRibOut::set_ready`]). The first batch is the whole table followed by an
//!   End-of-RIB per family (RFC 4724 §2). This is the restarting-speaker procedure of RFC 4724
//!   §4.1 too: a peer keeping our stale routes replaces them at our End-of-RIB, so it must come
//!   after the full table and not before.
//! - [`AdjRibOut::route_refresh`] re-sends one family whole (RFC 2918 §4).
//! - A route whose next hop is "our address toward the peer" follows
//!   [`AdjRibOut::set_local_addresses`]: when the node's source address changes, affected routes
//!   are re-announced with the new one, and withdrawn if there is none.

mod pack;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ipnet::IpNet;

pub use pack::{EMPTY_UPDATE_LEN, WireRoute, prefix_len};

use crate::bgp::fsm::Negotiated;
use crate::bgp::wire::{
    AsPathSegment, AsPathSegmentKind, EncodeContext, EncodeError, Family, LargeCommunity, Origin,
    PathAttributes, Update,
};

/// LOCAL_PREF sent to internal peers when the route does not name one (RFC 4271 §5.1.5 leaves
/// the value to policy; 100 is what every common implementation uses).
pub const DEFAULT_LOCAL_PREF: u32 = 100;

/// Where a route's next hop comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum NextHop {
    /// Our address toward this peer, of the route's family ([`AdjRibOut::set_local_addresses`]).
    #[default]
    LocalAddress,
    Address(IpAddr),
}

/// What the caller says about one prefix. AS_PATH and ORIGIN are derived from the session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RouteAttributes {
    pub next_hop: NextHop,
    pub communities: Vec<u32>,
    pub large_communities: Vec<LargeCommunity>,
    /// Sent to internal peers only; [`DEFAULT_LOCAL_PREF`] when `None`.
    pub local_pref: Option<u32>,
    pub med: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RibOutError {
    /// netgauze refuses multicast (and IPv4 broadcast) prefixes as unicast NLRI, and so would a peer.
    #[error("prefix {prefix} is not a unicast prefix")]
    NotUnicast { prefix: IpNet },
    #[error("encoding UPDATEs: {0}")]
    Encode(#[from] EncodeError),
}

/// Shares equal values, so 100,000 routes with a handful of attribute sets hold a handful of
/// copies.
#[derive(Debug)]
struct Interner<T: Eq + Hash>(HashSet<Arc<T>>);

impl<T: Eq + Hash> Interner<T> {
    fn intern(&mut self, value: T) -> Arc<T> {
        if let Some(existing) = self.0.get(&value) {
            return existing.clone();
        }
        let shared = Arc::new(value);
        self.0.insert(shared.clone());
        shared
    }

    /// Drops values nobody else holds any more.
    fn collect(&mut self) {
        self.0.retain(|value| Arc::strong_count(value) > 1);
    }
}

impl<T: Eq + Hash> Default for Interner<T> {
    fn default() -> Self {
        Interner(HashSet::new())
    }
}

/// What the Adj-RIB-Out needs to know about the Established session.
#[derive(Debug, Clone)]
struct SessionView {
    families: Vec<Family>,
    encode: EncodeContext,
    external: bool,
    /// IPv4 routes may carry an IPv6 next hop (RFC 8950).
    ipv4_over_ipv6_next_hop: bool,
    /// The whole table and the End-of-RIBs went out.
    initial_sent: bool,
}

#[derive(Debug)]
pub struct AdjRibOut {
    local_as: u32,
    local_v4: Option<Ipv4Addr>,
    local_v6: Option<Ipv6Addr>,
    desired: HashMap<IpNet, Arc<RouteAttributes>>,
    sent: HashMap<IpNet, Arc<WireRoute>>,
    /// Prefixes whose desired route may differ from what was sent.
    dirty: HashSet<IpNet>,
    route_attributes: Interner<RouteAttributes>,
    wire_routes: Interner<WireRoute>,
    session: Option<SessionView>,
    ready: bool,
}

impl AdjRibOut {
    pub fn new(local_as: u32) -> Self {
        AdjRibOut {
            local_as,
            local_v4: None,
            local_v6: None,
            desired: HashMap::new(),
            sent: HashMap::new(),
            dirty: HashSet::new(),
            route_attributes: Interner::default(),
            wire_routes: Interner::default(),
            session: None,
            ready: false,
        }
    }

    /// Prefixes the peer currently holds from us.
    pub fn sent_count(&self) -> usize {
        self.sent.len()
    }

    pub fn desired_count(&self) -> usize {
        self.desired.len()
    }

    pub fn announce(&mut self, prefix: IpNet, attributes: RouteAttributes) -> Result<(), RibOutError> {
        let prefix = prefix.trunc();
        check_unicast(&prefix)?;
        let attributes = self.route_attributes.intern(normalized(attributes));
        if self.desired.insert(prefix, attributes.clone()).as_ref() != Some(&attributes) {
            self.dirty.insert(prefix);
        }
        Ok(())
    }

    pub fn withdraw(&mut self, prefix: IpNet) {
        let prefix = prefix.trunc();
        if self.desired.remove(&prefix).is_some() {
            self.dirty.insert(prefix);
        }
    }

    /// Makes the desired set exactly `routes` (a periodic full reconcile); only differences
    /// become UPDATEs.
    pub fn replace_all(
        &mut self,
        routes: impl IntoIterator<Item = (IpNet, RouteAttributes)>,
    ) -> Result<(), RibOutError> {
        let mut keep = HashSet::new();
        for (prefix, attributes) in routes {
            self.announce(prefix, attributes)?;
            keep.insert(prefix.trunc());
        }
        let gone: Vec<IpNet> = self
            .desired
            .keys()
            .filter(|p| !keep.contains(*p))
            .copied()
            .collect();
        for prefix in gone {
            self.withdraw(prefix);
        }
        Ok(())
    }

    /// Our source addresses toward the peer. Routes using [`NextHop::LocalAddress`] of a family
    /// whose address changed are re-announced (or withdrawn, with no address).
    pub fn set_local_addresses(&mut self, v4: Option<Ipv4Addr>, v6: Option<Ipv6Addr>) {
        let v4_changed = v4 != self.local_v4;
        let v6_changed = v6 != self.local_v6;
        self.local_v4 = v4;
        self.local_v6 = v6;
        if !v4_changed && !v6_changed {
            return;
        }
        // An IPv4 route may take the IPv6 address under RFC 8950, so a v6 change touches it too.
        let affected = self.desired.iter().filter(|(prefix, attributes)| {
            attributes.next_hop == NextHop::LocalAddress
                && (matches!(prefix, IpNet::V4(_)) && (v4_changed || v6_changed)
                    || matches!(prefix, IpNet::V6(_)) && v6_changed)
        });
        let affected: Vec<IpNet> = affected.map(|(prefix, _)| *prefix).collect();
        self.dirty.extend(affected);
    }

    /// The session is Established: the peer holds nothing from us yet.
    pub fn session_up(&mut self, negotiated: &Negotiated) {
        self.sent.clear();
        self.dirty.clear();
        self.session = Some(SessionView {
            families: negotiated.families.clone(),
            encode: negotiated.encode_context(),
            external: negotiated.external,
            ipv4_over_ipv6_next_hop: !negotiated.extended_next_hop.is_empty(),
            initial_sent: false,
        });
        self.wire_routes.collect();
    }

    pub fn session_down(&mut self) {
        self.session = None;
        self.sent.clear();
        self.dirty.clear();
        self.wire_routes.collect();
    }

    /// The caller's data is complete (caches synced, or the graceful restart deferral time ran
    /// out): the initial table and End-of-RIB may go.
    pub fn set_ready(&mut self) {
        self.ready = true;
    }

    /// The UPDATEs to send now: nothing before the session is up and the data ready; then the
    /// whole table and an End-of-RIB per family; afterwards only differences.
    pub fn take_updates(&mut self) -> Result<Vec<Update>, RibOutError> {
        let Some(session) = self.session.clone() else {
            return Ok(Vec::new());
        };
        if !self.ready {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        if !session.initial_sent {
            self.dirty.clear();
            let all: Vec<IpNet> = self.desired.keys().copied().collect();
            self.send_differences(&session, all, &mut out)?;
            for family in &session.families {
                out.push(Update::end_of_rib(*family));
            }
            if let Some(view) = self.session.as_mut() {
                view.initial_sent = true;
            }
        } else if !self.dirty.is_empty() {
            let dirty: Vec<IpNet> = self.dirty.drain().collect();
            self.send_differences(&session, dirty, &mut out)?;
        }
        self.route_attributes.collect();
        Ok(out)
    }

    /// Everything the peer holds of `family`, again (RFC 2918 §4). Empty before the initial
    /// table went out: that table answers the request.
    pub fn route_refresh(&mut self, family: Family) -> Result<Vec<Update>, RibOutError> {
        let Some(session) = &self.session else {
            return Ok(Vec::new());
        };
        if !session.initial_sent || !session.families.contains(&family) {
            return Ok(Vec::new());
        }
        let mut groups: BTreeMap<Arc<WireRoute>, Vec<IpNet>> = BTreeMap::new();
        for (prefix, route) in &self.sent {
            if Family::of(prefix) == family {
                groups.entry(route.clone()).or_default().push(*prefix);
            }
        }
        let mut out = Vec::new();
        for (route, mut prefixes) in groups {
            prefixes.sort_unstable();
            pack::pack_announce(&route, &prefixes, session.encode, &mut out)?;
        }
        Ok(out)
    }

    /// The route the peer should have for `prefix`, or `None` to withdraw it.
    fn resolve(&mut self, session: &SessionView, prefix: &IpNet) -> Option<Arc<WireRoute>> {
        let attributes = self.desired.get(prefix)?.clone();
        let family = Family::of(prefix);
        let next_hop = match (attributes.next_hop, family) {
            (NextHop::Address(IpAddr::V4(a)), Family::Ipv4Unicast) => IpAddr::V4(a),
            (NextHop::Address(IpAddr::V6(a)), Family::Ipv4Unicast) if session.ipv4_over_ipv6_next_hop => {
                IpAddr::V6(a)
            }
            (NextHop::Address(IpAddr::V6(a)), Family::Ipv6Unicast) => IpAddr::V6(a),
            (NextHop::LocalAddress, Family::Ipv4Unicast) => match (self.local_v4, self.local_v6) {
                (Some(a), _) => IpAddr::V4(a),
                (None, Some(a)) if session.ipv4_over_ipv6_next_hop => IpAddr::V6(a),
                _ => return None,
            },
            (NextHop::LocalAddress, Family::Ipv6Unicast) => IpAddr::V6(self.local_v6?),
            // BIRD refuses IPv4-mapped IPv6 next hops (bgp.md §2.3), so none is made up.
            _ => return None,
        };
        // RFC 4271 §5.1.2: an originated route carries our AS alone to an external peer and
        // an empty AS_PATH to an internal one; LOCAL_PREF only goes to internal peers (§5.1.5).
        let as_path = if session.external {
            vec![AsPathSegment {
                kind: AsPathSegmentKind::Sequence,
                asns: vec![self.local_as],
            }]
        } else {
            Vec::new()
        };
        let path = PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(as_path),
            next_hop: None,
            med: attributes.med,
            local_pref: (!session.external).then(|| attributes.local_pref.unwrap_or(DEFAULT_LOCAL_PREF)),
            communities: attributes.communities.clone(),
            large_communities: attributes.large_communities.clone(),
        };
        Some(self.wire_routes.intern(WireRoute {
            family,
            next_hop,
            attributes: path,
        }))
    }

    fn send_differences(
        &mut self,
        session: &SessionView,
        prefixes: Vec<IpNet>,
        out: &mut Vec<Update>,
    ) -> Result<(), RibOutError> {
        let mut announce: BTreeMap<Arc<WireRoute>, Vec<IpNet>> = BTreeMap::new();
        let mut withdraw: BTreeMap<Family, Vec<IpNet>> = BTreeMap::new();
        for prefix in prefixes {
            let family = Family::of(&prefix);
            if !session.families.contains(&family) {
                continue;
            }
            let want = self.resolve(session, &prefix);
            match (want, self.sent.get(&prefix)) {
                (Some(want), Some(have)) if &want == have => {}
                (Some(want), _) => {
                    self.sent.insert(prefix, want.clone());
                    announce.entry(want).or_default().push(prefix);
                }
                (None, Some(_)) => {
                    self.sent.remove(&prefix);
                    withdraw.entry(family).or_default().push(prefix);
                }
                (None, None) => {}
            }
        }
        for (family, mut prefixes) in withdraw {
            prefixes.sort_unstable();
            pack::pack_withdraw(family, &prefixes, out);
        }
        for (route, mut prefixes) in announce {
            prefixes.sort_unstable();
            pack::pack_announce(&route, &prefixes, session.encode, out)?;
        }
        Ok(())
    }
}

/// Whether [`AdjRibOut::announce`] would take `prefix`, for callers that want the answer before
/// handing it over.
pub fn check_unicast(prefix: &IpNet) -> Result<(), RibOutError> {
    let prefix = prefix.trunc();
    let unicast = match prefix {
        // The same test netgauze applies when encoding (its `Ipv4Unicast::from_net`).
        IpNet::V4(p) => {
            let bad = |a: Ipv4Addr| a.is_broadcast() || a.is_multicast();
            !bad(p.addr()) && !p.hosts().next_back().is_some_and(bad)
        }
        IpNet::V6(p) => !p.addr().is_multicast(),
    };
    if unicast {
        Ok(())
    } else {
        Err(RibOutError::NotUnicast { prefix })
    }
}

/// Communities as a sorted set, so the same set given in another order groups together.
fn normalized(mut attributes: RouteAttributes) -> RouteAttributes {
    attributes.communities.sort_unstable();
    attributes.communities.dedup();
    attributes.large_communities.sort_unstable();
    attributes.large_communities.dedup();
    attributes
}
