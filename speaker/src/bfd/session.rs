//! The BFD session state machine (RFC 5880 §6.2, §6.8), sans-IO: [`Session::handle`] takes the
//! current time and one [`Input`] and returns the [`Action`]s the driver carries out. There is no
//! clock and no socket inside; timers are deadlines the actions arm, and their expiry comes back
//! as an input. Asynchronous mode only (no Demand mode of our own, no Echo function, no
//! authentication).
//!
//! ```text
//!            AdminUp                 peer Down            peer Init/Up
//!  AdminDown ───────► Down ───────────────────► Init ─────────────────► Up
//!                      ▲  ◄─ detect expiry (diag 1) / peer AdminDown or Down (diag 3) ─┘
//!  AdminDown ◄── AdminDown input from any state (diag 7)
//! ```
//!
//! Timers: while not Up we advertise and use a Desired Min TX of at least one second
//! (§6.8.3); on reaching Up we switch to the configured value and run a Poll Sequence (§6.5).
//! A change made while Up that could make the peer declare us down too early (a higher TX
//! interval, a lower RX interval) only takes effect once the peer answered the Poll with a
//! Final (§6.8.3); a change in the safe direction takes effect at once.

use std::time::{Duration, Instant};

use super::packet::{ControlPacket, Diagnostic, State};

/// The Desired Min TX floor while the session is not Up (RFC 5880 §6.8.3).
pub const SLOW_TX: Duration = Duration::from_secs(1);
/// bfd.RemoteMinRxInterval before the first packet: 1 µs (RFC 5880 §6.8.1).
const REMOTE_MIN_RX_INIT: Duration = Duration::from_micros(1);

/// The timer parameters of a session (RFC 5880 §6.8.1: bfd.DesiredMinTxInterval,
/// bfd.RequiredMinRxInterval, bfd.DetectMult). Kube-OVN's `--bfd-min-tx`, `--bfd-min-rx` and
/// `--bfd-detection-multiplier` (defaults 1000 ms, 1000 ms, 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    pub desired_min_tx: Duration,
    pub required_min_rx: Duration,
    pub detect_mult: u8,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            desired_min_tx: Duration::from_secs(1),
            required_min_rx: Duration::from_secs(1),
            detect_mult: 3,
        }
    }
}

/// Timers that cannot be sent: `field` names the [`Timers`] field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("BFD timers: {field}: {reason}")]
pub struct TimersError {
    pub field: &'static str,
    pub reason: &'static str,
}

impl Timers {
    /// Checks the limits of the wire format (RFC 5880 §4.1): intervals are 32-bit microseconds,
    /// Desired Min TX 0 is reserved, Detect Mult 0 is invalid, and a Required Min RX of 0 would
    /// tell the peer to send nothing, which makes no sense for a session we want to watch.
    pub fn validate(&self) -> Result<(), TimersError> {
        let fail = |field, reason| Err(TimersError { field, reason });
        let max = Duration::from_micros(u64::from(u32::MAX));
        if self.desired_min_tx.as_micros() == 0 {
            return fail("desired_min_tx", "must be at least 1 µs (0 is reserved)");
        }
        if self.required_min_rx.as_micros() == 0 {
            return fail("required_min_rx", "must be at least 1 µs");
        }
        if self.desired_min_tx > max || self.required_min_rx > max {
            return fail("desired_min_tx/required_min_rx", "at most 4294967295 µs");
        }
        if self.detect_mult == 0 {
            return fail("detect_mult", "must be 1 to 255");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// A packet that passed [`ControlPacket::decode`] and was demultiplexed to this session.
    Received(ControlPacket),
    /// The deadline of the last [`Action::ArmTx`] passed.
    TxTimer,
    /// The deadline of the last [`Action::ArmDetect`] passed.
    DetectTimer,
    AdminUp,
    AdminDown,
    SetTimers(Timers),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send this packet to the peer now.
    Send(ControlPacket),
    /// Send the next periodic packet at `at` (`interval` less the §6.8.7 jitter); replaces any
    /// armed TX deadline.
    ArmTx {
        at: Instant,
        interval: Duration,
    },
    StopTx,
    /// Declare the session failed at `at` unless a packet arrives first (§6.8.4).
    ArmDetect(Instant),
    StopDetect,
    StateChanged {
        from: State,
        to: State,
        diag: Diagnostic,
    },
}

/// What the owner of a session sees (and what the driver publishes in its watch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub state: State,
    /// Our bfd.LocalDiag: why the state last changed.
    pub diag: Diagnostic,
    /// The state the peer last reported.
    pub remote_state: State,
    pub local_discriminator: u32,
    pub remote_discriminator: u32,
    /// A Poll Sequence is outstanding (RFC 5880 §6.5): new intervals wait for the peer's Final.
    pub poll_in_progress: bool,
    /// The interval our periodic packets go at now, before jitter (§6.8.7: the larger of our
    /// Desired Min TX in force and the peer's Required Min RX); `None` while none are sent.
    pub tx_interval: Option<Duration>,
    /// The detection time in force (§6.8.4), once the peer has been heard.
    pub detection_time: Option<Duration>,
}

impl Status {
    /// True when a session that was `before` has failed: it left Up for Down, and not because
    /// the peer went AdminDown (RFC 5882 §3.2: a peer's AdminDown is not a path failure, so
    /// the client protocol must not be torn down for it).
    pub fn is_failure_after(&self, before: &Status) -> bool {
        before.state == State::Up && self.state == State::Down && self.remote_state != State::AdminDown
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Polled {
    desired_min_tx: Duration,
    required_min_rx: Duration,
}

#[derive(Debug)]
pub struct Session {
    config: Timers,
    state: State,
    diag: Diagnostic,
    local_discr: u32,
    remote_discr: u32,
    remote_state: State,
    /// bfd.DesiredMinTxInterval and bfd.RequiredMinRxInterval as advertised now.
    desired_min_tx: Duration,
    required_min_rx: Duration,
    /// The values in force for our TX rate and for the detection time; they lag the advertised
    /// ones while a Poll Sequence is outstanding (§6.8.3).
    tx_basis: Duration,
    rx_basis: Duration,
    remote_min_rx: Duration,
    remote_desired_min_tx: Duration,
    remote_detect_mult: u8,
    remote_demand: bool,
    /// The values the outstanding Poll Sequence carries, and whether another is due after it.
    poll: Option<Polled>,
    poll_again: bool,
    tx_at: Option<Instant>,
    tx_interval: Option<Duration>,
    detect_at: Option<Instant>,
    last_rx: Option<Instant>,
    /// While AdminDown, keep telling the peer until then, then go quiet (§6.8.16).
    admin_down_until: Option<Instant>,
    rng: u64,
    out: Vec<Action>,
}

impl Session {
    /// A session in AdminDown; [`Input::AdminUp`] starts it. `local_discriminator` must be
    /// non-zero and unique on this system (§6.8.1); `seed` feeds the TX jitter.
    pub fn new(local_discriminator: u32, timers: Timers, seed: u64) -> Self {
        let desired = timers.desired_min_tx.max(SLOW_TX);
        Session {
            config: timers,
            state: State::AdminDown,
            diag: Diagnostic::None,
            local_discr: local_discriminator,
            remote_discr: 0,
            remote_state: State::Down,
            desired_min_tx: desired,
            required_min_rx: timers.required_min_rx,
            tx_basis: desired,
            rx_basis: timers.required_min_rx,
            remote_min_rx: REMOTE_MIN_RX_INIT,
            remote_desired_min_tx: Duration::ZERO,
            remote_detect_mult: 0,
            remote_demand: false,
            poll: None,
            poll_again: false,
            tx_at: None,
            tx_interval: None,
            detect_at: None,
            last_rx: None,
            admin_down_until: None,
            rng: seed,
            out: Vec::new(),
        }
    }

    pub fn status(&self) -> Status {
        Status {
            state: self.state,
            diag: self.diag,
            remote_state: self.remote_state,
            local_discriminator: self.local_discr,
            remote_discriminator: self.remote_discr,
            poll_in_progress: self.poll.is_some(),
            tx_interval: self.tx_interval,
            detection_time: self.detection_time(),
        }
    }

    pub fn timers(&self) -> Timers {
        self.config
    }

    /// The detection time in force (§6.8.4), once the peer has been heard.
    pub fn detection_time(&self) -> Option<Duration> {
        (self.remote_detect_mult > 0)
            .then(|| self.rx_basis.max(self.remote_desired_min_tx) * u32::from(self.remote_detect_mult))
    }

    pub fn poll_in_progress(&self) -> bool {
        self.poll.is_some()
    }

    pub fn handle(&mut self, now: Instant, input: Input) -> Vec<Action> {
        match input {
            Input::Received(packet) => self.received(now, &packet),
            Input::TxTimer => self.tx_timer(now),
            Input::DetectTimer => self.detect_timer(now),
            Input::AdminUp => self.admin_up(now),
            Input::AdminDown => self.admin_down(now),
            Input::SetTimers(timers) => self.set_timers(now, timers),
        }
        std::mem::take(&mut self.out)
    }

    fn packet(&self, poll: bool, final_: bool) -> ControlPacket {
        ControlPacket {
            diag: self.diag,
            state: self.state,
            poll,
            final_,
            control_plane_independent: false,
            demand: false,
            detect_mult: self.config.detect_mult,
            my_discriminator: self.local_discr,
            your_discriminator: self.remote_discr,
            desired_min_tx: self.desired_min_tx,
            required_min_rx: self.required_min_rx,
            required_min_echo_rx: Duration::ZERO,
        }
    }

    fn set_state(&mut self, to: State, diag: Diagnostic) {
        let from = self.state;
        self.state = to;
        self.diag = diag;
        self.out.push(Action::StateChanged { from, to, diag });
        if to == State::Up {
            // §6.8.3: the one-second floor only applies while not Up.
            self.change_timers(self.config.desired_min_tx, self.config.required_min_rx);
        } else if from == State::Up {
            self.poll = None;
            self.poll_again = false;
            self.desired_min_tx = self.config.desired_min_tx.max(SLOW_TX);
            self.tx_basis = self.desired_min_tx;
            self.required_min_rx = self.config.required_min_rx;
            self.rx_basis = self.required_min_rx;
        }
    }

    /// The interval periodic packets go at, or None when none may be sent: the peer asked for
    /// none (Required Min RX 0), runs Demand mode with the session Up both ways (§6.8.7), or
    /// we have been AdminDown long enough (§6.8.16).
    fn periodic_interval(&self, now: Instant) -> Option<Duration> {
        if self.remote_min_rx.is_zero() {
            return None;
        }
        if self.remote_demand && self.state == State::Up && self.remote_state == State::Up {
            return None;
        }
        if self.state == State::AdminDown && self.admin_down_until.is_none_or(|until| now >= until) {
            return None;
        }
        Some(self.tx_basis.max(self.remote_min_rx))
    }

    fn next_random(&mut self) -> u64 {
        // splitmix64: a few lines of well-mixed bits is all the jitter needs.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// §6.8.7: each interval is cut by a random 0–25%, or 10–25% with a Detect Mult of 1.
    fn jittered(&mut self, interval: Duration) -> Duration {
        let (low, span) = if self.config.detect_mult == 1 {
            (750, 151)
        } else {
            (750, 251)
        };
        let per_mille = low + self.next_random() % span;
        let nanos = interval.as_nanos() * u128::from(per_mille) / 1000;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Arms the next periodic packet from `now`, or stops periodic TX if none may be sent.
    fn schedule_tx(&mut self, now: Instant) {
        if let Some(interval) = self.periodic_interval(now) {
            let at = now + self.jittered(interval);
            self.tx_at = Some(at);
            self.tx_interval = Some(interval);
            self.out.push(Action::ArmTx { at, interval });
        } else {
            if self.tx_at.take().is_some() {
                self.out.push(Action::StopTx);
            }
            self.tx_interval = None;
        }
    }

    /// Re-arms TX when the interval in force changed (§6.8.7 recalculates it on every change
    /// of either input), so a faster rate starts now and a slower one is honoured.
    fn reschedule_if_changed(&mut self, now: Instant) {
        if self.tx_at.is_some() && self.periodic_interval(now) != self.tx_interval {
            self.schedule_tx(now);
        }
    }

    fn arm_detect(&mut self) {
        let (Some(last), Some(time)) = (self.last_rx, self.detection_time()) else {
            return;
        };
        let at = last + time;
        if self.detect_at != Some(at) {
            self.detect_at = Some(at);
            self.out.push(Action::ArmDetect(at));
        }
    }

    fn stop_detect(&mut self) {
        if self.detect_at.take().is_some() {
            self.out.push(Action::StopDetect);
        }
    }

    /// §6.8.6, after the stateless checks [`ControlPacket::decode`] made.
    fn received(&mut self, now: Instant, p: &ControlPacket) {
        self.remote_discr = p.my_discriminator;
        self.remote_state = p.state;
        self.remote_demand = p.demand;
        self.remote_min_rx = p.required_min_rx;
        self.remote_desired_min_tx = p.desired_min_tx;
        self.remote_detect_mult = p.detect_mult;
        if p.final_
            && let Some(polled) = self.poll.take()
        {
            self.poll_finished(polled);
        }
        if self.state == State::AdminDown {
            self.reschedule_if_changed(now);
            return;
        }
        self.last_rx = Some(now);
        if p.state == State::AdminDown {
            if self.state != State::Down {
                self.set_state(State::Down, Diagnostic::NeighborSignaledSessionDown);
            }
        } else {
            match (self.state, p.state) {
                (State::Down, State::Down) => self.set_state(State::Init, Diagnostic::None),
                (State::Down, State::Init) | (State::Init, State::Init | State::Up) => {
                    self.set_state(State::Up, Diagnostic::None);
                }
                (State::Up, State::Down) => {
                    self.set_state(State::Down, Diagnostic::NeighborSignaledSessionDown);
                }
                _ => {}
            }
        }
        if p.poll {
            // §6.8.7: answer a Poll at once, outside the periodic schedule.
            self.out.push(Action::Send(self.packet(false, true)));
        }
        self.arm_detect();
        if self.tx_at.is_none() {
            self.schedule_tx(now);
        } else {
            self.reschedule_if_changed(now);
        }
    }

    /// The peer acknowledged `polled` (§6.5): a higher TX interval or a lower RX interval that
    /// waited for it now takes effect; another Poll follows if the values changed meanwhile.
    fn poll_finished(&mut self, polled: Polled) {
        self.tx_basis = self.desired_min_tx.min(polled.desired_min_tx);
        self.rx_basis = self.required_min_rx.max(polled.required_min_rx);
        if std::mem::take(&mut self.poll_again) {
            self.start_poll();
        }
    }

    fn start_poll(&mut self) {
        if self.poll.is_some() {
            self.poll_again = true;
        } else {
            self.poll = Some(Polled {
                desired_min_tx: self.desired_min_tx,
                required_min_rx: self.required_min_rx,
            });
        }
    }

    /// Advertise new intervals. While Up, §6.8.3: an increase of TX or a decrease of RX waits
    /// for the Poll Sequence; the other directions apply at once. While not Up, all at once.
    fn change_timers(&mut self, desired_min_tx: Duration, required_min_rx: Duration) {
        if desired_min_tx == self.desired_min_tx && required_min_rx == self.required_min_rx {
            return;
        }
        self.desired_min_tx = desired_min_tx;
        self.required_min_rx = required_min_rx;
        if self.state == State::Up {
            self.tx_basis = self.tx_basis.min(desired_min_tx);
            self.rx_basis = self.rx_basis.max(required_min_rx);
            self.start_poll();
        } else {
            self.tx_basis = desired_min_tx;
            self.rx_basis = required_min_rx;
        }
    }

    fn set_timers(&mut self, now: Instant, timers: Timers) {
        let mult_changed = timers.detect_mult != self.config.detect_mult;
        self.config = timers;
        let desired = if self.state == State::Up {
            timers.desired_min_tx
        } else {
            timers.desired_min_tx.max(SLOW_TX)
        };
        self.change_timers(desired, timers.required_min_rx);
        if mult_changed && self.state == State::Up {
            // The peer's detection time uses our Detect Mult; tell it through a Poll too.
            self.start_poll();
        }
        self.arm_detect();
        self.reschedule_if_changed(now);
    }

    fn tx_timer(&mut self, now: Instant) {
        if self.tx_at.take().is_none() {
            return;
        }
        if self.periodic_interval(now).is_some() {
            let poll = self.poll.is_some();
            self.out.push(Action::Send(self.packet(poll, false)));
        }
        self.schedule_tx(now);
    }

    /// §6.8.4: no packet within the detection time.
    fn detect_timer(&mut self, now: Instant) {
        if self.detect_at.take().is_none() {
            return;
        }
        // §6.8.1: bfd.RemoteDiscr is zeroed when a Detection Time passes in silence.
        self.remote_discr = 0;
        self.remote_state = State::Down;
        self.remote_detect_mult = 0;
        self.remote_demand = false;
        if matches!(self.state, State::Init | State::Up) {
            self.set_state(State::Down, Diagnostic::ControlDetectionTimeExpired);
        }
        self.reschedule_if_changed(now);
    }

    /// §6.8.16: AdminDown, diag 7; the peer is told at once and for a detection time, then we
    /// stop sending.
    fn admin_down(&mut self, now: Instant) {
        if self.state == State::AdminDown {
            return;
        }
        let detection = self.detection_time().unwrap_or_default();
        self.set_state(State::AdminDown, Diagnostic::AdministrativelyDown);
        self.poll = None;
        self.poll_again = false;
        self.desired_min_tx = self.config.desired_min_tx.max(SLOW_TX);
        self.tx_basis = self.desired_min_tx;
        // At least a detection time, and at least Detect Mult packets at the slow rate.
        let told_for =
            detection.max(self.tx_basis.max(self.remote_min_rx) * u32::from(self.config.detect_mult));
        self.stop_detect();
        self.last_rx = None;
        self.admin_down_until = Some(now + told_for);
        self.out.push(Action::Send(self.packet(false, false)));
        self.schedule_tx(now);
    }

    fn admin_up(&mut self, now: Instant) {
        if self.state != State::AdminDown {
            return;
        }
        self.admin_down_until = None;
        self.set_state(State::Down, Diagnostic::None);
        self.schedule_tx(now);
    }
}

#[cfg(test)]
mod tests;
