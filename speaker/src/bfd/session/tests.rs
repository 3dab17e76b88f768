//! The session machine by input → output (RFC 5880 §6.2, §6.5, §6.8): exact action lists, with
//! each ArmTx deadline checked against the §6.8.7 jitter window and then normalised so the
//! tables stay exact.

use std::time::{Duration, Instant};

use super::*;
use Diagnostic as D;

const LOCAL: u32 = 0x1111;
const PEER: u32 = 0x2222;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn timers(tx: u64, rx: u64, mult: u8) -> Timers {
    Timers {
        desired_min_tx: ms(tx),
        required_min_rx: ms(rx),
        detect_mult: mult,
    }
}

/// A session and a clock the test moves by hand.
struct H {
    s: Session,
    t0: Instant,
    now: Duration,
}

/// An ArmTx after normalisation: only the interval is compared exactly.
fn arm_tx(interval_ms: u64) -> Action {
    Action::ArmTx {
        at: epoch(),
        interval: ms(interval_ms),
    }
}

fn epoch() -> Instant {
    use std::sync::OnceLock;
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

impl H {
    fn new(t: Timers) -> Self {
        H {
            s: Session::new(LOCAL, t, 42),
            t0: epoch(),
            now: Duration::ZERO,
        }
    }

    fn up_and_running(t: Timers) -> Self {
        let mut h = H::new(t);
        h.at(0, Input::AdminUp);
        h
    }

    /// Feeds `input` at `t_ms` after the start and returns the normalised actions.
    fn at(&mut self, t_ms: u64, input: Input) -> Vec<Action> {
        self.now = ms(t_ms);
        let now = self.t0 + self.now;
        let mult = self.s.timers().detect_mult;
        let actions = self.s.handle(now, input);
        actions
            .into_iter()
            .map(|a| match a {
                Action::ArmTx { at, interval } => {
                    let waited = at - now;
                    let high = if mult == 1 { interval * 9 / 10 } else { interval };
                    assert!(
                        waited >= interval * 3 / 4 && waited <= high,
                        "TX armed {waited:?} after now for interval {interval:?}"
                    );
                    Action::ArmTx {
                        at: epoch(),
                        interval,
                    }
                }
                other => other,
            })
            .collect()
    }

    fn detect_at(&self, t_ms: u64) -> Action {
        Action::ArmDetect(self.t0 + ms(t_ms))
    }

    /// What we would send now (state, diag, intervals), with the given P/F bits.
    fn ours(&self, poll: bool, final_: bool) -> ControlPacket {
        self.s.packet(poll, final_)
    }
}

fn peer(state: State, your: u32) -> ControlPacket {
    ControlPacket {
        diag: D::None,
        state,
        poll: false,
        final_: false,
        control_plane_independent: false,
        demand: false,
        detect_mult: 3,
        my_discriminator: PEER,
        your_discriminator: your,
        desired_min_tx: ms(300),
        required_min_rx: ms(300),
        required_min_echo_rx: Duration::ZERO,
    }
}

fn rx(p: ControlPacket) -> Input {
    Input::Received(p)
}

fn changed(from: State, to: State, diag: Diagnostic) -> Action {
    Action::StateChanged { from, to, diag }
}

/// Brought Up with the peer at 300/300/3 and our 300/300/3; the Poll of the Up transition is
/// answered, so nothing is outstanding.
fn up(t: Timers) -> H {
    let mut h = H::up_and_running(t);
    h.at(10, rx(peer(State::Down, 0)));
    h.at(20, rx(peer(State::Up, LOCAL)));
    let mut fin = peer(State::Up, LOCAL);
    fin.final_ = true;
    h.at(30, rx(fin));
    assert_eq!(h.s.status().state, State::Up);
    assert!(!h.s.poll_in_progress());
    h
}

#[test]
fn admin_up_starts_slow_tx_in_down() {
    let mut h = H::new(timers(300, 300, 3));
    assert_eq!(h.s.status().state, State::AdminDown);
    assert_eq!(
        h.at(0, Input::AdminUp),
        vec![changed(State::AdminDown, State::Down, D::None), arm_tx(1000)]
    );
    let sent = ControlPacket {
        diag: D::None,
        state: State::Down,
        poll: false,
        final_: false,
        control_plane_independent: false,
        demand: false,
        detect_mult: 3,
        my_discriminator: LOCAL,
        your_discriminator: 0,
        // §6.8.3: at least one second while not Up.
        desired_min_tx: ms(1000),
        required_min_rx: ms(300),
        required_min_echo_rx: Duration::ZERO,
    };
    assert_eq!(h.at(900, Input::TxTimer), vec![Action::Send(sent), arm_tx(1000)]);
    // A second expiry of the same deadline, or a stale one, does nothing.
    assert_eq!(h.at(901, Input::DetectTimer), vec![]);
}

#[test]
fn three_way_handshake_then_poll_to_fast_rate() {
    let mut h = H::up_and_running(timers(300, 300, 3));
    // Peer Down → Init; detection time 3 × max(300 ours, 300 theirs).
    assert_eq!(
        h.at(10, rx(peer(State::Down, 0))),
        vec![changed(State::Down, State::Init, D::None), h.detect_at(10 + 900)]
    );
    assert_eq!(h.s.status().remote_discriminator, PEER);
    // Peer Init → Up; TX drops to 300 ms at once (a decrease, §6.8.3) and a Poll starts.
    assert_eq!(
        h.at(20, rx(peer(State::Init, LOCAL))),
        vec![
            changed(State::Init, State::Up, D::None),
            h.detect_at(20 + 900),
            arm_tx(300)
        ]
    );
    assert!(h.s.poll_in_progress());
    let polled = h.ours(true, false);
    assert_eq!(polled.desired_min_tx, ms(300));
    assert_eq!(h.at(300, Input::TxTimer), vec![Action::Send(polled), arm_tx(300)]);
    // The Final ends the Poll Sequence; the next periodic packet has no P bit.
    let mut fin = peer(State::Up, LOCAL);
    fin.final_ = true;
    assert_eq!(h.at(310, rx(fin)), vec![h.detect_at(310 + 900)]);
    assert!(!h.s.poll_in_progress());
    assert_eq!(
        h.at(600, Input::TxTimer),
        vec![Action::Send(h.ours(false, false)), arm_tx(300)]
    );
}

#[test]
fn transitions_of_6_8_6() {
    use State::{AdminDown, Down, Init, Up};
    // (our state, peer's state) → our state after, diag.
    let table = [
        (Down, AdminDown, Down, D::None),
        (Down, Down, Init, D::None),
        (Down, Init, Up, D::None),
        (Down, Up, Down, D::None),
        (Init, AdminDown, Down, D::NeighborSignaledSessionDown),
        (Init, Down, Init, D::None),
        (Init, Init, Up, D::None),
        (Init, Up, Up, D::None),
        (Up, AdminDown, Down, D::NeighborSignaledSessionDown),
        (Up, Down, Down, D::NeighborSignaledSessionDown),
        (Up, Init, Up, D::None),
        (Up, Up, Up, D::None),
    ];
    for (ours, theirs, want, diag) in table {
        let mut h = match ours {
            Down => H::up_and_running(timers(300, 300, 3)),
            Init => {
                let mut h = H::up_and_running(timers(300, 300, 3));
                h.at(10, rx(peer(Down, 0)));
                h
            }
            _ => up(timers(300, 300, 3)),
        };
        let your = if theirs == Down || theirs == AdminDown {
            0
        } else {
            LOCAL
        };
        h.at(50, rx(peer(theirs, your)));
        let st = h.s.status();
        assert_eq!((st.state, st.diag), (want, diag), "{ours:?} + peer {theirs:?}");
    }
}

#[test]
fn detection_time_expiry_brings_up_session_down_with_diag_1() {
    let mut h = up(timers(300, 300, 3));
    let before = h.s.status();
    assert_eq!(
        h.at(930, Input::DetectTimer),
        vec![
            changed(State::Up, State::Down, D::ControlDetectionTimeExpired),
            // Back to the one-second floor (§6.8.3).
            arm_tx(1000),
        ]
    );
    let after = h.s.status();
    assert!(after.is_failure_after(&before));
    // §6.8.1: the remote discriminator is forgotten.
    assert_eq!(after.remote_discriminator, 0);
    assert_eq!(h.ours(false, false).your_discriminator, 0);
    assert_eq!(h.ours(false, false).diag, D::ControlDetectionTimeExpired);
}

#[test]
fn detection_time_uses_the_slower_of_our_rx_and_their_tx_times_their_mult() {
    let mut h = H::up_and_running(timers(100, 200, 3));
    let mut p = peer(State::Down, 0);
    p.desired_min_tx = ms(1000);
    p.detect_mult = 5;
    h.at(0, rx(p));
    assert_eq!(h.s.detection_time(), Some(ms(5000)));
    p.desired_min_tx = ms(50);
    h.at(10, rx(p));
    assert_eq!(h.s.detection_time(), Some(ms(1000)));
}

#[test]
fn peer_admin_down_is_not_a_failure_but_peer_down_is() {
    let mut h = up(timers(300, 300, 3));
    let before = h.s.status();
    h.at(100, rx(peer(State::AdminDown, LOCAL)));
    assert!(!h.s.status().is_failure_after(&before));
    let mut h = up(timers(300, 300, 3));
    h.at(100, rx(peer(State::Down, LOCAL)));
    assert!(h.s.status().is_failure_after(&before));
}

#[test]
fn poll_is_answered_at_once_with_final() {
    let mut h = up(timers(300, 300, 3));
    let mut p = peer(State::Up, LOCAL);
    p.poll = true;
    p.desired_min_tx = ms(500);
    let actions = h.at(100, rx(p));
    assert_eq!(
        actions,
        vec![Action::Send(h.ours(false, true)), h.detect_at(100 + 1500)]
    );
}

#[test]
fn peer_asking_for_slower_packets_slows_our_tx() {
    let mut h = up(timers(300, 300, 3));
    let mut p = peer(State::Up, LOCAL);
    p.required_min_rx = ms(2000);
    assert_eq!(h.at(100, rx(p)), vec![h.detect_at(100 + 900), arm_tx(2000)]);
    // Required Min RX 0: the peer wants no periodic packets at all (§6.8.7).
    p.required_min_rx = Duration::ZERO;
    assert_eq!(h.at(200, rx(p)), vec![h.detect_at(200 + 900), Action::StopTx]);
}

#[test]
fn peer_in_demand_mode_with_both_up_stops_periodic_tx() {
    let mut h = up(timers(300, 300, 3));
    let mut p = peer(State::Up, LOCAL);
    p.demand = true;
    assert_eq!(h.at(100, rx(p)), vec![h.detect_at(100 + 900), Action::StopTx]);
}

#[test]
fn raising_tx_while_up_waits_for_the_final() {
    let mut h = up(timers(300, 300, 3));
    assert_eq!(h.at(100, Input::SetTimers(timers(600, 300, 3))), vec![]);
    assert!(h.s.poll_in_progress());
    // Still at 300 ms, now with P and the new value advertised.
    let sent = h.at(300, Input::TxTimer);
    assert_eq!(sent, vec![Action::Send(h.ours(true, false)), arm_tx(300)]);
    assert_eq!(h.ours(true, false).desired_min_tx, ms(600));
    let mut fin = peer(State::Up, LOCAL);
    fin.final_ = true;
    assert_eq!(h.at(310, rx(fin)), vec![h.detect_at(310 + 900), arm_tx(600)]);
}

#[test]
fn lowering_tx_while_up_applies_at_once() {
    let mut h = up(timers(600, 300, 3));
    assert_eq!(
        h.at(100, Input::SetTimers(timers(300, 300, 3))),
        vec![arm_tx(300)]
    );
    assert!(h.s.poll_in_progress());
}

#[test]
fn lowering_rx_while_up_keeps_the_old_detection_time_until_the_final() {
    let mut h = up(timers(300, 600, 3));
    assert_eq!(h.s.detection_time(), Some(ms(1800)));
    assert_eq!(h.at(100, Input::SetTimers(timers(300, 300, 3))), vec![]);
    assert_eq!(h.s.detection_time(), Some(ms(1800)));
    let mut fin = peer(State::Up, LOCAL);
    fin.final_ = true;
    assert_eq!(h.at(200, rx(fin)), vec![h.detect_at(200 + 900)]);
    assert_eq!(h.s.detection_time(), Some(ms(900)));
}

#[test]
fn raising_rx_while_up_lengthens_detection_at_once() {
    let mut h = up(timers(300, 300, 3));
    assert_eq!(
        h.at(100, Input::SetTimers(timers(300, 1000, 3))),
        vec![h.detect_at(30 + 3000)]
    );
}

#[test]
fn a_change_during_a_poll_gets_its_own_poll_after_the_final() {
    let mut h = up(timers(300, 300, 3));
    h.at(100, Input::SetTimers(timers(600, 300, 3)));
    h.at(150, Input::SetTimers(timers(900, 300, 3)));
    let mut fin = peer(State::Up, LOCAL);
    fin.final_ = true;
    // The first Final acknowledges 600 only.
    assert_eq!(h.at(200, rx(fin)), vec![h.detect_at(200 + 900), arm_tx(600)]);
    assert!(h.s.poll_in_progress());
    assert_eq!(h.at(300, rx(fin)), vec![h.detect_at(300 + 900), arm_tx(900)]);
    assert!(!h.s.poll_in_progress());
}

#[test]
fn timer_changes_while_down_apply_at_once_with_the_one_second_floor() {
    let mut h = H::up_and_running(timers(300, 300, 3));
    assert_eq!(
        h.at(10, Input::SetTimers(timers(2000, 300, 3))),
        vec![arm_tx(2000)]
    );
    assert_eq!(
        h.at(20, Input::SetTimers(timers(100, 300, 3))),
        vec![arm_tx(1000)]
    );
    assert!(!h.s.poll_in_progress());
}

#[test]
fn admin_down_tells_the_peer_for_a_detection_time_then_goes_quiet() {
    let mut h = up(timers(300, 300, 3));
    let actions = h.at(100, Input::AdminDown);
    let told = ControlPacket {
        state: State::AdminDown,
        diag: D::AdministrativelyDown,
        desired_min_tx: ms(1000),
        ..h.ours(false, false)
    };
    assert_eq!(
        actions,
        vec![
            changed(State::Up, State::AdminDown, D::AdministrativelyDown),
            Action::StopDetect,
            Action::Send(told),
            arm_tx(1000),
        ]
    );
    // Packets from the peer are discarded while AdminDown.
    assert_eq!(h.at(200, rx(peer(State::Up, LOCAL))), vec![]);
    assert_eq!(h.s.status().state, State::AdminDown);
    // Told for max(detection time 900, 3 × 1000 ms): sends until 100 + 3000, then stops.
    assert_eq!(h.at(1100, Input::TxTimer), vec![Action::Send(told), arm_tx(1000)]);
    assert_eq!(h.at(3200, Input::TxTimer), vec![]);
    // Admin up again starts from Down.
    assert_eq!(
        h.at(4000, Input::AdminUp),
        vec![changed(State::AdminDown, State::Down, D::None), arm_tx(1000)]
    );
}

#[test]
fn jitter_stays_within_6_8_7_bounds() {
    for mult in [1u8, 3] {
        let mut h = H::up_and_running(timers(1000, 1000, mult));
        // `H::at` asserts 75–100% (75–90% for mult 1) on every ArmTx; vary the seed stream.
        for i in 0..2000 {
            let actions = h.at(1000 + i, Input::TxTimer);
            assert!(matches!(actions.last(), Some(Action::ArmTx { .. })));
        }
    }
}

#[test]
fn jitter_spreads_across_the_window() {
    let mut s = Session::new(LOCAL, timers(1000, 1000, 3), 7);
    let draws: Vec<Duration> = (0..1000).map(|_| s.jittered(ms(1000))).collect();
    assert!(draws.iter().any(|d| *d < ms(800)));
    assert!(draws.iter().any(|d| *d > ms(950)));
}

#[test]
fn timers_validate() {
    assert_eq!(Timers::default(), timers(1000, 1000, 3));
    assert!(Timers::default().validate().is_ok());
    let bad = [
        (timers(0, 300, 3), "desired_min_tx"),
        (timers(300, 0, 3), "required_min_rx"),
        (timers(300, 300, 0), "detect_mult"),
        (
            Timers {
                desired_min_tx: Duration::from_secs(5000),
                ..Timers::default()
            },
            "desired_min_tx/required_min_rx",
        ),
    ];
    for (t, field) in bad {
        assert_eq!(t.validate().unwrap_err().field, field);
    }
}

mod prop {
    use proptest::prelude::*;

    use super::*;

    fn any_state() -> impl Strategy<Value = State> {
        prop_oneof![
            Just(State::AdminDown),
            Just(State::Down),
            Just(State::Init),
            Just(State::Up)
        ]
    }

    fn any_packet() -> impl Strategy<Value = ControlPacket> {
        (
            any_state(),
            any::<[bool; 3]>(),
            1u8..=5,
            prop_oneof![Just(0u32), Just(LOCAL), any::<u32>()],
            0u64..3000,
            0u64..3000,
        )
            .prop_map(|(state, [poll, final_, demand], mult, your, tx, rx)| {
                let mut p = peer(state, your);
                p.poll = poll;
                p.final_ = final_;
                p.demand = demand;
                p.detect_mult = mult;
                p.desired_min_tx = ms(tx.max(1));
                p.required_min_rx = ms(rx);
                p
            })
    }

    fn any_input() -> impl Strategy<Value = Input> {
        prop_oneof![
            6 => any_packet().prop_map(Input::Received),
            3 => Just(Input::TxTimer),
            2 => Just(Input::DetectTimer),
            1 => Just(Input::AdminUp),
            1 => Just(Input::AdminDown),
            1 => (1u64..2000, 1u64..2000, 1u8..=5).prop_map(|(tx, rx, m)| Input::SetTimers(timers(tx, rx, m))),
        ]
    }

    proptest! {
        /// Any input sequence: no panic; every packet we send carries our discriminator, never
        /// both P and F, the one-second floor while not Up (§6.8.3), a Poll only while Up; a
        /// TX deadline is never in the past; state changes are reported as they happen.
        #[test]
        fn invariants_hold_for_any_input_sequence(
            steps in proptest::collection::vec((0u64..500, any_input()), 1..80)
        ) {
            let t0 = epoch();
            let mut s = Session::new(LOCAL, timers(300, 300, 3), 1);
            let mut now = t0;
            let mut state = s.status().state;
            for (dt, input) in steps {
                now += ms(dt);
                for action in s.handle(now, input) {
                    match action {
                        Action::Send(p) => {
                            prop_assert_eq!(p.my_discriminator, LOCAL);
                            prop_assert!(!(p.poll && p.final_));
                            prop_assert_eq!(p.state, s.status().state);
                            if p.state != State::Up {
                                prop_assert!(p.desired_min_tx >= SLOW_TX);
                                prop_assert!(!p.poll);
                            }
                        }
                        Action::ArmTx { at, interval } => {
                            prop_assert!(at >= now && at <= now + interval);
                        }
                        Action::ArmDetect(at) => prop_assert!(at > t0),
                        Action::StateChanged { from, to, .. } => {
                            prop_assert_eq!(from, state);
                            prop_assert_ne!(from, to);
                            state = to;
                        }
                        Action::StopTx | Action::StopDetect => {}
                    }
                }
                prop_assert_eq!(state, s.status().state);
            }
        }
    }
}

#[test]
fn status_shows_the_poll_and_the_negotiated_intervals() {
    let mut h = H::up_and_running(timers(50, 50, 3));
    let slow = h.s.status();
    assert_eq!(
        (slow.poll_in_progress, slow.tx_interval, slow.detection_time),
        (false, Some(ms(1000)), None),
        "the one-second floor while not Up, nothing heard yet"
    );
    let mut fast_peer = peer(State::Down, 0);
    fast_peer.desired_min_tx = ms(50);
    fast_peer.required_min_rx = ms(50);
    h.at(10, rx(fast_peer));
    fast_peer.state = State::Up;
    fast_peer.your_discriminator = LOCAL;
    h.at(20, rx(fast_peer));
    let polling = h.s.status();
    assert_eq!(polling.state, State::Up);
    assert!(polling.poll_in_progress, "Up starts a Poll to the fast rate");
    // The faster TX applies at once (safe direction); the detection time is 3 × 50 ms.
    assert_eq!(
        (polling.tx_interval, polling.detection_time),
        (Some(ms(50)), Some(ms(150)))
    );
    fast_peer.final_ = true;
    h.at(30, rx(fast_peer));
    let done = h.s.status();
    assert!(!done.poll_in_progress);
    assert_eq!(
        (done.tx_interval, done.detection_time),
        (Some(ms(50)), Some(ms(150)))
    );
}
