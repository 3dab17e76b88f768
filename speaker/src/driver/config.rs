//! What the driver is told: the speaker's listener and each peer's transport settings around the
//! pure [`SessionConfig`].

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;

use crate::bgp::fsm::{ConfigError, SessionConfig};

/// The BGP port (RFC 4271 §8.2.1, IANA).
pub const BGP_PORT: u16 = 179;

/// Settings shared by all peers of one [`super::Speaker`].
#[derive(Debug, Clone, Default)]
pub struct SpeakerConfig {
    /// Addresses to accept peers' connections on (`[::]:179` takes IPv4 and IPv6). Empty: no
    /// listener, every session is opened by us; Kube-OVN's speaker listens only with
    /// `--passivemode`.
    pub listen: Vec<SocketAddr>,
    /// When set, an inbound connection from outside these prefixes is closed before it is
    /// matched to a peer, whatever peers are configured.
    pub allowed_sources: Option<Vec<IpNet>>,
}

/// One peer: where it is, how to reach it, and the session to run with it.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// The peer's address; also how an inbound connection is matched to this peer.
    pub address: IpAddr,
    /// The peer's port for our connections (179 but in tests).
    pub port: u16,
    /// Our source address toward the peer. When set, our connections bind it and an inbound
    /// connection that arrived on another local address is refused (Kube-OVN pins the source it
    /// resolved from `--allowed-source-addresses` the same way).
    pub local_address: Option<IpAddr>,
    /// RFC 2385 key (at most 80 bytes), on our connections and on the listener for this address.
    pub md5_key: Option<Vec<u8>>,
    /// IP TTL (IPv6 hop limit) of our packets. `None`: 1 for an external peer (a directly
    /// connected eBGP neighbour, Kube-OVN's `--ebgp-multihop` default) and the system default
    /// for an internal one. With [`PeerConfig::ttl_security`] it is instead the number of hops
    /// to the peer (`None`: 1, directly connected).
    pub ttl: Option<u8>,
    /// GTSM, the Generalized TTL Security Mechanism (RFC 5082): we send with TTL (hop limit)
    /// 255 and the kernel drops every segment of the session that arrives with less than
    /// `256 - hops` (255 for a directly connected peer), so a forged packet from farther away
    /// cannot reach BGP, nor reset or load the session. The peer must do the same (BIRD's
    /// `ttl security on`, FRR's `ttl-security hops`).
    pub ttl_security: bool,
    /// Graceful restart deferral: when set, the peer task calls [`super::PeerHandle::set_ready`]
    /// itself this long after it starts, so a caller that never syncs does not hold the
    /// End-of-RIB forever (Kube-OVN's `--graceful-restart-deferral-time`).
    pub ready_deadline: Option<Duration>,
    /// The interface a link-local `address` is on (its zone, RFC 4007 §11; BGP unnumbered):
    /// our connection goes to the address on that interface, and a connection from the
    /// address is taken only when it came in on that interface.
    pub interface: Option<String>,
    /// The device our sockets are bound to (`SO_BINDTODEVICE`): a VRF, whose routing table the
    /// session then uses, or any interface, out of which alone the session goes. An inbound
    /// connection is taken only when the kernel bound it to that device too, which it does
    /// for a VRF with `net.ipv4.tcp_l3mdev_accept=1` and for no plain device: a peer bound to
    /// a plain device should be active (we connect).
    pub bind_device: Option<String>,
    pub session: SessionConfig,
}

impl PeerConfig {
    /// A peer on port 179 with no MD5 key, source address or TTL of its own.
    pub fn new(address: IpAddr, session: SessionConfig) -> Self {
        PeerConfig {
            address,
            port: BGP_PORT,
            local_address: None,
            md5_key: None,
            ttl: None,
            ttl_security: false,
            ready_deadline: None,
            interface: None,
            bind_device: None,
            session,
        }
    }

    /// The TTL our sockets get, `None` to leave the system default.
    pub fn effective_ttl(&self) -> Option<u8> {
        if self.ttl_security {
            return Some(u8::MAX);
        }
        self.ttl
            .or((self.session.local_as != self.session.peer_as).then_some(1))
    }

    /// With GTSM, the least TTL a segment from the peer may arrive with: 255 minus the hops
    /// after the first (RFC 5082 §3). `None` without GTSM.
    pub fn min_ttl(&self) -> Option<u8> {
        self.ttl_security
            .then(|| u8::MAX - (self.ttl.unwrap_or(1).max(1) - 1))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.session.validate()?;
        let fail = |field, reason| Err(ConfigError { field, reason });
        if self.address.is_unspecified() || self.address.is_multicast() {
            return fail("address", "must be a unicast address");
        }
        if self.port == 0 {
            return fail("port", "must not be 0");
        }
        if self
            .md5_key
            .as_ref()
            .is_some_and(|k| k.is_empty() || k.len() > 80)
        {
            return fail("md5_key", "1 to 80 bytes (Linux TCP_MD5SIG_MAXKEYLEN)");
        }
        if self.ttl == Some(0) {
            return fail("ttl", "must be at least 1");
        }
        if self.ttl_security && self.ttl == Some(u8::MAX) {
            return fail(
                "ttl",
                "with ttl_security it counts hops; 255 would accept any TTL (RFC 5082 §3)",
            );
        }
        if let Some(local) = self.local_address
            && local.is_ipv4() != self.address.is_ipv4()
        {
            return fail("local_address", "must be of the peer address's family");
        }
        let link_local = matches!(self.address, IpAddr::V6(a) if a.is_unicast_link_local());
        if link_local != self.interface.is_some() {
            return fail(
                "interface",
                "needed with a link-local peer address (its zone, RFC 4007 §11), and only then",
            );
        }
        for name in [&self.interface, &self.bind_device].into_iter().flatten() {
            if name.is_empty() || name.len() > 15 {
                return fail("interface", "an interface name has 1 to 15 bytes");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::bgp::wire::Family;

    fn peer(local_as: u32, peer_as: u32) -> PeerConfig {
        PeerConfig::new(
            Ipv4Addr::new(10, 0, 0, 1).into(),
            SessionConfig {
                local_as,
                peer_as,
                router_id: Ipv4Addr::new(10, 0, 0, 2),
                hold_time: 90,
                connect_retry: Duration::from_secs(5),
                passive: false,
                families: vec![Family::Ipv4Unicast],
                graceful_restart: None,
                restarting: false,
                extended_next_hop: false,
            },
        )
    }

    #[test]
    fn gtsm_sends_255_and_expects_255_less_the_extra_hops() {
        let mut ebgp = peer(65001, 65000);
        assert_eq!((ebgp.effective_ttl(), ebgp.min_ttl()), (Some(1), None));
        ebgp.ttl_security = true;
        assert_eq!((ebgp.effective_ttl(), ebgp.min_ttl()), (Some(255), Some(255)));
        ebgp.ttl = Some(2);
        assert_eq!((ebgp.effective_ttl(), ebgp.min_ttl()), (Some(255), Some(254)));
        let mut ibgp = peer(65000, 65000);
        assert_eq!(ibgp.effective_ttl(), None);
        ibgp.ttl_security = true;
        assert_eq!((ibgp.effective_ttl(), ibgp.min_ttl()), (Some(255), Some(255)));
        ibgp.validate().unwrap();
        ibgp.ttl = Some(255);
        assert_eq!(ibgp.validate().unwrap_err().field, "ttl");
    }
}
