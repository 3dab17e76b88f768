//! Our messages → bytes, through `netgauze-bgp-pkt` for OPEN, UPDATE, KEEPALIVE and
//! ROUTE-REFRESH. NOTIFICATION is written here: it is three fields, and netgauze's enum cannot
//! carry subcodes newer than its tables.
//!
//! Two netgauze 0.13 writer quirks are handled here rather than trusted: a path attribute longer
//! than 255 octets must have its Extended Length flag set by the caller (netgauze writes a
//! 2-octet length without setting the flag otherwise), and the graceful restart time must be
//! masked to 12 bits (netgauze ORs it into the flags word, so a larger value would set R/N).

use std::net::IpAddr;

use netgauze_bgp_pkt::BgpMessage;
use netgauze_bgp_pkt::capabilities::{
    BgpCapability, ExtendedNextHopEncoding, ExtendedNextHopEncodingCapability, FourOctetAsCapability,
    GracefulRestartAddressFamily, GracefulRestartCapability, MultiProtocolExtensionsCapability,
};
use netgauze_bgp_pkt::community::{Community, LargeCommunity as NgLargeCommunity};
use netgauze_bgp_pkt::iana::RouteRefreshSubcode;
use netgauze_bgp_pkt::nlri::{Ipv4Unicast, Ipv4UnicastAddress, Ipv6Unicast, Ipv6UnicastAddress};
use netgauze_bgp_pkt::open::{BgpOpenMessage, BgpOpenMessageParameter};
use netgauze_bgp_pkt::path_attribute::{
    As2PathSegment, As4Path, As4PathSegment, AsPath, AsPathSegmentType, Communities, LargeCommunities,
    LocalPreference, MpReach as NgMpReach, MpUnreach as NgMpUnreach, MultiExitDiscriminator, NextHop,
    Origin as NgOrigin, PathAttribute, PathAttributeValue,
};
use netgauze_bgp_pkt::route_refresh::BgpRouteRefreshMessage;
use netgauze_bgp_pkt::update::BgpUpdateMessage;
use netgauze_iana::address_family::{AddressFamily, AddressType};
use netgauze_parse_utils::WritablePdu;

use super::error::EncodeError;
use super::types::{
    AS_TRANS, AsPathSegment, AsPathSegmentKind, Family, HEADER_LEN, MAX_MESSAGE_LEN, Message, MpReach, Nlri,
    Notification, Open, Origin, PathAttributes, Update,
};

/// What the session negotiated that changes how messages are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EncodeContext {
    /// Both sides sent the 4-octet AS capability (RFC 6793 §4).
    pub four_octet_as: bool,
}

pub(crate) fn address_type(family: Family) -> AddressType {
    match family {
        Family::Ipv4Unicast => AddressType::Ipv4Unicast,
        Family::Ipv6Unicast => AddressType::Ipv6Unicast,
    }
}

/// Encodes one message, appending it to `out`.
pub fn encode_into(message: &Message, context: EncodeContext, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let ng = match message {
        Message::Notification(notification) => {
            encode_notification(notification, out);
            return Ok(());
        }
        Message::UpdateChecked(_) => {
            return Err(EncodeError::InvalidAttribute {
                attribute: "UPDATE",
                reason: "a checked-only UPDATE has no content to send".into(),
            });
        }
        Message::Keepalive => BgpMessage::KeepAlive,
        Message::Open(open) => BgpMessage::Open(to_netgauze_open(open)),
        Message::Update(update) => BgpMessage::Update(to_netgauze_update(update, context)?),
        Message::RouteRefresh(refresh) => {
            let family = refresh.family().ok_or_else(|| EncodeError::InvalidAttribute {
                attribute: "ROUTE-REFRESH",
                reason: format!(
                    "AFI {} SAFI {} is not a family we carry",
                    refresh.afi, refresh.safi
                ),
            })?;
            BgpMessage::RouteRefresh(BgpRouteRefreshMessage::new(
                address_type(family),
                RouteRefreshSubcode::NormalRequest,
            ))
        }
    };
    let length = ng.len();
    if length > MAX_MESSAGE_LEN {
        return Err(EncodeError::TooLong {
            message_type: message.type_code(),
            length,
        });
    }
    out.reserve(length);
    ng.write(out)
        .map_err(|error| EncodeError::Writer(error.to_string()))
}

/// Encodes one message into a new buffer.
pub fn encode(message: &Message, context: EncodeContext) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode_into(message, context, &mut out)?;
    Ok(out)
}

fn encode_notification(notification: &Notification, out: &mut Vec<u8>) {
    // Data that does not fit is cut rather than refused: the NOTIFICATION is sent on the way
    // out of a session and must always go.
    let data = &notification.data[..notification.data.len().min(MAX_MESSAGE_LEN - HEADER_LEN - 2)];
    let length = HEADER_LEN + 2 + data.len();
    out.extend_from_slice(&[0xff; 16]);
    out.extend_from_slice(&u16::try_from(length).unwrap_or(u16::MAX).to_be_bytes());
    out.extend_from_slice(&[3, notification.code, notification.subcode]);
    out.extend_from_slice(data);
}

fn to_netgauze_open(open: &Open) -> BgpOpenMessage {
    let caps = &open.capabilities;
    let mut list: Vec<BgpCapability> = caps
        .multiprotocol
        .iter()
        .map(|family| {
            BgpCapability::MultiProtocolExtensions(MultiProtocolExtensionsCapability::new(address_type(
                *family,
            )))
        })
        .collect();
    if caps.route_refresh {
        list.push(BgpCapability::RouteRefresh);
    }
    if let Some(asn) = caps.four_octet_as {
        list.push(BgpCapability::FourOctetAs(FourOctetAsCapability::new(asn)));
    }
    if let Some(gr) = &caps.graceful_restart {
        let families: Vec<GracefulRestartAddressFamily> = gr
            .families
            .iter()
            .map(|f| GracefulRestartAddressFamily::new(f.forwarding_preserved, address_type(f.family)))
            .collect();
        list.push(BgpCapability::GracefulRestartCapability(
            GracefulRestartCapability::new(
                gr.restarting,
                gr.notification,
                gr.restart_time & 0x0fff,
                families,
            ),
        ));
    }
    if !caps.extended_next_hop.is_empty() {
        let encodings: Vec<ExtendedNextHopEncoding> = caps
            .extended_next_hop
            .iter()
            .filter_map(|e| {
                let afi = AddressFamily::try_from(e.next_hop_afi).ok()?;
                Some(ExtendedNextHopEncoding::new(address_type(e.family), afi))
            })
            .collect();
        list.push(BgpCapability::ExtendedNextHopEncoding(
            ExtendedNextHopEncodingCapability::new(encodings),
        ));
    }
    let params = if list.is_empty() {
        Vec::new()
    } else {
        vec![BgpOpenMessageParameter::new_capabilities(list)]
    };
    BgpOpenMessage::new(open.my_as, open.hold_time, open.bgp_id, params)
}

fn v4_nlri(prefixes: &[ipnet::Ipv4Net]) -> Result<Vec<Ipv4UnicastAddress>, EncodeError> {
    prefixes
        .iter()
        .map(|p| {
            Ipv4Unicast::from_net(p.trunc())
                .map(Ipv4UnicastAddress::new_no_path_id)
                .map_err(|_| EncodeError::InvalidPrefix {
                    prefix: p.to_string(),
                })
        })
        .collect()
}

fn v6_nlri(prefixes: &[ipnet::Ipv6Net]) -> Result<Vec<Ipv6UnicastAddress>, EncodeError> {
    prefixes
        .iter()
        .map(|p| {
            Ipv6Unicast::from_net(p.trunc())
                .map(|n| Ipv6UnicastAddress::new(None, n))
                .map_err(|_| EncodeError::InvalidPrefix {
                    prefix: p.to_string(),
                })
        })
        .collect()
}

/// Builds one attribute, setting the Extended Length flag exactly when the value needs it
/// (RFC 4271 §4.3): netgauze does not do it by itself.
fn attribute(
    optional: bool,
    transitive: bool,
    value: PathAttributeValue,
) -> Result<PathAttribute, EncodeError> {
    let invalid = |(_, error)| EncodeError::InvalidAttribute {
        attribute: "path attribute",
        reason: format!("{error:?}"),
    };
    let short = PathAttribute::from(optional, transitive, false, false, value).map_err(invalid)?;
    // len() = flags + type + 1-octet length + value.
    if short.len() - 3 <= 255 {
        return Ok(short);
    }
    PathAttribute::from(optional, transitive, false, true, short.value().clone()).map_err(invalid)
}

fn segment_type(kind: AsPathSegmentKind) -> AsPathSegmentType {
    match kind {
        AsPathSegmentKind::Set => AsPathSegmentType::AsSet,
        AsPathSegmentKind::Sequence => AsPathSegmentType::AsSequence,
    }
}

/// AS_PATH, plus AS4_PATH when a 2-octet peer must see AS_TRANS in place of a 4-octet AS
/// (RFC 6793 §4.2.2).
fn as_path_attributes(
    segments: &[AsPathSegment],
    context: EncodeContext,
) -> Result<(PathAttribute, Option<PathAttribute>), EncodeError> {
    let four_octet = || {
        segments
            .iter()
            .map(|s| As4PathSegment::new(segment_type(s.kind), s.asns.clone()))
            .collect::<Vec<_>>()
    };
    if context.four_octet_as {
        let path = AsPath::As4PathSegments(four_octet().into());
        return Ok((attribute(false, true, PathAttributeValue::AsPath(path))?, None));
    }
    let two_octet = |asn: u32| u16::try_from(asn).unwrap_or(AS_TRANS);
    let path = segments
        .iter()
        .map(|s| {
            As2PathSegment::new(
                segment_type(s.kind),
                s.asns.iter().map(|a| two_octet(*a)).collect::<Vec<_>>(),
            )
        })
        .collect::<Vec<_>>();
    let as_path = attribute(
        false,
        true,
        PathAttributeValue::AsPath(AsPath::As2PathSegments(path.into())),
    )?;
    let needs_as4_path = segments
        .iter()
        .flat_map(|s| &s.asns)
        .any(|asn| *asn > u32::from(u16::MAX));
    let as4_path = if needs_as4_path {
        Some(attribute(
            true,
            true,
            PathAttributeValue::As4Path(As4Path::new(four_octet())),
        )?)
    } else {
        None
    };
    Ok((as_path, as4_path))
}

fn mp_reach(reach: &MpReach) -> Result<NgMpReach, EncodeError> {
    Ok(match (&reach.nlri, reach.next_hop.global) {
        (Nlri::Ipv6(prefixes), IpAddr::V6(global)) => NgMpReach::Ipv6Unicast {
            next_hop_global: global,
            next_hop_local: reach.next_hop.link_local,
            nlri: v6_nlri(prefixes)?.into(),
        },
        (Nlri::Ipv4(prefixes), next_hop) => NgMpReach::Ipv4Unicast {
            next_hop,
            next_hop_local: reach.next_hop.link_local,
            nlri: v4_nlri(prefixes)?.into(),
        },
        (Nlri::Ipv6(_), IpAddr::V4(_)) => {
            return Err(EncodeError::InvalidAttribute {
                attribute: "MP_REACH_NLRI",
                reason: "IPv6 NLRI needs an IPv6 next hop".into(),
            });
        }
    })
}

/// The path attributes of an UPDATE in the order RFC 7606 §5.1 (MP attributes first) and
/// RFC 4271 §5 (ascending type code) ask for.
fn to_netgauze_attributes(
    update: &Update,
    context: EncodeContext,
) -> Result<Vec<PathAttribute>, EncodeError> {
    let attrs: &PathAttributes = &update.attributes;
    let mut out = Vec::new();
    if let Some(reach) = &update.mp_reach {
        out.push(attribute(
            true,
            false,
            PathAttributeValue::MpReach(mp_reach(reach)?),
        )?);
    }
    if let Some(unreach) = &update.mp_unreach {
        let value = match unreach {
            Nlri::Ipv4(p) => NgMpUnreach::Ipv4Unicast {
                nlri: v4_nlri(p)?.into(),
            },
            Nlri::Ipv6(p) => NgMpUnreach::Ipv6Unicast {
                nlri: v6_nlri(p)?.into(),
            },
        };
        out.push(attribute(true, false, PathAttributeValue::MpUnreach(value))?);
    }
    if let Some(origin) = attrs.origin {
        let value = match origin {
            Origin::Igp => NgOrigin::IGP,
            Origin::Egp => NgOrigin::EGP,
            Origin::Incomplete => NgOrigin::Incomplete,
        };
        out.push(attribute(false, true, PathAttributeValue::Origin(value))?);
    }
    let mut as4_path = None;
    if let Some(segments) = &attrs.as_path {
        let (as_path, as4) = as_path_attributes(segments, context)?;
        out.push(as_path);
        as4_path = as4;
    }
    if let Some(next_hop) = attrs.next_hop {
        out.push(attribute(
            false,
            true,
            PathAttributeValue::NextHop(NextHop::new(next_hop)),
        )?);
    }
    if let Some(med) = attrs.med {
        out.push(attribute(
            true,
            false,
            PathAttributeValue::MultiExitDiscriminator(MultiExitDiscriminator::new(med)),
        )?);
    }
    if let Some(local_pref) = attrs.local_pref {
        out.push(attribute(
            false,
            true,
            PathAttributeValue::LocalPreference(LocalPreference::new(local_pref)),
        )?);
    }
    if !attrs.communities.is_empty() {
        let list = attrs
            .communities
            .iter()
            .map(|c| Community::new(*c))
            .collect::<Vec<_>>();
        out.push(attribute(
            true,
            true,
            PathAttributeValue::Communities(Communities::new(list)),
        )?);
    }
    out.extend(as4_path);
    if !attrs.large_communities.is_empty() {
        let list = attrs
            .large_communities
            .iter()
            .map(|c| NgLargeCommunity::new(c.global_admin, c.local_data1, c.local_data2))
            .collect::<Vec<_>>();
        out.push(attribute(
            true,
            true,
            PathAttributeValue::LargeCommunities(LargeCommunities::new(list)),
        )?);
    }
    Ok(out)
}

fn to_netgauze_update(update: &Update, context: EncodeContext) -> Result<BgpUpdateMessage, EncodeError> {
    Ok(BgpUpdateMessage::new(
        v4_nlri(&update.withdrawn)?,
        to_netgauze_attributes(update, context)?,
        v4_nlri(&update.nlri)?,
    ))
}
