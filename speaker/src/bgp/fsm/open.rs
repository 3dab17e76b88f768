//! Building our OPEN, and checking the peer's OPEN against our configuration: the RFC 4271 §6.2
//! checks a decoder cannot make alone (peer AS, BGP identifier against ours, hold time: a
//! peer's 0 only when ours is 0 too), and the negotiation of what both sides support (RFC 5492).

use std::time::Duration;

use crate::bgp::wire::{
    AS_TRANS, Capabilities, EncodeContext, ExtendedNextHop, Family, GracefulRestart, GracefulRestartFamily,
    Message, Open, OpenError, encode,
};

use super::{Negotiated, SessionConfig};

/// Our OPEN. `restarting` sets the R bit (RFC 4724 §3).
pub(crate) fn local_open(config: &SessionConfig, restarting: bool) -> Open {
    let graceful_restart = config.graceful_restart.map(|gr| GracefulRestart {
        restarting,
        notification: false,
        restart_time: gr.restart_time.min(4095),
        families: config
            .families
            .iter()
            .map(|&family| GracefulRestartFamily {
                family,
                forwarding_preserved: gr.forwarding_preserved,
            })
            .collect(),
    });
    let extended_next_hop = if config.extended_next_hop && config.families.contains(&Family::Ipv4Unicast) {
        vec![ExtendedNextHop {
            family: Family::Ipv4Unicast,
            next_hop_afi: 2,
        }]
    } else {
        Vec::new()
    };
    Open {
        my_as: u16::try_from(config.local_as).unwrap_or(AS_TRANS),
        hold_time: config.hold_time,
        bgp_id: config.router_id,
        capabilities: Capabilities {
            multiprotocol: config.families.clone(),
            four_octet_as: Some(config.local_as),
            route_refresh: true,
            graceful_restart,
            extended_next_hop,
        },
    }
}

/// Checks the peer's OPEN (RFC 4271 §6.2, RFC 6286 §2.2, RFC 5492 §5) and negotiates.
pub(crate) fn negotiate(
    config: &SessionConfig,
    open: &Open,
    local_restarting: bool,
) -> Result<Negotiated, OpenError> {
    let peer_as = open.asn();
    if peer_as != config.peer_as {
        return Err(OpenError::BadPeerAs {
            received: peer_as,
            expected: config.peer_as,
        });
    }
    if !hold_time_acceptable(config.hold_time, open.hold_time) {
        return Err(OpenError::UnacceptableHoldTime {
            hold_time: open.hold_time,
        });
    }
    let external = peer_as != config.local_as;
    if open.bgp_id.is_unspecified() {
        return Err(OpenError::BadBgpIdentifier {
            bgp_id: open.bgp_id,
            reason: "zero",
        });
    }
    // RFC 6286 §2.2: two speakers of one AS must have distinct identifiers; across ASes the
    // same value is allowed (collisions then fall back to the AS numbers).
    if !external && open.bgp_id == config.router_id {
        return Err(OpenError::BadBgpIdentifier {
            bgp_id: open.bgp_id,
            reason: "same as ours inside one AS",
        });
    }
    let peer_caps = &open.capabilities;
    // A peer that sends no Multiprotocol capability speaks IPv4 unicast only (RFC 4760 §1).
    let peer_families: &[Family] = if peer_caps.multiprotocol.is_empty() {
        &[Family::Ipv4Unicast]
    } else {
        &peer_caps.multiprotocol
    };
    let families: Vec<Family> = config
        .families
        .iter()
        .copied()
        .filter(|f| peer_families.contains(f))
        .collect();
    if families.is_empty() {
        // RFC 5492 §5: name the capability we need, as we would send it.
        let ours = local_open(config, local_restarting);
        let data = encode(&Message::Open(ours), EncodeContext::default())
            .ok()
            .and_then(|bytes| mp_capability_bytes(&bytes))
            .unwrap_or_default();
        return Err(OpenError::UnsupportedCapability {
            capability_code: 1,
            reason: "no address family in common",
            data,
        });
    }
    let hold_time = config.hold_time.min(open.hold_time);
    let keepalive = (hold_time > 0).then(|| Duration::from_secs(u64::from(hold_time)) / 3);
    let extended_next_hop = if config.extended_next_hop {
        peer_caps
            .extended_next_hop
            .iter()
            .copied()
            .filter(|e| e.family == Family::Ipv4Unicast && e.next_hop_afi == 2)
            .collect()
    } else {
        Vec::new()
    };
    Ok(Negotiated {
        peer_as,
        peer_bgp_id: open.bgp_id,
        hold_time,
        keepalive,
        four_octet_as: peer_caps.four_octet_as.is_some(),
        families,
        peer_route_refresh: peer_caps.route_refresh,
        peer_graceful_restart: peer_caps.graceful_restart.clone(),
        local_restarting,
        extended_next_hop,
        external,
    })
}

/// Whether the peer's proposed hold time can be taken (RFC 4271 §6.2: 1 and 2 never; the
/// negotiated value is the smaller of the two, §4.2). A peer's 0 would make the smaller 0, and
/// so switch off keepalives and the hold timer for both sides: a dead peer would then never be
/// noticed. Accept it only when we proposed 0 ourselves; otherwise it is an "Unacceptable Hold
/// Time" (2/6), the choice §6.2 leaves to the implementation ("MAY reject").
pub(crate) fn hold_time_acceptable(ours: u16, theirs: u16) -> bool {
    match theirs {
        1 | 2 => false,
        0 => ours == 0,
        _ => true,
    }
}

/// The Multiprotocol capability TLVs (code 1) of an encoded OPEN, for the data of a 2/7.
fn mp_capability_bytes(open: &[u8]) -> Option<Vec<u8>> {
    // Header (19), version, AS, hold time, BGP ID (9), parameters length (1).
    let mut params = open.get(29..)?;
    let mut out = Vec::new();
    while let [_param_type, param_len, rest @ ..] = params {
        let (caps, after) = rest.split_at_checked(usize::from(*param_len))?;
        let mut caps = caps;
        while let [code, len, tail @ ..] = caps {
            let (value, next) = tail.split_at_checked(usize::from(*len))?;
            if *code == 1 {
                out.extend_from_slice(&[*code, *len]);
                out.extend_from_slice(value);
            }
            caps = next;
        }
        params = after;
    }
    Some(out)
}
