//! The BGP session state machine (RFC 4271 §8), sans-IO: [`Session::handle`] takes one
//! [`Input`] and returns the [`Action`]s the driver must carry out. No sockets, no clocks, no
//! async: timers are named, started and stopped by actions, and their expiry comes back as an
//! input. Every test drives it with plain values.
//!
//! A session has up to two TCP connections to its peer, one we opened ([`ConnectionId::Outbound`])
//! and one the peer opened ([`ConnectionId::Inbound`]); when both reach the OPEN exchange,
//! [`collision_winner`] picks the survivor and the other is closed with Cease / Connection
//! Collision Resolution (RFC 4271 §6.8, RFC 4486). After a failure the session restarts by
//! itself after an idle hold time that doubles up to a minute (RFC 4271 §8.1.1,
//! DampPeerOscillations), unless it was stopped by the operator.
//!
//! # The driver ([`crate::driver`]: one tokio task per peer, `driver/peer.rs`)
//!
//! ```text
//!   listener task ──accepted socket (source checked)──┐
//!   connect future ──connected / failed───────────────┤
//!   reader task per socket ──bytes───────────────────┼──► Input ──► Session::handle ──► Vec<Action>
//!   timers (sleep_until the earliest deadline)───────┤                                   │
//!   operator / config / BFD ──Start, Stop────────────┘                                   │
//!                                                                                         ▼
//!   Connect          → spawn a connect (MD5 key and local address set before connect())
//!   Send{conn,msg}   → wire::encode, write on that socket
//!   Close{conn}      → flush pending writes, shut the socket down
//!   RejectInbound    → write the NOTIFICATION if any, close the just-accepted socket
//!   StartTimer/Stop  → (re)arm or cancel the named deadline
//!   Established      → AdjRibOut::session_up(negotiated); send its UPDATEs on that connection
//!   SessionDown      → AdjRibOut::session_down()
//!   RouteRefreshRequested(f) → AdjRibOut::route_refresh(f); send
//! ```
//!
//! Bytes are split and decoded in the peer task, one frame at a time, each handled before the
//! next is decoded: UPDATEs are decoded with [`Negotiated::decode_context`] (4-octet AS, external
//! peer), known only once the KEEPALIVE that makes the session Established has been handled, and
//! that KEEPALIVE often shares a read with the first UPDATEs. Before that,
//! `DecodeContext::default()` is right (OPEN, KEEPALIVE and NOTIFICATION do not depend on it).
//!
//! UPDATEs from the Adj-RIB-Out are written by the driver on [`Session::established_connection`]
//! without passing through the state machine; they are only valid while it returns `Some`.
//! `tests/session_pair.rs` runs two sessions against each other through such a loop.

mod collision;
mod open;
mod types;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use collision::{ConnectionId, collision_winner};
pub use types::{
    Action, ConfigError, DownReason, GracefulRestartConfig, Input, Negotiated, SessionConfig, State,
    StopReason, Timer,
};

use crate::bgp::wire::notification::{cease, fsm as fsm_subcode};
use crate::bgp::wire::{Message, Notification};

/// The hold time used between sending OPEN and receiving the peer's (RFC 4271 §8.2.2 suggests
/// 4 minutes).
pub const OPEN_HOLD_TIME: Duration = Duration::from_mins(4);
/// First and last idle hold time before restarting after a failure.
pub const IDLE_HOLD_MIN: Duration = Duration::from_secs(1);
pub const IDLE_HOLD_MAX: Duration = Duration::from_mins(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    OpenSent,
    OpenConfirm,
    Established,
}

#[derive(Debug)]
struct Connection {
    phase: Phase,
    negotiated: Option<Negotiated>,
}

#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    running: bool,
    outbound: Option<Connection>,
    inbound: Option<Connection>,
    state: State,
    idle_hold: Duration,
    restarting: bool,
    out: Vec<Action>,
}

impl Session {
    pub fn new(config: SessionConfig) -> Self {
        let restarting = config.restarting && config.graceful_restart.is_some();
        Session {
            config,
            running: false,
            outbound: None,
            inbound: None,
            state: State::Idle,
            idle_hold: IDLE_HOLD_MIN,
            restarting,
            out: Vec::new(),
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// The connection UPDATEs go on, and what was negotiated on it, while Established.
    pub fn established_connection(&self) -> Option<(ConnectionId, &Negotiated)> {
        [ConnectionId::Outbound, ConnectionId::Inbound]
            .into_iter()
            .find_map(|id| {
                let conn = self.slot(id)?;
                (conn.phase == Phase::Established).then_some(())?;
                Some((id, conn.negotiated.as_ref()?))
            })
    }

    pub fn handle(&mut self, input: Input) -> Vec<Action> {
        match input {
            Input::Start => self.start(),
            Input::Stop(reason) => self.stop(reason),
            Input::TcpConnected(id) => self.tcp_connected(id),
            Input::TcpFailed(id) => {
                if self.slot(id).is_some() {
                    self.connection_failed(id, DownReason::ConnectionLost);
                }
            }
            Input::Message(id, message) => self.message(id, message),
            Input::DecodeError(id, error) => {
                if self.slot(id).is_some_and(|c| c.phase != Phase::Connecting) {
                    self.fail_with_notification(id, error.notification());
                }
            }
            Input::TimerExpired(timer) => self.timer_expired(timer),
        }
        self.update_state();
        std::mem::take(&mut self.out)
    }

    fn slot(&self, id: ConnectionId) -> Option<&Connection> {
        match id {
            ConnectionId::Outbound => self.outbound.as_ref(),
            ConnectionId::Inbound => self.inbound.as_ref(),
        }
    }

    fn slot_mut(&mut self, id: ConnectionId) -> &mut Option<Connection> {
        match id {
            ConnectionId::Outbound => &mut self.outbound,
            ConnectionId::Inbound => &mut self.inbound,
        }
    }

    fn phase(&self, id: ConnectionId) -> Option<Phase> {
        self.slot(id).map(|c| c.phase)
    }

    fn update_state(&mut self) {
        let phases = [
            self.phase(ConnectionId::Outbound),
            self.phase(ConnectionId::Inbound),
        ];
        let has = |p: Phase| phases.contains(&Some(p));
        let state = if has(Phase::Established) {
            State::Established
        } else if has(Phase::OpenConfirm) {
            State::OpenConfirm
        } else if has(Phase::OpenSent) {
            State::OpenSent
        } else if has(Phase::Connecting) {
            State::Connect
        } else if self.running {
            State::Active
        } else {
            State::Idle
        };
        if state != self.state {
            self.out.push(Action::StateChanged {
                from: self.state,
                to: state,
            });
            self.state = state;
        }
    }

    fn start(&mut self) {
        if self.running {
            return;
        }
        self.running = true;
        self.out.push(Action::StopTimer(Timer::IdleHold));
        if !self.config.passive {
            self.connect();
        }
    }

    fn connect(&mut self) {
        self.outbound = Some(Connection {
            phase: Phase::Connecting,
            negotiated: None,
        });
        self.out.push(Action::Connect);
        self.out
            .push(Action::StartTimer(Timer::ConnectRetry, self.config.connect_retry));
    }

    fn stop(&mut self, reason: StopReason) {
        let subcode = match &reason {
            StopReason::AdministrativeShutdown { .. } => Some(cease::ADMINISTRATIVE_SHUTDOWN),
            StopReason::PeerDeconfigured => Some(cease::PEER_DECONFIGURED),
            StopReason::AdministrativeReset => Some(cease::ADMINISTRATIVE_RESET),
            StopReason::BfdDown => Some(cease::BFD_DOWN),
            StopReason::Restarting => None,
        };
        let mut notification = subcode.map(Notification::cease);
        if let (Some(n), StopReason::AdministrativeShutdown { message }) = (&mut notification, &reason)
            && !message.is_empty()
        {
            // RFC 9003 §2: a length octet, then at most 255 octets of UTF-8.
            let text = &message[..message.floor_char_boundary(255)];
            n.data.push(u8::try_from(text.len()).unwrap_or(u8::MAX));
            n.data.extend_from_slice(text.as_bytes());
        }
        let comes_back = matches!(reason, StopReason::AdministrativeReset | StopReason::BfdDown);
        for id in [ConnectionId::Outbound, ConnectionId::Inbound] {
            if let (Some(n), Some(phase)) = (&notification, self.phase(id))
                && phase != Phase::Connecting
            {
                self.out.push(Action::Send(id, Message::Notification(n.clone())));
            }
        }
        self.go_idle(DownReason::Stopped(reason), comes_back);
        if !comes_back {
            self.out.push(Action::StopTimer(Timer::IdleHold));
        }
    }

    fn tcp_connected(&mut self, id: ConnectionId) {
        match id {
            ConnectionId::Outbound => {
                if self.phase(id) != Some(Phase::Connecting) {
                    // A connect that finished after we gave up on it.
                    self.out.push(Action::Close(id));
                    return;
                }
                self.out.push(Action::StopTimer(Timer::ConnectRetry));
            }
            ConnectionId::Inbound => {
                if !self.running {
                    self.out.push(Action::RejectInbound(Some(Notification::cease(
                        cease::CONNECTION_REJECTED,
                    ))));
                    return;
                }
                // A collision with an Established session closes the new connection (RFC 4271
                // §6.8); a second inbound connection while one is open is refused the same way.
                if self.inbound.is_some() || self.state == State::Established {
                    let n = Notification::cease(cease::CONNECTION_COLLISION_RESOLUTION);
                    self.out.push(Action::RejectInbound(Some(n)));
                    return;
                }
            }
        }
        *self.slot_mut(id) = Some(Connection {
            phase: Phase::OpenSent,
            negotiated: None,
        });
        let open = open::local_open(&self.config, self.restarting);
        self.out.push(Action::Send(id, Message::Open(open)));
        self.out.push(Action::StartTimer(Timer::Hold(id), OPEN_HOLD_TIME));
    }

    fn message(&mut self, id: ConnectionId, message: Message) {
        let Some(phase) = self.phase(id) else { return };
        let message_type = message.type_code();
        match (phase, message) {
            (Phase::Connecting, _) => {}
            (_, Message::Notification(n)) => {
                self.connection_failed(id, DownReason::NotificationReceived(n));
            }
            (Phase::OpenSent, Message::Open(peer_open)) => self.open_received(id, &peer_open),
            (Phase::OpenSent, _) => {
                self.fail_with_notification(
                    id,
                    Notification::fsm_error(fsm_subcode::UNEXPECTED_IN_OPEN_SENT, message_type),
                );
            }
            (Phase::OpenConfirm, Message::Keepalive) => self.established(id),
            (Phase::OpenConfirm, _) => {
                let n = Notification::fsm_error(fsm_subcode::UNEXPECTED_IN_OPEN_CONFIRM, message_type);
                self.fail_with_notification(id, n);
            }
            (Phase::Established, Message::Open(_)) => {
                let n = Notification::fsm_error(fsm_subcode::UNEXPECTED_IN_ESTABLISHED, message_type);
                self.fail_with_notification(id, n);
            }
            (Phase::Established, message) => {
                self.restart_hold_timer(id);
                self.established_message(id, message);
            }
        }
    }

    fn established_message(&mut self, id: ConnectionId, message: Message) {
        match message {
            Message::Update(update) => {
                if let Some(family) = update.end_of_rib_family() {
                    self.out.push(Action::EndOfRibReceived(family));
                } else {
                    self.out.push(Action::UpdateReceived(update));
                }
            }
            Message::UpdateChecked(summary) => {
                if let Some(family) = summary.end_of_rib {
                    self.out.push(Action::EndOfRibReceived(family));
                }
            }
            Message::RouteRefresh(request) => {
                // RFC 2918 §4 / RFC 7313 §4: a family not negotiated, or a subtype we did not
                // negotiate, is ignored.
                let negotiated = self.slot(id).and_then(|c| c.negotiated.as_ref());
                if let (Some(family), Some(n), 0) = (request.family(), negotiated, request.subtype)
                    && n.families.contains(&family)
                {
                    self.out.push(Action::RouteRefreshRequested(family));
                }
            }
            Message::Keepalive | Message::Open(_) | Message::Notification(_) => {}
        }
    }

    fn open_received(&mut self, id: ConnectionId, peer_open: &crate::bgp::wire::Open) {
        let negotiated = match open::negotiate(&self.config, peer_open, self.restarting) {
            Ok(n) => n,
            Err(error) => {
                self.fail_with_notification(id, error.notification());
                return;
            }
        };
        // RFC 4271 §6.8: with the peer's identifier known, settle a collision with the other
        // connection now; an Established one always wins.
        let other = id.other();
        match self.phase(other) {
            Some(Phase::Established) => {
                self.close_for_collision(id);
                return;
            }
            Some(Phase::OpenSent | Phase::OpenConfirm) => {
                let winner = collision_winner(
                    self.config.router_id,
                    self.config.local_as,
                    negotiated.peer_bgp_id,
                    negotiated.peer_as,
                );
                self.close_for_collision(winner.other());
                if winner != id {
                    return;
                }
            }
            Some(Phase::Connecting) | None => {}
        }
        if peer_open
            .capabilities
            .graceful_restart
            .as_ref()
            .is_some_and(|gr| gr.restarting)
        {
            self.out.push(Action::PeerRestarting);
        }
        self.out.push(Action::Send(id, Message::Keepalive));
        if let Some(keepalive) = negotiated.keepalive {
            self.out.push(Action::StartTimer(Timer::Keepalive(id), keepalive));
        }
        let hold = negotiated.hold_time;
        if let Some(conn) = self.slot_mut(id) {
            conn.phase = Phase::OpenConfirm;
            conn.negotiated = Some(negotiated);
        }
        if hold > 0 {
            self.out.push(Action::StartTimer(
                Timer::Hold(id),
                Duration::from_secs(u64::from(hold)),
            ));
        } else {
            self.out.push(Action::StopTimer(Timer::Hold(id)));
        }
    }

    fn established(&mut self, id: ConnectionId) {
        let Some(conn) = self.slot_mut(id) else { return };
        conn.phase = Phase::Established;
        let Some(negotiated) = conn.negotiated.clone() else {
            return;
        };
        self.restart_hold_timer(id);
        // The other connection is either still connecting or in OpenSent without the peer's
        // OPEN: it is the newer one and loses (RFC 4271 §6.8).
        if self.slot(id.other()).is_some() {
            self.close_for_collision(id.other());
        }
        self.out.push(Action::StopTimer(Timer::ConnectRetry));
        self.idle_hold = IDLE_HOLD_MIN;
        // The R bit is for the first session after our restart only (RFC 4724 §3).
        self.restarting = false;
        self.out.push(Action::Established(id, Box::new(negotiated)));
    }

    fn restart_hold_timer(&mut self, id: ConnectionId) {
        let hold = self
            .slot(id)
            .and_then(|c| c.negotiated.as_ref())
            .map_or(0, |n| n.hold_time);
        if hold > 0 {
            self.out.push(Action::StartTimer(
                Timer::Hold(id),
                Duration::from_secs(u64::from(hold)),
            ));
        }
    }

    fn close_for_collision(&mut self, id: ConnectionId) {
        let Some(conn) = self.slot_mut(id).take() else {
            return;
        };
        if conn.phase == Phase::Connecting {
            self.out.push(Action::StopTimer(Timer::ConnectRetry));
        } else {
            let n = Notification::cease(cease::CONNECTION_COLLISION_RESOLUTION);
            self.out.push(Action::Send(id, Message::Notification(n)));
        }
        self.close_connection(id);
    }

    fn close_connection(&mut self, id: ConnectionId) {
        *self.slot_mut(id) = None;
        self.out.push(Action::StopTimer(Timer::Hold(id)));
        self.out.push(Action::StopTimer(Timer::Keepalive(id)));
        self.out.push(Action::Close(id));
    }

    fn fail_with_notification(&mut self, id: ConnectionId, notification: Notification) {
        self.out
            .push(Action::Send(id, Message::Notification(notification.clone())));
        self.connection_failed(id, DownReason::NotificationSent(notification));
    }

    /// One connection is gone. The session survives only if it was not the Established one and
    /// the other connection is still going.
    fn connection_failed(&mut self, id: ConnectionId, reason: DownReason) {
        let was = self.phase(id);
        self.close_connection(id);
        if was == Some(Phase::Connecting) {
            // RFC 4271 §8.2.2 (Connect): wait for the ConnectRetry timer, then dial again.
            return;
        }
        if was != Some(Phase::Established) && self.slot(id.other()).is_some() {
            return;
        }
        self.go_idle(reason, true);
    }

    /// Closes everything and goes to Idle; with `restart`, comes back after the idle hold time.
    fn go_idle(&mut self, reason: DownReason, restart: bool) {
        let was_established = self.established_connection().is_some() || self.state == State::Established;
        for id in [ConnectionId::Outbound, ConnectionId::Inbound] {
            if self.slot(id).is_some() {
                self.close_connection(id);
            }
        }
        self.out.push(Action::StopTimer(Timer::ConnectRetry));
        self.running = false;
        if was_established {
            self.out.push(Action::SessionDown(reason));
        }
        if restart {
            self.out.push(Action::StartTimer(Timer::IdleHold, self.idle_hold));
            self.idle_hold = (self.idle_hold * 2).min(IDLE_HOLD_MAX);
        }
    }

    fn timer_expired(&mut self, timer: Timer) {
        match timer {
            Timer::ConnectRetry => {
                if !self.running || self.config.passive {
                    return;
                }
                match self.phase(ConnectionId::Outbound) {
                    Some(Phase::Connecting) => {
                        self.out.push(Action::Close(ConnectionId::Outbound));
                        self.connect();
                    }
                    None if self.state != State::Established => self.connect(),
                    _ => {}
                }
            }
            Timer::IdleHold => self.start(),
            Timer::Hold(id) => {
                if self.phase(id).is_some_and(|p| p != Phase::Connecting) {
                    self.out.push(Action::Send(
                        id,
                        Message::Notification(Notification::hold_timer_expired()),
                    ));
                    self.connection_failed(id, DownReason::HoldTimerExpired);
                }
            }
            Timer::Keepalive(id) => {
                let keepalive = self
                    .slot(id)
                    .and_then(|c| c.negotiated.as_ref())
                    .and_then(|n| n.keepalive);
                if let (Some(Phase::OpenConfirm | Phase::Established), Some(every)) =
                    (self.phase(id), keepalive)
                {
                    self.out.push(Action::Send(id, Message::Keepalive));
                    self.out.push(Action::StartTimer(Timer::Keepalive(id), every));
                }
            }
        }
    }
}
