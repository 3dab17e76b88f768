//! Packing routes into as few UPDATEs as fit in 4096 bytes (RFC 4271 §4), counting every byte:
//! the 19-octet header, the two 2-octet length fields, the path attributes and each NLRI entry
//! (one length octet plus the significant octets of the prefix, RFC 4271 §4.3).
//!
//! IPv4 routes with an IPv4 next hop use the UPDATE's own NLRI fields; everything else uses
//! MP_REACH_NLRI / MP_UNREACH_NLRI (RFC 4760 §3, §4), whose attribute header grows from 3 to 4
//! octets once its value passes 255 octets (Extended Length, RFC 4271 §4.3).

use std::net::{IpAddr, Ipv6Addr};
use std::ops::Range;

use ipnet::IpNet;

use crate::bgp::wire::{
    EncodeContext, EncodeError, Family, HEADER_LEN, MAX_MESSAGE_LEN, Message, MpNextHop, MpReach, Nlri,
    PathAttributes, Update, encode,
};

/// Header plus the Withdrawn Routes Length and Total Path Attribute Length fields.
pub const EMPTY_UPDATE_LEN: usize = HEADER_LEN + 4;

/// Bytes of one prefix in an NLRI or withdrawn-routes field.
pub fn prefix_len(prefix: &IpNet) -> usize {
    1 + usize::from(prefix.prefix_len()).div_ceil(8)
}

/// An attribute of `value_len` octets: flags, type, a 1- or 2-octet length, the value.
fn attribute_len(value_len: usize) -> usize {
    if value_len > 255 {
        4 + value_len
    } else {
        3 + value_len
    }
}

/// The value of MP_REACH_NLRI before its NLRI: AFI, SAFI, next hop length, next hop (and the
/// link-local one, RFC 2545 §3), reserved.
fn mp_reach_fixed_len(next_hop: IpAddr, link_local: Option<Ipv6Addr>) -> usize {
    let next_hop_len = if next_hop.is_ipv4() { 4 } else { 16 } + if link_local.is_some() { 16 } else { 0 };
    2 + 1 + 1 + next_hop_len + 1
}

/// The routes to send with one attribute set: the group key of the Adj-RIB-Out.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WireRoute {
    pub family: Family,
    pub next_hop: IpAddr,
    /// Our link-local address after an IPv6 `next_hop`, for a peer on the same link (RFC 2545
    /// §3: a 32-byte next hop).
    pub link_local: Option<Ipv6Addr>,
    /// Everything but the next hop, which goes in NEXT_HOP or MP_REACH_NLRI by family.
    pub attributes: PathAttributes,
}

impl WireRoute {
    /// IPv4 NLRI with an IPv4 next hop travel in the UPDATE's own NLRI field.
    fn uses_own_nlri_field(&self) -> bool {
        self.family == Family::Ipv4Unicast && self.next_hop.is_ipv4()
    }

    fn path_attributes(&self) -> PathAttributes {
        let mut attributes = self.attributes.clone();
        attributes.next_hop = match self.next_hop {
            IpAddr::V4(v4) if self.uses_own_nlri_field() => Some(v4),
            _ => None,
        };
        attributes
    }

    /// The UPDATE announcing `prefixes` with these attributes.
    pub fn update(&self, prefixes: Vec<IpNet>) -> Update {
        let attributes = self.path_attributes();
        if self.uses_own_nlri_field() {
            let nlri = prefixes
                .into_iter()
                .filter_map(|p| if let IpNet::V4(v4) = p { Some(v4) } else { None });
            return Update {
                attributes,
                nlri: nlri.collect(),
                ..Update::default()
            };
        }
        let nlri = to_nlri(self.family, prefixes);
        let next_hop = MpNextHop {
            global: self.next_hop,
            link_local: self.link_local,
        };
        Update {
            attributes,
            mp_reach: Some(MpReach { next_hop, nlri }),
            ..Update::default()
        }
    }
}

fn to_nlri(family: Family, prefixes: Vec<IpNet>) -> Nlri {
    match family {
        Family::Ipv4Unicast => Nlri::Ipv4(
            prefixes
                .into_iter()
                .filter_map(|p| if let IpNet::V4(v) = p { Some(v) } else { None })
                .collect(),
        ),
        Family::Ipv6Unicast => Nlri::Ipv6(
            prefixes
                .into_iter()
                .filter_map(|p| if let IpNet::V6(v) = p { Some(v) } else { None })
                .collect(),
        ),
    }
}

/// Splits `prefixes` (sorted, announced with `route`'s attributes) into runs that each fill one
/// UPDATE of at most 4096 bytes. Fails when the attributes alone, or with a single prefix, do
/// not fit (or cannot be encoded at all): then no prefix of the group can be sent.
pub fn split_announce(
    route: &WireRoute,
    prefixes: &[IpNet],
    context: EncodeContext,
) -> Result<Vec<Range<usize>>, EncodeError> {
    if prefixes.is_empty() {
        return Ok(Vec::new());
    }
    // The attributes other than MP_REACH_NLRI, measured by encoding them once: exact by
    // construction, whatever AS_PATH/AS4_PATH form the peer needs.
    let probe = Update {
        attributes: route.path_attributes(),
        ..Update::default()
    };
    let fixed = encode(&Message::Update(Box::new(probe)), context)?.len();
    let own_field = route.uses_own_nlri_field();
    let mp_fixed = mp_reach_fixed_len(route.next_hop, route.link_local);
    let size = |nlri_bytes: usize| {
        if own_field {
            fixed + nlri_bytes
        } else {
            fixed + attribute_len(mp_fixed + nlri_bytes)
        }
    };
    if size(prefix_len(&prefixes[0])) > MAX_MESSAGE_LEN {
        return Err(EncodeError::TooLong {
            message_type: 2,
            length: size(prefix_len(&prefixes[0])),
        });
    }
    Ok(runs(prefixes, size))
}

/// Splits `prefixes` (sorted, one family) into runs that each fill one withdrawing UPDATE.
pub fn split_withdraw(family: Family, prefixes: &[IpNet]) -> Vec<Range<usize>> {
    runs(prefixes, |nlri_bytes| match family {
        Family::Ipv4Unicast => EMPTY_UPDATE_LEN + nlri_bytes,
        // MP_UNREACH_NLRI value: AFI, SAFI, then the prefixes.
        Family::Ipv6Unicast => EMPTY_UPDATE_LEN + attribute_len(3 + nlri_bytes),
    })
}

/// Greedy runs: each as long as `size` of its NLRI bytes stays within 4096.
fn runs(prefixes: &[IpNet], size: impl Fn(usize) -> usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut nlri_bytes = 0;
    for (index, prefix) in prefixes.iter().enumerate() {
        let len = prefix_len(prefix);
        if index > start && size(nlri_bytes + len) > MAX_MESSAGE_LEN {
            out.push(start..index);
            start = index;
            nlri_bytes = 0;
        }
        nlri_bytes += len;
    }
    if start < prefixes.len() {
        out.push(start..prefixes.len());
    }
    out
}

/// The UPDATE withdrawing `prefixes` of one family.
pub fn withdraw_update(family: Family, prefixes: Vec<IpNet>) -> Update {
    match to_nlri(family, prefixes) {
        Nlri::Ipv4(withdrawn) => Update {
            withdrawn,
            ..Update::default()
        },
        nlri @ Nlri::Ipv6(_) => Update {
            mp_unreach: Some(nlri),
            ..Update::default()
        },
    }
}
