//! Sessions that fabrics use, against FRR 8.4 with zebra (so what bgpd accepts is also installed
//! in the ToR's kernel): RFC 8950 extended next hop (IPv4 routes over an IPv6 session, beside a
//! plain IPv4 session), and a session bound to a device (`vrf`; this kernel has no VRF driver, so
//! a plain interface stands in: `SO_BINDTODEVICE` works the same on both). BGP unnumbered is in
//! `frr_unnumbered.rs`. Each peer is built the way the speaker builds a `BgpPeer`
//! (`run::peers::from_bgp_peer` from a validated spec and the flags). Needs root; fails when FRR
//! is missing.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::frr_zebra::{Frr, bgp_peer, flags, host_routes, wait_kernel_route};
use common::*;
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::driver::{Speaker, SpeakerConfig};
use kube_ovn_testkit::wait_until;
use serde_json::json;

#[test]
fn extended_next_hop_carries_ipv4_over_an_ipv6_session_into_the_frr_kernel() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    // An address behind the node that only the IPv6 session announces, to ping through it.
    lab.node
        .ip(&["addr", "add", "10.17.0.1/32", "dev", "lo"])
        .unwrap();
    let frr = Frr::start(
        &lab.tor,
        "",
        &format!(
            "router bgp {TOR_AS}\n bgp router-id {TOR_V4}\n no bgp ebgp-requires-policy\n\
             neighbor {NODE_V6} remote-as {NODE_AS}\n neighbor {NODE_V6} passive\n\
             neighbor {NODE_V6} capability extended-nexthop\n\
             neighbor {NODE_V4} remote-as {NODE_AS}\n neighbor {NODE_V4} passive\n\
             address-family ipv4 unicast\n  neighbor {NODE_V6} activate\n  neighbor {NODE_V4} activate\n\
             exit-address-family\n address-family ipv6 unicast\n  neighbor {NODE_V6} activate\n\
             exit-address-family\n"
        ),
    )
    .unwrap();
    let config = flags(&[]);
    let over_v6 = bgp_peer(
        &config,
        json!({ "peerAddress": TOR_V6.to_string(), "peerASN": TOR_AS, "extendedNexthop": true }),
        IpAddr::V6(TOR_V6),
    );
    assert_eq!(
        over_v6.session.families.len(),
        2,
        "both families on the IPv6 session"
    );
    let plain_v4 = bgp_peer(
        &config,
        json!({ "peerAddress": TOR_V4.to_string(), "peerASN": TOR_AS }),
        IpAddr::V4(TOR_V4),
    );
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let v6 = speaker.add_peer(over_v6).unwrap();
        v6.announce_many(host_routes(17, 10)).unwrap();
        v6.announce(v6_prefix(), RouteAttributes::default()).unwrap();
        // What the next-hop task sets: the kernel's source toward the IPv6 peer.
        v6.set_local_addresses(None, Some(NODE_V6)).unwrap();
        v6.set_ready().unwrap();
        let v4 = speaker.add_peer(plain_v4).unwrap();
        v4.announce_many(host_routes(18, 5)).unwrap();
        v4.set_ready().unwrap();

        let n6 = NODE_V6.to_string();
        frr.wait_received("ipv4", &n6, 10).unwrap();
        frr.wait_received("ipv6", &n6, 1).unwrap();
        frr.wait_received("ipv4", &NODE_V4.to_string(), 5).unwrap();
        let neighbor = frr.json(&format!("show bgp neighbors {n6} json")).unwrap();
        assert_eq!(
            neighbor[&n6]["neighborCapabilities"]["extendedNexthop"], "advertisedAndReceived",
            "{neighbor}"
        );
        // bgpd's view: an IPv4 route with an IPv6 next hop.
        let route = frr.json("show bgp ipv4 unicast 10.17.0.1/32 json").unwrap();
        let hops = &route["paths"][0]["nexthops"];
        assert_eq!(hops[0]["ip"], n6, "{route}");
        assert_eq!(hops[0]["afi"], "ipv6", "{route}");
        // The kernel's: zebra installs it through the IPv6 gateway, and traffic follows it.
        let installed = wait_kernel_route(&lab.tor, "10.17.0.1", "via inet6 2001:db8:100::2").unwrap();
        assert!(installed.contains("dev eth1"), "{installed}");
        wait_kernel_route(&lab.tor, "10.18.0.1", "via 198.51.100.2").unwrap();
        lab.tor
            .wait_ping(Ipv4Addr::new(10, 17, 0, 1), WAIT)
            .expect("an IPv4 packet routed through the IPv6 next hop reaches the node");
        assert!(v6.status().is_established() && v4.status().is_established());
    });
}

#[test]
fn a_session_bound_to_a_device_goes_out_of_it_and_not_out_of_one_without_a_route() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    // The ToR's loopback address is reachable two ways: the main table prefers eth0; a second
    // link (alt0 ↔ alt1) also leads there. dead0 leads nowhere.
    let tor_lo = "192.0.2.1";
    lab.tor
        .ip(&["addr", "add", &format!("{tor_lo}/32"), "dev", "lo"])
        .unwrap();
    lab.node
        .ip(&[
            "link",
            "add",
            "alt0",
            "type",
            "veth",
            "peer",
            "name",
            "alt1",
            "netns",
            lab.tor.name(),
        ])
        .unwrap();
    lab.node
        .ip(&["addr", "add", "198.51.102.2/24", "dev", "alt0"])
        .unwrap();
    lab.node.ip(&["link", "set", "alt0", "up"]).unwrap();
    lab.tor
        .ip(&["addr", "add", "198.51.102.1/24", "dev", "alt1"])
        .unwrap();
    lab.tor.ip(&["link", "set", "alt1", "up"]).unwrap();
    lab.node
        .ip(&[
            "route",
            "add",
            tor_lo,
            "via",
            "198.51.100.1",
            "dev",
            "eth0",
            "metric",
            "10",
        ])
        .unwrap();
    lab.node
        .ip(&[
            "route",
            "add",
            tor_lo,
            "via",
            "198.51.102.1",
            "dev",
            "alt0",
            "metric",
            "20",
        ])
        .unwrap();
    lab.node
        .ip(&["link", "add", "dead0", "type", "veth", "peer", "name", "dead1"])
        .unwrap();
    lab.node.ip(&["link", "set", "dead0", "up"]).unwrap();
    lab.node.ip(&["link", "set", "dead1", "up"]).unwrap();
    let main = lab.node.ip(&["route", "get", tor_lo]).unwrap();
    assert!(
        main.contains("dev eth0"),
        "unbound, the session would use eth0: {main}"
    );
    // FRR knows the node only by its address on the second link.
    let frr = Frr::start(
        &lab.tor,
        "",
        &format!(
            "router bgp {TOR_AS}\n bgp router-id {TOR_V4}\n no bgp ebgp-requires-policy\n\
             neighbor 198.51.102.2 remote-as {NODE_AS}\n neighbor 198.51.102.2 timers connect 1\n\
             address-family ipv4 unicast\n  neighbor 198.51.102.2 activate\n exit-address-family\n"
        ),
    )
    .unwrap();
    let tor = IpAddr::V4(tor_lo.parse().unwrap());
    let config = flags(&[]);
    let bound = bgp_peer(
        &config,
        json!({ "peerAddress": tor_lo, "peerASN": TOR_AS, "vrf": "alt0" }),
        tor,
    );
    assert_eq!(bound.bind_device.as_deref(), Some("alt0"));
    // `--vrf` is every peer's default: a device without a route to the peer.
    let nowhere = bgp_peer(
        &flags(&["--vrf=dead0"]),
        json!({ "peerAddress": tor_lo, "peerASN": TOR_AS }),
        tor,
    );
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker.add_peer(bound).unwrap();
        peer.announce_many(host_routes(17, 3)).unwrap();
        peer.set_ready().unwrap();
        frr.wait_received("ipv4", "198.51.102.2", 3).unwrap();
        assert_eq!(
            peer.status().local_address,
            Some(IpAddr::V4(Ipv4Addr::new(198, 51, 102, 2))),
            "the session's source is alt0's address: it went out of alt0"
        );

        // Another speaker (a node whose --vrf has no route to the peer): never up, and it says why.
        let other = Speaker::new(SpeakerConfig::default()).unwrap();
        let stuck = other.add_peer(nowhere).unwrap();
        let status = block(
            rt,
            stuck.wait_for("a connect error", WAIT, |s| s.last_error.is_some()),
        )
        .unwrap();
        let error = status.last_error.clone().unwrap_or_default();
        // The kernel takes a peer with no route through the device as on-link there and
        // waits for an ARP answer that never comes: the connect times out.
        assert!(
            error.starts_with("connect: no answer from 192.0.2.1") && error.ends_with("out of dead0"),
            "{error}"
        );
        assert!(
            status.established_at.is_none() && status.messages_sent.open == 0,
            "{status:?}"
        );
        assert!(peer.status().is_established());

        // Passive: FRR dials 198.51.102.2 through alt1. A listener bound to no device cannot
        // tell where a connection came in, so the alt0-bound peer refuses it and says why ...
        block(rt, speaker.remove_peer(tor)).unwrap();
        let listen = || SpeakerConfig {
            listen: vec!["0.0.0.0:179".parse().unwrap()],
            allowed_sources: None,
        };
        let passive = || {
            bgp_peer(
                &flags(&["--vrf=alt0"]),
                json!({ "peerAddress": "198.51.102.1", "peerASN": TOR_AS, "passive": true }),
                IpAddr::V4(Ipv4Addr::new(198, 51, 102, 1)),
            )
        };
        let unbound = Speaker::new(listen()).unwrap();
        let refused = unbound.add_peer(passive()).unwrap();
        let status = block(
            rt,
            refused.wait_for("the refusal", WAIT, |s| s.last_error.is_some()),
        )
        .unwrap();
        assert_eq!(
            status.last_error.as_deref(),
            Some(
                "inbound connection refused: the peer's session is bound to alt0, and the kernel \
                 bound this connection to no device"
            )
        );
        drop(unbound);
        // ... while behind a listener bound to alt0 (`--vrf` with `--passivemode`) the
        // connection is bound to alt0 too, and is the peer's.
        let mut listening = None;
        wait_until("port 179 free again", WAIT, || {
            listening = Speaker::new_in_device(listen(), Some("alt0")).ok();
            Ok(listening.is_some())
        })
        .unwrap();
        let listening = listening.unwrap();
        let inbound = listening.add_peer(passive()).unwrap();
        inbound.announce_many(host_routes(17, 2)).unwrap();
        inbound.set_ready().unwrap();
        frr.wait_received("ipv4", "198.51.102.2", 2).unwrap();
        assert!(inbound.status().is_established());
    });
}
