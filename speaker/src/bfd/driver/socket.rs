//! The UDP sockets of single-hop BFD (RFC 5881): one receive socket per local address on port
//! 3784 that reports each datagram's TTL / Hop Limit, and one send socket per session bound to
//! the local address and a source port in 49152–65535, sending with TTL 255.

use std::io;
use std::net::{IpAddr, SocketAddr};

pub use kube_ovn_dataplane::socket::recv_with_ttl;
use kube_ovn_dataplane::socket::{IpVersion, set_recv_ttl, set_ttl};
use tokio::net::UdpSocket;

use super::BfdError;

/// Destination port of single-hop Control packets (RFC 5881 §4).
pub const CONTROL_PORT: u16 = 3784;
/// Source ports allowed for Control packets (RFC 5881 §4).
pub const SOURCE_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;
/// The TTL / Hop Limit sent and required on receipt (RFC 5881 §5, the GTSM rule).
pub const TTL: u8 = 255;

fn socket_error(addr: SocketAddr) -> impl FnOnce(kube_ovn_dataplane::Error) -> BfdError {
    move |source| BfdError::Socket {
        addr,
        source: Box::new(source),
    }
}

fn bind_std(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let sock = std::net::UdpSocket::bind(addr)?;
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// The receive socket on `local`:3784, asking the kernel for each datagram's TTL or Hop Limit.
pub fn bind_receiver(local: IpAddr) -> Result<UdpSocket, BfdError> {
    let addr = SocketAddr::new(local, CONTROL_PORT);
    let std = bind_std(addr).map_err(|source| BfdError::Bind { addr, source })?;
    let sock = UdpSocket::from_std(std).map_err(|source| BfdError::Bind { addr, source })?;
    set_recv_ttl(&sock, IpVersion::of(&addr)).map_err(socket_error(addr))?;
    Ok(sock)
}

/// The send socket of one session: `local` and a free source port from [`SOURCE_PORTS`], tried
/// from a random start (the same port for the session's whole life, RFC 5881 §4), TTL 255.
pub fn bind_sender(local: IpAddr, random: u64) -> Result<UdpSocket, BfdError> {
    let first = *SOURCE_PORTS.start();
    let count = u64::from(*SOURCE_PORTS.end() - first) + 1;
    let mut last_error = None;
    for i in 0..count {
        let offset = u16::try_from((random + i) % count).unwrap_or_default();
        let addr = SocketAddr::new(local, first + offset);
        match bind_std(addr) {
            Ok(std) => {
                let sock = UdpSocket::from_std(std).map_err(|source| BfdError::Bind { addr, source })?;
                set_ttl(&sock, IpVersion::of(&addr), TTL).map_err(socket_error(addr))?;
                return Ok(sock);
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_error = Some(e),
            Err(source) => return Err(BfdError::Bind { addr, source }),
        }
    }
    Err(BfdError::NoSourcePort {
        local,
        source: last_error.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)),
    })
}
