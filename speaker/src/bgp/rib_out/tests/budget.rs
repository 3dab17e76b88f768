//! Output within a byte budget (the driver's bound on what waits for a slow peer's socket):
//! superseded changes never reach the wire, outputs never pass the budget, what was encoded is
//! exactly what counts as sent, and a peer converges whatever the changes and partial sends.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use proptest::prelude::*;

use super::*;
use crate::bgp::wire::{MAX_MESSAGE_LEN, Update};

fn host(i: u32) -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0a10_0000 + i), 32).unwrap())
}

fn med(value: u32) -> RouteAttributes {
    RouteAttributes {
        med: Some(value),
        ..Default::default()
    }
}

/// Attributes that cannot fit one UPDATE: 1100 communities are 4400 bytes of attribute.
fn too_large() -> RouteAttributes {
    RouteAttributes {
        communities: (0..1100).collect(),
        ..Default::default()
    }
}

/// Takes everything in outputs of at most `budget` bytes, checking each against the budget.
fn drain_in_steps(rib: &mut AdjRibOut, budget: usize) -> Vec<Output> {
    let mut outputs = Vec::new();
    loop {
        let output = rib.take_output(budget);
        if output.bytes.is_empty() {
            return outputs;
        }
        assert!(
            output.bytes.len() <= budget.max(MAX_MESSAGE_LEN),
            "{} bytes for a budget of {budget}",
            output.bytes.len()
        );
        outputs.push(output);
    }
}

#[test]
fn a_slow_peer_gets_the_latest_state_not_every_change() {
    let mut rib = rib(true);
    for i in 0..1000 {
        rib.announce(host(i), med(0)).unwrap();
    }
    let mut peer = PeerTable::default();
    peer.apply(&take(&mut rib));
    // The socket takes nothing while every route changes fifty times.
    for round in 1..=50 {
        for i in 0..1000 {
            rib.announce(host(i), med(round)).unwrap();
        }
    }
    assert_eq!(rib.pending_count(), 1000);
    let updates = take(&mut rib);
    // 1000 /32s with one attribute set: two UPDATEs (810 fit in one), all with the last MED.
    assert_eq!(updates.len(), 2);
    assert!(
        updates.iter().all(|u| u.attributes.med == Some(50)),
        "{updates:?}"
    );
    peer.apply(&updates);
    assert_eq!(peer.0.len(), 1000);
    assert!(peer.0.values().all(|(_, a)| a.med == Some(50)));

    // A change undone before it went out sends nothing at all.
    rib.announce(host(7), med(99)).unwrap();
    rib.announce(host(7), med(50)).unwrap();
    rib.withdraw(host(8));
    rib.announce(host(8), med(50)).unwrap();
    assert_eq!(take(&mut rib), vec![]);
}

#[test]
fn outputs_stay_within_the_budget_and_end_of_rib_comes_last() {
    let mut rib = rib(true);
    for i in 0..100_000 {
        rib.announce(host(i), RouteAttributes::default()).unwrap();
    }
    let budget = 64 * 1024;
    let outputs = drain_in_steps(&mut rib, budget);
    // 100,000 × 5 bytes of NLRI in 64 KiB outputs: about eight of them.
    assert!((8..=12).contains(&outputs.len()), "{} outputs", outputs.len());
    let (last, before) = outputs.split_last().unwrap();
    assert!(last.end_of_rib && before.iter().all(|o| !o.end_of_rib));
    let mut peer = PeerTable::default();
    let mut updates = Vec::new();
    for output in &outputs {
        updates.extend(decode_all(&output.bytes, true));
    }
    let tail = &updates[updates.len() - 2..];
    assert_eq!(
        tail,
        &[
            Update::end_of_rib(Family::Ipv4Unicast),
            Update::end_of_rib(Family::Ipv6Unicast)
        ]
    );
    peer.apply(&updates);
    assert_eq!((peer.0.len(), rib.sent_count()), (100_000, 100_000));
    assert_eq!(
        outputs.iter().map(|o| o.updates).sum::<u64>(),
        updates.len() as u64
    );
}

#[test]
fn a_budget_smaller_than_a_message_still_sends_one_message_at_a_time() {
    let mut rib = rib(true);
    for i in 0..3 {
        rib.announce(host(i), med(i)).unwrap();
    }
    let outputs = drain_in_steps(&mut rib, 1);
    let counts: Vec<u64> = outputs.iter().map(|o| o.updates).collect();
    // One UPDATE per attribute set, then the two End-of-RIBs together (23 and 30 bytes).
    assert_eq!(counts, vec![1, 1, 1, 2]);
    assert_eq!(rib.sent_count(), 3);
    assert_eq!(rib.take_output(0), Output::default(), "no budget, no output");
}

#[test]
fn an_unencodable_route_is_not_counted_as_sent_and_the_old_one_is_withdrawn() {
    let mut rib = rib(true);
    rib.announce(host(1), RouteAttributes::default()).unwrap();
    rib.announce(host(2), too_large()).unwrap();
    let mut peer = PeerTable::default();
    let initial = take(&mut rib);
    peer.apply(&initial);
    // host(2) could not go; the table and the End-of-RIBs did.
    assert_eq!(peer.0.keys().copied().collect::<Vec<_>>(), vec![host(1)]);
    assert_eq!(initial.len(), 3);
    assert_eq!((rib.sent_count(), rib.unsendable_count()), (1, 1));
    let failures = rib.take_failures();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].prefixes, vec![host(2)]);
    assert!(matches!(
        failures[0].error,
        EncodeError::TooLong { message_type: 2, .. }
    ));
    assert_eq!(take(&mut rib), vec![], "not tried again while nothing changed");

    // The peer holds host(1); its new attributes cannot be sent: the old route is withdrawn,
    // not left behind as if it were still what we want.
    rib.announce(host(1), too_large()).unwrap();
    peer.apply(&take(&mut rib));
    assert!(peer.0.is_empty());
    assert_eq!((rib.sent_count(), rib.unsendable_count()), (0, 2));

    // A route that can be encoded again goes out.
    rib.announce(host(2), med(3)).unwrap();
    peer.apply(&take(&mut rib));
    assert_eq!(peer.0.keys().copied().collect::<Vec<_>>(), vec![host(2)]);
    assert_eq!((rib.sent_count(), rib.unsendable_count()), (1, 1));
}

#[test]
fn passes_hold_partial_updates_back_without_starving_small_groups() {
    // More prefixes than one pass plans: 50,000 sharing attributes and 20,000 each with its own.
    let mut rib = rib(true);
    for i in 0..50_000 {
        rib.announce(host(i), RouteAttributes::default()).unwrap();
    }
    for i in 50_000..70_000 {
        rib.announce(host(i), med(i)).unwrap();
    }
    let updates = take(&mut rib);
    let mut peer = PeerTable::default();
    peer.apply(&updates);
    assert_eq!((peer.0.len(), rib.sent_count()), (70_000, 70_000));
    // One pass would make ⌈50000 / 810⌉ = 62 UPDATEs for the shared set, one per singleton and
    // two End-of-RIBs. Passes take at most 16,384 prefixes (five here) in the table's hash order;
    // a pass holds its partial UPDATEs back for the next one, except a pass whose UPDATEs are all
    // partial (singletons and a few shared), which sends them: at most one extra per later pass.
    let one_pass = 62 + 20_000 + 2;
    assert!(
        (one_pass..=one_pass + 4).contains(&updates.len()),
        "{} UPDATEs, one pass would make {one_pass}",
        updates.len()
    );
    assert_eq!(rib.pending_count(), 0);
}

#[derive(Debug, Clone)]
enum Op {
    Announce(u8, u8),
    AnnounceTooLarge(u8),
    Withdraw(u8),
    MoveNextHop(u8),
    /// Take at most this many bytes (the socket had that much room).
    Send(u16),
    /// Take everything due (a fast peer).
    SendAll,
    SessionReset,
}

/// Even indexes IPv4 host routes, odd ones IPv6.
fn prefix_of(index: u8) -> IpNet {
    if index.is_multiple_of(2) {
        IpNet::V4(Ipv4Net::new(Ipv4Addr::new(10, 16, 0, index), 32).unwrap())
    } else {
        IpNet::V6(Ipv6Net::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(index)), 128).unwrap())
    }
}

proptest! {
    /// Whatever the changes, the partial and full sends and the session resets, once the socket takes
    /// everything the peer holds exactly the desired routes that can be encoded, with the
    /// right next hop; no output passes its budget; sent is what the peer holds.
    #[test]
    fn peer_converges_whatever_the_partial_sends(ops in proptest::collection::vec(
        prop_oneof![
            4 => (0u8..40, 0u8..3).prop_map(|(i, c)| Op::Announce(i, c)),
            1 => (0u8..40).prop_map(Op::AnnounceTooLarge),
            2 => (0u8..40).prop_map(Op::Withdraw),
            1 => (1u8..250).prop_map(Op::MoveNextHop),
            3 => (0u16..300).prop_map(Op::Send),
            1 => Just(Op::SendAll),
            1 => Just(Op::SessionReset),
        ],
        0..80,
    )) {
        let mut rib = rib(true);
        let mut peer = PeerTable::default();
        // prefix → Some(community) or None for attributes that cannot be encoded
        let mut desired: BTreeMap<IpNet, Option<u32>> = BTreeMap::new();
        let mut node_v4 = NODE_V4;
        for op in &ops {
            match op {
                Op::Announce(i, c) => {
                    let attrs = RouteAttributes { communities: vec![u32::from(*c)], ..Default::default() };
                    rib.announce(prefix_of(*i), attrs).unwrap();
                    desired.insert(prefix_of(*i), Some(u32::from(*c)));
                }
                Op::AnnounceTooLarge(i) => {
                    rib.announce(prefix_of(*i), too_large()).unwrap();
                    desired.insert(prefix_of(*i), None);
                }
                Op::Withdraw(i) => {
                    rib.withdraw(prefix_of(*i));
                    desired.remove(&prefix_of(*i));
                }
                Op::MoveNextHop(last) => {
                    node_v4 = Ipv4Addr::new(198, 51, 100, *last);
                    rib.set_local_addresses(Some(node_v4), Some(NODE_V6));
                }
                Op::Send(budget) => {
                    let budget = usize::from(*budget);
                    let output = rib.take_output(budget);
                    prop_assert!(output.bytes.len() <= budget.max(MAX_MESSAGE_LEN));
                    peer.apply(&decode_all(&output.bytes, true));
                }
                Op::SendAll => peer.apply(&take(&mut rib)),
                Op::SessionReset => {
                    // The peer drops what it had from us; the next session starts over.
                    rib.session_down();
                    peer = PeerTable::default();
                    rib.session_up(&negotiated(true, &both()));
                }
            }
        }
        peer.apply(&take(&mut rib));
        let held: BTreeMap<IpNet, (IpAddr, u32)> =
            peer.0.iter().map(|(p, (nh, a))| (*p, (*nh, a.communities[0]))).collect();
        let want: BTreeMap<IpNet, (IpAddr, u32)> = desired
            .iter()
            .filter_map(|(p, c)| {
                let nh = if matches!(p, IpNet::V4(_)) { IpAddr::V4(node_v4) } else { IpAddr::V6(NODE_V6) };
                c.map(|c| (*p, (nh, c)))
            })
            .collect();
        prop_assert_eq!(rib.sent_count(), want.len());
        prop_assert_eq!(held, want);
        prop_assert_eq!(rib.pending_count(), 0);
    }
}
