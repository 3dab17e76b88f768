//! Prometheus metrics (OpenMetrics text) under Kube-OVN's speaker names
//! (`kube_ovn_speaker_bgp_peer_*`, `kube_ovn_speaker_bfd_*`), plus ours: prefixes announced per
//! peer and the kernel's TCP MD5 drop counters.
//!
//! Every metric is a gauge, as in Kube-OVN, set from a [`Snapshot`] by [`Metrics::refresh`]:
//! the whole set of series is replaced, so a peer that is gone disappears instead of reporting
//! its last values forever. Encoding waits for a refresh in progress, so a scrape never sees a
//! half-written set.
//!
//! Values and labels:
//! - `peer` is the peer's address; `type` of the message counters is `open`, `update`,
//!   `notification`, `keepalive` or `route_refresh` (RFC 4271 §4.1, RFC 2918 §3).
//! - `bgp_peer_session_state` uses GoBGP's numbering, as Kube-OVN does: Idle 1, Connect 2,
//!   Active 3, OpenSent 4, OpenConfirm 5, Established 6.
//! - `bgp_peer_out_queue` is in bytes written to the session but not yet taken by the kernel
//!   (GoBGP counts queued messages instead); it stays below 1 MiB plus one message, and what
//!   does not fit waits as `bgp_peer_prefixes_pending` (ours, with
//!   `bgp_peer_prefixes_unsendable`).
//! - `bfd_peer_session_state` and `bfd_peer_remote_session_state` use the state field of the
//!   BFD Control packet (RFC 5880 §4.1): AdminDown 0, Down 1, Init 2, Up 3.
//! - `bfd_server_received_drop` counts datagrams dropped for a TTL other than 255 (RFC 5881 §5)
//!   or a full session queue; `bfd_server_received_error` counts receive errors.
//! - `tcp_md5_failures{reason}` are the `TcpExt` counters of the speaker's network namespace:
//!   `not_found` (unsigned segment on a keyed connection), `unexpected` (signed segment on an
//!   unkeyed one), `failure` (wrong signature: the keys differ) (RFC 2385).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kube_ovn_dataplane::tcp_md5::Md5Counters;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::bfd::driver::{ServerCounters, SessionCounters};
use crate::bfd::{State as BfdState, Status as BfdStatus};
use crate::driver::{MessageCounts, PeerStatus};

/// The BFD server's counters at one moment (see [`ServerCounters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BfdServerCounts {
    pub received: u64,
    pub bad_ttl: u64,
    pub invalid: u64,
    pub unknown_peer: u64,
    pub queue_full: u64,
    pub errors: u64,
}

impl From<&ServerCounters> for BfdServerCounts {
    fn from(c: &ServerCounters) -> Self {
        BfdServerCounts {
            received: c.received.load(Ordering::Relaxed),
            bad_ttl: c.bad_ttl.load(Ordering::Relaxed),
            invalid: c.invalid.load(Ordering::Relaxed),
            unknown_peer: c.unknown_peer.load(Ordering::Relaxed),
            queue_full: c.queue_full.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
        }
    }
}

/// One BFD session's counters at one moment (see [`SessionCounters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BfdSessionCounts {
    pub transmitted: u64,
    pub received: u64,
    pub failures: u64,
}

impl From<&SessionCounters> for BfdSessionCounts {
    fn from(c: &SessionCounters) -> Self {
        BfdSessionCounts {
            transmitted: c.transmitted.load(Ordering::Relaxed),
            received: c.received.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
        }
    }
}

/// Everything the metrics show, gathered by the caller.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Each configured peer: its address, its BGP session, its BFD session when it has one.
    pub peers: Vec<(IpAddr, PeerStatus, Option<BfdStatus>)>,
    pub md5: Md5Counters,
    /// `None` when BFD is not in use (no `kube_ovn_speaker_bfd_server_*` series).
    pub bfd_server: Option<BfdServerCounts>,
    /// Packet and failure counters of each peer's BFD session.
    pub bfd_sessions: Vec<(IpAddr, BfdSessionCounts)>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    peer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MessageLabels {
    peer: String,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

type PeerGauge = Family<PeerLabels, Gauge>;
type PeerCount = Family<PeerLabels, Gauge<u64, AtomicU64>>;
type Count = Gauge<u64, AtomicU64>;

#[derive(Default)]
struct Bgp {
    up: PeerGauge,
    state: PeerGauge,
    flaps: PeerCount,
    out_queue: PeerCount,
    received: Family<MessageLabels, Count>,
    sent: Family<MessageLabels, Count>,
    prefixes: PeerCount,
    pending: PeerCount,
    unsendable: PeerCount,
}

#[derive(Default)]
struct Bfd {
    up: PeerGauge,
    state: PeerGauge,
    remote_state: PeerGauge,
    failures: PeerCount,
    transmitted: PeerCount,
    received: PeerCount,
    // The server's counters have no labels (they encode as `name{} value`); a family with the
    // empty label set lets them vanish when BFD is not in use.
    server_received: Family<Vec<(String, String)>, Count>,
    server_drop: Family<Vec<(String, String)>, Count>,
    server_error: Family<Vec<(String, String)>, Count>,
    server_invalid: Family<Vec<(String, String)>, Count>,
    server_unknown_peer: Family<Vec<(String, String)>, Count>,
}

struct Inner {
    registry: Registry,
    bgp: Bgp,
    bfd: Bfd,
    md5: Family<ReasonLabels, Count>,
    /// Held while the series are rewritten and while they are encoded.
    lock: Mutex<()>,
}

/// Cheap to clone; every clone shows the same registry.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let bgp = Bgp::default();
        let bfd = Bfd::default();
        let md5 = Family::<ReasonLabels, Count>::default();
        let sub = registry.sub_registry_with_prefix("kube_ovn_speaker");
        sub.register(
            "bgp_peer_up",
            "1 when the BGP session is Established",
            bgp.up.clone(),
        );
        sub.register(
            "bgp_peer_session_state",
            "BGP session state (1 Idle, 2 Connect, 3 Active, 4 OpenSent, 5 OpenConfirm, 6 Established)",
            bgp.state.clone(),
        );
        sub.register(
            "bgp_peer_flap_count",
            "Times an Established session went down",
            bgp.flaps.clone(),
        );
        sub.register(
            "bgp_peer_out_queue",
            "Bytes written to the session and not yet taken by the kernel",
            bgp.out_queue.clone(),
        );
        sub.register(
            "bgp_peer_received_messages",
            "BGP messages received, by type",
            bgp.received.clone(),
        );
        sub.register(
            "bgp_peer_sent_messages",
            "BGP messages sent, by type",
            bgp.sent.clone(),
        );
        sub.register(
            "bgp_peer_prefixes_announced",
            "Prefixes the peer holds from this speaker",
            bgp.prefixes.clone(),
        );
        sub.register(
            "bgp_peer_prefixes_pending",
            "Prefixes whose change has not gone out to the peer yet (a slow peer, or no session)",
            bgp.pending.clone(),
        );
        sub.register(
            "bgp_peer_prefixes_unsendable",
            "Prefixes not announced because their attributes cannot be encoded in one UPDATE",
            bgp.unsendable.clone(),
        );
        sub.register(
            "tcp_md5_failures",
            "TCP segments the kernel dropped for their MD5 signature (RFC 2385), by reason",
            md5.clone(),
        );
        sub.register("bfd_peer_up", "1 when the BFD session is Up", bfd.up.clone());
        sub.register(
            "bfd_peer_session_state",
            "BFD session state (0 AdminDown, 1 Down, 2 Init, 3 Up)",
            bfd.state.clone(),
        );
        sub.register(
            "bfd_peer_remote_session_state",
            "BFD state the peer last reported (0 AdminDown, 1 Down, 2 Init, 3 Up)",
            bfd.remote_state.clone(),
        );
        sub.register(
            "bfd_peer_failure_transitions",
            "Times the BFD session failed (Up to Down)",
            bfd.failures.clone(),
        );
        sub.register(
            "bfd_peer_transmitted_packets",
            "BFD Control packets sent",
            bfd.transmitted.clone(),
        );
        sub.register(
            "bfd_peer_received_packets",
            "BFD Control packets received",
            bfd.received.clone(),
        );
        sub.register(
            "bfd_server_received_packets",
            "Datagrams read by the BFD receive sockets",
            bfd.server_received.clone(),
        );
        sub.register(
            "bfd_server_received_drop",
            "BFD datagrams dropped (TTL not 255, or a full session queue)",
            bfd.server_drop.clone(),
        );
        sub.register(
            "bfd_server_received_error",
            "Errors reading the BFD receive sockets",
            bfd.server_error.clone(),
        );
        sub.register(
            "bfd_server_invalid_packet",
            "BFD packets failing the checks of RFC 5880 §6.8.6",
            bfd.server_invalid.clone(),
        );
        sub.register(
            "bfd_server_unknown_peer",
            "BFD packets that matched no session",
            bfd.server_unknown_peer.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                bgp,
                bfd,
                md5,
                lock: Mutex::new(()),
            }),
        }
    }

    /// Replaces every series with the values of `snapshot`.
    pub fn refresh(&self, snapshot: &Snapshot) {
        let _guard = self.inner.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let Inner { bgp, bfd, md5, .. } = &*self.inner;
        bgp.clear();
        bfd.clear();
        md5.clear();
        for (address, status, bfd_status) in &snapshot.peers {
            let peer = PeerLabels {
                peer: address.to_string(),
            };
            bgp.set(&peer, status);
            if let Some(s) = bfd_status {
                bfd.up
                    .get_or_create(&peer)
                    .set(i64::from(s.state == BfdState::Up));
                bfd.state.get_or_create(&peer).set(i64::from(s.state as u8));
                bfd.remote_state
                    .get_or_create(&peer)
                    .set(i64::from(s.remote_state as u8));
            }
        }
        for (address, counts) in &snapshot.bfd_sessions {
            let peer = PeerLabels {
                peer: address.to_string(),
            };
            bfd.failures.get_or_create(&peer).set(counts.failures);
            bfd.transmitted.get_or_create(&peer).set(counts.transmitted);
            bfd.received.get_or_create(&peer).set(counts.received);
        }
        if let Some(c) = &snapshot.bfd_server {
            let none = Vec::new();
            bfd.server_received.get_or_create(&none).set(c.received);
            bfd.server_drop
                .get_or_create(&none)
                .set(c.bad_ttl.saturating_add(c.queue_full));
            bfd.server_error.get_or_create(&none).set(c.errors);
            bfd.server_invalid.get_or_create(&none).set(c.invalid);
            bfd.server_unknown_peer.get_or_create(&none).set(c.unknown_peer);
        }
        for (reason, value) in [
            ("not_found", snapshot.md5.not_found),
            ("unexpected", snapshot.md5.unexpected),
            ("failure", snapshot.md5.failure),
        ] {
            md5.get_or_create(&ReasonLabels { reason }).set(value);
        }
    }

    /// The OpenMetrics text of the last refresh.
    pub fn encode(&self) -> String {
        let _guard = self.inner.lock.lock().unwrap_or_else(PoisonError::into_inner);
        kube_ovn_support::endpoints::encode(&self.inner.registry)
    }
}

impl Bgp {
    fn clear(&self) {
        self.up.clear();
        self.state.clear();
        self.flaps.clear();
        self.out_queue.clear();
        self.received.clear();
        self.sent.clear();
        self.prefixes.clear();
        self.pending.clear();
        self.unsendable.clear();
    }

    fn set(&self, peer: &PeerLabels, status: &PeerStatus) {
        self.up
            .get_or_create(peer)
            .set(i64::from(status.is_established()));
        self.state.get_or_create(peer).set(i64::from(status.state_code()));
        self.flaps.get_or_create(peer).set(status.flaps);
        self.out_queue
            .get_or_create(peer)
            .set(status.out_queue_bytes as u64);
        self.prefixes.get_or_create(peer).set(status.prefixes_sent as u64);
        self.pending
            .get_or_create(peer)
            .set(status.prefixes_pending as u64);
        self.unsendable
            .get_or_create(peer)
            .set(status.prefixes_unsendable as u64);
        for (family, counts) in [
            (&self.received, &status.messages_received),
            (&self.sent, &status.messages_sent),
        ] {
            for (kind, value) in by_type(counts) {
                let labels = MessageLabels {
                    peer: peer.peer.clone(),
                    r#type: kind,
                };
                family.get_or_create(&labels).set(value);
            }
        }
    }
}

impl Bfd {
    fn clear(&self) {
        self.up.clear();
        self.state.clear();
        self.remote_state.clear();
        self.failures.clear();
        self.transmitted.clear();
        self.received.clear();
        self.server_received.clear();
        self.server_drop.clear();
        self.server_error.clear();
        self.server_invalid.clear();
        self.server_unknown_peer.clear();
    }
}

fn by_type(c: &MessageCounts) -> [(&'static str, u64); 5] {
    [
        ("open", c.open),
        ("update", c.update),
        ("notification", c.notification),
        ("keepalive", c.keepalive),
        ("route_refresh", c.route_refresh),
    ]
}

#[cfg(test)]
mod tests;
