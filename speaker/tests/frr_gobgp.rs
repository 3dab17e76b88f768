//! The driver against FRR's bgpd (8.4, run without zebra) and gobgpd (3.10) in a ToR namespace:
//! sessions over IPv4 and IPv6 transport, both families announced and withdrawn, MD5, route
//! refresh from `clear bgp ... soft in`, passive mode with gobgpd connecting to us. Their CLIs
//! are the oracle. Needs root; fails when bgpd or gobgpd is missing.

mod common;

use std::net::{IpAddr, SocketAddr};

use common::peers::{Frr, Gobgp, PeerSpec};
use common::*;
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::driver::{PeerConfig, Speaker, SpeakerConfig};
use kube_ovn_testkit::wait_until;

#[test]
fn frr_ipv4_transport_md5_announce_withdraw_and_route_refresh() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let spec = PeerSpec {
        password: Some("s3cr3t-md5".into()),
        ..PeerSpec::new(TOR_V4, NODE_V4)
    };
    let frr = Frr::start(&lab.tor, &spec).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig {
                md5_key: Some(b"s3cr3t-md5".to_vec()),
                ..PeerConfig::new(IpAddr::V4(TOR_V4), session(false))
            })
            .unwrap();
        peer.announce_many(hosts(200)).unwrap();
        peer.announce(v6_prefix(), RouteAttributes::default()).unwrap();
        peer.set_local_addresses(None, Some(NODE_V6)).unwrap();
        peer.set_ready().unwrap();
        frr.wait_received("ipv4", 200).unwrap();
        frr.wait_received("ipv6", 1).unwrap();

        peer.withdraw_many((0..50).map(host)).unwrap();
        peer.withdraw(v6_prefix()).unwrap();
        frr.wait_received("ipv4", 150).unwrap();
        frr.wait_received("ipv6", 0).unwrap();

        let before = peer.status();
        frr.vtysh(&format!("clear bgp ipv4 unicast {NODE_V4} soft in"))
            .unwrap();
        let after = block(
            rt,
            peer.wait_for("ROUTE-REFRESH from bgpd", WAIT, |s| {
                s.messages_received.route_refresh > before.messages_received.route_refresh
                    && s.messages_sent.update > before.messages_sent.update
            }),
        )
        .unwrap();
        assert_eq!(after.flaps, 0);
        frr.wait_received("ipv4", 150).unwrap();
    });
}

#[test]
fn frr_ipv6_transport() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let frr = Frr::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V6)).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig::new(IpAddr::V6(TOR_V6), session(false)))
            .unwrap();
        peer.announce_many(hosts(10)).unwrap();
        peer.announce(v6_prefix(), RouteAttributes::default()).unwrap();
        peer.set_local_addresses(Some(NODE_V4), None).unwrap();
        peer.set_ready().unwrap();
        frr.wait_received("ipv6", 1).unwrap();
        frr.wait_received("ipv4", 10).unwrap();
        let route = frr.vtysh(&format!("show bgp ipv6 unicast {V6_PREFIX}")).unwrap();
        assert!(route.contains("2001:db8:100::2"), "{route}");
    });
}

#[test]
fn gobgp_announce_withdraw_both_families() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let gobgp = Gobgp::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4)).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig::new(IpAddr::V4(TOR_V4), session(false)))
            .unwrap();
        announce_both_families(&peer);
        wait_until("gobgpd to see the session Established", WAIT, || {
            gobgp.established()
        })
        .unwrap();
        gobgp.wait_count("ipv4", 100).unwrap();
        gobgp.wait_count("ipv6", 1).unwrap();
        peer.withdraw_many((0..10).map(host)).unwrap();
        peer.withdraw(v6_prefix()).unwrap();
        gobgp.wait_count("ipv4", 90).unwrap();
        gobgp.wait_count("ipv6", 0).unwrap();
        let prefixes = gobgp.prefixes("ipv4").unwrap();
        assert!(!prefixes.iter().any(|p| p == "10.17.0.5/32"), "{prefixes:?}");
    });
}

#[test]
fn gobgp_connects_to_a_passive_speaker() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let spec = PeerSpec {
        passive: false,
        ..PeerSpec::new(TOR_V4, NODE_V4)
    };
    let gobgp = Gobgp::start(&lab.tor, &spec).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig {
            listen: vec![SocketAddr::from((NODE_V4, 179))],
            allowed_sources: Some(vec!["198.51.100.0/24".parse().unwrap()]),
        })
        .unwrap();
        let peer = speaker
            .add_peer(PeerConfig::new(IpAddr::V4(TOR_V4), session(true)))
            .unwrap();
        peer.announce_many(hosts(7)).unwrap();
        peer.set_ready().unwrap();
        gobgp.wait_count("ipv4", 7).unwrap();
        assert!(gobgp.established().unwrap());
    });
}
