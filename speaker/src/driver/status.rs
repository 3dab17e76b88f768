//! What a peer task publishes about its session, for metrics (Kube-OVN's
//! `kube_ovn_speaker_bgp_peer_*`) and the per-node status of a peer resource.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use crate::bgp::fsm::State;

/// Messages counted by type (RFC 4271 §4.1, RFC 2918 §3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageCounts {
    pub open: u64,
    pub update: u64,
    pub notification: u64,
    pub keepalive: u64,
    pub route_refresh: u64,
}

impl MessageCounts {
    pub(crate) fn count(&mut self, message_type: u8) {
        match message_type {
            1 => self.open += 1,
            2 => self.update += 1,
            3 => self.notification += 1,
            4 => self.keepalive += 1,
            5 => self.route_refresh += 1,
            _ => {}
        }
    }

    pub fn total(&self) -> u64 {
        self.open + self.update + self.notification + self.keepalive + self.route_refresh
    }
}

/// A snapshot of one peer, published on every change through
/// [`super::PeerHandle::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStatus {
    pub address: IpAddr,
    pub state: State,
    /// When the current session became Established.
    pub established_at: Option<SystemTime>,
    /// How many times an Established session went down.
    pub flaps: u64,
    /// Prefixes the peer holds from us now.
    pub prefixes_sent: usize,
    /// Prefixes we want the peer to hold (equal to `prefixes_sent` once converged).
    pub prefixes_desired: usize,
    pub messages_sent: MessageCounts,
    pub messages_received: MessageCounts,
    /// Prefixes whose change has not gone out yet (the peer is slow, or nothing is up).
    pub prefixes_pending: usize,
    /// Prefixes whose route cannot be encoded (attributes too large for one UPDATE); not
    /// announced until their route changes.
    pub prefixes_unsendable: usize,
    /// Bytes written to the session's socket queue but not yet taken by the kernel.
    pub out_queue_bytes: usize,
    /// The most bytes ever queued on a connection of this peer: bounded by the driver's
    /// in-flight limit plus one message, however slow the peer.
    pub out_queue_peak_bytes: usize,
    /// Why the last session ended or the last connection attempt failed.
    pub last_error: Option<String>,
    /// Our address on the Established connection.
    pub local_address: Option<IpAddr>,
    /// The caller said its routes are complete (or the deferral ran out).
    pub ready: bool,
    /// The End-of-RIB for every family went out on the current session.
    pub initial_table_sent: bool,
    /// BFD reported the path down; the session stays down until it is back.
    pub bfd_down: bool,
    /// Idle holds that ran out while BFD said the path was down: each is a start the session
    /// skipped, waiting for `bfd_up` rather than the clock (so a test can see the wait happen).
    pub idle_holds_waited_for_bfd: u64,
    /// The peer task has ended (shut down); nothing will change any more.
    pub stopped: bool,
}

impl PeerStatus {
    pub(crate) fn new(address: IpAddr) -> Self {
        PeerStatus {
            address,
            state: State::Idle,
            established_at: None,
            flaps: 0,
            prefixes_sent: 0,
            prefixes_desired: 0,
            messages_sent: MessageCounts::default(),
            messages_received: MessageCounts::default(),
            prefixes_pending: 0,
            prefixes_unsendable: 0,
            out_queue_bytes: 0,
            out_queue_peak_bytes: 0,
            last_error: None,
            local_address: None,
            ready: false,
            initial_table_sent: false,
            bfd_down: false,
            idle_holds_waited_for_bfd: 0,
            stopped: false,
        }
    }

    pub fn is_established(&self) -> bool {
        self.state == State::Established
    }

    /// Time since the session came up, `None` when it is not up.
    pub fn uptime(&self) -> Option<Duration> {
        self.established_at
            .and_then(|at| SystemTime::now().duration_since(at).ok())
    }

    /// Kube-OVN's `kube_ovn_speaker_bgp_peer_session_state` values follow GoBGP's numbering:
    /// Idle 1, Connect 2, Active 3, OpenSent 4, OpenConfirm 5, Established 6.
    pub fn state_code(&self) -> u8 {
        match self.state {
            State::Idle => 1,
            State::Connect => 2,
            State::Active => 3,
            State::OpenSent => 4,
            State::OpenConfirm => 5,
            State::Established => 6,
        }
    }
}
