//! The configuration, inputs, outputs and states of [`super::Session`], and what a session
//! negotiated ([`Negotiated`], built by `open`, which depends on this module and not the other
//! way round).

use std::net::Ipv4Addr;
use std::time::Duration;

use super::ConnectionId;
use crate::bgp::wire::{
    DecodeContext, DecodeError, EncodeContext, ExtendedNextHop, Family, GracefulRestart, Message,
    Notification, Update, UpdateContext, UpdateMode,
};

/// What both sides agreed on, handed to the driver when the session is Established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    pub peer_as: u32,
    pub peer_bgp_id: Ipv4Addr,
    /// The smaller of the two hold times (RFC 4271 §4.2); 0 means no hold timer and no keepalives.
    pub hold_time: u16,
    /// One third of the hold time (RFC 4271 §10), `None` when the hold time is 0.
    pub keepalive: Option<Duration>,
    /// Both sides sent the 4-octet AS capability (RFC 6793 §4).
    pub four_octet_as: bool,
    /// Families both sides announced in Multiprotocol capabilities (RFC 4760 §8).
    pub families: Vec<Family>,
    /// The peer accepts ROUTE-REFRESH from us (RFC 2918).
    pub peer_route_refresh: bool,
    /// The peer's Graceful Restart capability, if it sent one (RFC 4724 §3).
    pub peer_graceful_restart: Option<GracefulRestart>,
    /// We sent the R bit: the Adj-RIB-Out must hold UPDATEs until our routes are ready, then send
    /// End-of-RIB per family (RFC 4724 §4.1).
    pub local_restarting: bool,
    /// Extended next hop encodings both sides announced (RFC 8950 §3).
    pub extended_next_hop: Vec<ExtendedNextHop>,
    /// The peer is in another AS.
    pub external: bool,
}

impl Negotiated {
    pub fn encode_context(&self) -> EncodeContext {
        EncodeContext {
            four_octet_as: self.four_octet_as,
        }
    }

    pub fn decode_context(&self, update_mode: UpdateMode) -> DecodeContext {
        DecodeContext {
            update: UpdateContext {
                four_octet_as: self.four_octet_as,
                external_peer: self.external,
            },
            update_mode,
        }
    }
}

/// Graceful restart as the restarting speaker (RFC 4724).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GracefulRestartConfig {
    /// Seconds the peer should keep our routes after we go away (at most 4095).
    pub restart_time: u16,
    /// F bit: forwarding survived our restart. True for a speaker whose data plane (kernel,
    /// OVS) does not restart with it.
    pub forwarding_preserved: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    pub local_as: u32,
    pub peer_as: u32,
    pub router_id: Ipv4Addr,
    /// Proposed hold time in seconds: 0, or at least 3 (RFC 4271 §4.2).
    pub hold_time: u16,
    pub connect_retry: Duration,
    /// Never connect; wait for the peer (Kube-OVN's `--passivemode`).
    pub passive: bool,
    pub families: Vec<Family>,
    pub graceful_restart: Option<GracefulRestartConfig>,
    /// This process restarted within the restart time: set the R bit on the first session.
    pub restarting: bool,
    /// Offer IPv4 NLRI with an IPv6 next hop (RFC 8950).
    pub extended_next_hop: bool,
}

/// A session configuration that cannot work; `field` names the [`SessionConfig`] field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("BGP session config: {field}: {reason}")]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: &'static str,
}

impl SessionConfig {
    /// Checks what RFCs forbid before any OPEN is built from it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |field, reason| Err(ConfigError { field, reason });
        if self.local_as == 0 {
            return fail("local_as", "AS 0 is reserved (RFC 7607)");
        }
        if self.peer_as == 0 {
            return fail("peer_as", "AS 0 is reserved (RFC 7607)");
        }
        if self.router_id.is_unspecified() {
            return fail("router_id", "must not be 0.0.0.0 (RFC 6286 §2.1)");
        }
        if matches!(self.hold_time, 1 | 2) {
            return fail("hold_time", "must be 0 or at least 3 seconds (RFC 4271 §4.2)");
        }
        if self.families.is_empty() {
            return fail("families", "at least one address family is needed");
        }
        if self.connect_retry.is_zero() {
            return fail("connect_retry", "must be more than zero");
        }
        if self.graceful_restart.is_some_and(|gr| gr.restart_time > 4095) {
            return fail(
                "graceful_restart.restart_time",
                "at most 4095 seconds (12 bits, RFC 4724 §3)",
            );
        }
        Ok(())
    }
}

/// Session states (RFC 4271 §8.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    Idle,
    Connect,
    Active,
    OpenSent,
    OpenConfirm,
    Established,
}

/// Why the session was stopped by its owner; each maps to a Cease subcode (RFC 4486 §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// 6/2, with an optional shutdown communication (RFC 9003). Stays down.
    AdministrativeShutdown { message: String },
    /// 6/3. Stays down.
    PeerDeconfigured,
    /// 6/4. Comes back up after the idle hold time.
    AdministrativeReset,
    /// 6/10 (RFC 9384): BFD saw the path fail. Comes back up after the idle hold time.
    BfdDown,
    /// No NOTIFICATION: the TCP connection is just closed, so a peer in graceful restart helper
    /// mode keeps our routes (RFC 4724 §4.2). For a speaker about to restart. Stays down.
    Restarting,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Start,
    Stop(StopReason),
    /// A TCP connection is up: ours connected, or the driver accepted one from the peer.
    TcpConnected(ConnectionId),
    /// Our connect failed, or an open connection was closed or broke.
    TcpFailed(ConnectionId),
    Message(ConnectionId, Message),
    /// Bytes from this connection could not be decoded.
    DecodeError(ConnectionId, DecodeError),
    TimerExpired(Timer),
}

/// The timers the driver keeps for the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    ConnectRetry,
    /// Delay before restarting after a failure.
    IdleHold,
    Hold(ConnectionId),
    Keepalive(ConnectionId),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownReason {
    HoldTimerExpired,
    NotificationReceived(Notification),
    NotificationSent(Notification),
    ConnectionLost,
    Stopped(StopReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Connect,
    Send(ConnectionId, Message),
    Close(ConnectionId),
    /// Refuse the connection just offered with [`Input::TcpConnected`]`(Inbound)`; the existing
    /// inbound connection, if any, is untouched.
    RejectInbound(Option<Notification>),
    StartTimer(Timer, Duration),
    StopTimer(Timer),
    StateChanged {
        from: State,
        to: State,
    },
    Established(ConnectionId, Box<Negotiated>),
    SessionDown(DownReason),
    /// The peer asked for our routes of this family again (RFC 2918).
    RouteRefreshRequested(Family),
    /// The peer's OPEN had the R bit: it restarted (RFC 4724 §3).
    PeerRestarting,
    EndOfRibReceived(Family),
    UpdateReceived(Box<Update>),
}
