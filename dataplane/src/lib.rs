//! The only crate that talks to the kernel below std (DESIGN.md "Boundaries"): network
//! namespace handles, links (veth pairs across namespaces), addresses, routes, policy rules,
//! sysctls, nftables tables (a script in one transaction, set elements over netlink), ICMP echo
//! and ARP resolution out of a device, announcing a device's addresses (gratuitous ARP,
//! unsolicited Neighbor Advertisements), and the one ethtool setting the userspace datapath needs; for the speaker's
//! sockets, TCP MD5 keys,
//! TTL / hop limit, the minimum received TTL (GTSM), `IPV6_V6ONLY` and the received TTL
//! (`socket`). Callers make sockets with
//! std or tokio and lend their file descriptors here.
//!
//! Everything is reached through [`Netns`] handles rather than by entering namespaces on the
//! caller's thread: `setns` is per thread, and a tokio worker that entered a pod's namespace
//! would carry it into unrelated tasks. [`Netns::run`] enters on a fresh thread that dies
//! afterwards; [`Netlink::connect`] opens its socket there, and a netlink socket stays bound to
//! the namespace it was opened in, so the returned handle works from any task.

// `unsafe` is allowed in this crate only, for the SIOCETHTOOL ioctl in `ethtool.rs`, the
// TCP_MD5SIG socket option in `tcp_md5.rs` and the AF_PACKET socket of `arp.rs` (also `announce.rs`'s; nix has no
// constructor for a `sockaddr_ll`), which no safe wrapper in nix, socket2 or std covers;
// every other kernel call goes through rtnetlink or std.
#![allow(unsafe_code)]

pub mod announce;
pub mod arp;
mod error;
pub mod ethtool;
mod link;
mod ndp;
mod netns;
pub mod nft;
pub mod ping;
mod records;
mod route;
mod rule;
pub mod socket;
pub mod tcp_md5;

pub use error::{Error, Result};
pub use link::{LinkInfo, Netlink, VethPair};
pub use netns::Netns;
pub use records::{AddrRecord, RouteMetrics, RouteRecord, is_link_local};
pub use route::Route;
pub use rule::{PROTOCOL as RULE_PROTOCOL, PolicyRule, TableRoute};

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Formats a MAC as lower-case `aa:bb:cc:dd:ee:ff`, the form OVN and Kube-OVN annotations use.
pub fn format_mac(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_round_trip_and_rejects() {
        let mac = parse_mac("0a:00:00:64:00:02").unwrap();
        assert_eq!(mac, [0x0a, 0, 0, 0x64, 0, 2]);
        assert_eq!(format_mac(&mac), "0a:00:00:64:00:02");
        for bad in [
            "",
            "0a:00:00:64:00",
            "0a:00:00:64:00:02:03",
            "0a:00:00:64:00:2",
            "zz:00:00:64:00:02",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }
}
