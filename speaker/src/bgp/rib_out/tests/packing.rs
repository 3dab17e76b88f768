//! Packing at the 4096-byte limit.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::*;

#[test]
fn an_update_fills_to_exactly_4096_bytes() {
    // Header 23 + ORIGIN 4 + AS_PATH 9 + NEXT_HOP 7 = 43; 4096 - 43 = 4053 = 809 × 5 (/32) + 2 × 4 (/24).
    let mut rib = rib(true);
    rib.announce(p("10.0.0.0/24"), RouteAttributes::default())
        .unwrap();
    rib.announce(p("10.0.1.0/24"), RouteAttributes::default())
        .unwrap();
    for i in 0..810u32 {
        rib.announce(
            IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0a01_0000 + i), 32).unwrap()),
            RouteAttributes::default(),
        )
        .unwrap();
    }
    let updates = take(&mut rib);
    assert_eq!(encoded_len(&updates[0]), 4096);
    assert_eq!(updates[0].nlri.len(), 811);
    assert_eq!(updates[1].nlri.len(), 1);
    assert_eq!(encoded_len(&updates[1]), 43 + 5);
}

#[test]
fn withdrawals_fill_to_the_limit() {
    let mut rib = rib(true);
    let v4: Vec<IpNet> = (0..815u32)
        .map(|i| IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 + i), 32).unwrap()))
        .collect();
    let v6: Vec<IpNet> = (0..300u128)
        .map(|i| IpNet::V6(Ipv6Net::new(Ipv6Addr::from((0xfd00u128 << 112) + i), 128).unwrap()))
        .collect();
    for prefix in v4.iter().chain(&v6) {
        rib.announce(*prefix, RouteAttributes::default()).unwrap();
    }
    take(&mut rib);
    for prefix in v4.iter().chain(&v6) {
        rib.withdraw(*prefix);
    }
    let updates = take(&mut rib);
    // IPv4: 23 + 814 × 5 = 4093; one /32 more would not fit. IPv6: header and lengths 23,
    // MP_UNREACH_NLRI header 4 (extended length) and AFI/SAFI 3, 17 per /128: 239.
    let sizes: Vec<(usize, usize)> = updates
        .iter()
        .map(|u| (u.withdrawn.len(), encoded_len(u)))
        .collect();
    assert_eq!(sizes[..2], [(814, 4093), (1, 28)]);
    let v6_counts: Vec<usize> = updates[2..]
        .iter()
        .map(|u| u.mp_unreach.as_ref().unwrap().len())
        .collect();
    assert_eq!(v6_counts, vec![239, 61]);
    assert_eq!(encoded_len(&updates[2]), 23 + 4 + 3 + 239 * 17);
}

#[test]
fn hundred_thousand_prefixes_take_the_fewest_updates() {
    let mut rib = rib(true);
    for i in 0..100_000u32 {
        let prefix = Ipv4Net::new(Ipv4Addr::from(0x0a10_0000 + i), 32).unwrap();
        rib.announce(IpNet::V4(prefix), RouteAttributes::default())
            .unwrap();
    }
    for i in 0..100_000u128 {
        let prefix = Ipv6Net::new(Ipv6Addr::from((0xfd00_0010_0016u128 << 80) + i), 128).unwrap();
        rib.announce(IpNet::V6(prefix), RouteAttributes::default())
            .unwrap();
    }
    let updates = take(&mut rib);
    let v4 = updates.iter().filter(|u| !u.nlri.is_empty()).count();
    let v6 = updates.iter().filter(|u| u.mp_reach.is_some()).count();
    // IPv4: 810 /32s per UPDATE (43 + 5 × 810 = 4093), ⌈100000 / 810⌉ = 124, the lower bound
    // ⌈100000 × 5 / (4096 − 43)⌉. IPv6: 23 + 13 + 4 + 21 = 61 fixed, 17 per /128: 237 per
    // UPDATE, ⌈100000 / 237⌉ = 422.
    assert_eq!((v4, v6), (124, 422));
    assert_eq!(updates.len(), 124 + 422 + 2);
    let mut peer = PeerTable::default();
    peer.apply(&updates);
    assert_eq!(peer.0.len(), 200_000);
}
