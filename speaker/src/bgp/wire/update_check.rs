//! A single pass over a received UPDATE's lengths and attribute headers that decides, without
//! building any route, how RFC 7606 says to handle it: accept, "attribute discard",
//! "treat-as-withdraw", or "session reset" (returned as a [`DecodeError`]).
//!
//! Session reset is kept for the cases RFC 7606 still requires it: the withdrawn-routes or
//! total-attribute length overrunning the message (§4), NLRI that cannot be parsed (§5.3), an
//! MP_REACH_NLRI/MP_UNREACH_NLRI that is malformed or repeated (§3 g, §7.11, RFC 4760 §7), and an
//! unrecognised well-known attribute (RFC 4271 §6.3). Everything else is treat-as-withdraw or
//! attribute discard, per attribute (§7).

use std::ops::Range;

use super::error::{DecodeError, UpdateIssue};
use super::notification::update as subcode;
use super::types::{Family, UpdateSummary};

/// Path attribute type codes (IANA "BGP Path Attributes").
pub mod attribute_type {
    pub const ORIGIN: u8 = 1;
    pub const AS_PATH: u8 = 2;
    pub const NEXT_HOP: u8 = 3;
    pub const MULTI_EXIT_DISC: u8 = 4;
    pub const LOCAL_PREF: u8 = 5;
    pub const ATOMIC_AGGREGATE: u8 = 6;
    pub const AGGREGATOR: u8 = 7;
    pub const COMMUNITIES: u8 = 8;
    pub const ORIGINATOR_ID: u8 = 9;
    pub const CLUSTER_LIST: u8 = 10;
    pub const MP_REACH_NLRI: u8 = 14;
    pub const MP_UNREACH_NLRI: u8 = 15;
    pub const EXTENDED_COMMUNITIES: u8 = 16;
    pub const AS4_PATH: u8 = 17;
    pub const AS4_AGGREGATOR: u8 = 18;
    pub const LARGE_COMMUNITIES: u8 = 32;
}

use attribute_type as at;

const FLAG_OPTIONAL: u8 = 0x80;
const FLAG_TRANSITIVE: u8 = 0x40;
const FLAG_PARTIAL: u8 = 0x20;
const FLAG_EXTENDED_LENGTH: u8 = 0x10;

/// What the session negotiated that changes how an UPDATE is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UpdateContext {
    /// Both sides sent the 4-octet AS capability: AS_PATH carries 4-octet AS numbers (RFC 6793).
    pub four_octet_as: bool,
    /// The peer is in another AS; LOCAL_PREF from it is discarded (RFC 7606 §7.5).
    pub external_peer: bool,
}

/// Where the routes of a checked UPDATE are, for a caller that wants them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct UpdateLayout {
    pub withdrawn: Range<usize>,
    pub attributes: Range<usize>,
    pub nlri: Range<usize>,
    pub mp_reach_nlri: Option<(Family, Range<usize>)>,
    pub mp_unreach_nlri: Option<(Family, Range<usize>)>,
    /// Whole attributes (header included) to drop under "attribute discard".
    pub discarded: Vec<Range<usize>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckedUpdate {
    pub summary: UpdateSummary,
    pub issue: Option<UpdateIssue>,
    pub layout: UpdateLayout,
}

fn reset(subcode: u8, reason: &'static str, data: &[u8]) -> DecodeError {
    DecodeError::Update {
        subcode,
        reason,
        data: data.to_vec(),
    }
}

/// Walks `field` as a sequence of (length, prefix) NLRI entries (RFC 4271 §4.3); returns how
/// many there are, or `None` if one is longer than `max_bits` or overruns the field.
pub(crate) fn count_prefixes(field: &[u8], max_bits: u8) -> Option<usize> {
    let mut at = 0;
    let mut count = 0;
    while at < field.len() {
        let bits = field[at];
        if bits > max_bits {
            return None;
        }
        at += 1 + usize::from(bits).div_ceil(8);
        if at > field.len() {
            return None;
        }
        count += 1;
    }
    Some(count)
}

fn max_prefix_bits(family: Family) -> u8 {
    match family {
        Family::Ipv4Unicast => 32,
        Family::Ipv6Unicast => 128,
    }
}

/// The expected (optional, transitive) flags of the attributes we check (RFC 4271 §5,
/// RFC 1997, RFC 4360, RFC 4456, RFC 4760, RFC 6793, RFC 8092).
fn expected_flags(type_code: u8) -> Option<(bool, bool)> {
    Some(match type_code {
        at::ORIGIN | at::AS_PATH | at::NEXT_HOP | at::LOCAL_PREF | at::ATOMIC_AGGREGATE => (false, true),
        at::MULTI_EXIT_DISC
        | at::ORIGINATOR_ID
        | at::CLUSTER_LIST
        | at::MP_REACH_NLRI
        | at::MP_UNREACH_NLRI => (true, false),
        at::AGGREGATOR
        | at::COMMUNITIES
        | at::EXTENDED_COMMUNITIES
        | at::AS4_PATH
        | at::AS4_AGGREGATOR
        | at::LARGE_COMMUNITIES => (true, true),
        _ => return None,
    })
}

fn flags_conflict(type_code: u8, flags: u8) -> bool {
    let Some((optional, transitive)) = expected_flags(type_code) else {
        return false;
    };
    let partial_allowed = optional && transitive;
    (flags & FLAG_OPTIONAL != 0) != optional
        || (flags & FLAG_TRANSITIVE != 0) != transitive
        || (!partial_allowed && flags & FLAG_PARTIAL != 0)
}

/// Whether an AS_PATH or AS4_PATH value is a well-formed list of segments (RFC 4271 §4.3,
/// RFC 5065 for the confederation segment types 3 and 4, RFC 7606 §7.2).
fn as_path_well_formed(value: &[u8], asn_width: usize) -> bool {
    let mut at = 0;
    while at < value.len() {
        let (Some(&kind), Some(&count)) = (value.get(at), value.get(at + 1)) else {
            return false;
        };
        if !(1..=4).contains(&kind) || count == 0 {
            return false;
        }
        at += 2 + usize::from(count) * asn_width;
        if at > value.len() {
            return false;
        }
    }
    true
}

/// Checks MP_REACH_NLRI (RFC 4760 §3); returns the family and where its NLRI is inside `value`.
/// A family we do not carry is not looked into: it was never negotiated, and we ignore it.
fn check_mp_reach(value: &[u8]) -> Result<Option<(Family, Range<usize>)>, &'static str> {
    let [afi_hi, afi_lo, safi, next_hop_len, ..] = *value else {
        return Err("MP_REACH_NLRI shorter than its fixed fields");
    };
    let Some(family) = Family::from_afi_safi(u16::from_be_bytes([afi_hi, afi_lo]), safi) else {
        return Ok(None);
    };
    let nlri_start = 4 + usize::from(next_hop_len) + 1;
    if nlri_start > value.len() {
        return Err("MP_REACH_NLRI next hop overruns the attribute");
    }
    // IPv6: global, or global plus link-local (RFC 2545 §3). IPv4: 4 octets, or an IPv6 next
    // hop as RFC 8950 allows.
    let next_hop_ok = match family {
        Family::Ipv6Unicast => matches!(next_hop_len, 16 | 32),
        Family::Ipv4Unicast => matches!(next_hop_len, 4 | 16 | 32),
    };
    if !next_hop_ok {
        return Err("MP_REACH_NLRI next hop length is invalid for the family");
    }
    if count_prefixes(&value[nlri_start..], max_prefix_bits(family)).is_none() {
        return Err("MP_REACH_NLRI prefixes cannot be parsed");
    }
    Ok(Some((family, nlri_start..value.len())))
}

fn check_mp_unreach(value: &[u8]) -> Result<Option<(Family, Range<usize>)>, &'static str> {
    let [afi_hi, afi_lo, safi, ..] = *value else {
        return Err("MP_UNREACH_NLRI shorter than its fixed fields");
    };
    let Some(family) = Family::from_afi_safi(u16::from_be_bytes([afi_hi, afi_lo]), safi) else {
        return Ok(None);
    };
    if count_prefixes(&value[3..], max_prefix_bits(family)).is_none() {
        return Err("MP_UNREACH_NLRI prefixes cannot be parsed");
    }
    Ok(Some((family, 3..value.len())))
}

/// Checks a received UPDATE body (the bytes after the 19-octet header).
pub(crate) fn check_update(body: &[u8], context: UpdateContext) -> Result<CheckedUpdate, DecodeError> {
    let read_u16 = |at: usize| {
        body.get(at..at + 2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    };
    let withdrawn_len =
        read_u16(0).ok_or_else(|| reset(subcode::MALFORMED_ATTRIBUTE_LIST, "truncated", &[]))?;
    let withdrawn = 2..2 + withdrawn_len;
    // RFC 4271 §6.3 / RFC 7606 §4: a length that overruns the message hides where the NLRI is.
    let attributes_len = read_u16(withdrawn.end).ok_or_else(|| {
        reset(
            subcode::MALFORMED_ATTRIBUTE_LIST,
            "withdrawn routes length overruns the message",
            &[],
        )
    })?;
    let attributes = withdrawn.end + 2..withdrawn.end + 2 + attributes_len;
    if attributes.end > body.len() {
        return Err(reset(
            subcode::MALFORMED_ATTRIBUTE_LIST,
            "total path attribute length overruns the message",
            &[],
        ));
    }
    let nlri = attributes.end..body.len();
    let withdrawn_count = count_prefixes(&body[withdrawn.clone()], 32).ok_or_else(|| {
        reset(
            subcode::INVALID_NETWORK_FIELD,
            "withdrawn routes cannot be parsed",
            &[],
        )
    })?;
    let nlri_count = count_prefixes(&body[nlri.clone()], 32)
        .ok_or_else(|| reset(subcode::INVALID_NETWORK_FIELD, "NLRI cannot be parsed", &[]))?;

    let mut layout = UpdateLayout {
        withdrawn,
        attributes: attributes.clone(),
        nlri,
        ..UpdateLayout::default()
    };
    let mut issue: Option<UpdateIssue> = None;
    let mut note = |found: UpdateIssue| {
        if issue.is_none_or(|current| found.severity() > current.severity()) {
            issue = Some(found);
        }
    };
    let mut seen = [false; 256];
    let mut attribute_count = 0;
    let field = &body[attributes.clone()];
    let mut at = 0;
    while at < field.len() {
        let flags = field[at];
        let header_len = if flags & FLAG_EXTENDED_LENGTH != 0 { 4 } else { 3 };
        let Some(header) = field.get(at..at + header_len) else {
            // RFC 7606 §4: too few octets left for an attribute header.
            note(UpdateIssue::TreatAsWithdraw {
                attribute_type: 0,
                reason: "trailing bytes in the attribute field",
            });
            break;
        };
        let type_code = header[1];
        let value_len = if header_len == 4 {
            usize::from(u16::from_be_bytes([header[2], header[3]]))
        } else {
            usize::from(header[2])
        };
        let Some(value) = field.get(at + header_len..at + header_len + value_len) else {
            // RFC 7606 §4: the last attribute overruns the attribute field.
            note(UpdateIssue::TreatAsWithdraw {
                attribute_type: type_code,
                reason: "attribute overruns the field",
            });
            break;
        };
        let whole = &field[at..at + header_len + value_len];
        let whole_range = attributes.start + at..attributes.start + at + header_len + value_len;
        let value_start = attributes.start + at + header_len;
        at += header_len + value_len;
        attribute_count += 1;

        if std::mem::replace(&mut seen[usize::from(type_code)], true) {
            // RFC 7606 §3 g: a repeated MP attribute is fatal, any other repeat is dropped.
            if matches!(type_code, at::MP_REACH_NLRI | at::MP_UNREACH_NLRI) {
                return Err(reset(
                    subcode::MALFORMED_ATTRIBUTE_LIST,
                    "MP_REACH/MP_UNREACH_NLRI repeated",
                    &[],
                ));
            }
            note(UpdateIssue::AttributeDiscarded {
                attribute_type: type_code,
                reason: "repeated attribute",
            });
            continue;
        }
        if expected_flags(type_code).is_none() && flags & FLAG_OPTIONAL == 0 {
            return Err(reset(
                subcode::UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE,
                "unrecognized well-known attribute",
                whole,
            ));
        }
        let flags_bad = flags_conflict(type_code, flags);
        let treat_as_withdraw = |reason| UpdateIssue::TreatAsWithdraw {
            attribute_type: type_code,
            reason,
        };
        let discard = |reason| UpdateIssue::AttributeDiscarded {
            attribute_type: type_code,
            reason,
        };
        match type_code {
            at::MP_REACH_NLRI | at::MP_UNREACH_NLRI => {
                if flags_bad {
                    return Err(reset(subcode::ATTRIBUTE_FLAGS_ERROR, "MP attribute flags", whole));
                }
                let checked = if type_code == at::MP_REACH_NLRI {
                    check_mp_reach(value)
                } else {
                    check_mp_unreach(value)
                };
                let found =
                    checked.map_err(|reason| reset(subcode::OPTIONAL_ATTRIBUTE_ERROR, reason, whole))?;
                let shifted =
                    found.map(|(family, range)| (family, range.start + value_start..range.end + value_start));
                if type_code == at::MP_REACH_NLRI {
                    layout.mp_reach_nlri = shifted;
                } else {
                    layout.mp_unreach_nlri = shifted;
                }
            }
            // RFC 7606 §7.5: LOCAL_PREF from an external peer is discarded whatever it holds.
            at::LOCAL_PREF if context.external_peer => {
                note(discard("LOCAL_PREF from an external peer"));
                layout.discarded.push(whole_range);
            }
            // RFC 7606 §7.6, §7.7, RFC 6793 §6: these are discarded when malformed.
            at::ATOMIC_AGGREGATE | at::AGGREGATOR | at::AS4_PATH | at::AS4_AGGREGATOR => {
                let aggregator_len = if context.four_octet_as { 8 } else { 6 };
                let well_formed = match type_code {
                    at::ATOMIC_AGGREGATE => value.is_empty(),
                    at::AGGREGATOR => value.len() == aggregator_len,
                    at::AS4_AGGREGATOR => value.len() == 8,
                    _ => as_path_well_formed(value, 4),
                };
                if flags_bad || !well_formed {
                    note(discard("malformed attribute"));
                    layout.discarded.push(whole_range);
                }
            }
            _ if flags_bad => note(treat_as_withdraw("attribute flags conflict with its type")),
            at::ORIGIN if value.len() != 1 || value[0] > 2 => note(treat_as_withdraw("malformed ORIGIN")),
            at::AS_PATH if !as_path_well_formed(value, if context.four_octet_as { 4 } else { 2 }) => {
                note(treat_as_withdraw("malformed AS_PATH"));
            }
            at::NEXT_HOP | at::MULTI_EXIT_DISC | at::LOCAL_PREF | at::ORIGINATOR_ID if value.len() != 4 => {
                note(treat_as_withdraw("attribute length is not 4"));
            }
            at::COMMUNITIES | at::CLUSTER_LIST if value.is_empty() || value.len() % 4 != 0 => {
                note(treat_as_withdraw("length is not a non-zero multiple of 4"));
            }
            at::EXTENDED_COMMUNITIES if value.is_empty() || value.len() % 8 != 0 => {
                note(treat_as_withdraw("length is not a non-zero multiple of 8"));
            }
            at::LARGE_COMMUNITIES if value.is_empty() || value.len() % 12 != 0 => {
                note(treat_as_withdraw(
                    "length is not a non-zero multiple of 12 (RFC 8092 §6)",
                ));
            }
            _ => {}
        }
    }

    let mp_reach_count = layout.mp_reach_nlri.as_ref().map_or(0, |(family, range)| {
        count_prefixes(&body[range.clone()], max_prefix_bits(*family)).unwrap_or(0)
    });
    let mp_unreach_count = layout.mp_unreach_nlri.as_ref().map_or(0, |(family, range)| {
        count_prefixes(&body[range.clone()], max_prefix_bits(*family)).unwrap_or(0)
    });
    let announces = nlri_count > 0 || mp_reach_count > 0;
    // RFC 7606 §3 d: a route without its mandatory attributes is withdrawn, not fatal. NEXT_HOP
    // is needed only for NLRI in the UPDATE's own field (RFC 4760 §3).
    if announces {
        let missing = !seen[usize::from(at::ORIGIN)]
            || !seen[usize::from(at::AS_PATH)]
            || (nlri_count > 0 && !seen[usize::from(at::NEXT_HOP)])
            || (!context.external_peer && !seen[usize::from(at::LOCAL_PREF)]);
        if missing {
            note(UpdateIssue::TreatAsWithdraw {
                attribute_type: 0,
                reason: "missing well-known attribute",
            });
        }
    }
    // End-of-RIB (RFC 4724 §2): nothing at all, or one MP_UNREACH_NLRI with no prefixes.
    let end_of_rib = if withdrawn_count == 0 && nlri_count == 0 && attribute_count == 0 {
        Some(Family::Ipv4Unicast)
    } else if withdrawn_count == 0 && nlri_count == 0 && attribute_count == 1 && mp_unreach_count == 0 {
        layout.mp_unreach_nlri.as_ref().map(|(family, _)| *family)
    } else {
        None
    };
    let summary = UpdateSummary {
        end_of_rib,
        announces,
        withdraws: withdrawn_count > 0 || mp_unreach_count > 0,
    };
    Ok(CheckedUpdate {
        summary,
        issue,
        layout,
    })
}
