//! TCP keepalive for OVSDB connections: a peer whose host died or whose network path broke sends
//! no FIN or RST, and without keepalive a connection that sends nothing waits for it forever, and
//! one with unacknowledged data waits out the kernel's retransmissions (about 15 minutes with
//! Linux's default `tcp_retries2`). The inactivity probe (RFC 7047 `echo`) catches a peer whose
//! process stalls; keepalive also works when the probe is disabled, and `TCP_USER_TIMEOUT`
//! (RFC 5482) bounds how long written data may stay unacknowledged.

use std::os::fd::AsFd;
use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt};

/// Keepalive's first probe when the inactivity probe is disabled: Kube-OVN's default
/// `--ovsdb-inactivity-timeout`.
const IDLE_WITHOUT_PROBE: Duration = Duration::from_secs(10);
/// Unanswered keepalive probes before the kernel drops the connection.
const PROBES: u32 = 3;
/// Linux refuses larger `TCP_KEEPIDLE` / `TCP_KEEPINTVL` (`MAX_TCP_KEEPIDLE`, `MAX_TCP_KEEPINTVL`).
const MAX_SECS: u32 = 32_767;

/// The socket options for one connection. Pure: derived from the client's timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Keepalive {
    /// Idle time before the first probe, seconds.
    pub idle_secs: u32,
    /// Between probes, seconds.
    pub interval_secs: u32,
    pub probes: u32,
    /// How long written data may stay unacknowledged, milliseconds.
    pub user_timeout_ms: u32,
}

impl Keepalive {
    /// The first probe after the inactivity probe's interval (the silence the operator already
    /// tolerates), then one every connect timeout (how long a server may take to answer at all);
    /// [`PROBES`] unanswered ones end the connection. Unacknowledged writes are given the same
    /// total. Whole seconds, from 1 to the kernel's maximum.
    pub fn new(connect_timeout: Duration, inactivity_probe: Duration) -> Self {
        let idle = if inactivity_probe.is_zero() {
            IDLE_WITHOUT_PROBE
        } else {
            inactivity_probe
        };
        let secs = |d: Duration| u32::try_from(d.as_secs()).unwrap_or(MAX_SECS).clamp(1, MAX_SECS);
        let (idle_secs, interval_secs) = (secs(idle), secs(connect_timeout));
        // At most 4 × 32 767 s in ms: well inside the C `int` the kernel takes.
        let total_secs = idle_secs + interval_secs * PROBES;
        Self {
            idle_secs,
            interval_secs,
            probes: PROBES,
            user_timeout_ms: total_secs * 1000,
        }
    }

    /// Sets the options on a connected TCP socket.
    pub fn apply(&self, socket: &impl AsFd) -> nix::Result<()> {
        setsockopt(socket, sockopt::KeepAlive, &true)?;
        setsockopt(socket, sockopt::TcpKeepIdle, &self.idle_secs)?;
        setsockopt(socket, sockopt::TcpKeepInterval, &self.interval_secs)?;
        setsockopt(socket, sockopt::TcpKeepCount, &self.probes)?;
        setsockopt(socket, sockopt::TcpUserTimeout, &self.user_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_probe_and_the_connect_timeout() {
        // Kube-OVN's defaults: 3 s connect timeout, 10 s inactivity probe.
        let k = Keepalive::new(Duration::from_secs(3), Duration::from_secs(10));
        assert_eq!(
            k,
            Keepalive {
                idle_secs: 10,
                interval_secs: 3,
                probes: 3,
                user_timeout_ms: 19_000,
            }
        );
    }

    #[test]
    fn still_on_when_the_probe_is_disabled() {
        let k = Keepalive::new(Duration::from_secs(5), Duration::ZERO);
        assert_eq!((k.idle_secs, k.interval_secs), (10, 5));
        assert_eq!(k.user_timeout_ms, 25_000);
    }

    #[test]
    fn sub_second_and_huge_timeouts_stay_in_the_kernels_range() {
        let k = Keepalive::new(Duration::from_millis(200), Duration::from_millis(300));
        assert_eq!((k.idle_secs, k.interval_secs), (1, 1));
        for huge in [Duration::from_secs(40_000), Duration::MAX] {
            let k = Keepalive::new(huge, huge);
            assert_eq!((k.idle_secs, k.interval_secs), (32_767, 32_767));
            assert_eq!(k.user_timeout_ms, 131_068_000);
            // The kernel takes them.
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            k.apply(&stream).unwrap();
        }
    }

    #[test]
    fn applies_to_a_real_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let k = Keepalive::new(Duration::from_secs(3), Duration::from_secs(10));
        k.apply(&stream).unwrap();
        assert!(nix::sys::socket::getsockopt(&stream, sockopt::KeepAlive).unwrap());
        assert_eq!(
            nix::sys::socket::getsockopt(&stream, sockopt::TcpKeepIdle).unwrap(),
            10
        );
        assert_eq!(
            nix::sys::socket::getsockopt(&stream, sockopt::TcpKeepInterval).unwrap(),
            3
        );
        assert_eq!(
            nix::sys::socket::getsockopt(&stream, sockopt::TcpKeepCount).unwrap(),
            3
        );
        assert_eq!(
            nix::sys::socket::getsockopt(&stream, sockopt::TcpUserTimeout).unwrap(),
            19_000
        );
    }
}
