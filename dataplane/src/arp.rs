//! ARP resolution out of one device (RFC 826), for the node daemon's gateway check of pods:
//! Kube-OVN resolves a pod's IPv4 gateway with ARP before it reports the pod ready
//! (`util.ArpResolve`, called from `waitNetworkReady`); on an underlay subnet that gateway is
//! the physical router, and an answer proves the pod's VLAN reaches it. An `AF_PACKET`
//! datagram socket bound to the device and to ARP: the kernel adds the Ethernet header
//! (broadcast destination, the device's MAC as source) and hands back only ARP frames.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use crate::error::{Error, Result};
use crate::netns::Netns;

const ARP_REQUEST: u16 = 1;
const ARP_REPLY: u16 = 2;
/// Hardware type Ethernet, protocol type IPv4 (RFC 826).
const HTYPE_ETHERNET: u16 = 1;
const PTYPE_IPV4: u16 = 0x0800;
const ARP_LEN: usize = 28;

/// The Ethernet broadcast address.
pub(crate) const BROADCAST: [u8; 6] = [0xff; 6];

/// An ARP request for `target` from `src_mac`/`src`.
fn request(src_mac: [u8; 6], src: Ipv4Addr, target: Ipv4Addr) -> [u8; ARP_LEN] {
    let mut p = [0u8; ARP_LEN];
    p[0..2].copy_from_slice(&HTYPE_ETHERNET.to_be_bytes());
    p[2..4].copy_from_slice(&PTYPE_IPV4.to_be_bytes());
    p[4] = 6;
    p[5] = 4;
    p[6..8].copy_from_slice(&ARP_REQUEST.to_be_bytes());
    p[8..14].copy_from_slice(&src_mac);
    p[14..18].copy_from_slice(&src.octets());
    // Target hardware address unknown: zeros.
    p[24..28].copy_from_slice(&target.octets());
    p
}

/// An ARP announcement of `addr` by `mac` (RFC 5227 §2.3, what "gratuitous ARP" means
/// since): a request whose sender and target protocol addresses are both `addr`, the target
/// hardware address zero, sent to the broadcast address. Every host on the segment that has
/// `addr` in its cache replaces the MAC there (Linux treats sender == target as gratuitous and
/// overrides its entry), and a switch learns `mac` on the port it came in on.
pub(crate) fn announcement(mac: [u8; 6], addr: Ipv4Addr) -> [u8; ARP_LEN] {
    request(mac, addr, addr)
}

/// The sender's MAC when `data` is an ARP reply from `target`.
fn reply_from(data: &[u8], target: Ipv4Addr) -> Option<[u8; 6]> {
    if data.len() < ARP_LEN
        || data[0..2] != HTYPE_ETHERNET.to_be_bytes()
        || data[2..4] != PTYPE_IPV4.to_be_bytes()
        || data[4] != 6
        || data[5] != 4
        || data[6..8] != ARP_REPLY.to_be_bytes()
        || data[14..18] != target.octets()
    {
        return None;
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&data[8..14]);
    Some(mac)
}

/// Ethertype ARP (for `sll_protocol`).
pub(crate) const ETH_P_ARP: u16 = 0x0806;

fn sockaddr(ifindex: i32, ethertype: u16, dst: Option<[u8; 6]>) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = u16::try_from(libc::AF_PACKET).unwrap_or_default();
    sa.sll_protocol = ethertype.to_be();
    sa.sll_ifindex = ifindex;
    if let Some(dst) = dst {
        sa.sll_halen = 6;
        sa.sll_addr[..6].copy_from_slice(&dst);
    }
    sa
}

/// An `AF_PACKET` datagram socket on one device: the kernel adds the Ethernet header (the
/// device's MAC as source, the destination given to [`PacketSocket::send`]).
pub(crate) struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
}

impl PacketSocket {
    /// Opens it on `device` of the calling thread's namespace. `receive`: the ethertype whose
    /// frames [`PacketSocket::recv`] hands back (each within `timeout`); `None` for a socket
    /// that only sends (the kernel queues nothing for it).
    pub(crate) fn open(device: &str, receive: Option<(u16, Duration)>) -> std::io::Result<Self> {
        let ifindex = nix::net::if_::if_nametoindex(device)?;
        let ifindex = i32::try_from(ifindex).map_err(std::io::Error::other)?;
        let ethertype = receive.map_or(0, |(t, _)| t);
        let protocol = i32::from(ethertype.to_be());
        // SAFETY: socket(2) with constant arguments; the result is checked before use and owned.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, protocol) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let sa = sockaddr(ifindex, ethertype, None);
        let len = libc::socklen_t::try_from(size_of::<libc::sockaddr_ll>()).unwrap_or_default();
        // SAFETY: `sa` is a valid sockaddr_ll of `len` bytes, alive for the call.
        let rc = unsafe { libc::bind(fd.as_raw_fd(), std::ptr::from_ref(&sa).cast(), len) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some((_, timeout)) = receive {
            let micros = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX).max(1000);
            setsockopt(
                &fd,
                sockopt::ReceiveTimeout,
                &TimeVal::new(micros / 1_000_000, micros % 1_000_000),
            )?;
        }
        Ok(Self { fd, ifindex })
    }

    /// Sends `packet` (what follows the Ethernet header) with `ethertype` to `dst`.
    pub(crate) fn send(&self, ethertype: u16, dst: [u8; 6], packet: &[u8]) -> std::io::Result<()> {
        let dst = sockaddr(self.ifindex, ethertype, Some(dst));
        let len = libc::socklen_t::try_from(size_of::<libc::sockaddr_ll>()).unwrap_or_default();
        // SAFETY: `packet` and `dst` are valid for the given lengths during the call.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                0,
                std::ptr::from_ref(&dst).cast(),
                len,
            )
        };
        if sent < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// One received frame's payload into `buf`: `Ok(None)` when the timeout passed.
    fn recv(&self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        // SAFETY: `buf` is valid for writes of its length during the call.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(usize::try_from(n).unwrap_or_default()))
    }
}

fn resolve(
    device: &str,
    src_mac: [u8; 6],
    src: Ipv4Addr,
    target: Ipv4Addr,
    timeout: Duration,
) -> std::io::Result<Option<[u8; 6]>> {
    let socket = PacketSocket::open(device, Some((ETH_P_ARP, timeout)))?;
    socket.send(ETH_P_ARP, BROADCAST, &request(src_mac, src, target))?;
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 256];
    while Instant::now() < deadline {
        let Some(n) = socket.recv(&mut buf)? else {
            break;
        };
        // Every ARP frame of the device arrives here (other pods' too): only a reply from
        // the target answers.
        if let Some(mac) = reply_from(&buf[..n], target) {
            return Ok(Some(mac));
        }
    }
    Ok(None)
}

/// Sends one ARP request for `target` out of `device` in `ns`, as `src_mac`/`src`, and waits
/// up to `timeout` for the target's reply: `Ok(Some(mac))` with the target's MAC,
/// `Ok(None)` when none came. An error means the probe could not be made (no such device, no
/// privilege).
pub async fn arp_resolve(
    ns: &Netns,
    device: &str,
    src_mac: [u8; 6],
    src: Ipv4Addr,
    target: Ipv4Addr,
    timeout: Duration,
) -> Result<Option<[u8; 6]>> {
    let op = format!("arping {target} from {device} in {}", ns.label());
    let device = device.to_owned();
    ns.run_async(move || resolve(&device, src_mac, src, target, timeout))
        .await?
        .map_err(|source| Error::Io { op, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_and_reply_layout() {
        let mac = [0x0a, 0, 0, 0x64, 0, 5];
        let src: Ipv4Addr = "10.100.0.5".parse().unwrap();
        let gw: Ipv4Addr = "10.100.0.1".parse().unwrap();
        let req = request(mac, src, gw);
        assert_eq!(&req[..8], &[0, 1, 8, 0, 6, 4, 0, 1]);
        assert_eq!(&req[8..14], &mac);
        assert_eq!(&req[14..18], &src.octets());
        assert_eq!(&req[18..24], &[0; 6]);
        assert_eq!(&req[24..28], &gw.octets());
        // Our own request is not an answer; the gateway's reply is.
        assert_eq!(reply_from(&req, gw), None);
        let gw_mac = [0x2e, 1, 2, 3, 4, 5];
        let mut reply = req;
        reply[6..8].copy_from_slice(&ARP_REPLY.to_be_bytes());
        reply[8..14].copy_from_slice(&gw_mac);
        reply[14..18].copy_from_slice(&gw.octets());
        reply[18..24].copy_from_slice(&mac);
        reply[24..28].copy_from_slice(&src.octets());
        assert_eq!(reply_from(&reply, gw), Some(gw_mac));
        assert_eq!(reply_from(&reply, src), None, "a reply from someone else");
        assert_eq!(reply_from(&reply[..20], gw), None);
    }

    #[test]
    fn announcement_is_a_request_for_its_own_address() {
        let mac = [0x0a, 0, 0, 0x64, 0, 0x0a];
        let addr: Ipv4Addr = "10.100.0.10".parse().unwrap();
        let garp = announcement(mac, addr);
        // htype 1, ptype 0x0800, hlen 6, plen 4, op 1 (request): RFC 5227 §2.3.
        assert_eq!(&garp[..8], &[0, 1, 8, 0, 6, 4, 0, 1]);
        assert_eq!(&garp[8..14], &mac, "sender hardware address");
        assert_eq!(&garp[14..18], &addr.octets(), "sender protocol address");
        assert_eq!(&garp[18..24], &[0; 6], "target hardware address");
        assert_eq!(&garp[24..28], &addr.octets(), "target protocol address");
        // Not mistaken for an answer when the gateway check reads the device's ARP frames.
        assert_eq!(reply_from(&garp, addr), None);
    }
}
