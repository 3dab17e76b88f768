//! The driver against BIRD 2 in a ToR namespace: sessions over IPv4 and IPv6 transport, IPv4 and
//! IPv6 prefixes announced and withdrawn, route refresh, passive mode, multihop. BIRD's own
//! tables (`birdc show route`) are the oracle. Needs root; fails when BIRD is missing.

mod common;

use std::net::{IpAddr, SocketAddr};

use common::peers::{Bird, PeerSpec};
use common::*;
use kube_ovn_speaker::bgp::fsm::State;
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::driver::{PeerConfig, Speaker, SpeakerConfig};

#[test]
fn ipv4_transport_announce_and_withdraw_both_families() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4)).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig::new(IpAddr::V4(TOR_V4), session(false)))
            .unwrap();
        announce_both_families(&peer);
        bird.wait_established().unwrap();
        bird.wait_count("master4", 100).unwrap();
        bird.wait_count("master6", 1).unwrap();
        let route = bird.route_all("10.17.0.5/32").unwrap();
        assert!(route.contains("BGP.next_hop: 198.51.100.2"), "{route}");
        assert!(route.contains("BGP.as_path: 65001"), "{route}");
        let v6 = bird.route_all(V6_PREFIX).unwrap();
        assert!(v6.contains("2001:db8:100::2"), "{v6}");

        peer.withdraw_many((0..10).map(host)).unwrap();
        peer.withdraw(v6_prefix()).unwrap();
        bird.wait_count("master4", 90).unwrap();
        bird.wait_count("master6", 0).unwrap();
        assert!(!bird.has("10.17.0.5/32").unwrap());
        assert!(bird.has("10.17.0.50/32").unwrap());

        let status = peer.status();
        assert_eq!(status.state, State::Established);
        assert_eq!(status.prefixes_sent, 90);
        assert_eq!(status.local_address, Some(IpAddr::V4(NODE_V4)));
        assert!(status.messages_received.keepalive >= 1 && status.messages_sent.open == 1);
        assert_eq!(status.flaps, 0);
    });
}

#[test]
fn ipv6_transport_carries_both_families() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V6)).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig::new(IpAddr::V6(TOR_V6), session(false)))
            .unwrap();
        peer.announce_many(hosts(20)).unwrap();
        peer.announce(v6_prefix(), RouteAttributes::default()).unwrap();
        // Now IPv4 routes need the IPv4 next hop from the caller (no RFC 8950 here).
        peer.set_local_addresses(Some(NODE_V4), None).unwrap();
        peer.set_ready().unwrap();
        bird.wait_established().unwrap();
        bird.wait_count("master6", 1).unwrap();
        bird.wait_count("master4", 20).unwrap();
        let v6 = bird.route_all(V6_PREFIX).unwrap();
        assert!(v6.contains("BGP.next_hop: 2001:db8:100::2"), "{v6}");
        assert_eq!(peer.status().local_address, Some(IpAddr::V6(NODE_V6)));
        peer.withdraw(v6_prefix()).unwrap();
        bird.wait_count("master6", 0).unwrap();
    });
}

#[test]
fn route_refresh_from_the_peer_resends_the_table() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4)).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig::new(IpAddr::V4(TOR_V4), session(false)))
            .unwrap();
        peer.announce_many(hosts(1000)).unwrap();
        peer.set_ready().unwrap();
        bird.wait_count("master4", 1000).unwrap();
        let before = block(
            rt,
            peer.wait_for("the table and End-of-RIBs", WAIT, |s| s.initial_table_sent),
        )
        .unwrap();
        // `reload in` makes BIRD send ROUTE-REFRESH for each family (RFC 2918).
        bird.birdc(&["reload", "in", "node"]).unwrap();
        let after = block(
            rt,
            peer.wait_for("ROUTE-REFRESH for both families", WAIT, |s| {
                s.messages_received.route_refresh >= 2
            }),
        )
        .unwrap();
        // 1000 /32s fit in 2 UPDATEs; IPv6 has nothing to re-send.
        assert_eq!(
            after.messages_sent.update,
            before.messages_sent.update + 2,
            "{before:?} -> {after:?}"
        );
        bird.wait_count("master4", 1000).unwrap();
        assert_eq!(after.flaps, 0);
    });
}

#[test]
fn passive_speaker_with_md5_accepts_the_peers_connection() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let spec = PeerSpec {
        passive: false,
        password: Some("s3cr3t-md5".into()),
        ..PeerSpec::new(TOR_V4, NODE_V4)
    };
    let bird = Bird::start(&lab.tor, &spec).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        // One dual-stack listener on [::]:179; the MD5 key goes onto it for the peer.
        let speaker = Speaker::new(SpeakerConfig {
            listen: vec![SocketAddr::from(([0u16; 8], 179))],
            allowed_sources: None,
        })
        .unwrap();
        let peer = speaker
            .add_peer(PeerConfig {
                md5_key: Some(b"s3cr3t-md5".to_vec()),
                ..PeerConfig::new(IpAddr::V4(TOR_V4), session(true))
            })
            .unwrap();
        peer.announce_many(hosts(10)).unwrap();
        peer.set_ready().unwrap();
        bird.wait_established().unwrap();
        bird.wait_count("master4", 10).unwrap();
        let status = peer.status();
        assert_eq!(
            status.messages_sent.open, 1,
            "the passive side only answers: {status:?}"
        );
    });
}

#[test]
fn multihop_peer_two_hops_away() {
    init_tracing();
    let lab = Lab::routed().unwrap();
    let spec = PeerSpec {
        multihop: Some(2),
        ..PeerSpec::new(FAR_TOR_V4, NODE_V4)
    };
    let bird = Bird::start(&lab.tor, &spec).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        // The eBGP default TTL of 1 dies at the router: never Established.
        let single_hop = speaker
            .add_peer(PeerConfig::new(IpAddr::V4(FAR_TOR_V4), session(false)))
            .unwrap();
        let stuck = block(
            rt,
            single_hop.wait_for("OpenSent", std::time::Duration::from_secs(3), |s| {
                s.state >= State::OpenSent
            }),
        );
        assert!(stuck.is_err(), "TTL 1 must not reach a peer two hops away");
        block(rt, speaker.remove_peer(IpAddr::V4(FAR_TOR_V4))).unwrap();

        let peer = speaker
            .add_peer(PeerConfig {
                ttl: Some(2),
                ..PeerConfig::new(IpAddr::V4(FAR_TOR_V4), session(false))
            })
            .unwrap();
        peer.announce_many(hosts(5)).unwrap();
        peer.set_ready().unwrap();
        bird.wait_established().unwrap();
        bird.wait_count("master4", 5).unwrap();
        assert_eq!(peer.status().local_address, Some(IpAddr::V4(NODE_V4)));
    });
}
