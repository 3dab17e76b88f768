//! Two of our BFD services against each other over loopback addresses (127.0.0.0/8 is all
//! local on Linux, so each side binds its own address's port 3784): the session comes Up and
//! polls to fast timers, AdminDown is not a failure, a peer that falls silent is detected by
//! the detection timer (the time is reported), and the receive path drops TTL ≠ 255 and malformed packets
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

    /// Stops every task at once: the peer just goes silent. The handle is leaked, not dropped:
    /// a dropped handle tells its session to send AdminDown, and a worker thread still running
    /// when the runtime goes down could do so before the task is gone.
    fn kill(self) {
        let Remote { rt, handle } = self;
        rt.shutdown_background();
        std::mem::forget(handle);
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
    // The Poll to the fast rate is answered: 50 ms both ways, detection in 3 × 50 ms.
    let fast_rate = |s: &Status| {
        s.state == State::Up
            && !s.poll_in_progress
            && s.tx_interval == Some(Duration::from_millis(50))
            && s.detection_time == Some(Duration::from_millis(150))
    };
    wait_for(&h, "our Poll done", Duration::from_secs(5), fast_rate).await;
    wait_for(
        &remote.handle,
        "the remote's Poll done",
        Duration::from_secs(5),
        fast_rate,
    )
    .await;
    // And packets do go at that rate: 20 of them take more than 19 intervals less the 25%
    // jitter (so not faster), and far less than the 19 s of the slow rate.
    let start = Instant::now();
    let sent = h.counters().transmitted.load(Ordering::Relaxed);
    counted_at_least(
        "20 packets at the fast rate",
        &h.counters().transmitted,
        sent + 20,
        Duration::from_secs(5),
    )
    .await;
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(19 * 375 / 10),
        "20 packets in {took:?}"
    );

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
async fn a_silent_peer_is_detected_by_the_detection_timer() {
    let ours = Bfd::new();
    let h = ours.add_session(ip(22), ip(21), fast()).unwrap();
    let remote = Remote::start(ip(21), ip(22), fast());
    // Both Polls finished: the 150 ms detection time is in force on our side, and the peer
    // has nothing more to say before it falls silent.
    let settled = |s: &Status| {
        s.state == State::Up && !s.poll_in_progress && s.detection_time == Some(Duration::from_millis(150))
    };
    wait_for(&h, "Up at the fast rate", Duration::from_secs(5), settled).await;
    wait_for(
        &remote.handle,
        "the remote Up at the fast rate",
        Duration::from_secs(5),
        settled,
    )
    .await;
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
    // The diagnostic says the detection timer fired (not an AdminDown or a peer's Down); that it
    // fires at the detection time is the sans-IO session's unit tests' job, on a virtual clock.
    // Here the time is reported, not asserted: a loaded machine delays the wake-up, not BFD.
    assert_eq!(after.diag, Diagnostic::ControlDetectionTimeExpired, "{after:?}");
    assert!(after.is_failure_after(&before));
    eprintln!("silent peer detected after {took:?} (detection time 150 ms)");
    assert_eq!(h.counters().failures.load(Ordering::Relaxed), 1);

    // A new peer on the same address brings it back Up.
    let remote = Remote::start(ip(21), ip(22), fast());
    wait_for(&h, "Up with the new peer", Duration::from_secs(5), |s| {
        s.state == State::Up
    })
    .await;
    remote.kill();
}

/// Waits (on the runtime, so the receive task runs) until `counter` is at least `n`, at most
/// `within`. The counters are plain atomics with nothing to await, so this polls them every
/// 5 ms: a bounded wait on observable state, not a fixed sleep.
async fn counted_at_least(what: &str, counter: &AtomicU64, n: u64, within: Duration) {
    let deadline = Instant::now() + within;
    while counter.load(Ordering::Relaxed) < n {
        assert!(
            Instant::now() < deadline,
            "{what}: counter at {} after {within:?}",
            counter.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `counter` reaches exactly `n`.
async fn counted(what: &str, counter: &AtomicU64, n: u64) {
    counted_at_least(what, counter, n, Duration::from_secs(2)).await;
    assert_eq!(counter.load(Ordering::Relaxed), n, "{what}");
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
