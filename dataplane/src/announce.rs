//! Announcing a device's addresses on its link: an ARP announcement per IPv4 address
//! ([`crate::arp`], RFC 5227 §2.3) and an unsolicited Neighbor Advertisement per IPv6 address
//! ([`crate::ndp`], RFC 4861 §7.2.6). Neighbours that cache one of the addresses with another
//! MAC (a pod re-created with the same address and a new MAC) replace it at once instead of
//! sending to the old MAC until their entry expires, and switches learn where the MAC is now.
//! Kube-OVN does the same for each address it puts on a pod's NIC (`configureNic`:
//! `util.AnnounceArpAddress`, `util.AnnounceNDPAddress`). One `AF_PACKET` socket for both (the
//! one the gateway check's ARP uses), the frames built whole here.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;

use crate::arp::{self, BROADCAST, ETH_P_ARP, PacketSocket};
use crate::error::{Error, Result};
use crate::ndp::{self, ALL_NODES_MAC, ETH_P_IPV6};
use crate::netns::Netns;

/// What announcing one address means on the wire: ethertype, destination MAC, the packet.
pub(crate) fn frame(mac: [u8; 6], addr: IpAddr) -> Option<(u16, [u8; 6], Vec<u8>)> {
    match addr {
        IpAddr::V4(a) => Some((ETH_P_ARP, BROADCAST, arp::announcement(mac, a).to_vec())),
        // A link-local address is the kernel's own (derived from the MAC; it sends its NA).
        IpAddr::V6(a) if a.is_unicast_link_local() => None,
        IpAddr::V6(a) => Some((ETH_P_IPV6, ALL_NODES_MAC, ndp::unsolicited_na(mac, a).to_vec())),
    }
}

/// What [`announce`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Announced {
    /// Frames sent.
    pub sent: usize,
    /// How long the device took to be running (up to the bound given).
    pub waited: Duration,
    /// Whether it was running when they were sent.
    pub running: bool,
}

/// Whether `device` of the calling thread's namespace is running (`IFF_RUNNING`: up, with
/// carrier, and the kernel's link watch has processed it).
fn running(device: &str) -> std::io::Result<bool> {
    Ok(getifaddrs()?.any(|i| i.interface_name == device && i.flags.contains(InterfaceFlags::IFF_RUNNING)))
}

fn send_all(
    device: &str,
    frames: &[(u16, [u8; 6], Vec<u8>)],
    wait_running: Duration,
) -> std::io::Result<Announced> {
    // A veth just brought up has the no-op qdisc, which drops every frame without an error,
    // until the kernel's link watch activates it; that work runs at most once a second, so
    // on a node making many pods it can lag the link's coming up by up to a second.
    let started = Instant::now();
    let mut is_running = running(device)?;
    while !is_running && started.elapsed() < wait_running {
        std::thread::sleep(RUNNING_POLL);
        is_running = running(device)?;
    }
    let socket = PacketSocket::open(device, None)?;
    for (ethertype, dst, packet) in frames {
        socket.send(*ethertype, *dst, packet)?;
    }
    Ok(Announced {
        sent: frames.len(),
        waited: started.elapsed(),
        running: is_running,
    })
}

/// How often the device's state is read while waiting for it to run.
const RUNNING_POLL: Duration = Duration::from_millis(10);

/// Sends one announcement of each of `addresses` (IPv6 link-local ones excepted) out of
/// `device` in `ns`, as `mac` (the device's), once the device is running or `wait_running`
/// passed. An error means they could not be sent (no such device, no privilege).
pub async fn announce(
    ns: &Netns,
    device: &str,
    mac: [u8; 6],
    addresses: &[IpAddr],
    wait_running: Duration,
) -> Result<Announced> {
    let frames: Vec<_> = addresses.iter().filter_map(|a| frame(mac, *a)).collect();
    if frames.is_empty() {
        return Ok(Announced {
            sent: 0,
            waited: Duration::ZERO,
            running: true,
        });
    }
    let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
    let op = format!("announce {} from {device} in {}", list.join(","), ns.label());
    let device = device.to_owned();
    ns.run_async(move || send_all(&device, &frames, wait_running))
        .await?
        .map_err(|source| Error::Io { op, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_frame_per_family_none_for_link_local() {
        let mac = [0x0a, 0, 0, 0x64, 0, 0x0a];
        let (t, dst, p) = frame(mac, "10.100.0.10".parse().unwrap()).unwrap();
        assert_eq!((t, dst), (0x0806, [0xff; 6]));
        assert_eq!(p, arp::announcement(mac, "10.100.0.10".parse().unwrap()));
        let (t, dst, p) = frame(mac, "fd00:100::10".parse().unwrap()).unwrap();
        assert_eq!((t, dst), (0x86dd, [0x33, 0x33, 0, 0, 0, 1]));
        assert_eq!(p.len(), 72);
        assert_eq!(frame(mac, "fe80::1".parse().unwrap()), None);
    }
}
