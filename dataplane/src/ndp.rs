//! The unsolicited Neighbor Advertisement (RFC 4861 §7.2.6) a node sends when its link-layer
//! address for an IPv6 address may have changed: to all nodes (`ff02::1`), Override set, so
//! every neighbour with the address in its cache replaces the MAC there. Kube-OVN sends one
//! per IPv6 address of a pod after adding it (`util.AnnounceNDPAddress`, kubeovn/kube-ovn#7139).
//! The whole IPv6 packet is built here (it goes out of an `AF_PACKET` socket, see `announce`),
//! its ICMPv6 checksum included.

use std::net::Ipv6Addr;

use crate::ping::checksum;

/// Ethertype IPv6 (for `sll_protocol`).
pub(crate) const ETH_P_IPV6: u16 = 0x86dd;
/// `ff02::1`, all nodes on the link.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// Its Ethernet address: 33:33 and the low 32 bits of the group (RFC 2464 §7).
pub(crate) const ALL_NODES_MAC: [u8; 6] = [0x33, 0x33, 0, 0, 0, 1];

const IPV6_HEADER: usize = 40;
/// ICMPv6 type Neighbor Advertisement (RFC 4861 §4.4).
const NEIGHBOR_ADVERTISEMENT: u8 = 136;
const NEXT_HEADER_ICMPV6: u8 = 58;
/// The NA's flags byte: Override (R and S clear: the pod is no router, and nobody asked).
const FLAG_OVERRIDE: u8 = 0x20;
/// Option Target Link-Layer Address, 1 unit of 8 bytes (RFC 4861 §4.6.1).
const OPTION_TARGET_LLA: u8 = 2;
/// The NA (type … target, 24 bytes) and its one option (8 bytes).
const NA_LEN: usize = 24 + 8;
/// The whole packet after the Ethernet header.
pub(crate) const PACKET_LEN: usize = IPV6_HEADER + NA_LEN;

/// The unsolicited NA of `addr` by `mac`, as an IPv6 packet from `addr` to `ff02::1`: hop
/// limit 255 (a receiver drops ND messages with any other, RFC 4861 §7.1.2), Override set,
/// the target `addr`, and the target link-layer address option `mac`.
pub(crate) fn unsolicited_na(mac: [u8; 6], addr: Ipv6Addr) -> [u8; PACKET_LEN] {
    let mut p = [0u8; PACKET_LEN];
    // IPv6 header: version 6, traffic class and flow label 0.
    p[0] = 0x60;
    p[4..6].copy_from_slice(&u16::try_from(NA_LEN).unwrap_or_default().to_be_bytes());
    p[6] = NEXT_HEADER_ICMPV6;
    p[7] = 255;
    p[8..24].copy_from_slice(&addr.octets());
    p[24..40].copy_from_slice(&ALL_NODES.octets());
    let na = &mut p[IPV6_HEADER..];
    na[0] = NEIGHBOR_ADVERTISEMENT;
    na[4] = FLAG_OVERRIDE;
    na[8..24].copy_from_slice(&addr.octets());
    na[24] = OPTION_TARGET_LLA;
    na[25] = 1;
    na[26..32].copy_from_slice(&mac);
    let sum = icmpv6_checksum(addr, ALL_NODES, &p[IPV6_HEADER..]);
    p[IPV6_HEADER + 2..IPV6_HEADER + 4].copy_from_slice(&sum.to_be_bytes());
    p
}

/// The ICMPv6 checksum of `message` (its checksum field zero, or as sent: then the result is
/// zero), over the pseudo-header of RFC 8200 §8.1.
fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, message: &[u8]) -> u16 {
    let mut data = Vec::with_capacity(40 + message.len());
    data.extend_from_slice(&src.octets());
    data.extend_from_slice(&dst.octets());
    data.extend_from_slice(&u32::try_from(message.len()).unwrap_or_default().to_be_bytes());
    data.extend_from_slice(&[0, 0, 0, NEXT_HEADER_ICMPV6]);
    data.extend_from_slice(message);
    checksum(&data)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x0a, 0, 0, 0, 0, 0x10];

    fn addr() -> Ipv6Addr {
        "fd00:100::10".parse().unwrap()
    }

    #[test]
    fn unsolicited_na_layout() {
        let p = unsolicited_na(MAC, addr());
        // IPv6: version 6, payload 32 bytes, ICMPv6, hop limit 255, from the address to
        // all nodes.
        assert_eq!(&p[..8], &[0x60, 0, 0, 0, 0, 32, 58, 255]);
        assert_eq!(&p[8..24], &addr().octets());
        assert_eq!(&p[24..40], &ALL_NODES.octets());
        let na = &p[40..];
        assert_eq!((na[0], na[1]), (136, 0), "type NA, code 0");
        assert_eq!(na[4], 0x20, "Override only: not a router, not solicited");
        assert_eq!(&na[5..8], &[0; 3], "reserved");
        assert_eq!(&na[8..24], &addr().octets(), "target address");
        assert_eq!(&na[24..26], &[2, 1], "target link-layer address option, 8 bytes");
        assert_eq!(&na[26..32], &MAC);
        assert_eq!(ALL_NODES_MAC, [0x33, 0x33, 0, 0, 0, 1]);
    }

    #[test]
    fn unsolicited_na_checksum() {
        let p = unsolicited_na(MAC, addr());
        // A receiver sums the message with its checksum in place: zero when correct.
        assert_eq!(icmpv6_checksum(addr(), ALL_NODES, &p[40..]), 0);
        // The value itself, worked out by hand (RFC 1071): the pseudo-header's 16-bit words
        // fd00+0100+0010 (source) + ff02+0001 (destination) + 0020 (length) + 003a (next
        // header), and the NA's 8800 (type, code) + 2000 (flags) + fd00+0100+0010 (target) +
        // 0201+0a00+0000+0010 (option) sum to 0x3_af8e; folded 0xaf91, complemented 0x506e.
        assert_eq!(&p[42..44], &[0x50, 0x6e]);
        // Any change to what the checksum covers is caught.
        let mut bad = p;
        bad[40 + 26] ^= 1;
        assert_ne!(icmpv6_checksum(addr(), ALL_NODES, &bad[40..]), 0);
        let other: Ipv6Addr = "fd00:100::11".parse().unwrap();
        assert_ne!(icmpv6_checksum(other, ALL_NODES, &p[40..]), 0);
    }
}
