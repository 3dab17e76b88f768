//! Our own model of the BGP messages this speaker sends and receives. It covers only what the
//! speaker uses (RFC 4271 plus MP-BGP, 4-octet AS, route refresh, graceful restart, communities,
//! large communities, extended next hop); the codec translates it to and from `netgauze-bgp-pkt`
//! so that crate never leaks past [`crate::bgp::wire`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// The BGP version this speaker implements (RFC 4271 §4.2).
pub const BGP_VERSION: u8 = 4;
/// AS_TRANS, sent in 2-octet AS fields when our AS does not fit (RFC 6793 §9).
pub const AS_TRANS: u16 = 23456;
/// Message header length: 16-octet marker, 2-octet length, 1-octet type (RFC 4271 §4.1).
pub const HEADER_LEN: usize = 19;
/// Largest message without the Extended Message capability, which we never advertise (RFC 4271 §4).
pub const MAX_MESSAGE_LEN: usize = 4096;

/// The address families this speaker can carry: IPv4 and IPv6 unicast (AFI 1/2, SAFI 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Ipv4Unicast,
    Ipv6Unicast,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::Ipv4Unicast, Family::Ipv6Unicast];

    /// Address Family Identifier (IANA).
    pub const fn afi(self) -> u16 {
        match self {
            Family::Ipv4Unicast => 1,
            Family::Ipv6Unicast => 2,
        }
    }

    /// Subsequent Address Family Identifier: unicast (RFC 4760 §6).
    pub const fn safi(self) -> u8 {
        1
    }

    pub const fn from_afi_safi(afi: u16, safi: u8) -> Option<Family> {
        match (afi, safi) {
            (1, 1) => Some(Family::Ipv4Unicast),
            (2, 1) => Some(Family::Ipv6Unicast),
            _ => None,
        }
    }

    pub const fn of(prefix: &IpNet) -> Family {
        match prefix {
            IpNet::V4(_) => Family::Ipv4Unicast,
            IpNet::V6(_) => Family::Ipv6Unicast,
        }
    }
}

/// Per-family graceful restart flags (RFC 4724 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GracefulRestartFamily {
    pub family: Family,
    /// F bit: forwarding state for this family was preserved across the restart.
    pub forwarding_preserved: bool,
}

/// The Graceful Restart capability (RFC 4724 §3, N bit from RFC 8538).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GracefulRestart {
    /// R bit: the sender has restarted; the receiver must not wait for its End-of-RIB before
    /// sending its own routes.
    pub restarting: bool,
    /// N bit (RFC 8538): the sender supports graceful restart for NOTIFICATION messages.
    pub notification: bool,
    /// Seconds the receiver should keep the sender's routes after the session drops (12 bits).
    pub restart_time: u16,
    pub families: Vec<GracefulRestartFamily>,
}

/// One Extended Next Hop Encoding tuple (RFC 8950 §3): NLRI of `family` may carry a next hop
/// of address family `next_hop_afi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtendedNextHop {
    pub family: Family,
    pub next_hop_afi: u16,
}

/// The capabilities of an OPEN that this speaker understands. Capabilities it does not
/// understand are dropped on decode, as RFC 5492 §4 requires ("MUST ignore").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Multiprotocol Extensions (RFC 4760 §8), one per family; families we do not carry are not kept.
    pub multiprotocol: Vec<Family>,
    /// 4-octet AS number (RFC 6793).
    pub four_octet_as: Option<u32>,
    /// Route Refresh (RFC 2918), including the pre-standard Cisco code 128.
    pub route_refresh: bool,
    pub graceful_restart: Option<GracefulRestart>,
    pub extended_next_hop: Vec<ExtendedNextHop>,
}

/// An OPEN message (RFC 4271 §4.2). The version is always [`BGP_VERSION`]: the decoder refuses
/// any other with NOTIFICATION 2/1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// The 2-octet "My Autonomous System" field: [`AS_TRANS`] when the real AS needs 4 octets.
    pub my_as: u16,
    pub hold_time: u16,
    pub bgp_id: Ipv4Addr,
    pub capabilities: Capabilities,
}

impl Open {
    /// The sender's AS: the 4-octet AS capability when present, else the 2-octet field (RFC 6793 §4.1).
    pub fn asn(&self) -> u32 {
        self.capabilities.four_octet_as.unwrap_or(u32::from(self.my_as))
    }
}

/// A NOTIFICATION (RFC 4271 §4.5). Kept as raw code, subcode and data: a peer may send codes and
/// subcodes newer than any table we carry, and its NOTIFICATION must still close the session
/// cleanly with the reason logged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Notification {
    pub code: u8,
    pub subcode: u8,
    pub data: Vec<u8>,
}

/// A ROUTE-REFRESH request (RFC 2918 §3). AFI/SAFI are raw: a request for a family we did not
/// negotiate must be ignored, not refused (RFC 2918 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteRefresh {
    pub afi: u16,
    pub safi: u8,
    /// 0 for a plain request; 1/2 are enhanced route refresh markers (RFC 7313 §3), which we do
    /// not negotiate and so ignore.
    pub subtype: u8,
}

impl RouteRefresh {
    pub const fn new(family: Family) -> Self {
        RouteRefresh {
            afi: family.afi(),
            safi: family.safi(),
            subtype: 0,
        }
    }

    pub const fn family(&self) -> Option<Family> {
        Family::from_afi_safi(self.afi, self.safi)
    }
}

/// ORIGIN attribute values (RFC 4271 §5.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Origin {
    #[default]
    Igp,
    Egp,
    Incomplete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AsPathSegmentKind {
    Set,
    Sequence,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AsPathSegment {
    pub kind: AsPathSegmentKind,
    pub asns: Vec<u32>,
}

/// A large community (RFC 8092): global administrator, two local data parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LargeCommunity {
    pub global_admin: u32,
    pub local_data1: u32,
    pub local_data2: u32,
}

/// The path attributes we send, and the ones we keep from what we receive. AS numbers are
/// always 4 octets here; the encoder writes AS_TRANS and AS4_PATH for a 2-octet peer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PathAttributes {
    pub origin: Option<Origin>,
    pub as_path: Option<Vec<AsPathSegment>>,
    /// The NEXT_HOP attribute: IPv4 NLRI in the UPDATE's own NLRI field only (RFC 4760 §3).
    pub next_hop: Option<Ipv4Addr>,
    pub med: Option<u32>,
    pub local_pref: Option<u32>,
    /// Standard communities (RFC 1997) as their 32-bit value.
    pub communities: Vec<u32>,
    pub large_communities: Vec<LargeCommunity>,
}

/// The next hop of MP_REACH_NLRI: an IPv6 global address with an optional link-local (RFC 2545
/// §3), or an IPv4 address for IPv4 NLRI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MpNextHop {
    pub global: IpAddr,
    pub link_local: Option<Ipv6Addr>,
}

/// NLRI of one family.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Nlri {
    Ipv4(Vec<Ipv4Net>),
    Ipv6(Vec<Ipv6Net>),
}

impl Nlri {
    pub fn family(&self) -> Family {
        match self {
            Nlri::Ipv4(_) => Family::Ipv4Unicast,
            Nlri::Ipv6(_) => Family::Ipv6Unicast,
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Nlri::Ipv4(p) => p.is_empty(),
            Nlri::Ipv6(p) => p.is_empty(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Nlri::Ipv4(p) => p.len(),
            Nlri::Ipv6(p) => p.len(),
        }
    }

    pub fn empty(family: Family) -> Nlri {
        match family {
            Family::Ipv4Unicast => Nlri::Ipv4(Vec::new()),
            Family::Ipv6Unicast => Nlri::Ipv6(Vec::new()),
        }
    }
}

/// MP_REACH_NLRI (RFC 4760 §3). IPv6 unicast, or IPv4 unicast with an IPv6 next hop (RFC 8950).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MpReach {
    pub next_hop: MpNextHop,
    pub nlri: Nlri,
}

/// An UPDATE (RFC 4271 §4.3). IPv4 routes travel in `withdrawn`/`nlri` with the NEXT_HOP
/// attribute; other families in `mp_reach`/`mp_unreach` (RFC 4760).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Update {
    pub withdrawn: Vec<Ipv4Net>,
    pub attributes: PathAttributes,
    pub nlri: Vec<Ipv4Net>,
    pub mp_reach: Option<MpReach>,
    pub mp_unreach: Option<Nlri>,
}

impl Update {
    /// The End-of-RIB marker for `family` (RFC 4724 §2): an empty UPDATE for IPv4 unicast, an
    /// UPDATE with only an empty MP_UNREACH_NLRI otherwise.
    pub fn end_of_rib(family: Family) -> Update {
        match family {
            Family::Ipv4Unicast => Update::default(),
            Family::Ipv6Unicast => Update {
                mp_unreach: Some(Nlri::empty(family)),
                ..Update::default()
            },
        }
    }

    /// Which family this UPDATE marks the end of, if it is an End-of-RIB marker.
    pub fn end_of_rib_family(&self) -> Option<Family> {
        let no_routes = self.withdrawn.is_empty() && self.nlri.is_empty() && self.mp_reach.is_none();
        if !no_routes || self.attributes != PathAttributes::default() {
            return None;
        }
        match &self.mp_unreach {
            None => Some(Family::Ipv4Unicast),
            Some(nlri) if nlri.is_empty() => Some(nlri.family()),
            Some(_) => None,
        }
    }
}

/// One BGP message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Open(Open),
    Update(Box<Update>),
    /// An UPDATE the decoder checked but did not parse, because the session was set to ignore
    /// received routes ([`crate::bgp::wire::UpdateMode::Check`]).
    UpdateChecked(UpdateSummary),
    Notification(Notification),
    Keepalive,
    RouteRefresh(RouteRefresh),
}

impl Message {
    /// The message type code (RFC 4271 §4.1, RFC 2918 §3).
    pub fn type_code(&self) -> u8 {
        match self {
            Message::Open(_) => 1,
            Message::Update(_) | Message::UpdateChecked(_) => 2,
            Message::Notification(_) => 3,
            Message::Keepalive => 4,
            Message::RouteRefresh(_) => 5,
        }
    }
}

/// What the cheap UPDATE check found, for an UPDATE that was not parsed in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UpdateSummary {
    /// Set when the UPDATE is an End-of-RIB marker.
    pub end_of_rib: Option<Family>,
    /// Whether it announced any route (NLRI or MP_REACH_NLRI with NLRI).
    pub announces: bool,
    /// Whether it withdrew any route.
    pub withdraws: bool,
}
