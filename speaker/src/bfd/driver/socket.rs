//! The UDP sockets of single-hop BFD (RFC 5881): one receive socket per local address on port
//! 3784 that reports each datagram's TTL / Hop Limit, and one send socket per session bound to
//! the local address and a source port in 49152–65535, sending with TTL 255.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrLike, SockaddrStorage, recvmsg, setsockopt, sockopt,
};
use tokio::net::UdpSocket;

use super::BfdError;

/// Destination port of single-hop Control packets (RFC 5881 §4).
pub const CONTROL_PORT: u16 = 3784;
/// Source ports allowed for Control packets (RFC 5881 §4).
pub const SOURCE_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;
/// The TTL / Hop Limit sent and required on receipt (RFC 5881 §5, the GTSM rule).
pub const TTL: u8 = 255;

fn sockopt_error(option: &'static str, addr: SocketAddr) -> impl FnOnce(nix::Error) -> BfdError {
    move |e| BfdError::SockOpt {
        option,
        addr,
        source: io::Error::from(e),
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
    if local.is_ipv4() {
        setsockopt(&sock, sockopt::Ipv4RecvTtl, &true).map_err(sockopt_error("IP_RECVTTL", addr))?;
    } else {
        setsockopt(&sock, sockopt::Ipv6RecvHopLimit, &true)
            .map_err(sockopt_error("IPV6_RECVHOPLIMIT", addr))?;
    }
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
                if local.is_ipv4() {
                    setsockopt(&sock, sockopt::Ipv4Ttl, &i32::from(TTL))
                        .map_err(sockopt_error("IP_TTL", addr))?;
                } else {
                    setsockopt(&sock, sockopt::Ipv6Ttl, &i32::from(TTL))
                        .map_err(sockopt_error("IPV6_UNICAST_HOPS", addr))?;
                }
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

/// One datagram: its length in the buffer, its source, and the TTL / Hop Limit it arrived with
/// (None if the kernel gave none, which the caller treats as a failed check).
pub struct Datagram {
    pub len: usize,
    pub source: SocketAddr,
    pub ttl: Option<u8>,
}

fn to_std(addr: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = addr.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    addr.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

/// A non-blocking recvmsg(2) that reads the IP_TTL / IPV6_HOPLIMIT control message; for use
/// inside [`UdpSocket::async_io`].
pub fn recv_with_ttl(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<Datagram> {
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut cmsg = nix::cmsg_space!(i32);
    let msg = recvmsg::<SockaddrStorage>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_DONTWAIT,
    )?;
    let mut ttl = None;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::Ipv4Ttl(t) | ControlMessageOwned::Ipv6HopLimit(t) = c {
            ttl = u8::try_from(t).ok();
        }
    }
    let source = msg
        .address
        .as_ref()
        .filter(|a| a.len() > 0)
        .and_then(to_std)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "datagram without a source address"))?;
    Ok(Datagram {
        len: msg.bytes,
        source,
        ttl,
    })
}
