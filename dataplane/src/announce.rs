//! Announcing a device's addresses on its link: an ARP announcement per IPv4 address
//! ([`crate::arp`], RFC 5227 §2.3) and an unsolicited Neighbor Advertisement per IPv6 address
//! ([`crate::ndp`], RFC 4861 §7.2.6). Neighbours that cache one of the addresses with another
//! MAC (a pod re-created with the same address and a new MAC) replace it at once instead of
//! sending to the old MAC until their entry expires, and switches learn where the MAC is now.
//! Kube-OVN does the same for each address it puts on a pod's NIC (`configureNic`:
//! `util.AnnounceArpAddress`, `util.AnnounceNDPAddress`). One `AF_PACKET` socket for both (the
//! one the gateway check's ARP uses), the frames built whole here.

use std::net::IpAddr;

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

fn send_all(device: &str, frames: &[(u16, [u8; 6], Vec<u8>)]) -> std::io::Result<()> {
    let socket = PacketSocket::open(device, None)?;
    for (ethertype, dst, packet) in frames {
        socket.send(*ethertype, *dst, packet)?;
    }
    Ok(())
}

/// Sends one announcement of each of `addresses` (IPv6 link-local ones excepted) out of
/// `device` in `ns`, as `mac` (the device's). Returns how many went out. An error means they
/// could not be sent (no such device, no privilege); nothing is waited for.
pub async fn announce(ns: &Netns, device: &str, mac: [u8; 6], addresses: &[IpAddr]) -> Result<usize> {
    let frames: Vec<_> = addresses.iter().filter_map(|a| frame(mac, *a)).collect();
    if frames.is_empty() {
        return Ok(0);
    }
    let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
    let op = format!("announce {} from {device} in {}", list.join(","), ns.label());
    let device = device.to_owned();
    let count = frames.len();
    ns.run_async(move || send_all(&device, &frames))
        .await?
        .map_err(|source| Error::Io { op, source })?;
    Ok(count)
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
