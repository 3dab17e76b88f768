//! Bytes → our messages. OPEN and (in [`UpdateMode::Full`]) UPDATE go through
//! `netgauze-bgp-pkt`; KEEPALIVE, NOTIFICATION and ROUTE-REFRESH are a few fixed fields and are
//! read here, so a NOTIFICATION with a subcode netgauze does not know, or a ROUTE-REFRESH for a
//! family we never negotiated, is still understood (RFC 2918 §4 says to ignore the latter).
//!
//! Every UPDATE first goes through [`check_update`], which decides the RFC 7606 handling from
//! lengths and attribute headers alone. A speaker that only announces stops there
//! ([`UpdateMode::Check`]), so a ToR sending a full table costs a length walk, not a parse.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use netgauze_bgp_pkt::capabilities::BgpCapability;
use netgauze_bgp_pkt::open::BgpOpenMessage;
use netgauze_bgp_pkt::path_attribute::{
    AsPath, AsPathSegmentType, MpReach as NgMpReach, MpUnreach as NgMpUnreach,
};
use netgauze_bgp_pkt::path_attribute::{Origin as NgOrigin, PathAttributeValue};
use netgauze_bgp_pkt::update::BgpUpdateMessage;
use netgauze_bgp_pkt::wire::deserializer::BgpParsingContext;
use netgauze_bgp_pkt::wire::deserializer::open::{BgpOpenMessageParsingError, BgpParameterParsingError};
use netgauze_iana::address_family::{AddressFamily, AddressType};
use netgauze_parse_utils::reader::SliceReader;
use netgauze_parse_utils::traits::ParseFromWithOneInput;

use super::error::{DecodeError, OpenError, UpdateIssue};
use super::frame::{Frame, check_header, message_type};
use super::types::{
    AsPathSegment, AsPathSegmentKind, Capabilities, ExtendedNextHop, Family, GracefulRestart,
    GracefulRestartFamily, HEADER_LEN, LargeCommunity, Message, MpNextHop, MpReach, Nlri, Notification, Open,
    Origin, RouteRefresh, Update,
};
use super::update_check::{CheckedUpdate, UpdateContext, UpdateLayout, check_update};

/// How much of a received UPDATE to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpdateMode {
    /// Check it for RFC 7606 session-reset errors and End-of-RIB, build nothing
    /// ([`Message::UpdateChecked`]). For a speaker that ignores the routes it receives.
    #[default]
    Check,
    /// Parse it into an [`Update`] as well.
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecodeContext {
    pub update: UpdateContext,
    pub update_mode: UpdateMode,
}

/// A decoded message, with the RFC 7606 outcome for an UPDATE that was not accepted whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub message: Message,
    pub issue: Option<UpdateIssue>,
}

impl From<Message> for Decoded {
    fn from(message: Message) -> Self {
        Decoded { message, issue: None }
    }
}

/// Decodes one complete message (header included) whose header the caller has not checked.
pub fn decode_message(bytes: &[u8], context: DecodeContext) -> Result<Decoded, DecodeError> {
    let header = bytes
        .first_chunk::<HEADER_LEN>()
        .ok_or(DecodeError::BadMessageLength {
            length: u16::try_from(bytes.len()).unwrap_or(u16::MAX),
            message_type: 0,
        })?;
    let (length, message_type) = check_header(header)?;
    if length != bytes.len() {
        return Err(DecodeError::BadMessageLength {
            length: u16::try_from(length).unwrap_or(u16::MAX),
            message_type,
        });
    }
    decode_frame(Frame { message_type, bytes }, context)
}

/// Decodes a frame from [`super::FrameSplitter`] (header already checked).
pub fn decode_frame(frame: Frame<'_>, context: DecodeContext) -> Result<Decoded, DecodeError> {
    let body = frame.body();
    match frame.message_type {
        message_type::OPEN => decode_open(body).map(|open| Message::Open(open).into()),
        message_type::UPDATE => decode_update(body, context),
        message_type::NOTIFICATION => {
            let (code, subcode) = (
                body.first().copied().unwrap_or(0),
                body.get(1).copied().unwrap_or(0),
            );
            let data = body.get(2..).unwrap_or_default().to_vec();
            Ok(Message::Notification(Notification { code, subcode, data }).into())
        }
        message_type::KEEPALIVE => Ok(Message::Keepalive.into()),
        message_type::ROUTE_REFRESH => match *body {
            [afi_hi, afi_lo, subtype, safi] => {
                let afi = u16::from_be_bytes([afi_hi, afi_lo]);
                Ok(Message::RouteRefresh(RouteRefresh { afi, safi, subtype }).into())
            }
            _ => Err(DecodeError::BadMessageLength {
                length: u16::try_from(frame.bytes.len()).unwrap_or(u16::MAX),
                message_type: frame.message_type,
            }),
        },
        other => Err(DecodeError::BadMessageType { message_type: other }),
    }
}

fn family_of(address_type: AddressType) -> Option<Family> {
    match address_type {
        AddressType::Ipv4Unicast => Some(Family::Ipv4Unicast),
        AddressType::Ipv6Unicast => Some(Family::Ipv6Unicast),
        _ => None,
    }
}

fn open_error(error: BgpOpenMessageParsingError) -> OpenError {
    match error {
        BgpOpenMessageParsingError::UnsupportedVersionNumber { version, .. } => {
            OpenError::UnsupportedVersion { version }
        }
        BgpOpenMessageParsingError::UnacceptableHoldTime { time, .. } => {
            OpenError::UnacceptableHoldTime { hold_time: time }
        }
        // netgauze refuses broadcast, multicast and 0.0.0.0 (RFC 4271's "valid unicast host
        // address"); RFC 6286 §2.1 only forbids 0, so a multicast-looking ID is refused here
        // too. No production BGP speaker uses one.
        BgpOpenMessageParsingError::InvalidBgpId { bgp_id, .. } => OpenError::BadBgpIdentifier {
            bgp_id,
            reason: "not a unicast address",
        },
        BgpOpenMessageParsingError::ParameterError(BgpParameterParsingError::UndefinedParameterType {
            code,
            ..
        }) => OpenError::UnsupportedOptionalParameter { parameter_type: code },
        other => OpenError::Malformed {
            reason: other.to_string(),
        },
    }
}

fn decode_open(body: &[u8]) -> Result<Open, DecodeError> {
    // Capabilities we do not understand, or understand but find malformed, are skipped: RFC
    // 5492 §4 asks a speaker to ignore what it does not recognise, and refusing a peer over a
    // capability we would not use gains nothing.
    let mut context = BgpParsingContext::new(true, HashMap::new(), HashMap::new(), true, true, false, true);
    let mut reader = SliceReader::new(body);
    let ng = BgpOpenMessage::parse(&mut reader, &mut context).map_err(open_error)?;
    if !reader.is_empty() {
        return Err(OpenError::Malformed {
            reason: "bytes after the optional parameters".into(),
        }
        .into());
    }
    Ok(from_netgauze_open(&ng))
}

fn from_netgauze_open(ng: &BgpOpenMessage) -> Open {
    let mut caps = Capabilities::default();
    for capability in ng.capabilities() {
        match capability {
            BgpCapability::MultiProtocolExtensions(mp) => {
                if let Some(family) = family_of(mp.address_type())
                    && !caps.multiprotocol.contains(&family)
                {
                    caps.multiprotocol.push(family);
                }
            }
            BgpCapability::RouteRefresh | BgpCapability::CiscoRouteRefresh => caps.route_refresh = true,
            BgpCapability::FourOctetAs(asn) => caps.four_octet_as = Some(asn.asn4()),
            BgpCapability::GracefulRestartCapability(gr) => {
                let families = gr
                    .address_families()
                    .iter()
                    .filter_map(|f| {
                        let family = family_of(f.address_type())?;
                        Some(GracefulRestartFamily {
                            family,
                            forwarding_preserved: f.forwarding_state(),
                        })
                    })
                    .collect();
                caps.graceful_restart = Some(GracefulRestart {
                    restarting: gr.restart(),
                    notification: gr.graceful_notification(),
                    restart_time: gr.time(),
                    families,
                });
            }
            BgpCapability::ExtendedNextHopEncoding(enh) => {
                for encoding in enh.encodings() {
                    if let Some(family) = family_of(encoding.address_type()) {
                        let next_hop_afi = match encoding.next_hop_afi() {
                            AddressFamily::IPv4 => 1,
                            AddressFamily::IPv6 => 2,
                            _ => continue,
                        };
                        caps.extended_next_hop
                            .push(ExtendedNextHop { family, next_hop_afi });
                    }
                }
            }
            _ => {}
        }
    }
    Open {
        my_as: ng.my_as(),
        hold_time: ng.hold_time(),
        bgp_id: ng.bgp_id(),
        capabilities: caps,
    }
}

/// Reads NLRI entries that [`check_update`] already validated.
fn read_prefixes(field: &[u8], family: Family) -> Nlri {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    let mut at = 0;
    while let Some(&bits) = field.get(at) {
        let octets = usize::from(bits).div_ceil(8);
        let Some(bytes) = field.get(at + 1..at + 1 + octets) else {
            break;
        };
        at += 1 + octets;
        match family {
            Family::Ipv4Unicast => {
                let mut addr = [0u8; 4];
                addr[..octets.min(4)].copy_from_slice(&bytes[..octets.min(4)]);
                if let Ok(net) = Ipv4Net::new(Ipv4Addr::from(addr), bits) {
                    v4.push(net.trunc());
                }
            }
            Family::Ipv6Unicast => {
                let mut addr = [0u8; 16];
                addr[..octets.min(16)].copy_from_slice(&bytes[..octets.min(16)]);
                if let Ok(net) = Ipv6Net::new(Ipv6Addr::from(addr), bits) {
                    v6.push(net.trunc());
                }
            }
        }
    }
    match family {
        Family::Ipv4Unicast => Nlri::Ipv4(v4),
        Family::Ipv6Unicast => Nlri::Ipv6(v6),
    }
}

fn v4(nlri: Nlri) -> Vec<Ipv4Net> {
    match nlri {
        Nlri::Ipv4(p) => p,
        Nlri::Ipv6(_) => Vec::new(),
    }
}

/// RFC 7606 §2 "treat-as-withdraw": every route the UPDATE carries, reachable or not, is
/// reported as withdrawn, and its attributes are dropped.
fn treat_as_withdraw(body: &[u8], layout: &UpdateLayout) -> Update {
    let mut withdrawn = v4(read_prefixes(
        &body[layout.withdrawn.clone()],
        Family::Ipv4Unicast,
    ));
    withdrawn.extend(v4(read_prefixes(&body[layout.nlri.clone()], Family::Ipv4Unicast)));
    let mut mp_unreach: Option<Nlri> = None;
    for (family, range) in [&layout.mp_unreach_nlri, &layout.mp_reach_nlri]
        .into_iter()
        .flatten()
    {
        match (read_prefixes(&body[range.clone()], *family), mp_unreach.as_mut()) {
            (Nlri::Ipv4(p), _) => withdrawn.extend(p),
            (Nlri::Ipv6(p), Some(Nlri::Ipv6(existing))) => existing.extend(p),
            (nlri @ Nlri::Ipv6(_), _) => mp_unreach = Some(nlri),
        }
    }
    Update {
        withdrawn,
        mp_unreach,
        ..Update::default()
    }
}

fn decode_update(body: &[u8], context: DecodeContext) -> Result<Decoded, DecodeError> {
    let CheckedUpdate {
        summary,
        issue,
        layout,
    } = check_update(body, context.update)?;
    if context.update_mode == UpdateMode::Check {
        return Ok(Decoded {
            message: Message::UpdateChecked(summary),
            issue,
        });
    }
    if matches!(issue, Some(UpdateIssue::TreatAsWithdraw { .. })) {
        return Ok(Decoded {
            message: Message::Update(Box::new(treat_as_withdraw(body, &layout))),
            issue,
        });
    }
    // The check found nothing fatal. Attributes it classed as "attribute discard" are cut out
    // before netgauze sees them: netgauze fails the whole UPDATE on some of them (a 1-octet
    // ATOMIC_AGGREGATE, for one).
    let stripped;
    let parse_body = if layout.discarded.is_empty() {
        body
    } else {
        stripped = without_attributes(body, &layout);
        &stripped[..]
    };
    let mut ng_context = BgpParsingContext::new(
        context.update.four_octet_as,
        HashMap::new(),
        HashMap::new(),
        false,
        false,
        false,
        false,
    );
    let mut reader = SliceReader::new(parse_body);
    match BgpUpdateMessage::parse(&mut reader, &mut ng_context) {
        Ok(ng) if reader.is_empty() => {
            let skipped = !ng_context.parsing_errors().path_attr_errors().is_empty();
            let issue = issue.or(skipped.then_some(UpdateIssue::AttributeDiscarded {
                attribute_type: 0,
                reason: "attribute value rejected by the parser",
            }));
            Ok(Decoded {
                message: Message::Update(Box::new(from_netgauze_update(&ng, context.update))),
                issue,
            })
        }
        _ => {
            let issue = Some(UpdateIssue::TreatAsWithdraw {
                attribute_type: 0,
                reason: "attribute value rejected by the parser",
            });
            Ok(Decoded {
                message: Message::Update(Box::new(treat_as_withdraw(body, &layout))),
                issue,
            })
        }
    }
}

/// `body` with the discarded attributes removed and the Total Path Attribute Length fixed.
fn without_attributes(body: &[u8], layout: &UpdateLayout) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    out.extend_from_slice(&body[..layout.attributes.start]);
    let mut at = layout.attributes.start;
    for range in &layout.discarded {
        out.extend_from_slice(&body[at..range.start]);
        at = range.end;
    }
    out.extend_from_slice(&body[at..]);
    let removed: usize = layout.discarded.iter().map(ExactSizeIterator::len).sum();
    let attributes_len = u16::try_from(layout.attributes.len() - removed).unwrap_or(0);
    let field = layout.attributes.start - 2;
    out[field..field + 2].copy_from_slice(&attributes_len.to_be_bytes());
    out
}

fn segment_kind(kind: AsPathSegmentType) -> AsPathSegmentKind {
    match kind {
        AsPathSegmentType::AsSet => AsPathSegmentKind::Set,
        AsPathSegmentType::AsSequence => AsPathSegmentKind::Sequence,
    }
}

fn from_netgauze_update(ng: &BgpUpdateMessage, context: UpdateContext) -> Update {
    let mut update = Update {
        withdrawn: ng
            .withdraw_routes()
            .iter()
            .map(|a| a.network().address())
            .collect(),
        nlri: ng.nlri().iter().map(|a| a.network().address()).collect(),
        ..Update::default()
    };
    let attrs = &mut update.attributes;
    for attribute in ng.path_attributes() {
        match attribute.value() {
            PathAttributeValue::Origin(origin) => {
                attrs.origin = Some(match origin {
                    NgOrigin::IGP => Origin::Igp,
                    NgOrigin::EGP => Origin::Egp,
                    NgOrigin::Incomplete => Origin::Incomplete,
                });
            }
            PathAttributeValue::AsPath(AsPath::As2PathSegments(segments)) => {
                attrs.as_path = Some(
                    segments
                        .iter()
                        .map(|s| AsPathSegment {
                            kind: segment_kind(s.segment_type()),
                            asns: s.as_numbers().iter().map(|a| u32::from(*a)).collect(),
                        })
                        .collect(),
                );
            }
            PathAttributeValue::AsPath(AsPath::As4PathSegments(segments)) => {
                attrs.as_path = Some(
                    segments
                        .iter()
                        .map(|s| AsPathSegment {
                            kind: segment_kind(s.segment_type()),
                            asns: s.as_numbers().to_vec(),
                        })
                        .collect(),
                );
            }
            PathAttributeValue::NextHop(next_hop) => attrs.next_hop = Some(next_hop.next_hop()),
            PathAttributeValue::MultiExitDiscriminator(med) => attrs.med = Some(med.metric()),
            PathAttributeValue::LocalPreference(pref) if !context.external_peer => {
                attrs.local_pref = Some(pref.metric());
            }
            PathAttributeValue::Communities(list) => {
                attrs.communities = list
                    .communities()
                    .iter()
                    .map(netgauze_bgp_pkt::community::Community::value)
                    .collect();
            }
            PathAttributeValue::LargeCommunities(list) => {
                attrs.large_communities = list
                    .communities()
                    .iter()
                    .map(|c| LargeCommunity {
                        global_admin: c.global_admin(),
                        local_data1: c.local_data1(),
                        local_data2: c.local_data2(),
                    })
                    .collect();
            }
            PathAttributeValue::MpReach(NgMpReach::Ipv6Unicast {
                next_hop_global,
                next_hop_local,
                nlri,
            }) => {
                update.mp_reach = Some(MpReach {
                    next_hop: MpNextHop {
                        global: (*next_hop_global).into(),
                        link_local: *next_hop_local,
                    },
                    nlri: Nlri::Ipv6(nlri.iter().map(|a| a.network().address()).collect()),
                });
            }
            PathAttributeValue::MpReach(NgMpReach::Ipv4Unicast {
                next_hop,
                next_hop_local,
                nlri,
            }) => {
                update.mp_reach = Some(MpReach {
                    next_hop: MpNextHop {
                        global: *next_hop,
                        link_local: *next_hop_local,
                    },
                    nlri: Nlri::Ipv4(nlri.iter().map(|a| a.network().address()).collect()),
                });
            }
            PathAttributeValue::MpUnreach(NgMpUnreach::Ipv6Unicast { nlri }) => {
                update.mp_unreach = Some(Nlri::Ipv6(nlri.iter().map(|a| a.network().address()).collect()));
            }
            PathAttributeValue::MpUnreach(NgMpUnreach::Ipv4Unicast { nlri }) => {
                update.mp_unreach = Some(Nlri::Ipv4(nlri.iter().map(|a| a.network().address()).collect()));
            }
            _ => {}
        }
    }
    update
}
