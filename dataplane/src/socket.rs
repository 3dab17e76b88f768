//! Socket options and ancillary data that std and tokio do not cover, for the speaker's BGP and
//! BFD sockets: the TTL / IPv6 hop limit a socket sends with (eBGP single hop and multihop,
//! BFD's 255), `IPV6_V6ONLY` on a listener, and receiving the TTL / hop limit each datagram
//! arrived with (the RFC 5881 §5 check). All of it goes through nix's safe wrappers; the
//! sockets themselves are made by std or tokio and lent here by file descriptor.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};

// The macro calls itself and `setsockopt_impl!` unqualified: both must be in scope.
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrLike, SockaddrStorage, recvmsg, setsockopt, sockopt,
};
use nix::{setsockopt_impl, sockopt_impl};

use crate::error::{Error, Result};

/// Which IP version a socket speaks: the options differ (`IP_*` or `IPV6_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpVersion {
    V4,
    V6,
}

impl IpVersion {
    pub fn of(addr: &SocketAddr) -> IpVersion {
        if addr.is_ipv4() {
            IpVersion::V4
        } else {
            IpVersion::V6
        }
    }
}

fn failed(op: String) -> impl FnOnce(nix::Error) -> Error {
    move |errno| Error::Io {
        op,
        source: io::Error::from(errno),
    }
}

/// The TTL (IPv4, `IP_TTL`) or unicast hop limit (IPv6, `IPV6_UNICAST_HOPS`) of what the socket
/// sends.
pub fn set_ttl(socket: &impl AsFd, version: IpVersion, ttl: u8) -> Result<()> {
    let value = i32::from(ttl);
    match version {
        IpVersion::V4 => {
            setsockopt(socket, sockopt::Ipv4Ttl, &value).map_err(failed(format!("set IP_TTL {ttl}")))
        }
        IpVersion::V6 => setsockopt(socket, sockopt::Ipv6Ttl, &value)
            .map_err(failed(format!("set IPV6_UNICAST_HOPS {ttl}"))),
    }
}

// nix 0.31 has no option type for these two; its macro makes one with the same checked
// `setsockopt` call as the options it ships (an int value, no hand-written `unsafe` here).
sockopt_impl!(
    /// `IP_MINTTL` (Linux 2.6.34): segments arriving with a lower TTL are dropped by the kernel.
    Ipv4MinTtl,
    SetOnly,
    libc::IPPROTO_IP,
    libc::IP_MINTTL,
    libc::c_int
);
sockopt_impl!(
    /// `IPV6_MINHOPCOUNT` (Linux 2.6.35): the same for the IPv6 hop limit.
    Ipv6MinHopCount,
    SetOnly,
    libc::IPPROTO_IPV6,
    libc::IPV6_MINHOPCOUNT,
    libc::c_int
);

sockopt_impl!(
    /// `IPV6_MULTICAST_LOOP`: whether our own multicasts come back to our sockets.
    Ipv6MulticastLoop,
    SetOnly,
    libc::IPPROTO_IPV6,
    libc::IPV6_MULTICAST_LOOP,
    libc::c_int
);

/// The Generalized TTL Security Mechanism's receive check (RFC 5082 §3): the kernel drops what
/// arrives on this socket with a TTL (IPv4) or hop limit (IPv6) below `min`, before TCP sees
/// it. On a connecting socket set it before `connect()`, so a forged SYN-ACK is dropped too.
/// An IPv6 socket that may carry IPv4 (a dual-stack listener's mapped peers) gets both.
pub fn set_min_ttl(socket: &impl AsFd, version: IpVersion, min: u8) -> Result<()> {
    let value = libc::c_int::from(min);
    match version {
        IpVersion::V4 => {
            setsockopt(socket, Ipv4MinTtl, &value).map_err(failed(format!("set IP_MINTTL {min}")))
        }
        IpVersion::V6 => {
            setsockopt(socket, Ipv6MinHopCount, &value)
                .map_err(failed(format!("set IPV6_MINHOPCOUNT {min}")))?;
            // IPv4-mapped traffic on an IPv6 socket is checked against IP_MINTTL; a v6-only
            // socket refuses the IPv4 option, which then does not matter.
            let _ = setsockopt(socket, Ipv4MinTtl, &value);
            Ok(())
        }
    }
}

/// `IPV6_V6ONLY`: whether an IPv6 socket refuses IPv4 (mapped) peers. Set before `bind()`.
pub fn set_v6_only(socket: &impl AsFd, only: bool) -> Result<()> {
    setsockopt(socket, sockopt::Ipv6V6Only, &only).map_err(failed(format!("set IPV6_V6ONLY {only}")))
}

/// `SO_BINDTODEVICE`: the socket sends out of `device` only and takes only what came in on it;
/// for a VRF device, it uses the VRF's routing table. Set before `connect()` / `bind()`.
pub fn bind_to_device(socket: &impl AsFd, device: &str) -> Result<()> {
    setsockopt(socket, sockopt::BindToDevice, &std::ffi::OsString::from(device))
        .map_err(failed(format!("set SO_BINDTODEVICE {device}")))
}

/// The device a socket is bound to, `None` when unbound. An accepted TCP socket is bound to
/// the VRF it came in through when the listener was not and `net.ipv4.tcp_l3mdev_accept` is 1,
/// and to the interface of a link-local IPv6 peer.
pub fn bound_device(socket: &impl AsFd) -> Result<Option<String>> {
    let name = nix::sys::socket::getsockopt(socket, sockopt::BindToDevice)
        .map_err(failed("get SO_BINDTODEVICE".into()))?;
    let name = name.to_string_lossy().trim_end_matches('\0').to_owned();
    Ok((!name.is_empty()).then_some(name))
}

/// The index of interface `name` (`if_nametoindex(3)`) in the calling thread's namespace: the
/// zone (scope id) of a link-local address on it.
pub fn interface_index(name: &str) -> Result<u32> {
    nix::net::if_::if_nametoindex(name).map_err(failed(format!("no interface {name}")))
}

/// A raw ICMPv6 socket bound to `device`, for Neighbor Discovery's router messages (BGP
/// unnumbered): non-blocking, sends with hop limit 255 (receivers drop ND messages with any
/// other, RFC 4861 §6.1.2), does not hear its own multicasts, and reports the hop limit of
/// what it receives ([`recv_with_ttl`]). The kernel fills in the ICMPv6 checksum (RFC 3542
/// §3.1).
pub fn icmpv6_on_device(device: &str) -> Result<std::os::fd::OwnedFd> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockProtocol, SockType, socket};
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        SockProtocol::IcmpV6,
    )
    .map_err(failed("open a raw ICMPv6 socket".into()))?;
    bind_to_device(&fd, device)?;
    setsockopt(&fd, sockopt::Ipv6MulticastHops, &255).map_err(failed("set IPV6_MULTICAST_HOPS".into()))?;
    set_ttl(&fd, IpVersion::V6, 255)?;
    setsockopt(&fd, Ipv6MulticastLoop, &0).map_err(failed("set IPV6_MULTICAST_LOOP".into()))?;
    set_recv_ttl(&fd, IpVersion::V6)?;
    Ok(fd)
}

/// Asks the kernel for each received datagram's TTL (`IP_RECVTTL`) or hop limit
/// (`IPV6_RECVHOPLIMIT`), which [`recv_with_ttl`] then reports.
pub fn set_recv_ttl(socket: &impl AsFd, version: IpVersion) -> Result<()> {
    match version {
        IpVersion::V4 => {
            setsockopt(socket, sockopt::Ipv4RecvTtl, &true).map_err(failed("set IP_RECVTTL".into()))
        }
        IpVersion::V6 => setsockopt(socket, sockopt::Ipv6RecvHopLimit, &true)
            .map_err(failed("set IPV6_RECVHOPLIMIT".into())),
    }
}

/// One datagram: its length in the buffer, its source, and the TTL / hop limit it arrived with
/// (`None` when the kernel gave none: [`set_recv_ttl`] was not called).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// A non-blocking `recvmsg(2)` that reads the TTL / hop limit control message. The error is
/// the OS's own (`WouldBlock` included), so it fits inside tokio's `UdpSocket::async_io`.
pub fn recv_with_ttl(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<Datagram> {
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut cmsg = nix::cmsg_space!(i32);
    let msg = recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
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

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket};

    use super::*;

    #[test]
    fn a_datagram_reports_the_ttl_it_was_sent_with() {
        let receiver = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        set_recv_ttl(&receiver, IpVersion::V4).unwrap();
        let sender = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        set_ttl(&sender, IpVersion::V4, 77).unwrap();
        sender.send_to(b"hello", receiver.local_addr().unwrap()).unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        // Blocking wait (with the timeout above) for the datagram, then the non-blocking read.
        let mut peek = [0u8; 8];
        receiver.peek(&mut peek).unwrap();
        let mut buf = [0u8; 16];
        let got = recv_with_ttl(&receiver, &mut buf).unwrap();
        assert_eq!(
            (got.len, got.source, got.ttl),
            (5, sender.local_addr().unwrap(), Some(77))
        );
        assert_eq!(&buf[..5], b"hello");
    }

    #[test]
    fn ipv6_hop_limit_and_v6_only() {
        let Ok(receiver) = UdpSocket::bind("[::1]:0") else {
            panic!("IPv6 loopback is needed for this test");
        };
        set_recv_ttl(&receiver, IpVersion::V6).unwrap();
        let sender = UdpSocket::bind("[::1]:0").unwrap();
        set_ttl(&sender, IpVersion::V6, 255).unwrap();
        sender.send_to(b"x", receiver.local_addr().unwrap()).unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut peek = [0u8; 1];
        receiver.peek(&mut peek).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(recv_with_ttl(&receiver, &mut buf).unwrap().ttl, Some(255));
        let error = set_v6_only(&receiver, true).unwrap_err();
        assert!(
            error.to_string().contains("IPV6_V6ONLY"),
            "a bound socket refuses it, and the error names the option: {error}"
        );
    }

    #[test]
    fn min_ttl_drops_tcp_segments_that_arrive_below_it() {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        use std::time::Duration;

        // Linux checks IP_MINTTL for TCP only (tcp_v4_rcv), so a TCP pair shows it.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        set_min_ttl(&server, IpVersion::V4, 255).unwrap();
        server.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        client.set_ttl(254).unwrap();
        client.write_all(b"x").unwrap();
        let mut buf = [0u8; 1];
        let error = server.read(&mut buf).unwrap_err();
        assert!(
            matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
            "a segment with TTL 254 never reaches the socket: {error}"
        );
        // TCP retransmits the byte; with TTL 255 it now gets through.
        client.set_ttl(255).unwrap();
        server.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        assert_eq!(server.read(&mut buf).unwrap(), 1);
        let v6 = TcpListener::bind("[::1]:0").unwrap();
        set_min_ttl(&v6, IpVersion::V6, 254).unwrap();
    }

    #[test]
    fn recv_on_an_empty_socket_would_block() {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut buf = [0u8; 4];
        let error = recv_with_ttl(&socket, &mut buf).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
    }
}
