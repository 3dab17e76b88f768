//! What goes out for each kind of change.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

use super::*;
use crate::bgp::wire::{Nlri, Update};

#[test]
fn nothing_goes_out_before_the_session_is_up_and_the_data_ready() {
    let mut rib = AdjRibOut::new(65001);
    rib.set_local_addresses(Some(NODE_V4), Some(NODE_V6));
    rib.announce(p("10.16.0.0/16"), RouteAttributes::default())
        .unwrap();
    assert_eq!(take(&mut rib), vec![]);
    rib.session_up(&negotiated(true, &both()));
    assert_eq!(take(&mut rib), vec![], "held until set_ready (RFC 4724 §4.1)");
    rib.announce(p("10.17.0.1/32"), RouteAttributes::default())
        .unwrap();
    rib.set_ready();
    let updates = take(&mut rib);
    assert_eq!(updates.len(), 3);
    assert_eq!(
        updates[0].nlri,
        vec![
            "10.16.0.0/16".parse::<Ipv4Net>().unwrap(),
            "10.17.0.1/32".parse().unwrap()
        ]
    );
    assert_eq!(updates[1], Update::end_of_rib(Family::Ipv4Unicast));
    assert_eq!(updates[2], Update::end_of_rib(Family::Ipv6Unicast));
    assert_eq!(take(&mut rib), vec![], "nothing changed since");
}

#[test]
fn ebgp_initial_dump_has_our_as_and_no_local_pref() {
    let mut rib = rib(true);
    rib.announce(
        p("10.16.0.0/16"),
        RouteAttributes {
            local_pref: Some(300),
            med: Some(5),
            ..Default::default()
        },
    )
    .unwrap();
    rib.announce(p("fd00:10:16::/64"), RouteAttributes::default())
        .unwrap();
    let updates = take(&mut rib);
    assert_eq!(updates.len(), 4);
    let v4 = &updates[0];
    let expected_path = vec![AsPathSegment {
        kind: AsPathSegmentKind::Sequence,
        asns: vec![65001],
    }];
    assert_eq!(v4.attributes.as_path, Some(expected_path.clone()));
    assert_eq!(v4.attributes.origin, Some(Origin::Igp));
    assert_eq!(v4.attributes.next_hop, Some(NODE_V4));
    assert_eq!(
        v4.attributes.local_pref, None,
        "RFC 4271 §5.1.5: never to external peers"
    );
    assert_eq!(v4.attributes.med, Some(5));
    let v6 = &updates[1];
    assert_eq!(v6.attributes.next_hop, None);
    assert_eq!(v6.attributes.as_path, Some(expected_path));
    let reach = v6.mp_reach.as_ref().unwrap();
    assert_eq!(reach.next_hop.global, IpAddr::V6(NODE_V6));
    assert_eq!(reach.nlri, Nlri::Ipv6(vec!["fd00:10:16::/64".parse().unwrap()]));
    assert_eq!(
        &updates[2..],
        &[
            Update::end_of_rib(Family::Ipv4Unicast),
            Update::end_of_rib(Family::Ipv6Unicast)
        ]
    );
}

#[test]
fn ibgp_gets_an_empty_as_path_and_local_pref() {
    let mut rib = rib(false);
    rib.announce(p("10.16.0.0/16"), RouteAttributes::default())
        .unwrap();
    rib.announce(
        p("10.17.0.0/16"),
        RouteAttributes {
            local_pref: Some(200),
            ..Default::default()
        },
    )
    .unwrap();
    let updates = take(&mut rib);
    let prefs: Vec<Option<u32>> = updates[..2].iter().map(|u| u.attributes.local_pref).collect();
    assert_eq!(prefs, vec![Some(DEFAULT_LOCAL_PREF), Some(200)]);
    assert!(updates[..2].iter().all(|u| u.attributes.as_path == Some(vec![])));
}

#[test]
fn prefixes_group_by_attribute_set() {
    let mut rib = rib(true);
    let blue = RouteAttributes {
        communities: vec![2, 1],
        ..Default::default()
    };
    let blue_reordered = RouteAttributes {
        communities: vec![1, 2, 2],
        ..Default::default()
    };
    let red = RouteAttributes {
        large_communities: vec![LargeCommunity {
            global_admin: 65001,
            local_data1: 1,
            local_data2: 1,
        }],
        ..Default::default()
    };
    rib.announce(p("10.0.0.1/32"), blue).unwrap();
    rib.announce(p("10.0.0.2/32"), red.clone()).unwrap();
    rib.announce(p("10.0.0.3/32"), blue_reordered).unwrap();
    rib.announce(p("10.0.0.4/32"), red).unwrap();
    let updates = take(&mut rib);
    let groups: Vec<(Vec<u32>, usize)> = updates[..2]
        .iter()
        .map(|u| (u.attributes.communities.clone(), u.nlri.len()))
        .collect();
    assert_eq!(groups, vec![(vec![], 2), (vec![1, 2], 2)]);
}

#[test]
fn incremental_changes_send_only_the_difference() {
    let mut rib = rib(true);
    rib.announce(p("10.16.0.0/16"), RouteAttributes::default())
        .unwrap();
    rib.announce(p("fd00::/64"), RouteAttributes::default()).unwrap();
    take(&mut rib);

    rib.announce(p("10.17.0.5/32"), RouteAttributes::default())
        .unwrap();
    let updates = take(&mut rib);
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].nlri, vec!["10.17.0.5/32".parse::<Ipv4Net>().unwrap()]);

    rib.announce(p("10.17.0.5/32"), RouteAttributes::default())
        .unwrap();
    assert_eq!(take(&mut rib), vec![], "same route again: nothing");

    rib.announce(
        p("10.17.0.5/32"),
        RouteAttributes {
            communities: vec![7],
            ..Default::default()
        },
    )
    .unwrap();
    let updates = take(&mut rib);
    assert_eq!(
        (updates.len(), updates[0].attributes.communities.clone()),
        (1, vec![7])
    );

    rib.withdraw(p("10.17.0.5/32"));
    rib.withdraw(p("fd00::/64"));
    rib.withdraw(p("10.99.0.0/16"));
    let updates = take(&mut rib);
    assert_eq!(
        updates,
        vec![
            Update {
                withdrawn: vec!["10.17.0.5/32".parse().unwrap()],
                ..Update::default()
            },
            Update {
                mp_unreach: Some(Nlri::Ipv6(vec!["fd00::/64".parse::<Ipv6Net>().unwrap()])),
                ..Update::default()
            },
        ]
    );
    assert_eq!(rib.sent_count(), 1);
}

#[test]
fn replace_all_diffs_against_what_was_sent() {
    let mut rib = rib(true);
    let attrs = RouteAttributes::default;
    rib.replace_all([(p("10.0.0.1/32"), attrs()), (p("10.0.0.2/32"), attrs())])
        .unwrap();
    take(&mut rib);
    rib.replace_all([(p("10.0.0.2/32"), attrs()), (p("10.0.0.3/32"), attrs())])
        .unwrap();
    let updates = take(&mut rib);
    assert_eq!(updates.len(), 2);
    assert_eq!(
        updates[0].withdrawn,
        vec!["10.0.0.1/32".parse::<Ipv4Net>().unwrap()]
    );
    assert_eq!(updates[1].nlri, vec!["10.0.0.3/32".parse::<Ipv4Net>().unwrap()]);
}

#[test]
fn next_hop_change_reannounces_affected_routes_only() {
    let mut rib = rib(true);
    let fixed = RouteAttributes {
        next_hop: NextHop::Address("192.0.2.9".parse().unwrap()),
        ..Default::default()
    };
    rib.announce(p("10.16.0.0/16"), RouteAttributes::default())
        .unwrap();
    rib.announce(p("10.18.0.0/16"), fixed).unwrap();
    rib.announce(p("fd00::/64"), RouteAttributes::default()).unwrap();
    take(&mut rib);

    let moved = Ipv4Addr::new(198, 51, 100, 77);
    rib.set_local_addresses(Some(moved), Some(NODE_V6));
    let updates = take(&mut rib);
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].nlri, vec!["10.16.0.0/16".parse::<Ipv4Net>().unwrap()]);
    assert_eq!(updates[0].attributes.next_hop, Some(moved));

    // The IPv6 address disappeared: a stale next hop is withdrawn, not left.
    rib.set_local_addresses(Some(moved), None);
    let updates = take(&mut rib);
    assert_eq!(
        updates,
        vec![Update {
            mp_unreach: Some(Nlri::Ipv6(vec!["fd00::/64".parse().unwrap()])),
            ..Update::default()
        }]
    );
}

#[test]
fn route_refresh_resends_one_family() {
    let mut rib = rib(true);
    assert_eq!(
        rib.route_refresh(Family::Ipv4Unicast),
        0,
        "before the initial table"
    );
    rib.announce(p("10.16.0.0/16"), RouteAttributes::default())
        .unwrap();
    rib.announce(
        p("10.17.0.0/16"),
        RouteAttributes {
            med: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    rib.announce(p("fd00::/64"), RouteAttributes::default()).unwrap();
    let initial = take(&mut rib);
    assert_eq!(rib.route_refresh(Family::Ipv4Unicast), 2);
    assert_eq!(take(&mut rib), initial[..2].to_vec());
    assert_eq!(rib.route_refresh(Family::Ipv6Unicast), 1);
    assert_eq!(take(&mut rib), initial[2..3].to_vec());
    assert_eq!(take(&mut rib), vec![], "once");
}

#[test]
fn families_not_negotiated_are_held_back() {
    let mut rib = AdjRibOut::new(65001);
    rib.set_local_addresses(Some(NODE_V4), Some(NODE_V6));
    rib.set_ready();
    rib.session_up(&negotiated(true, &[Family::Ipv4Unicast]));
    rib.announce(p("fd00::/64"), RouteAttributes::default()).unwrap();
    rib.announce(p("10.16.0.0/16"), RouteAttributes::default())
        .unwrap();
    let updates = take(&mut rib);
    assert_eq!(updates.len(), 2);
    assert_eq!(updates[1], Update::end_of_rib(Family::Ipv4Unicast));
    assert_eq!(rib.route_refresh(Family::Ipv6Unicast), 0);
}

#[test]
fn ipv4_routes_take_the_ipv6_next_hop_only_with_extended_next_hop() {
    for extended in [false, true] {
        let mut rib = AdjRibOut::new(65001);
        rib.set_local_addresses(None, Some(NODE_V6));
        rib.set_ready();
        let mut n = negotiated(true, &both());
        if extended {
            n.extended_next_hop = vec![crate::bgp::wire::ExtendedNextHop {
                family: Family::Ipv4Unicast,
                next_hop_afi: 2,
            }];
        }
        rib.session_up(&n);
        rib.announce(p("10.16.0.0/16"), RouteAttributes::default())
            .unwrap();
        let updates = take(&mut rib);
        if extended {
            let reach = updates[0].mp_reach.as_ref().unwrap();
            assert_eq!(
                (reach.next_hop.global, reach.nlri.family()),
                (IpAddr::V6(NODE_V6), Family::Ipv4Unicast)
            );
        } else {
            assert_eq!(updates.len(), 2, "only the two End-of-RIBs");
        }
    }
}

#[test]
fn a_link_local_address_follows_a_global_next_hop_and_stands_alone_without_one() {
    let ll: Ipv6Addr = "fe80::8e5:dff:fe14:a8b8".parse().unwrap();
    let mut rib = AdjRibOut::new(65001);
    rib.set_local_addresses(None, Some(NODE_V6));
    rib.set_link_local(Some(ll));
    rib.set_ready();
    let mut n = negotiated(true, &both());
    n.extended_next_hop = vec![crate::bgp::wire::ExtendedNextHop {
        family: Family::Ipv4Unicast,
        next_hop_afi: 2,
    }];
    rib.session_up(&n);
    rib.announce(p("10.16.0.0/16"), RouteAttributes::default())
        .unwrap();
    rib.announce(p("fd00:10:16::/64"), RouteAttributes::default())
        .unwrap();
    let hops = |updates: &[Update]| -> Vec<(IpAddr, Option<Ipv6Addr>)> {
        updates
            .iter()
            .filter_map(|u| u.mp_reach.as_ref())
            .map(|r| (r.next_hop.global, r.next_hop.link_local))
            .collect()
    };
    // RFC 2545 §3: global and link-local, for IPv4 (RFC 8950) and IPv6 routes alike.
    assert_eq!(hops(&take(&mut rib)), [(IpAddr::V6(NODE_V6), Some(ll)); 2]);
    // An unnumbered link with no global address: the link-local one is the next hop alone.
    rib.set_local_addresses(None, Some(ll));
    assert_eq!(hops(&take(&mut rib)), [(IpAddr::V6(ll), None); 2]);
    // A route with a next hop of its own carries no link-local address of ours.
    rib.announce(
        p("fd00:10:17::/64"),
        RouteAttributes {
            next_hop: NextHop::Address("2001:db8::9".parse().unwrap()),
            ..RouteAttributes::default()
        },
    )
    .unwrap();
    rib.set_local_addresses(None, Some(NODE_V6));
    let updates = take(&mut rib);
    assert!(
        hops(&updates).contains(&("2001:db8::9".parse().unwrap(), None)),
        "{updates:?}"
    );
}

#[test]
fn session_down_then_up_sends_the_whole_table_again() {
    let mut rib = rib(true);
    rib.announce(p("10.16.0.0/16"), RouteAttributes::default())
        .unwrap();
    let first = take(&mut rib);
    rib.session_down();
    assert_eq!(rib.sent_count(), 0);
    rib.session_up(&negotiated(true, &both()));
    assert_eq!(take(&mut rib), first);
}

#[test]
fn multicast_prefixes_are_refused() {
    let mut rib = rib(true);
    for prefix in ["224.0.0.0/4", "255.255.255.254/31", "ff02::/16"] {
        assert_eq!(
            rib.announce(p(prefix), RouteAttributes::default()),
            Err(RibOutError::NotUnicast { prefix: p(prefix) })
        );
    }
    assert!(rib.announce(p("0.0.0.0/0"), RouteAttributes::default()).is_ok());
}

#[test]
fn replace_all_leaves_a_multicast_prefix_out_alone() {
    let mut rib = rib(true);
    let attrs = RouteAttributes::default;
    rib.replace_all([(p("10.0.0.1/32"), attrs())]).unwrap();
    take(&mut rib);
    // One multicast prefix among the set: refused and named, while the new route goes out
    // and the dropped one is withdrawn.
    assert_eq!(
        rib.replace_all([(p("239.1.1.1/32"), attrs()), (p("10.0.0.2/32"), attrs())]),
        Err(RibOutError::NotUnicast {
            prefix: p("239.1.1.1/32")
        })
    );
    let updates = take(&mut rib);
    assert_eq!(updates.len(), 2, "{updates:?}");
    assert_eq!(
        updates[0].withdrawn,
        vec!["10.0.0.1/32".parse::<Ipv4Net>().unwrap()]
    );
    assert_eq!(updates[1].nlri, vec!["10.0.0.2/32".parse::<Ipv4Net>().unwrap()]);
}

#[test]
fn prepend_repeats_our_as_to_external_peers_only() {
    for external in [true, false] {
        let mut rib = rib(external);
        rib.announce(
            p("10.16.0.0/16"),
            RouteAttributes {
                as_path_prepend: 3,
                ..Default::default()
            },
        )
        .unwrap();
        let updates = take(&mut rib);
        let path = updates[0].attributes.as_path.clone().unwrap();
        if external {
            assert_eq!(
                path,
                vec![AsPathSegment {
                    kind: AsPathSegmentKind::Sequence,
                    asns: vec![65001; 4],
                }],
                "our AS once plus three prepends"
            );
        } else {
            assert!(
                path.is_empty(),
                "an internal peer gets an empty AS_PATH: {path:?}"
            );
        }
    }
}
