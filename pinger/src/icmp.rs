//! ICMP echo (ping) over IPv4 and IPv6, without `unsafe`: a socket2 ICMP socket handed to tokio
//! as a `UdpSocket` (both are datagram sockets to the kernel; `send_to`/`recv_from` work the
//! same on an ICMP socket, the port being ignored).
//!
//! Kube-OVN's pinger runs pro-bing "privileged", i.e. on a raw socket (its DaemonSet adds
//! `NET_RAW`); so does this, and falls back to the unprivileged ping socket (`SOCK_DGRAM`,
//! allowed by `net.ipv4.ping_group_range`) when a raw one is refused. A raw socket sees every
//! echo reply on the host, and a ping socket rewrites the identifier, so replies are matched by
//! a random token in the payload and by sequence number, never by identifier alone.
//!
//! The packet codec ([`echo_request`], [`parse_echo_reply`]) is pure; [`ping`] is the I/O.

use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::time::Instant;

const ECHO_REQUEST_V4: u8 = 8;
const ECHO_REPLY_V4: u8 = 0;
const ECHO_REQUEST_V6: u8 = 128;
const ECHO_REPLY_V6: u8 = 129;
const TOKEN_LEN: usize = 8;

/// What one [`ping`] run saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PingStats {
    pub sent: u32,
    pub received: u32,
    /// Round-trip time of each reply.
    pub rtts: Vec<Duration>,
}

impl PingStats {
    /// Requests that got no reply (Kube-OVN's "loss count": |sent − received|).
    pub fn lost(&self) -> u32 {
        self.sent.abs_diff(self.received)
    }

    /// The mean round-trip time in milliseconds (0 without replies, as pro-bing reports it).
    pub fn avg_rtt_ms(&self) -> f64 {
        if self.rtts.is_empty() {
            return 0.0;
        }
        let total: Duration = self.rtts.iter().sum();
        total.as_secs_f64() * 1000.0 / f64::from(u32::try_from(self.rtts.len()).unwrap_or(u32::MAX))
    }
}

/// The internet checksum (RFC 1071).
pub fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for chunk in bytes.chunks(2) {
        let word = u16::from_be_bytes([chunk[0], chunk.get(1).copied().unwrap_or(0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    // The fold above leaves at most 16 bits.
    !u16::try_from(sum).unwrap_or(u16::MAX)
}

/// An echo request. For IPv6 the checksum is left 0: the kernel fills it in for ICMPv6 sockets
/// (it covers a pseudo-header with the source address, which only the kernel knows).
pub fn echo_request(v6: bool, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut packet = Vec::with_capacity(8 + payload.len());
    packet.push(if v6 { ECHO_REQUEST_V6 } else { ECHO_REQUEST_V4 });
    packet.push(0);
    packet.extend_from_slice(&[0, 0]);
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&seq.to_be_bytes());
    packet.extend_from_slice(payload);
    if !v6 {
        let sum = checksum(&packet);
        packet[2..4].copy_from_slice(&sum.to_be_bytes());
    }
    packet
}

/// An echo reply as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EchoReply<'a> {
    pub id: u16,
    pub seq: u16,
    pub payload: &'a [u8],
}

/// The echo reply in `buf`, or `None` for any other packet. A raw IPv4 socket delivers the IP
/// header too (`ip_header`); IPv6 and ping sockets deliver the ICMP message alone.
pub fn parse_echo_reply(v6: bool, ip_header: bool, buf: &[u8]) -> Option<EchoReply<'_>> {
    let icmp = if ip_header {
        let ihl = usize::from(buf.first()? & 0x0f) * 4;
        buf.get(ihl..)?
    } else {
        buf
    };
    if icmp.len() < 8 || icmp[1] != 0 {
        return None;
    }
    let want = if v6 { ECHO_REPLY_V6 } else { ECHO_REPLY_V4 };
    if icmp[0] != want {
        return None;
    }
    Some(EchoReply {
        id: u16::from_be_bytes([icmp[4], icmp[5]]),
        seq: u16::from_be_bytes([icmp[6], icmp[7]]),
        payload: &icmp[8..],
    })
}

/// An open ICMP socket for one address family.
struct IcmpSocket {
    socket: UdpSocket,
    v6: bool,
    raw: bool,
}

impl IcmpSocket {
    fn open(v6: bool) -> io::Result<Self> {
        let (domain, protocol) = if v6 {
            (Domain::IPV6, Protocol::ICMPV6)
        } else {
            (Domain::IPV4, Protocol::ICMPV4)
        };
        let (socket, raw) = match Socket::new(domain, Type::RAW, Some(protocol)) {
            Ok(socket) => (socket, true),
            Err(e) if matches!(e.kind(), io::ErrorKind::PermissionDenied) => {
                (Socket::new(domain, Type::DGRAM, Some(protocol))?, false)
            }
            Err(e) => return Err(e),
        };
        socket.set_nonblocking(true)?;
        let socket = UdpSocket::from_std(std::net::UdpSocket::from(socket))?;
        Ok(Self { socket, v6, raw })
    }
}

/// Sends `count` echo requests to `addr`, one every `interval`, and waits for their replies until
/// all came or `timeout` (the whole run, as pro-bing's `Timeout`) passed.
pub async fn ping(addr: IpAddr, count: u16, interval: Duration, timeout: Duration) -> io::Result<PingStats> {
    let v6 = addr.is_ipv6();
    let icmp = IcmpSocket::open(v6)?;
    let token = RandomState::new().hash_one(addr).to_be_bytes();
    let id = u16::from_be_bytes([token[0], token[1]]);
    let target = SocketAddr::new(addr, 0);
    let start = Instant::now();
    let deadline = start + timeout;
    let mut sent_at: Vec<Instant> = Vec::with_capacity(usize::from(count));
    let mut answered = vec![false; usize::from(count)];
    let mut stats = PingStats::default();
    let mut next_send = start;
    let mut buf = [0u8; 1500];
    loop {
        let now = Instant::now();
        if sent_at.len() < usize::from(count) && now >= next_send {
            let seq = u16::try_from(sent_at.len()).unwrap_or(u16::MAX);
            let packet = echo_request(v6, id, seq, &token);
            icmp.socket.send_to(&packet, target).await?;
            sent_at.push(Instant::now());
            stats.sent += 1;
            next_send += interval;
        }
        if stats.received == u32::from(count) || now >= deadline {
            break;
        }
        let wake = if sent_at.len() < usize::from(count) {
            next_send.min(deadline)
        } else {
            deadline
        };
        let Ok(received) = tokio::time::timeout_at(wake, icmp.socket.recv_from(&mut buf)).await else {
            continue;
        };
        let (len, from) = received?;
        let arrived = Instant::now();
        if from.ip() != addr {
            continue;
        }
        let Some(reply) = parse_echo_reply(icmp.v6, icmp.raw && !icmp.v6, &buf[..len]) else {
            continue;
        };
        if reply.payload.get(..TOKEN_LEN) != Some(&token[..]) {
            continue;
        }
        let seq = usize::from(reply.seq);
        if seq < sent_at.len() && !answered[seq] {
            answered[seq] = true;
            stats.received += 1;
            stats.rtts.push(arrived - sent_at[seq]);
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_request_has_a_valid_checksum_and_round_trips() {
        let packet = echo_request(false, 0x1234, 7, b"tokentok");
        assert_eq!(packet[0], 8);
        // A correct checksum makes the sum over the whole message 0 (RFC 1071).
        assert_eq!(checksum(&packet), 0);
        // The reply echoes everything but the type and checksum.
        let mut reply = packet.clone();
        reply[0] = 0;
        let parsed = parse_echo_reply(false, false, &reply).unwrap();
        assert_eq!(
            (parsed.id, parsed.seq, parsed.payload),
            (0x1234, 7, &b"tokentok"[..])
        );
        // The request itself is not a reply.
        assert_eq!(parse_echo_reply(false, false, &packet), None);
    }

    #[test]
    fn raw_v4_replies_skip_the_ip_header() {
        let mut reply = echo_request(false, 1, 2, b"abcdefgh");
        reply[0] = 0;
        // A 24-byte header (IHL 6, with options).
        let mut datagram = vec![0x46];
        datagram.extend_from_slice(&[0; 23]);
        datagram.extend_from_slice(&reply);
        let parsed = parse_echo_reply(false, true, &datagram).unwrap();
        assert_eq!((parsed.id, parsed.seq, parsed.payload), (1, 2, &b"abcdefgh"[..]));
        assert_eq!(parse_echo_reply(false, true, &datagram[..20]), None);
    }

    #[test]
    fn v6_types_and_other_messages() {
        let request = echo_request(true, 9, 3, b"x");
        assert_eq!((request[0], &request[2..4]), (128, &[0u8, 0][..]));
        let mut reply = request.clone();
        reply[0] = 129;
        assert_eq!(parse_echo_reply(true, false, &reply).unwrap().seq, 3);
        // A neighbour solicitation, a v4 reply on a v6 socket, a truncated message.
        assert_eq!(parse_echo_reply(true, false, &[135, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(parse_echo_reply(true, false, &[0, 0, 0, 0, 0, 9, 0, 3]), None);
        assert_eq!(parse_echo_reply(true, false, &[129, 0, 0]), None);
    }

    #[test]
    fn stats_loss_and_mean() {
        let stats = PingStats {
            sent: 3,
            received: 2,
            rtts: vec![Duration::from_millis(1), Duration::from_millis(3)],
        };
        assert_eq!(stats.lost(), 1);
        assert!((stats.avg_rtt_ms() - 2.0).abs() < 1e-9);
        assert!(PingStats::default().avg_rtt_ms().abs() < f64::EPSILON);
    }
}
