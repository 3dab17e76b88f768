use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;
use crate::bfd::Diagnostic;
use crate::bgp::fsm::State;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1));

fn peer(address: IpAddr, state: State) -> PeerStatus {
    let mut s = PeerStatus::new(address);
    s.state = state;
    s
}

fn bfd(state: BfdState, remote_state: BfdState) -> BfdStatus {
    BfdStatus {
        state,
        diag: Diagnostic::None,
        remote_state,
        local_discriminator: 1,
        remote_discriminator: 2,
        poll_in_progress: false,
        tx_interval: None,
        detection_time: None,
    }
}

/// The value of the one sample named `name` with exactly `labels` (`{peer="..."}`, or `{}` for none).
fn sample(text: &str, name: &str, labels: &str) -> Option<String> {
    let head = format!("{name}{labels} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&head))
        .map(str::to_owned)
}

#[test]
fn names_labels_and_values() {
    let mut up = peer(A, State::Established);
    up.flaps = 2;
    up.prefixes_sent = 1000;
    up.prefixes_pending = 12;
    up.prefixes_unsendable = 1;
    up.out_queue_bytes = 4096;
    up.messages_sent.update = 7;
    up.messages_sent.keepalive = 3;
    up.messages_received.open = 1;
    up.messages_received.route_refresh = 1;
    let snapshot = Snapshot {
        peers: vec![
            (A, up, Some(bfd(BfdState::Up, BfdState::Up))),
            (B, peer(B, State::OpenSent), None),
        ],
        md5: Md5Counters {
            not_found: 1,
            unexpected: 2,
            failure: 3,
        },
        bfd_server: Some(BfdServerCounts {
            received: 10,
            bad_ttl: 1,
            invalid: 2,
            unknown_peer: 3,
            queue_full: 4,
            errors: 5,
        }),
        bfd_sessions: vec![(
            A,
            BfdSessionCounts {
                transmitted: 20,
                received: 19,
                failures: 1,
            },
        )],
    };
    let metrics = Metrics::new();
    metrics.refresh(&snapshot);
    let text = metrics.encode();
    let a = "{peer=\"10.0.0.1\"}";
    let b = "{peer=\"fd00::1\"}";
    let expect = [
        ("kube_ovn_speaker_bgp_peer_up", a, "1"),
        ("kube_ovn_speaker_bgp_peer_up", b, "0"),
        ("kube_ovn_speaker_bgp_peer_session_state", a, "6"),
        ("kube_ovn_speaker_bgp_peer_session_state", b, "4"),
        ("kube_ovn_speaker_bgp_peer_flap_count", a, "2"),
        ("kube_ovn_speaker_bgp_peer_out_queue", a, "4096"),
        ("kube_ovn_speaker_bgp_peer_prefixes_announced", a, "1000"),
        ("kube_ovn_speaker_bgp_peer_prefixes_pending", a, "12"),
        ("kube_ovn_speaker_bgp_peer_prefixes_unsendable", a, "1"),
        ("kube_ovn_speaker_bgp_peer_prefixes_announced", b, "0"),
        (
            "kube_ovn_speaker_bgp_peer_sent_messages",
            "{peer=\"10.0.0.1\",type=\"update\"}",
            "7",
        ),
        (
            "kube_ovn_speaker_bgp_peer_sent_messages",
            "{peer=\"10.0.0.1\",type=\"keepalive\"}",
            "3",
        ),
        (
            "kube_ovn_speaker_bgp_peer_received_messages",
            "{peer=\"10.0.0.1\",type=\"open\"}",
            "1",
        ),
        (
            "kube_ovn_speaker_bgp_peer_received_messages",
            "{peer=\"10.0.0.1\",type=\"route_refresh\"}",
            "1",
        ),
        (
            "kube_ovn_speaker_bgp_peer_received_messages",
            "{peer=\"fd00::1\",type=\"notification\"}",
            "0",
        ),
        ("kube_ovn_speaker_tcp_md5_failures", "{reason=\"not_found\"}", "1"),
        (
            "kube_ovn_speaker_tcp_md5_failures",
            "{reason=\"unexpected\"}",
            "2",
        ),
        ("kube_ovn_speaker_tcp_md5_failures", "{reason=\"failure\"}", "3"),
        ("kube_ovn_speaker_bfd_peer_up", a, "1"),
        ("kube_ovn_speaker_bfd_peer_session_state", a, "3"),
        ("kube_ovn_speaker_bfd_peer_remote_session_state", a, "3"),
        ("kube_ovn_speaker_bfd_peer_failure_transitions", a, "1"),
        ("kube_ovn_speaker_bfd_peer_transmitted_packets", a, "20"),
        ("kube_ovn_speaker_bfd_peer_received_packets", a, "19"),
        ("kube_ovn_speaker_bfd_server_received_packets", "{}", "10"),
        ("kube_ovn_speaker_bfd_server_received_drop", "{}", "5"),
        ("kube_ovn_speaker_bfd_server_received_error", "{}", "5"),
        ("kube_ovn_speaker_bfd_server_invalid_packet", "{}", "2"),
        ("kube_ovn_speaker_bfd_server_unknown_peer", "{}", "3"),
    ];
    for (name, labels, value) in expect {
        assert_eq!(
            sample(&text, name, labels).as_deref(),
            Some(value),
            "{name}{labels} in\n{text}"
        );
    }
    // No BFD series for the peer without BFD; gauges, so no `_total` suffixes.
    assert_eq!(sample(&text, "kube_ovn_speaker_bfd_peer_up", b), None);
    assert!(
        text.contains("# TYPE kube_ovn_speaker_bgp_peer_flap_count gauge"),
        "{text}"
    );
    assert!(!text.contains("_total"), "{text}");
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn refresh_replaces_every_series() {
    let metrics = Metrics::new();
    metrics.refresh(&Snapshot {
        peers: vec![
            (
                A,
                peer(A, State::Established),
                Some(bfd(BfdState::Up, BfdState::Up)),
            ),
            (B, peer(B, State::Established), None),
        ],
        bfd_server: Some(BfdServerCounts::default()),
        bfd_sessions: vec![(A, BfdSessionCounts::default())],
        ..Snapshot::default()
    });
    assert!(metrics.encode().contains("10.0.0.1"));
    // A is unconfigured and BFD is off: every series of A and of the BFD server goes away.
    metrics.refresh(&Snapshot {
        peers: vec![(B, peer(B, State::Idle), None)],
        ..Snapshot::default()
    });
    let text = metrics.encode();
    assert!(!text.contains("10.0.0.1"), "{text}");
    assert_eq!(
        sample(&text, "kube_ovn_speaker_bfd_server_received_packets", "{}"),
        None
    );
    assert_eq!(
        sample(
            &text,
            "kube_ovn_speaker_bgp_peer_session_state",
            "{peer=\"fd00::1\"}"
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        sample(&text, "kube_ovn_speaker_tcp_md5_failures", "{reason=\"failure\"}").as_deref(),
        Some("0")
    );
    // An empty snapshot leaves only the MD5 counters (the kernel always has them).
    metrics.refresh(&Snapshot::default());
    let text = metrics.encode();
    assert!(!text.contains("peer="), "{text}");
}

#[test]
fn counters_convert_from_the_bfd_driver() {
    let server = ServerCounters::default();
    server.received.store(4, Ordering::Relaxed);
    server.errors.store(1, Ordering::Relaxed);
    let counts = BfdServerCounts::from(&server);
    assert_eq!((counts.received, counts.errors, counts.invalid), (4, 1, 0));
    let session = SessionCounters::default();
    session.failures.store(2, Ordering::Relaxed);
    assert_eq!(BfdSessionCounts::from(&session).failures, 2);
}
