//! nftables in a network namespace: a script applied in one transaction (`nft -f -`), a table
//! listed as JSON (`nft -j list table`), element updates and the ruleset generation over a
//! netlink socket kept open ([`NftNetlink`], encoding in [`netlink`]).
//!
//! Why the `nft` binary for whole tables: its text is what operators read (`nft list table ip
//! kube-ovn` prints what we wrote), its parser and evaluator know every expression, and a file
//! of commands is one kernel transaction. Why netlink for elements: nft 1.0.6 reads every
//! element of the table before adding one (tens of milliseconds for a thousand subnets), where
//! the kernel needs only the new intervals.
//!
//! `nft` runs on a thread that entered the namespace (it inherits the namespace from that
//! thread), awaited from async code (see [`Netns::run_async`]); the netlink socket is opened
//! there once and stays bound to the namespace.

pub mod netlink;

use std::io::Write as _;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, send, setsockopt,
    socket, sockopt,
};
use nix::sys::time::TimeVal;

use crate::error::{Error, Result};
use crate::netns::Netns;

/// A table family we write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NftFamily {
    Ipv4,
    Ipv6,
}

impl NftFamily {
    /// The nft keyword (`ip`, `ip6`).
    pub fn keyword(self) -> &'static str {
        match self {
            Self::Ipv4 => "ip",
            Self::Ipv6 => "ip6",
        }
    }
}

/// Elements to remove from and add to one interval set (or map) in `table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementUpdate {
    pub family: NftFamily,
    pub table: String,
    pub set: String,
    /// Removed before any addition.
    pub delete: Vec<(IpNet, Option<IpAddr>)>,
    /// Values only for maps.
    pub add: Vec<(IpNet, Option<IpAddr>)>,
}

/// How long a netlink answer may take before the call fails (the kernel answers at once).
const NETLINK_TIMEOUT: Duration = Duration::from_secs(5);

fn nft_command(args: &[&str], stdin: Option<&str>) -> std::io::Result<std::process::Output> {
    let mut child = Command::new("nft")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())?;
    }
    child.wait_with_output()
}

fn command_error(op: String, e: &std::io::Error) -> Error {
    let hint = if e.kind() == std::io::ErrorKind::NotFound {
        " (the nftables package: scripts/install-deps.sh)"
    } else {
        ""
    };
    Error::Command {
        op,
        message: format!("{e}{hint}"),
    }
}

/// Applies `script` in `ns` with `nft -f -`: every command in it is one transaction, committed
/// whole or not at all. A refusal carries nft's message (which names the line).
pub async fn apply_script(ns: &Netns, script: String) -> Result<()> {
    let op = format!("nft -f - in {}", ns.label());
    let output = ns
        .run_async(move || nft_command(&["-f", "-"], Some(&script)))
        .await?
        .map_err(|e| command_error(op.clone(), &e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            op,
            message: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// `nft -j list table <family> <table>` in `ns`; `None` when there is no such table.
pub async fn list_table_json(ns: &Netns, family: NftFamily, table: &str) -> Result<Option<String>> {
    let op = format!("nft -j list table {} {table} in {}", family.keyword(), ns.label());
    let (keyword, name) = (family.keyword(), table.to_owned());
    let output = ns
        .run_async(move || nft_command(&["-j", "list", "table", keyword, &name], None))
        .await?
        .map_err(|e| command_error(op.clone(), &e))?;
    if output.status.success() {
        return Ok(Some(String::from_utf8_lossy(&output.stdout).into_owned()));
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("No such file or directory") {
        return Ok(None);
    }
    Err(Error::Command {
        op,
        message: stderr.trim().to_owned(),
    })
}

fn netlink_socket() -> std::io::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    let timeout = TimeVal::new(i64::try_from(NETLINK_TIMEOUT.as_secs()).unwrap_or(5), 0);
    setsockopt(&fd, sockopt::ReceiveTimeout, &timeout)?;
    Ok(fd)
}

/// Sends `request` on `fd` and reads answers until `done` says so (given each message), or the
/// timeout passes. Answers to other sequence numbers (a late answer to an earlier request that
/// timed out) are the caller's to ignore.
fn exchange(
    fd: &OwnedFd,
    request: &[u8],
    mut done: impl FnMut(&netlink::Reply<'_>) -> bool,
) -> std::io::Result<()> {
    send(fd.as_raw_fd(), request, MsgFlags::empty())?;
    let mut buf = vec![0u8; 65536];
    loop {
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        for reply in netlink::split_replies(&buf[..n]) {
            if done(&reply) {
                return Ok(());
            }
        }
    }
}

/// A netlink socket to nf_tables in one namespace, kept open for the life of its owner.
///
/// Why not one socket per request: when a netfilter socket closes, the kernel first waits for
/// the memory of every element and rule deleted so far to be released, which takes an RCU grace
/// period (10-15 ms on the CI machine); nft pays it at exit. A socket that stays open leaves
/// that to the kernel's worker, and a change of a few elements costs a fraction of a millisecond.
pub struct NftNetlink {
    fd: Arc<OwnedFd>,
    /// One request at a time, with increasing sequence numbers.
    seq: tokio::sync::Mutex<u32>,
    ns: String,
}

impl NftNetlink {
    /// Opens the socket in `ns`.
    pub async fn open(ns: &Netns) -> Result<Self> {
        let fd = ns.run_async(netlink_socket).await?.map_err(|source| Error::Io {
            op: format!("open a netfilter netlink socket in {}", ns.label()),
            source,
        })?;
        Ok(Self {
            fd: Arc::new(fd),
            seq: tokio::sync::Mutex::new(0),
            ns: ns.label(),
        })
    }

    /// Applies element updates as one netlink batch: all of them or, on any refusal (an
    /// element to delete that is not there, a set that is gone), none. A prefix that cannot be
    /// expressed as an element pair is refused before anything is sent; the caller then
    /// replaces the table instead.
    pub async fn update_elements(&self, updates: Vec<ElementUpdate>) -> Result<()> {
        if updates.iter().all(|u| u.add.is_empty() && u.delete.is_empty()) {
            return Ok(());
        }
        let op = format!("update {} nft set(s) in {}", updates.len(), self.ns);
        let mut seq = self.seq.lock().await;
        let first = seq.wrapping_add(1);
        let (request, expected) = netlink::encode_updates(&updates, first).map_err(|e| Error::Command {
            op: op.clone(),
            message: e.0,
        })?;
        *seq = first.wrapping_add(u32::try_from(expected.len()).unwrap_or(0) + 1);
        let fd = self.fd.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let mut pending = expected;
            let mut refused = None;
            exchange(&fd, &request, |reply| {
                if pending.contains(&reply.seq)
                    && let Some(code) = netlink::error_code(reply)
                {
                    pending.retain(|s| *s != reply.seq);
                    if code != 0 && refused.is_none() {
                        refused = Some(code);
                    }
                }
                pending.is_empty()
            })
            .map(|()| refused)
        })
        .await
        .map_err(|e| Error::Command {
            op: op.clone(),
            message: e.to_string(),
        })?;
        match outcome {
            Ok(None) => Ok(()),
            Ok(Some(code)) => Err(Error::Io {
                op,
                source: std::io::Error::from_raw_os_error(code),
            }),
            Err(source) => Err(Error::Io { op, source }),
        }
    }

    /// The nf_tables generation of the namespace: it moves with every committed change to any
    /// table, so an unchanged value means nobody touched the ruleset.
    pub async fn generation(&self) -> Result<u32> {
        let op = format!("read the nftables generation in {}", self.ns);
        let mut seq = self.seq.lock().await;
        *seq = seq.wrapping_add(1);
        let (request, want) = (netlink::encode_getgen(*seq), *seq);
        let fd = self.fd.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let mut found = None;
            exchange(&fd, &request, |reply| {
                if reply.seq != want {
                    return false;
                }
                found = netlink::generation(reply);
                found.is_some() || reply.kind == netlink::NLMSG_ERROR
            })
            .map(|()| found)
        })
        .await
        .map_err(|e| Error::Command {
            op: op.clone(),
            message: e.to_string(),
        })?;
        match outcome {
            Ok(Some(generation)) => Ok(generation),
            Ok(None) => Err(Error::Command {
                op,
                message: "the kernel answered without a generation".into(),
            }),
            Err(source) => Err(Error::Io { op, source }),
        }
    }
}
