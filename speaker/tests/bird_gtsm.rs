//! GTSM (RFC 5082) against BIRD 2: with `ttl security on` on both sides the session comes up,
//! whichever side connects; a peer whose packets arrive with a TTL below 255 (BIRD `multihop 2`
//! without ttl security sends with TTL 2) never gets a session, and the kernel's
//! `TcpExtTCPMinTTLDrop` counter in the node's namespace shows its segments were dropped below
//! BGP. The binary turns it on with `--ttl-security` for flag peers and with a BgpPeer's
//! `spec.ttlSecurity`. Needs root and bird2; fails, never skips.

mod common;

use std::net::{IpAddr, SocketAddr};

use anyhow::Context;
use common::k8s::{Cluster, speaker, speaker_without_peers, wait_route};
use common::peers::{Bird, PeerSpec};
use common::*;
use kube::Api;
use kube::api::PostParams;
use kube_ovn_speaker::bgp::fsm::State;
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::crd::BgpPeer;
use kube_ovn_speaker::driver::{PeerConfig, PeerHandle, Speaker, SpeakerConfig};
use kube_ovn_testkit::{Netns, wait_until};

/// Our session toward the ToR with GTSM on.
fn gtsm_peer(passive: bool) -> PeerConfig {
    let mut config = PeerConfig::new(IpAddr::V4(TOR_V4), session(passive));
    config.ttl_security = true;
    config
}

/// Segments the kernel dropped in `ns` for arriving below a socket's IP_MINTTL.
fn min_ttl_drops(ns: &Netns) -> anyhow::Result<u64> {
    let out = ns.exec(&["nstat", "-saz", "TcpExtTCPMinTTLDrop"])?;
    out.lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("TcpExtTCPMinTTLDrop")).then(|| words.next()?.parse().ok())?
        })
        .ok_or_else(|| anyhow::anyhow!("no TcpExtTCPMinTTLDrop in nstat output: {out}"))
}

fn never_established(peer: &PeerHandle) {
    let status = peer.status();
    assert!(
        status.state != State::Established && status.established_at.is_none() && status.flaps == 0,
        "a peer below the minimum TTL never reached Established: {status:?}"
    );
}

#[test]
fn gtsm_on_both_sides_establishes_when_we_connect() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let spec = PeerSpec {
        ttl_security: true,
        ..PeerSpec::new(TOR_V4, NODE_V4)
    };
    let bird = Bird::start(&lab.tor, &spec).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker.add_peer(gtsm_peer(false)).unwrap();
        peer.announce_many(hosts(3)).unwrap();
        peer.set_ready().unwrap();
        bird.wait_established().unwrap();
        bird.wait_count("master4", 3).unwrap();
        assert_eq!(min_ttl_drops(&lab.node).unwrap(), 0, "nothing arrived below 255");
    });
}

#[test]
fn gtsm_on_both_sides_establishes_when_the_peer_connects() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let spec = PeerSpec {
        ttl_security: true,
        passive: false,
        ..PeerSpec::new(TOR_V4, NODE_V4)
    };
    let bird = Bird::start(&lab.tor, &spec).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        // BIRD checks our SYN-ACK too: the listener must send with 255.
        let speaker = Speaker::new(SpeakerConfig {
            listen: vec![SocketAddr::from(([0u16; 8], 179))],
            allowed_sources: None,
        })
        .unwrap();
        let peer = speaker.add_peer(gtsm_peer(true)).unwrap();
        peer.announce_many(hosts(2)).unwrap();
        peer.set_ready().unwrap();
        bird.wait_established().unwrap();
        bird.wait_count("master4", 2).unwrap();
    });
}

#[test]
fn gtsm_over_ipv6_uses_the_hop_limit() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let good = Bird::start(
        &lab.tor,
        &PeerSpec {
            ttl_security: true,
            ..PeerSpec::new(TOR_V4, NODE_V6)
        },
    )
    .unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let mut config = PeerConfig::new(IpAddr::V6(TOR_V6), session(false));
        config.ttl_security = true;
        let peer = speaker.add_peer(config).unwrap();
        peer.announce(v6_prefix(), RouteAttributes::default()).unwrap();
        peer.set_ready().unwrap();
        good.wait_established().unwrap();
        good.wait_count("master6", 1).unwrap();
    });
}

#[test]
fn an_ipv6_peer_whose_hop_limit_arrives_below_255_gets_no_session() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let spec = PeerSpec {
        multihop: Some(2),
        ..PeerSpec::new(TOR_V4, NODE_V6)
    };
    let bird = Bird::start(&lab.tor, &spec).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let mut config = PeerConfig::new(IpAddr::V6(TOR_V6), session(false));
        config.ttl_security = true;
        let peer = speaker.add_peer(config).unwrap();
        peer.announce(v6_prefix(), RouteAttributes::default()).unwrap();
        peer.set_ready().unwrap();
        wait_until("the kernel to drop BIRD's low hop-limit segments", WAIT, || {
            Ok(min_ttl_drops(&lab.node)? >= 3)
        })
        .unwrap();
        never_established(&peer);
        assert!(!bird.established().unwrap());
        assert_eq!(bird.count("master6").unwrap(), 0);
    });
}

/// BIRD two hops "away" by its TTL: `multihop 2` sends with TTL 2 and no GTSM.
fn low_ttl_bird(lab: &Lab, passive: bool) -> Bird {
    let spec = PeerSpec {
        multihop: Some(2),
        passive,
        ..PeerSpec::new(TOR_V4, NODE_V4)
    };
    Bird::start(&lab.tor, &spec).unwrap()
}

#[test]
fn a_peer_whose_packets_arrive_below_255_gets_no_session_when_we_connect() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let bird = low_ttl_bird(&lab, true);
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker.add_peer(gtsm_peer(false)).unwrap();
        peer.announce_many(hosts(1)).unwrap();
        peer.set_ready().unwrap();
        // BIRD's SYN-ACKs (TTL 2) are dropped below TCP: several retransmissions and connect
        // retries worth of them.
        wait_until("the kernel to drop BIRD's low-TTL segments", WAIT, || {
            Ok(min_ttl_drops(&lab.node)? >= 3)
        })
        .unwrap();
        never_established(&peer);
        assert!(!bird.established().unwrap(), "BIRD has no session either");
        assert_eq!(bird.count("master4").unwrap(), 0);
    });
}

#[test]
fn a_peer_whose_packets_arrive_below_255_gets_no_session_when_it_connects() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let bird = low_ttl_bird(&lab, false);
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig {
            listen: vec![SocketAddr::from(([0u16; 8], 179))],
            allowed_sources: None,
        })
        .unwrap();
        let peer = speaker.add_peer(gtsm_peer(true)).unwrap();
        peer.announce_many(hosts(1)).unwrap();
        peer.set_ready().unwrap();
        // The handshake reaches the shared listener, but every segment after the accepted
        // socket got its minimum TTL is dropped: BIRD's KEEPALIVE can never confirm our OPEN.
        wait_until("the kernel to drop BIRD's low-TTL segments", WAIT, || {
            Ok(min_ttl_drops(&lab.node)? >= 3)
        })
        .unwrap();
        never_established(&peer);
        // BIRD may believe in a session (its OPEN may have come before the check, and it takes
        // our KEEPALIVE), but ours never confirms it: the ToR learns nothing.
        assert_eq!(bird.count("master4").unwrap(), 0);
    });
}

/// What a peer that does not wait for our OPEN sends at once: its OPEN and the KEEPALIVE that
/// would confirm ours.
fn open_and_keepalive() -> Vec<u8> {
    use kube_ovn_speaker::bgp::wire::{Capabilities, EncodeContext, Family, Message, Open, encode};
    let open = Message::Open(Open {
        my_as: u16::try_from(TOR_AS).unwrap(),
        hold_time: 30,
        bgp_id: TOR_V4,
        capabilities: Capabilities {
            multiprotocol: vec![Family::Ipv4Unicast],
            four_octet_as: Some(TOR_AS),
            ..Capabilities::default()
        },
    });
    let mut bytes = encode(&open, EncodeContext::default()).unwrap();
    bytes.extend(encode(&Message::Keepalive, EncodeContext::default()).unwrap());
    bytes
}

#[test]
fn a_low_ttl_peer_that_sends_open_and_keepalive_at_once_gets_no_session() {
    use std::io::{Read, Write};
    init_tracing();
    let lab = Lab::direct().unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig {
            listen: vec![SocketAddr::from(([0u16; 8], 179))],
            allowed_sources: None,
        })
        .unwrap();
        let peer = speaker.add_peer(gtsm_peer(true)).unwrap();
        // From the ToR's namespace with the system TTL (64): the bytes land on the accepted
        // socket before or after its minimum TTL is set; either way they must not establish.
        let closed_by_us = lab
            .tor
            .run(|| {
                let mut tcp = std::net::TcpStream::connect((NODE_V4, 179)).unwrap();
                tcp.write_all(&open_and_keepalive()).unwrap();
                tcp.set_read_timeout(Some(WAIT)).unwrap();
                let mut buf = [0u8; 4096];
                loop {
                    match tcp.read(&mut buf) {
                        Ok(0) => return true,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                        Err(_) => return false,
                    }
                }
            })
            .unwrap();
        let drops = min_ttl_drops(&lab.node).unwrap();
        assert!(
            closed_by_us || drops > 0,
            "the connection was refused, or its segments dropped (drops: {drops})"
        );
        never_established(&peer);
    });
}

/// BIRD with `ttl security on`, and a subnet to announce.
async fn gtsm_bird_and_cluster(lab: &Lab) -> anyhow::Result<(Bird, Cluster)> {
    let spec = PeerSpec {
        ttl_security: true,
        ..PeerSpec::new(TOR_V4, NODE_V4)
    };
    let bird = Bird::start(&lab.tor, &spec)?;
    let cluster = Cluster::start().await?;
    cluster.subnet("s1", "10.16.0.0/16", "cluster").await?;
    Ok((bird, cluster))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ttl_security_flag_turns_gtsm_on_for_flag_peers() -> anyhow::Result<()> {
    let lab = Lab::direct()?;
    let (bird, cluster) = gtsm_bird_and_cluster(&lab).await?;
    let dir = tempfile::tempdir()?;
    let speaker = speaker(&cluster, &lab, dir.path(), &["--ttl-security"])?;
    bird.wait_established().with_context(|| speaker.log_tail(20))?;
    wait_route(&bird, &speaker, "10.16.0.0/16", true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bgp_peer_with_ttl_security_uses_gtsm() -> anyhow::Result<()> {
    let lab = Lab::direct()?;
    let (bird, cluster) = gtsm_bird_and_cluster(&lab).await?;
    let dir = tempfile::tempdir()?;
    let speaker = speaker_without_peers(&cluster, &lab, dir.path(), &[])?;
    let peer: BgpPeer = serde_json::from_value(serde_json::json!({
        "apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpPeer", "metadata": {"name": "tor"},
        "spec": {"peerAddress": TOR_V4.to_string(), "peerASN": TOR_AS, "ttlSecurity": true}}))?;
    Api::<BgpPeer>::all(cluster.kube.clone())
        .create(&PostParams::default(), &peer)
        .await?;
    bird.wait_established().with_context(|| speaker.log_tail(20))?;
    wait_route(&bird, &speaker, "10.16.0.0/16", true)
}
