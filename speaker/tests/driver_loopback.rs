//! Two of our speakers against each other on loopback through the real driver (sockets,
//! timers, listener dispatch): one active, one passive behind a listener. No root needed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use kube_ovn_speaker::bgp::fsm::{SessionConfig, State};
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::bgp::wire::Family;
use kube_ovn_speaker::driver::{PeerConfig, PeerHandle, Speaker, SpeakerConfig};

const WAIT: Duration = Duration::from_secs(10);
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn session(local_as: u32, peer_as: u32, id: [u8; 4], passive: bool) -> SessionConfig {
    SessionConfig {
        local_as,
        peer_as,
        router_id: Ipv4Addr::from(id),
        hold_time: 9,
        connect_retry: Duration::from_secs(1),
        passive,
        families: Family::ALL.to_vec(),
        graceful_restart: None,
        restarting: false,
        extended_next_hop: false,
    }
}

/// A passive speaker listening on an ephemeral loopback port, and an active one dialling it.
fn pair() -> (Speaker, PeerHandle, Speaker, PeerHandle) {
    let listen = SocketAddr::new(LOCALHOST, 0);
    let passive = Speaker::new(SpeakerConfig {
        listen: vec![listen],
        allowed_sources: Some(vec!["127.0.0.0/8".parse().unwrap()]),
    })
    .unwrap();
    let port = passive.listen_addresses()[0].port();
    let b = passive
        .add_peer(PeerConfig::new(
            LOCALHOST,
            session(65000, 65001, [10, 0, 0, 1], true),
        ))
        .unwrap();
    let active = Speaker::new(SpeakerConfig::default()).unwrap();
    let a = active
        .add_peer(PeerConfig {
            port,
            ..PeerConfig::new(LOCALHOST, session(65001, 65000, [10, 0, 0, 2], false))
        })
        .unwrap();
    (active, a, passive, b)
}

#[tokio::test]
async fn session_routes_bfd_seam_and_shutdown_notification() {
    let (_active, a, _passive, b) = pair();
    a.announce_many((0..1000u32).map(|i| {
        let net = ipnet::Ipv4Net::new(Ipv4Addr::from(0x0a11_0000 + i), 32).unwrap();
        (net.into(), RouteAttributes::default())
    }))
    .unwrap();
    a.announce("fd00:10:16::/64".parse().unwrap(), RouteAttributes::default())
        .unwrap();
    // The IPv6 route needs an IPv6 next hop on an IPv4 session.
    a.set_local_addresses(None, Some("fd00::2".parse().unwrap()))
        .unwrap();
    // Nothing goes out before the caller is ready, though the session is up.
    a.wait_for("Established", WAIT, |s| s.state == State::Established)
        .await
        .unwrap();
    assert_eq!(a.status().messages_sent.update, 0, "held until ready");
    a.set_ready().unwrap();
    b.set_ready().unwrap();
    let sent = a
        .wait_for("the table sent", WAIT, |s| {
            s.prefixes_sent == 1001 && s.initial_table_sent
        })
        .await
        .unwrap();
    assert_eq!(sent.local_address, Some(LOCALHOST));
    // 1000 /32s fill two UPDATEs, the /64 a third, then two End-of-RIBs.
    b.wait_for("5 UPDATEs", WAIT, |s| s.messages_received.update == 5)
        .await
        .unwrap();

    a.withdraw_many((0..10u32).map(|i| {
        ipnet::Ipv4Net::new(Ipv4Addr::from(0x0a11_0000 + i), 32)
            .unwrap()
            .into()
    }))
    .unwrap();
    a.wait_for("991 prefixes", WAIT, |s| s.prefixes_sent == 991)
        .await
        .unwrap();
    b.wait_for("the withdraw", WAIT, |s| s.messages_received.update == 6)
        .await
        .unwrap();

    // BFD down: Cease/BFD Down (6/10) reaches the peer, and the session stays down past the
    // first idle hold (1 s) until BFD is back.
    a.bfd_down().unwrap();
    let down = b
        .wait_for("the session to drop", WAIT, |s| s.state != State::Established)
        .await
        .unwrap();
    assert!(
        down.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("BFD down (6/10)"),
        "{down:?}"
    );
    // What is checked is that nothing happens: the session must not come back on its own when
    // its idle hold (1 s) runs out. The driver counts the idle holds that ran out while BFD held
    // the session down: once one has, the session must still be Idle.
    let held = a
        .wait_for("the idle hold to run out while BFD is down", WAIT, |s| {
            s.idle_holds_waited_for_bfd >= 1
        })
        .await
        .unwrap();
    assert!(held.bfd_down && held.state == State::Idle, "{held:?}");
    a.bfd_up().unwrap();
    a.wait_for("Established again", WAIT, |s| {
        s.state == State::Established && s.prefixes_sent == 991
    })
    .await
    .unwrap();
    assert_eq!(a.status().flaps, 1);

    a.shutdown("maintenance").await.unwrap();
    let last = b
        .wait_for("the shutdown", WAIT, |s| s.state != State::Established)
        .await
        .unwrap();
    let error = last.last_error.unwrap_or_default();
    assert!(error.contains("administrative shutdown (6/2)"), "{error}");
}

#[tokio::test]
async fn listener_refuses_unknown_and_disallowed_sources() {
    let speaker = Speaker::new(SpeakerConfig {
        listen: vec![SocketAddr::new(LOCALHOST, 0)],
        allowed_sources: Some(vec!["127.0.0.2/32".parse().unwrap()]),
    })
    .unwrap();
    let port = speaker.listen_addresses()[0].port();
    // 127.0.0.1 is a configured peer but not an allowed source; 127.0.0.2 is allowed but not a
    // peer. Both connections are closed before any BGP message.
    let peer = speaker
        .add_peer(PeerConfig::new(
            LOCALHOST,
            session(65000, 65001, [10, 0, 0, 1], true),
        ))
        .unwrap();
    for source in [Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 2)] {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(source.into(), 0)).unwrap();
        let mut stream = socket.connect(SocketAddr::new(LOCALHOST, port)).await.unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(WAIT, tokio::io::AsyncReadExt::read(&mut stream, &mut buf))
            .await
            .expect("the listener should close the connection")
            .unwrap_or(0);
        assert_eq!(n, 0, "closed without a message for {source}");
    }
    assert_eq!(peer.status().messages_received.total(), 0);
}
