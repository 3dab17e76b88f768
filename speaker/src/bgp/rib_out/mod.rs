//! Adj-RIB-Out for one peer (RFC 4271 §3.2) as desired-versus-sent state: the routes we want
//! the peer to have, the routes it was sent, and the UPDATEs that take it from one to the
//! other. Pure: the driver feeds changes and session events in and writes the encoded bytes
//! that come out.
//!
//! - Desired routes change by [`AdjRibOut::announce`], [`AdjRibOut::withdraw`] or
//!   [`AdjRibOut::replace_all`]; a change only marks the prefix. [`AdjRibOut::take_output`]
//!   computes the difference from what the peer holds when the socket can take more, within a
//!   byte budget, so a change superseded before it went out never reaches the wire: a slow peer
//!   gets the latest state, not every intermediate one. Prefixes are grouped by identical
//!   attributes and packed into UPDATEs of at most 4096 bytes (see `pack.rs`).
//! - Sent is only what was encoded: an UPDATE that cannot be encoded (attributes too large for
//!   one message) leaves its prefixes out of the sent state, reported by
//!   [`AdjRibOut::take_failures`]; a version the peer already holds is withdrawn rather than
//!   left stale. The prefix is tried again when its route changes or a new session starts.
//! - Nothing is sent until the session is up ([`AdjRibOut::session_up`]) and the caller's data
//!   is complete ([`AdjRibOut::set_ready`]). The first output is the whole table followed by an
//!   End-of-RIB per family (RFC 4724 §2). This is the restarting-speaker procedure of RFC 4724
//!   §4.1 too: a peer keeping our stale routes replaces them at our End-of-RIB, so it must come
//!   after the full table and not before.
//! - [`AdjRibOut::route_refresh`] re-sends one family whole (RFC 2918 §4).
//! - A route whose next hop is "our address toward the peer" follows
//!   [`AdjRibOut::set_local_addresses`]: when the node's source address changes, affected routes
//!   are re-announced with the new one, and withdrawn if there is none.

mod output;
mod pack;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ipnet::IpNet;

pub use output::{Output, Unsendable};
pub use pack::{EMPTY_UPDATE_LEN, WireRoute, prefix_len};

use crate::bgp::fsm::Negotiated;
use crate::bgp::wire::{
    AsPathSegment, AsPathSegmentKind, EncodeContext, EncodeError, Family, LargeCommunity, Origin,
    PathAttributes,
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
    /// Extra copies of our AS prepended to the AS_PATH sent to an external peer (so the route
    /// looks longer and is less preferred, RFC 4271 §9.1.2.2 a); nothing to an internal peer,
    /// whose AS_PATH of an originated route is empty and must stay free of our own AS (a peer
    /// in our AS drops a route that carries it, §9.1.2).
    pub as_path_prepend: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RibOutError {
    /// netgauze refuses multicast (and IPv4 broadcast) prefixes as unicast NLRI, and so would a peer.
    #[error("prefix {prefix} is not a unicast prefix")]
    NotUnicast { prefix: IpNet },
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
    /// The initial table was taken from the desired routes (at the first output after the
    /// session came up and the data was ready, so it holds everything announced until then).
    initial_started: bool,
    /// The whole table and the End-of-RIBs went out.
    initial_sent: bool,
}

#[derive(Debug)]
pub struct AdjRibOut {
    local_as: u32,
    local_v4: Option<Ipv4Addr>,
    local_v6: Option<Ipv6Addr>,
    /// Our link-local address on a link shared with the peer, sent after a global IPv6 next hop.
    local_link_local: Option<Ipv6Addr>,
    desired: HashMap<IpNet, Arc<RouteAttributes>>,
    sent: HashMap<IpNet, Arc<WireRoute>>,
    /// Prefixes whose desired route may differ from what was sent.
    dirty: HashSet<IpNet>,
    /// The part of the initial table not yet sent; End-of-RIB goes when it is empty.
    initial: Vec<IpNet>,
    /// Prefixes to send again even though the peer has them as desired (route refresh).
    refresh: HashSet<IpNet>,
    /// Prefixes whose route could not be encoded, and why; treated as withdrawn until their
    /// route changes or a new session starts.
    unsendable: HashMap<IpNet, EncodeError>,
    /// Encoding failures not yet collected by [`AdjRibOut::take_failures`].
    failures: Vec<Unsendable>,
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
            local_link_local: None,
            desired: HashMap::new(),
            sent: HashMap::new(),
            dirty: HashSet::new(),
            initial: Vec::new(),
            refresh: HashSet::new(),
            unsendable: HashMap::new(),
            failures: Vec::new(),
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

    /// Prefixes marked for the next output (changed, or not yet sent on this session); some
    /// may turn out to need nothing.
    pub fn pending_count(&self) -> usize {
        match &self.session {
            Some(s) if !s.initial_started => self.desired.len(),
            _ => self.initial.len() + self.dirty.len(),
        }
    }

    /// Prefixes whose route could not be encoded.
    pub fn unsendable_count(&self) -> usize {
        self.unsendable.len()
    }

    /// Whether the whole table and the End-of-RIBs went out on the current session.
    pub fn initial_table_sent(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.initial_sent)
    }

    /// Marks a prefix for the next output; a changed route gets another chance to encode.
    fn touch(&mut self, prefix: IpNet) {
        self.dirty.insert(prefix);
        self.unsendable.remove(&prefix);
    }

    pub fn announce(&mut self, prefix: IpNet, attributes: RouteAttributes) -> Result<(), RibOutError> {
        let prefix = prefix.trunc();
        check_unicast(&prefix)?;
        let attributes = self.route_attributes.intern(normalized(attributes));
        if self.desired.insert(prefix, attributes.clone()).as_ref() != Some(&attributes) {
            self.touch(prefix);
        }
        Ok(())
    }

    pub fn withdraw(&mut self, prefix: IpNet) {
        let prefix = prefix.trunc();
        if self.desired.remove(&prefix).is_some() {
            self.touch(prefix);
        }
    }

    /// Makes the desired set exactly `routes` (a periodic full reconcile); only differences
    /// become UPDATEs. A prefix that cannot be announced is left out alone (the rest of the set
    /// still applies, so one bad prefix cannot freeze the table) and named in the error.
    pub fn replace_all(
        &mut self,
        routes: impl IntoIterator<Item = (IpNet, RouteAttributes)>,
    ) -> Result<(), RibOutError> {
        let mut keep = HashSet::new();
        let mut refused = None;
        for (prefix, attributes) in routes {
            match self.announce(prefix, attributes) {
                Ok(()) => {
                    keep.insert(prefix.trunc());
                }
                Err(e) => refused = refused.or(Some(e)),
            }
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
        refused.map_or(Ok(()), Err)
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
        for prefix in affected {
            self.touch(prefix);
        }
    }

    /// Our link-local address, for a peer on the same link (BGP unnumbered): routes using
    /// [`NextHop::LocalAddress`] with a global IPv6 next hop carry it too, in a 32-byte next hop
    /// (RFC 2545 §3), so the peer can reach us on the link whatever it does with the global one.
    /// Without a global address the link-local one is the next hop itself.
    pub fn set_link_local(&mut self, link_local: Option<Ipv6Addr>) {
        if link_local == self.local_link_local {
            return;
        }
        self.local_link_local = link_local;
        // Every route that may take an IPv6 next hop from us.
        let affected: Vec<IpNet> = self
            .desired
            .iter()
            .filter(|(_, attributes)| attributes.next_hop == NextHop::LocalAddress)
            .map(|(prefix, _)| *prefix)
            .collect();
        for prefix in affected {
            self.touch(prefix);
        }
    }

    /// The session is Established: the peer holds nothing from us yet, and the whole table is
    /// due.
    pub fn session_up(&mut self, negotiated: &Negotiated) {
        self.reset_session_state();
        self.session = Some(SessionView {
            families: negotiated.families.clone(),
            encode: negotiated.encode_context(),
            external: negotiated.external,
            ipv4_over_ipv6_next_hop: !negotiated.extended_next_hop.is_empty(),
            initial_started: false,
            initial_sent: false,
        });
    }

    pub fn session_down(&mut self) {
        self.session = None;
        self.reset_session_state();
    }

    fn reset_session_state(&mut self) {
        self.sent.clear();
        self.dirty.clear();
        self.initial.clear();
        self.refresh.clear();
        // The next session may negotiate another encoding (4-octet AS): try everything again.
        self.unsendable.clear();
        self.wire_routes.collect();
    }

    /// The caller's data is complete (caches synced, or the graceful restart deferral time ran
    /// out): the initial table and End-of-RIB may go.
    pub fn set_ready(&mut self) {
        self.ready = true;
    }

    /// Everything the peer holds of `family` goes out again with the next outputs (RFC 2918
    /// §4); returns how many prefixes. Nothing before the initial table went out: that table
    /// answers the request.
    pub fn route_refresh(&mut self, family: Family) -> usize {
        let Some(session) = &self.session else {
            return 0;
        };
        if !session.initial_sent || !session.families.contains(&family) {
            return 0;
        }
        let prefixes: Vec<IpNet> = self
            .sent
            .keys()
            .filter(|p| Family::of(p) == family)
            .copied()
            .collect();
        self.refresh.extend(prefixes.iter().copied());
        self.dirty.extend(prefixes.iter().copied());
        prefixes.len()
    }

    /// Encoding failures since the last call, for the caller's logs.
    pub fn take_failures(&mut self) -> Vec<Unsendable> {
        std::mem::take(&mut self.failures)
    }

    /// The route the peer should have for `prefix`, or `None` to withdraw it.
    fn resolve(&mut self, session: &SessionView, prefix: &IpNet) -> Option<Arc<WireRoute>> {
        if self.unsendable.contains_key(prefix) {
            return None;
        }
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
        let link_local = match next_hop {
            IpAddr::V6(global)
                if attributes.next_hop == NextHop::LocalAddress && !global.is_unicast_link_local() =>
            {
                self.local_link_local
            }
            _ => None,
        };
        // RFC 4271 §5.1.2: an originated route carries our AS alone to an external peer and
        // an empty AS_PATH to an internal one; LOCAL_PREF only goes to internal peers (§5.1.5).
        let as_path = if session.external {
            vec![AsPathSegment {
                kind: AsPathSegmentKind::Sequence,
                asns: vec![self.local_as; 1 + usize::from(attributes.as_path_prepend)],
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
            link_local,
            attributes: path,
        }))
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
