//! TCP MD5 signatures (RFC 2385) for BGP sessions, and the kernel's counters of segments it
//! dropped for a missing or wrong signature.
//!
//! The key is per peer address and lives on the socket: on an active socket it must be set
//! before `connect()` so the SYN is signed; on a listening socket one key per peer is set before
//! the peer connects, and the accepted socket inherits it (setting it after `accept()` is too
//! late: the SYN/ACK already went out unsigned). Neither std, socket2 nor nix wraps
//! `TCP_MD5SIG`, and libc has the constants but not `struct tcp_md5sig`, so it is declared
//! here (linux/tcp.h).
//!
//! A signature mismatch is invisible to both applications: the kernel drops the segment and the
//! connection just never comes up. The only signal is the `TcpExt` counters in
//! `/proc/net/netstat` ([`Md5Counters`]), which the speaker exports as metrics.

use std::mem::{size_of, zeroed};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::error::{Error, Result};
use crate::netns::Netns;

/// Longest key the kernel accepts (`TCP_MD5SIG_MAXKEYLEN`); RFC 2385 sets no limit of its own.
pub const MAX_KEY_LEN: usize = 80;

// The address family constants as the `sa_family_t` the sockaddr structs hold (2 and 10 fit).
#[allow(
    clippy::cast_possible_truncation,
    reason = "AF_INET and AF_INET6 are small constants"
)]
const AF_INET: libc::sa_family_t = libc::AF_INET as libc::sa_family_t;
#[allow(
    clippy::cast_possible_truncation,
    reason = "AF_INET and AF_INET6 are small constants"
)]
const AF_INET6: libc::sa_family_t = libc::AF_INET6 as libc::sa_family_t;

/// `struct tcp_md5sig` (linux/tcp.h, since 2.6.20; the flags/prefixlen/ifindex fields were
/// padding before 4.13 and are left zero, which is what plain `TCP_MD5SIG` expects).
#[repr(C)]
struct TcpMd5Sig {
    addr: libc::sockaddr_storage,
    flags: u8,
    prefixlen: u8,
    keylen: u16,
    ifindex: libc::c_int,
    key: [u8; MAX_KEY_LEN],
}

/// Writes `ip` into a `sockaddr_storage` of the family the socket has. An IPv4 peer on an
/// IPv6 (dual-stack) socket reaches it as an IPv4-mapped address, and that is how the kernel
/// expects the key for it (it files the key under AF_INET itself).
fn peer_storage(ip: IpAddr, socket_is_v6: bool) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid (AF_UNSPEC) value.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let v6 = match (ip, socket_is_v6) {
        (IpAddr::V4(v4), false) => {
            let sin = libc::sockaddr_in {
                sin_family: AF_INET,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in>(), sin) };
            return storage;
        }
        (IpAddr::V4(v4), true) => v4.to_ipv6_mapped(),
        (IpAddr::V6(v6), _) => v6,
    };
    let sin6 = libc::sockaddr_in6 {
        sin6_family: AF_INET6,
        sin6_port: 0,
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr { s6_addr: v6.octets() },
        sin6_scope_id: 0,
    };
    // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
    unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in6>(), sin6) };
    storage
}

/// Whether the socket is AF_INET6, read with `getsockopt(SO_DOMAIN)` so unbound sockets work.
fn socket_is_v6(fd: BorrowedFd<'_>) -> std::io::Result<bool> {
    let mut domain: libc::c_int = 0;
    let mut len = libc::socklen_t::try_from(size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: `domain` and `len` are live for the call and sized for an int option.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&raw mut domain).cast(),
            &raw mut len,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(domain == libc::AF_INET6)
}

/// Sets (or, with an empty `key`, removes) the MD5 key for segments to and from `peer` on a TCP
/// socket: an unconnected socket about to `connect()` to it, or a listening socket that will
/// accept it.
pub fn set_md5_key(fd: BorrowedFd<'_>, peer: IpAddr, key: &[u8]) -> Result<()> {
    let op = || format!("set TCP MD5 key for {peer}");
    if key.len() > MAX_KEY_LEN {
        return Err(Error::Io {
            op: op(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("key is {} bytes, at most {MAX_KEY_LEN}", key.len()),
            ),
        });
    }
    let is_v6 = socket_is_v6(fd).map_err(|source| Error::Io { op: op(), source })?;
    let mut sig = TcpMd5Sig {
        addr: peer_storage(peer, is_v6),
        flags: 0,
        prefixlen: 0,
        keylen: u16::try_from(key.len()).unwrap_or(0),
        ifindex: 0,
        key: [0; MAX_KEY_LEN],
    };
    sig.key[..key.len()].copy_from_slice(key);
    let len = libc::socklen_t::try_from(size_of::<TcpMd5Sig>()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: `sig` is a fully initialised `struct tcp_md5sig` that outlives the call; the
    // kernel only reads `len` bytes of it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            (&raw const sig).cast(),
            len,
        )
    };
    if rc < 0 {
        let source = std::io::Error::last_os_error();
        // Removing a key that was never set is not a failure for the caller.
        if key.is_empty() && source.raw_os_error() == Some(libc::ENOENT) {
            return Ok(());
        }
        return Err(Error::Io { op: op(), source });
    }
    Ok(())
}

/// [`set_md5_key`] by socket address, for callers that have the peer as a `SocketAddr`.
pub fn set_md5_key_for(fd: BorrowedFd<'_>, peer: SocketAddr, key: &[u8]) -> Result<()> {
    set_md5_key(fd, peer.ip(), key)
}

/// The kernel's TCP MD5 drop counters of one network namespace (`TcpExt` in
/// `/proc/net/netstat`), each counting segments dropped since the namespace was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Md5Counters {
    /// A segment came without a signature on a connection that has a key.
    pub not_found: u64,
    /// A signed segment came on a connection that has no key.
    pub unexpected: u64,
    /// The signature did not match (wrong key on one side).
    pub failure: u64,
}

impl Md5Counters {
    /// Reads the counters from the text of `/proc/net/netstat`: pairs of lines, a header line
    /// of field names and a line of values, both starting with the same `Prefix:`. Counters the
    /// kernel does not have (built without `CONFIG_TCP_MD5SIG`) stay 0.
    pub fn parse(netstat: &str) -> Self {
        let mut counters = Md5Counters::default();
        let mut lines = netstat.lines();
        while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
            let (Some(("TcpExt", names)), Some(("TcpExt", values))) =
                (names.split_once(':'), values.split_once(':'))
            else {
                continue;
            };
            for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
                let value = value.parse().unwrap_or(0);
                match name {
                    "TCPMD5NotFound" => counters.not_found = value,
                    "TCPMD5Unexpected" => counters.unexpected = value,
                    "TCPMD5Failure" => counters.failure = value,
                    _ => {}
                }
            }
        }
        counters
    }

    /// The counters of the calling thread's network namespace. `/proc/thread-self`, not
    /// `/proc/self`: the latter is the main thread's view, which differs for a thread that
    /// entered another namespace.
    pub fn read() -> Result<Self> {
        let path = "/proc/thread-self/net/netstat";
        std::fs::read_to_string(path)
            .map(|text| Md5Counters::parse(&text))
            .map_err(|source| Error::Io {
                op: format!("read {path}"),
                source,
            })
    }

    /// The counters of `ns`.
    pub fn read_in(ns: &Netns) -> Result<Self> {
        ns.run(Md5Counters::read)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, TcpListener};
    use std::os::fd::AsFd;

    #[test]
    fn parses_tcpext_counters_and_skips_other_sections() {
        let text = "TcpExt: SyncookiesSent TCPMD5NotFound TCPMD5Unexpected TCPMD5Failure Other\n\
                    TcpExt: 1 5 2 7 9\n\
                    IpExt: InNoRoutes TCPMD5Failure\n\
                    IpExt: 3 99\n";
        assert_eq!(
            Md5Counters::parse(text),
            Md5Counters {
                not_found: 5,
                unexpected: 2,
                failure: 7
            }
        );
        assert_eq!(Md5Counters::parse(""), Md5Counters::default());
    }

    #[test]
    fn reads_this_namespace() {
        // Every Linux has the file; the values are whatever this namespace has seen.
        Md5Counters::read().unwrap();
    }

    #[test]
    fn keys_on_v4_and_dual_stack_listeners_and_removal() {
        let v4 = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        set_md5_key(v4.as_fd(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), b"secret").unwrap();
        set_md5_key(v4.as_fd(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), b"").unwrap();
        // Removing an absent key is fine.
        set_md5_key(v4.as_fd(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)), b"").unwrap();
        // A v6 peer on a v4 socket is a kernel error, reported with the peer in the message.
        let err = set_md5_key(v4.as_fd(), IpAddr::V6(Ipv6Addr::LOCALHOST), b"x").unwrap_err();
        assert!(err.to_string().contains("::1"), "{err}");

        if let Ok(v6) = TcpListener::bind((Ipv6Addr::LOCALHOST, 0)) {
            set_md5_key(v6.as_fd(), IpAddr::V6(Ipv6Addr::LOCALHOST), &[7; MAX_KEY_LEN]).unwrap();
            set_md5_key(v6.as_fd(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), b"mapped").unwrap();
        }
        let long = [0u8; MAX_KEY_LEN + 1];
        assert!(set_md5_key(v4.as_fd(), IpAddr::V4(Ipv4Addr::LOCALHOST), &long).is_err());
    }
}
