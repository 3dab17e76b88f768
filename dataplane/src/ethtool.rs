//! TX checksum offload and sysctls, the two settings a pod's namespace needs that rtnetlink
//! does not carry.
//!
//! Why TX checksum offload must go: ovs-vswitchd's userspace (`netdev`) datapath reads veths
//! through AF_PACKET, where a CHECKSUM_PARTIAL packet arrives with its L4 checksum not yet
//! computed; the receiver then drops every TCP and UDP packet (ICMP still works, which hides
//! it). `ethtool -K eth0 tx off` in the pod fixes it (reference/dataplane.md §5.6).

use std::os::fd::AsRawFd;

use crate::error::{Error, Result};
use crate::netns::Netns;

/// `SIOCETHTOOL` (linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `ETHTOOL_GTXCSUM` / `ETHTOOL_STXCSUM` (linux/ethtool.h): get / set TX checksumming.
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_STXCSUM: u32 = 0x17;

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `struct ifreq` with the `ifr_data` member of its union (40 bytes on 64-bit Linux).
#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut EthtoolValue,
    _pad: [u8; 16],
}

fn ethtool_value(ifname: &str, cmd: u32, data: u32) -> std::io::Result<u32> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| std::net::UdpSocket::bind("[::]:0"))?;
    let mut value = EthtoolValue { cmd, data };
    let mut request = IfreqData {
        name: [0; libc::IFNAMSIZ],
        data: &raw mut value,
        _pad: [0; 16],
    };
    for (dst, src) in request.name.iter_mut().zip(ifname.bytes()) {
        *dst = libc::c_char::from_ne_bytes([src]);
    }
    // SAFETY: `request` is a properly laid out `struct ifreq` whose `ifr_data` points to a live
    // `ethtool_value`; both outlive the call, and the kernel writes only within them.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCETHTOOL as _, &raw mut request) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value.data)
}

// The three below run on the request path of the node daemon: each enters `ns` on a thread
// of its own that the calling task awaits (`Netns::run_async`), so no runtime worker blocks.

/// Turns TX checksum offload off on `ifname` inside `ns` (and, through the kernel's feature
/// dependencies, the segmentation offloads that need it).
pub async fn disable_tx_checksum(ns: &Netns, ifname: &str) -> Result<()> {
    let name = ifname.to_owned();
    ns.run_async(move || ethtool_value(&name, ETHTOOL_STXCSUM, 0))
        .await?
        .map(drop)
        .map_err(|source| Error::Io {
            op: format!("turn TX checksum offload off on {ifname} in {}", ns.label()),
            source,
        })
}

/// Whether TX checksum offload is on for `ifname` inside `ns`.
pub async fn tx_checksum_enabled(ns: &Netns, ifname: &str) -> Result<bool> {
    let name = ifname.to_owned();
    ns.run_async(move || ethtool_value(&name, ETHTOOL_GTXCSUM, 0))
        .await?
        .map(|v| v != 0)
        .map_err(|source| Error::Io {
            op: format!("read TX checksum offload of {ifname} in {}", ns.label()),
            source,
        })
}

/// Writes a sysctl under `/proc/sys/net` inside `ns` (`key` like `ipv6/conf/all/disable_ipv6`).
/// `Ok(false)` when the key does not exist (IPv6 compiled out, say).
pub async fn write_net_sysctl(ns: &Netns, key: &str, value: &str) -> Result<bool> {
    let path = format!("/proc/sys/net/{key}");
    let (file, text) = (path.clone(), value.to_owned());
    match ns.run_async(move || std::fs::write(&file, text)).await? {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(Error::Io {
            op: format!("write {value} to {path} in {}", ns.label()),
            source,
        }),
    }
}

/// Reads a sysctl under `/proc/sys/net` inside `ns`, trimmed; `Ok(None)` when the key does not
/// exist (the interface is gone, or IPv6 compiled out).
pub async fn read_net_sysctl(ns: &Netns, key: &str) -> Result<Option<String>> {
    let path = format!("/proc/sys/net/{key}");
    let file = path.clone();
    match ns.run_async(move || std::fs::read_to_string(&file)).await? {
        Ok(text) => Ok(Some(text.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            op: format!("read {path} in {}", ns.label()),
            source,
        }),
    }
}
