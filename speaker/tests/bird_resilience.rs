//! The driver against BIRD 2 when things go wrong: MD5 keys that match and keys that do not,
//! graceful restart after the speaker dies (RFC 4724: the peer keeps our routes as stale,
//! replaces them at our End-of-RIB), and hold timer expiry when the peer goes silent. Needs
//! root; fails when BIRD is missing.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::peers::{Bird, PeerSpec};
use common::*;
use kube_ovn_dataplane::tcp_md5::Md5Counters;
use kube_ovn_speaker::bgp::fsm::State;
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::driver::{PeerConfig, Speaker, SpeakerConfig};
use kube_ovn_testkit::wait_until;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn md5_spec() -> PeerSpec {
    PeerSpec {
        password: Some("s3cr3t-md5".into()),
        ..PeerSpec::new(TOR_V4, NODE_V4)
    }
}

fn tor_md5_counters(lab: &Lab) -> Md5Counters {
    let ns = kube_ovn_dataplane::Netns::open(lab.tor.path()).unwrap();
    Md5Counters::read_in(&ns).unwrap()
}

#[test]
fn md5_right_key_comes_up() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let bird = Bird::start(&lab.tor, &md5_spec()).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig {
                md5_key: Some(b"s3cr3t-md5".to_vec()),
                ..PeerConfig::new(IpAddr::V4(TOR_V4), session(false))
            })
            .unwrap();
        peer.announce_many(hosts(3)).unwrap();
        peer.set_ready().unwrap();
        bird.wait_established().unwrap();
        bird.wait_count("master4", 3).unwrap();
    });
    assert_eq!(tor_md5_counters(&lab).failure, 0);
}

#[test]
fn md5_wrong_key_stays_down_and_the_kernel_counts_it() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let _bird = Bird::start(&lab.tor, &md5_spec()).unwrap();
    let before = tor_md5_counters(&lab);
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig {
                md5_key: Some(b"wrong-key".to_vec()),
                ..PeerConfig::new(IpAddr::V4(TOR_V4), session(false))
            })
            .unwrap();
        // The SYN is dropped by the ToR's kernel: no TCP connection, so never OpenSent. Waiting
        // for the kernel's counter is the positive signal that the attempt reached it.
        wait_until("TCPMD5Failure to rise in the ToR", WAIT, || {
            Ok(tor_md5_counters(&lab).failure > before.failure)
        })
        .unwrap();
        let up = block(
            rt,
            peer.wait_for("OpenSent", Duration::from_secs(3), |s| s.state >= State::OpenSent),
        );
        assert!(up.is_err(), "a wrong MD5 key must keep the session down");
        assert_eq!(peer.status().messages_received.total(), 0);
    });
}

#[test]
fn graceful_restart_keeps_stale_routes_until_end_of_rib() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4)).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let tor = IpAddr::V4(TOR_V4);
        // First life: 10.17.0.0-2 announced with the GR capability.
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig::new(tor, with_gr(session(false), false)))
            .unwrap();
        peer.announce_many(hosts(3)).unwrap();
        peer.set_ready().unwrap();
        bird.wait_count("master4", 3).unwrap();

        // The speaker dies: every task ends, sockets close with no NOTIFICATION.
        drop(speaker);
        wait_until("BIRD to notice and keep our routes", WAIT, || {
            let protocol = bird.birdc(&["show", "protocols", "all", "node"])?;
            Ok(!protocol.contains("Established") && bird.count("master4")? == 3)
        })
        .unwrap();

        // Second life, restarting: 10.17.0.2 is gone, 10.17.0.3 is new, and the caller is not
        // ready yet (caches still syncing).
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig::new(tor, with_gr(session(false), true)))
            .unwrap();
        peer.announce_many([0, 1, 3].map(|i| (host(i), RouteAttributes::default())))
            .unwrap();
        block(
            rt,
            peer.wait_for("Established", WAIT, |s| s.state == State::Established),
        )
        .unwrap();
        bird.wait_established().unwrap();
        // The R bit told BIRD we restarted: it holds the old routes as stale and we hold ours.
        let stale = bird.route_all("10.17.0.2/32").unwrap();
        assert!(stale.contains("10.17.0.2/32"), "stale route kept: {stale}");
        assert!(!bird.has("10.17.0.3/32").unwrap(), "nothing sent before ready");
        assert_eq!(peer.status().messages_sent.update, 0);

        peer.set_ready().unwrap();
        wait_until("BIRD to flush the stale route at End-of-RIB", WAIT, || {
            Ok(bird.has("10.17.0.3/32")? && !bird.has("10.17.0.2/32")?)
        })
        .unwrap();
        bird.wait_count("master4", 3).unwrap();
        let status = peer.status();
        assert!(
            status.initial_table_sent && status.prefixes_sent == 3,
            "{status:?}"
        );
    });
}

#[test]
fn hold_timer_expires_when_the_peer_goes_silent() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let (bird, speaker_with_peer) = tor_and_speaker_with_hold(&lab, 3).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let (_speaker, peer) = speaker_with_peer();
        peer.set_ready().unwrap();
        block(
            rt,
            peer.wait_for("Established", WAIT, |s| s.state == State::Established),
        )
        .unwrap();

        let pid = bird.pid();
        let _resume = ContinueOnDrop(pid);
        kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
        let down = block(
            rt,
            peer.wait_for("the hold timer to expire", Duration::from_secs(10), |s| {
                s.state != State::Established
            }),
        )
        .unwrap();
        assert_eq!(down.last_error.as_deref(), Some("hold timer expired"), "{down:?}");
        assert_eq!(down.messages_sent.notification, 1);
        assert_eq!(down.flaps, 1);
        kill(Pid::from_raw(pid), Signal::SIGCONT).unwrap();
        // Once BIRD runs again the session comes back by itself.
        block(
            rt,
            peer.wait_for("Established again", WAIT, |s| s.state == State::Established),
        )
        .unwrap();
    });
}
