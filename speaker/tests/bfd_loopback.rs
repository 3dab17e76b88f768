//! Two of our BFD services against each other over loopback addresses (127.0.0.0/8 is all
//! local on Linux, so each side binds its own address's port 3784): the session comes Up and
//! polls to fast timers, AdminDown is not a failure, a peer that falls silent is detected
//! within the detection time, and the receive path drops TTL ≠ 255 and malformed packets
//! (RFC 5881 §5, RFC 5880 §6.8.6). No root needed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kube_ovn_speaker::bfd::packet::{ControlPacket, MIN_LEN};
use kube_ovn_speaker::bfd::{Bfd, BfdHandle, Diagnostic, State, Status, Timers};
use tokio::time::timeout;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

fn fast() -> Timers {
    Timers {
        desired_min_tx: Duration::from_millis(50),
        required_min_rx: Duration::from_millis(50),
        detect_mult: 3,
    }
}

async fn wait_for(h: &BfdHandle, what: &str, within: Duration, f: impl Fn(&Status) -> bool) -> Status {
    let mut rx = h.subscribe();
    match timeout(within, rx.wait_for(|s| f(s))).await {
        Ok(Ok(s)) => *s,
        Ok(Err(_)) => panic!("{what}: the session task ended; last status {:?}", h.status()),
        Err(elapsed) => panic!("{what}: {elapsed} ({within:?}); status {:?}", h.status()),
    }
}

/// A BFD service on a runtime of its own, so the test can kill it without a farewell packet.
struct Remote {
    rt: tokio::runtime::Runtime,
    handle: BfdHandle,
}

impl Remote {
    fn start(peer: IpAddr, local: IpAddr, timers: Timers) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let handle = {
            let _in = rt.enter();
            Bfd::new().add_session(peer, local, timers).unwrap()
        };
        Remote { rt, handle }
    }

    /// Stops every task at once: the peer just goes silent.
    fn kill(self) {
        let Remote { rt, handle } = self;
        rt.shutdown_background();
        drop(handle);
    }
}

#[tokio::test]
async fn comes_up_polls_to_fast_rate_and_admin_down_is_not_a_failure() {
    let ours = Bfd::new();
    let h = ours.add_session(ip(12), ip(11), fast()).unwrap();
    let remote = Remote::start(ip(11), ip(12), fast());
    // Down → Init → Up at the 1 s slow rate takes one or two packets each way.
    wait_for(&h, "Up", Duration::from_secs(5), |s| s.state == State::Up).await;
    wait_for(&remote.handle, "remote Up", Duration::from_secs(5), |s| {
        s.state == State::Up
    })
    .await;
    assert_eq!(
        h.status().remote_discriminator,
        remote.handle.status().local_discriminator
    );
    // After the Poll both sides send every 50 ms less jitter: a second holds at least 15.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = h.counters().transmitted.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rate = h.counters().transmitted.load(Ordering::Relaxed) - sent;
    assert!((15..=30).contains(&rate), "{rate} packets in a second at 50 ms");

    let before = h.status();
    remote.handle.admin_down().unwrap();
    let after = wait_for(&h, "Down on AdminDown", Duration::from_secs(2), |s| {
        s.state == State::Down
    })
    .await;
    assert_eq!(after.diag, Diagnostic::NeighborSignaledSessionDown);
    assert_eq!(after.remote_state, State::AdminDown);
    assert!(!after.is_failure_after(&before));
    remote.handle.admin_up().unwrap();
    wait_for(&h, "Up again", Duration::from_secs(5), |s| s.state == State::Up).await;
    assert_eq!(h.counters().failures.load(Ordering::Relaxed), 0);
    remote.kill();
}

#[tokio::test]
async fn a_silent_peer_is_detected_within_the_detection_time() {
    let ours = Bfd::new();
    let h = ours.add_session(ip(22), ip(21), fast()).unwrap();
    let remote = Remote::start(ip(21), ip(22), fast());
    wait_for(&h, "Up", Duration::from_secs(5), |s| s.state == State::Up).await;
    // Let the Poll finish so the 150 ms detection time is in force.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = h.status();
    let killed = Instant::now();
    remote.kill();
    let after = wait_for(
        &h,
        "Down after the peer fell silent",
        Duration::from_secs(2),
        |s| s.state == State::Down,
    )
    .await;
    let took = killed.elapsed();
    assert_eq!(after.diag, Diagnostic::ControlDetectionTimeExpired);
    assert!(after.is_failure_after(&before));
    assert!(
        took <= Duration::from_millis(150 + 100),
        "detected after {took:?}"
    );
    assert_eq!(h.counters().failures.load(Ordering::Relaxed), 1);

    // A new peer on the same address brings it back Up.
    let remote = Remote::start(ip(21), ip(22), fast());
    wait_for(&h, "Up with the new peer", Duration::from_secs(5), |s| {
        s.state == State::Up
    })
    .await;
    remote.kill();
}

/// Waits (on the runtime, so the receive task runs) until `counter` reaches `n`.
async fn counted(what: &str, counter: &AtomicU64, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while counter.load(Ordering::Relaxed) != n {
        assert!(
            Instant::now() < deadline,
            "{what}: counter at {}",
            counter.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn sender(ttl: u32) -> UdpSocket {
    let s = UdpSocket::bind(SocketAddr::new(ip(32), 0)).unwrap();
    s.set_ttl(ttl).unwrap();
    s
}

fn down_packet(your: u32) -> [u8; MIN_LEN] {
    ControlPacket {
        diag: Diagnostic::None,
        state: State::Down,
        poll: false,
        final_: false,
        control_plane_independent: false,
        demand: false,
        detect_mult: 3,
        my_discriminator: 7,
        your_discriminator: your,
        desired_min_tx: Duration::from_secs(1),
        required_min_rx: Duration::from_secs(1),
        required_min_echo_rx: Duration::ZERO,
    }
    .encode()
}

#[tokio::test]
async fn receive_path_drops_bad_ttl_malformed_and_unknown() {
    let ours = Bfd::new();
    let h = ours.add_session(ip(32), ip(31), fast()).unwrap();
    let to = SocketAddr::new(ip(31), 3784);
    let c = ours.counters();
    // TTL 254: one hop away, or spoofed; dropped before parsing (RFC 5881 §5).
    sender(254).send_to(&down_packet(0), to).unwrap();
    counted("bad TTL", &c.bad_ttl, 1).await;
    // TTL 255 but version 0.
    let mut bad = down_packet(0);
    bad[0] = 0;
    sender(255).send_to(&bad, to).unwrap();
    counted("invalid", &c.invalid, 1).await;
    // Valid, but Your Discriminator names no session.
    sender(255).send_to(&down_packet(0xdead_beef), to).unwrap();
    counted("unknown peer", &c.unknown_peer, 1).await;
    // Valid, from the peer's address: the session moves to Init.
    sender(255).send_to(&down_packet(0), to).unwrap();
    wait_for(&h, "Init", Duration::from_secs(2), |s| s.state == State::Init).await;
    assert_eq!(h.status().remote_discriminator, 7);
    assert_eq!(c.received.load(Ordering::Relaxed), 4);
}

#[tokio::test]
async fn duplicate_and_mismatched_sessions_are_refused() {
    let ours = Bfd::new();
    let _h = ours.add_session(ip(42), ip(41), fast()).unwrap();
    assert!(matches!(
        ours.add_session(ip(42), ip(41), fast()),
        Err(kube_ovn_speaker::bfd::BfdError::Duplicate { .. })
    ));
    assert!(matches!(
        ours.add_session("::1".parse().unwrap(), ip(41), fast()),
        Err(kube_ovn_speaker::bfd::BfdError::FamilyMismatch { .. })
    ));
    let zero = Timers {
        detect_mult: 0,
        ..fast()
    };
    assert!(matches!(
        ours.add_session(ip(43), ip(41), zero),
        Err(kube_ovn_speaker::bfd::BfdError::Timers(_))
    ));
    // A second session on the same local address shares its receive socket.
    let _h2 = ours.add_session(ip(43), ip(41), fast()).unwrap();
}

#[test]
fn add_session_outside_a_runtime_is_an_error() {
    assert!(matches!(
        Bfd::new().add_session(ip(52), ip(51), fast()),
        Err(kube_ovn_speaker::bfd::BfdError::NoRuntime)
    ));
}
