//! Adj-RIB-Out by input → output, everything through the real encoder and decoder: what goes
//! out on session up, on each change, on route refresh and on a next hop change (`changes`);
//! byte-exact packing at the 4096 boundary and 100,000 prefixes in the fewest UPDATEs
//! (`packing`); output within a byte budget, superseded changes never sent, unencodable routes
//! never counted as sent, and a model peer that must end up with the desired set whatever the
//! changes and partial sends (`budget`).

mod budget;
mod changes;
mod packing;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

pub(super) use super::*;
use crate::bgp::wire::{
    DecodeContext, Message, MpReach, Nlri, Update, UpdateContext, UpdateMode, decode_message, encode,
};

pub(super) const NODE_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
pub(super) const NODE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 2);

pub(super) fn negotiated(external: bool, families: &[Family]) -> Negotiated {
    Negotiated {
        peer_as: if external { 65000 } else { 65001 },
        peer_bgp_id: Ipv4Addr::new(10, 0, 0, 1),
        hold_time: 90,
        keepalive: None,
        four_octet_as: true,
        families: families.to_vec(),
        peer_route_refresh: true,
        peer_graceful_restart: None,
        local_restarting: false,
        extended_next_hop: vec![],
        external,
    }
}

pub(super) fn both() -> Vec<Family> {
    Family::ALL.to_vec()
}

pub(super) fn p(text: &str) -> IpNet {
    text.parse().unwrap()
}

/// A ready Adj-RIB-Out with the node's addresses set and the session up.
pub(super) fn rib(external: bool) -> AdjRibOut {
    let mut rib = AdjRibOut::new(65001);
    rib.set_local_addresses(Some(NODE_V4), Some(NODE_V6));
    rib.set_ready();
    rib.session_up(&negotiated(external, &both()));
    rib
}

/// Everything due now, decoded back through the real decoder.
pub(super) fn take(rib: &mut AdjRibOut) -> Vec<Update> {
    let external = rib.session.as_ref().is_none_or(|s| s.external);
    decode_all(&rib.take_output(usize::MAX).bytes, external)
}

/// Splits concatenated messages by their length field and decodes each UPDATE.
pub(super) fn decode_all(mut bytes: &[u8], external: bool) -> Vec<Update> {
    let context = DecodeContext {
        update: UpdateContext {
            four_octet_as: true,
            external_peer: external,
        },
        update_mode: UpdateMode::Full,
    };
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
        let Message::Update(update) = decode_message(&bytes[..len], context).unwrap().message else {
            panic!("not an UPDATE")
        };
        out.push(*update);
        bytes = &bytes[len..];
    }
    out
}

pub(super) fn encoded_len(update: &Update) -> usize {
    encode(
        &Message::Update(Box::new(update.clone())),
        EncodeContext { four_octet_as: true },
    )
    .unwrap()
    .len()
}

/// What an external peer holds after applying UPDATEs: prefix → (next hop, attributes).
#[derive(Debug, Default, PartialEq)]
pub(super) struct PeerTable(pub(super) BTreeMap<IpNet, (IpAddr, PathAttributes)>);

impl PeerTable {
    pub(super) fn apply(&mut self, updates: &[Update]) {
        for update in updates {
            // Everything goes through the real encoder and decoder.
            let bytes = encode(
                &Message::Update(Box::new(update.clone())),
                EncodeContext { four_octet_as: true },
            )
            .unwrap();
            assert!(bytes.len() <= 4096);
            let context = DecodeContext {
                update: UpdateContext {
                    four_octet_as: true,
                    external_peer: true,
                },
                update_mode: UpdateMode::Full,
            };
            let Message::Update(update) = decode_message(&bytes, context).unwrap().message else {
                panic!()
            };
            for prefix in &update.withdrawn {
                self.0.remove(&IpNet::V4(*prefix));
            }
            if let Some(Nlri::Ipv6(prefixes)) = &update.mp_unreach {
                for prefix in prefixes {
                    self.0.remove(&IpNet::V6(*prefix));
                }
            }
            let mut attributes = update.attributes.clone();
            let next_hop = attributes.next_hop.take();
            for prefix in &update.nlri {
                self.0.insert(
                    IpNet::V4(*prefix),
                    (IpAddr::V4(next_hop.unwrap()), attributes.clone()),
                );
            }
            if let Some(MpReach { next_hop, nlri }) = &update.mp_reach {
                let prefixes: Vec<IpNet> = match nlri {
                    Nlri::Ipv4(v) => v.iter().map(|p| IpNet::V4(*p)).collect(),
                    Nlri::Ipv6(v) => v.iter().map(|p| IpNet::V6(*p)).collect(),
                };
                for prefix in prefixes {
                    self.0.insert(prefix, (next_hop.global, attributes.clone()));
                }
            }
        }
    }
}
