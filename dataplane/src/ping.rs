//! ICMP echo out of one device, for the node daemon's health loop: can the node reach the join
//! subnet's gateway through `ovn0` (Kube-OVN's `loopOvn0Check`)? A raw socket bound to the
//! device, so the answer says something about that device and not about another route.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, SockaddrIn, SockaddrIn6, SockaddrLike,
    SockaddrStorage, recvfrom, sendto, setsockopt, socket, sockopt,
};
use nix::sys::time::TimeVal;

use crate::error::{Error, Result};
use crate::netns::Netns;

const ECHO_REQUEST_V4: u8 = 8;
const ECHO_REPLY_V4: u8 = 0;
const ECHO_REQUEST_V6: u8 = 128;
const ECHO_REPLY_V6: u8 = 129;

/// The internet checksum (RFC 1071).
pub(crate) fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !u16::try_from(sum).unwrap_or(u16::MAX)
}

/// An echo request; IPv6's checksum is the kernel's (it covers a pseudo-header).
fn echo_request(v6: bool, id: u16, seq: u16) -> Vec<u8> {
    let kind = if v6 { ECHO_REQUEST_V6 } else { ECHO_REQUEST_V4 };
    let mut packet = vec![kind, 0, 0, 0];
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&seq.to_be_bytes());
    packet.extend_from_slice(b"kube-ovn");
    if !v6 {
        let sum = checksum(&packet);
        packet[2..4].copy_from_slice(&sum.to_be_bytes());
    }
    packet
}

/// Whether `data` (an IPv4 raw socket hands over the IP header too) is our echo reply.
fn is_reply(v6: bool, data: &[u8], id: u16, seq: u16) -> bool {
    let icmp = if v6 {
        data
    } else {
        let header = usize::from(data.first().map_or(0, |b| b & 0x0f)) * 4;
        data.get(header..).unwrap_or_default()
    };
    let kind = if v6 { ECHO_REPLY_V6 } else { ECHO_REPLY_V4 };
    icmp.len() >= 8 && icmp[0] == kind && icmp[4..6] == id.to_be_bytes() && icmp[6..8] == seq.to_be_bytes()
}

fn open(v6: bool, device: &str, timeout: Duration) -> std::io::Result<OwnedFd> {
    let (family, protocol) = if v6 {
        (AddressFamily::Inet6, SockProtocol::IcmpV6)
    } else {
        (AddressFamily::Inet, SockProtocol::Icmp)
    };
    let fd = socket(family, SockType::Raw, SockFlag::SOCK_CLOEXEC, protocol)?;
    setsockopt(&fd, sockopt::BindToDevice, &OsString::from(device))?;
    let micros = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX);
    setsockopt(
        &fd,
        sockopt::ReceiveTimeout,
        &TimeVal::new(micros / 1_000_000, micros % 1_000_000),
    )?;
    Ok(fd)
}

fn echo(target: IpAddr, device: &str, attempts: u32, timeout: Duration) -> std::io::Result<bool> {
    static NEXT_ID: AtomicU16 = AtomicU16::new(0);
    let v6 = target.is_ipv6();
    let fd = open(v6, device, timeout)?;
    // Every raw ICMP socket of the namespace sees every echo reply: ours carry our id.
    let id = (u16::try_from(std::process::id() & 0xffff).unwrap_or(0))
        .wrapping_add(NEXT_ID.fetch_add(1, Ordering::Relaxed));
    let mut buf = [0u8; 1500];
    for seq in 1..=u16::try_from(attempts).unwrap_or(u16::MAX) {
        let packet = echo_request(v6, id, seq);
        match target {
            IpAddr::V4(a) => sendto(
                fd.as_raw_fd(),
                &packet,
                &SockaddrIn::from(SocketAddrV4::new(a, 0)),
                MsgFlags::empty(),
            ),
            IpAddr::V6(a) => sendto(
                fd.as_raw_fd(),
                &packet,
                &SockaddrIn6::from(SocketAddrV6::new(a, 0, 0, 0)),
                MsgFlags::empty(),
            ),
        }?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match recvfrom::<SockaddrStorage>(fd.as_raw_fd(), &mut buf) {
                Ok((n, from)) => {
                    let from_target = from.is_some_and(|f| match (f.as_sockaddr_in(), f.as_sockaddr_in6()) {
                        (Some(a), _) => IpAddr::V4(a.ip()) == target,
                        (_, Some(a)) => IpAddr::V6(a.ip()) == target,
                        _ => f.family().is_none(),
                    });
                    if from_target && is_reply(v6, &buf[..n], id, seq) {
                        return Ok(true);
                    }
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(false)
}

/// Sends up to `attempts` echo requests to `target` out of `device` in `ns`, each given
/// `timeout` for its reply: `Ok(true)` at the first reply, `Ok(false)` when none came. An
/// error means the probe could not be made (no such device, no privilege).
pub async fn ping(
    ns: &Netns,
    device: &str,
    target: IpAddr,
    attempts: u32,
    timeout: Duration,
) -> Result<bool> {
    let op = format!("ping {target} from {device} in {}", ns.label());
    let device = device.to_owned();
    ns.run_async(move || echo(target, &device, attempts, timeout))
        .await?
        .map_err(|source| Error::Io { op, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_a_valid_checksum_and_replies_are_matched_by_id_and_seq() {
        let request = echo_request(false, 0x1234, 7);
        assert_eq!(checksum(&request), 0, "a packet with its checksum sums to zero");
        let mut reply = vec![0x45u8; 1];
        reply.extend_from_slice(&[0; 19]);
        let mut icmp = request.clone();
        icmp[0] = ECHO_REPLY_V4;
        reply.extend_from_slice(&icmp);
        assert!(is_reply(false, &reply, 0x1234, 7));
        assert!(!is_reply(false, &reply, 0x1234, 8));
        assert!(!is_reply(false, &reply[..24], 0x1234, 7));
        let mut v6 = echo_request(true, 1, 1);
        v6[0] = ECHO_REPLY_V6;
        assert!(is_reply(true, &v6, 1, 1));
    }
}
