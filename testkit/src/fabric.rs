//! A datacenter fabric in a network namespace for the underlay tests: the "router" that is also
//! the physical VLAN gateway. This kernel has no 8021q module, no dummy links and no
//! VLAN-filtering Linux bridge, so VLANs end on Open vSwitch: the router runs its own
//! ovsdb-server and ovs-vswitchd (an [`OvsNode`] without OVN) with one netdev bridge `fab`
//! (action NORMAL, so it learns MACs per VLAN like a switch):
//!
//! ```text
//!  router netns  (bridge `fab`, netdev, NORMAL)
//!    trunk ports  t<n> (veth, all VLANs)  ───────  node netns: the provider NIC (eth1)
//!    internal ports g<id> tag=<id>, address = the VLAN's gateway (tag 0: untagged)
//!    ip_forward=1 between the gateways
//! ```
//!
//! [`Capture`] runs `tcpdump -e -nn -l` on a router port and parses what the tests assert on:
//! MACs, the 802.1Q tag, and the IPv4 and IPv6 addresses (so "no NAT" and "tagged 100" are
//! checkable).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::Context as _;

use crate::daemon::Daemon;
use crate::netns::{Netns, exec, veth_pair};
use crate::ovs_node::OvsNode;
use crate::wait::wait_until;

/// The router's bridge.
pub const FABRIC_BRIDGE: &str = "fab";

/// How long tcpdump gets to start listening.
const CAPTURE_START: Duration = Duration::from_secs(10);

/// The fabric's router: an OVS netdev bridge that trunks every VLAN to the nodes, and the
/// VLANs' gateways as tagged internal ports.
pub struct VlanRouter {
    ovs: OvsNode,
    next: AtomicU32,
}

impl VlanRouter {
    /// A fresh router in netns `<prefix>-<pid>-<n>`, with the bridge and forwarding on.
    pub fn start(prefix: &str) -> anyhow::Result<Self> {
        let ovs = OvsNode::start(prefix)?;
        ovs.vsctl(&[
            "--may-exist",
            "add-br",
            FABRIC_BRIDGE,
            "--",
            "set",
            "Bridge",
            FABRIC_BRIDGE,
            "datapath_type=netdev",
        ])?;
        ovs.check_interface(FABRIC_BRIDGE)?;
        ovs.netns().exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        Ok(Self {
            ovs,
            next: AtomicU32::new(0),
        })
    }

    pub fn netns(&self) -> &Netns {
        self.ovs.netns()
    }

    /// The router's OVS (for `ovs-vsctl`, `ofproto/trace`, `fdb/show`).
    pub fn ovs(&self) -> &OvsNode {
        &self.ovs
    }

    fn unique(&self, prefix: &str) -> String {
        // Interface names are at most 15 bytes: prefix (1) + PID (7 digits max) + "x" + n.
        format!(
            "{prefix}{}x{}",
            std::process::id(),
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Wires `nic` in namespace `node_ns` to a new trunk port of the bridge (every VLAN), both
    /// veth ends with `mtu`, up, TX checksum offload off (the userspace datapath does not
    /// complete partial checksums, dataplane.md §5.6). Returns the router-side port's name.
    pub fn attach(&self, node_ns: &str, nic: &str, mtu: u32) -> anyhow::Result<String> {
        let trunk = self.unique("t");
        veth_pair(self.netns().name(), &trunk, node_ns, nic, mtu)?;
        for (ns, dev) in [(self.netns().name(), trunk.as_str()), (node_ns, nic)] {
            exec(ns, "ethtool", &["-K", dev, "tx", "off"])?;
            exec(ns, "ip", &["link", "set", dev, "up"])?;
        }
        self.ovs.vsctl(&["add-port", FABRIC_BRIDGE, &trunk])?;
        self.ovs.check_interface(&trunk)?;
        Ok(trunk)
    }

    /// The physical gateway of VLAN `id` (0: untagged): an internal port of the bridge with
    /// `tag=id` (an access port: frames leave it untagged, enter the trunks tagged) carrying
    /// `cidr` (`10.100.0.1/24`, or an IPv6 one, see [`VlanRouter::add_address`]). Returns the
    /// port's name.
    pub fn add_vlan_gateway(&self, id: u16, cidr: &str) -> anyhow::Result<String> {
        let port = self.unique("g");
        let mut args = vec![
            "add-port".to_owned(),
            FABRIC_BRIDGE.to_owned(),
            port.clone(),
            "--".to_owned(),
            "set".to_owned(),
            "Interface".to_owned(),
            port.clone(),
            "type=internal".to_owned(),
        ];
        if id != 0 {
            args.extend([
                "--".to_owned(),
                "set".to_owned(),
                "Port".to_owned(),
                port.clone(),
                format!("tag={id}"),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.ovs.vsctl(&args)?;
        self.ovs.check_interface(&port)?;
        let ns = self.netns();
        // As a router's interface: ARP answered only for the addresses on it (Linux answers
        // for any of its addresses on any interface otherwise), so a frame that reaches the
        // wrong VLAN's port is not answered and VLAN isolation is observable.
        ns.exec(&["sysctl", "-qw", &format!("net.ipv4.conf.{port}.arp_ignore=1")])?;
        self.add_address(&port, cidr)?;
        ns.ip(&["link", "set", &port, "up"])?;
        Ok(port)
    }

    /// Adds `cidr` (`fd00:100::1/64`) to the gateway port `port`: a VLAN's second family, for
    /// dual-stack and IPv6 subnets. IPv6 goes on without duplicate address detection, so the
    /// router answers at once (the address is the test's, nobody else's), and the router
    /// forwards IPv6 as it does IPv4.
    pub fn add_address(&self, port: &str, cidr: &str) -> anyhow::Result<()> {
        let ns = self.netns();
        let mut args = vec!["addr", "add", cidr, "dev", port];
        if cidr.contains(':') {
            ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])?;
            args.push("nodad");
        }
        ns.ip(&args).map(drop)
    }

    /// Removes `cidr` from the gateway port `port` (a router that stops answering one family).
    pub fn del_address(&self, port: &str, cidr: &str) -> anyhow::Result<()> {
        self.netns().ip(&["addr", "del", cidr, "dev", port]).map(drop)
    }

    /// Takes a gateway port down or up (a router that stops answering).
    pub fn set_up(&self, port: &str, up: bool) -> anyhow::Result<()> {
        self.netns()
            .ip(&["link", "set", port, if up { "up" } else { "down" }])
            .map(drop)
    }

    /// The MAC of a router port (a gateway's, as pods resolve it).
    pub fn mac(&self, port: &str) -> anyhow::Result<String> {
        let out = self.netns().ip(&["-br", "link", "show", port])?;
        out.split_whitespace()
            .nth(2)
            .map(str::to_owned)
            .with_context(|| format!("no MAC in {out:?}"))
    }

    /// Starts `tcpdump -e -nn -l` on `port` in the router's namespace; returns once it listens.
    pub fn capture(&self, port: &str) -> anyhow::Result<Capture> {
        let log = self.ovs.dir().join(format!("tcpdump-{}.log", self.unique("c")));
        Capture::start(self.netns().name(), port, log)
    }
}

/// A running tcpdump; stopped (by PID) on drop.
pub struct Capture {
    daemon: Daemon,
    log: PathBuf,
}

impl Capture {
    /// Starts `tcpdump -e -nn -l -U -i <port>` in the network namespace named `netns`, printing
    /// into `log`; returns once it listens (frames from then on are captured).
    pub fn start(netns: &str, port: &str, log: PathBuf) -> anyhow::Result<Self> {
        let args: Vec<String> = [
            "netns", "exec", netns, "tcpdump", "-i", port, "-e", "-nn", "-l", "-U",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let mut daemon = Daemon::spawn(&format!("tcpdump on {port} in {netns}"), "ip", &args, &log, &[])?;
        // tcpdump says "listening on <port>" on stderr (into the same log) once the socket is
        // bound: frames from then on are captured.
        wait_until(
            &format!("tcpdump on {port} in {netns} to listen"),
            CAPTURE_START,
            || {
                daemon.check_alive()?;
                Ok(std::fs::read_to_string(&log).is_ok_and(|l| l.contains("listening on")))
            },
        )?;
        Ok(Capture { daemon, log })
    }

    /// Everything tcpdump printed so far.
    pub fn raw(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every frame printed so far, parsed.
    pub fn frames(&self) -> Vec<Frame> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(Frame::parse)
            .collect()
    }

    /// Waits until a frame satisfies `pred`, then returns it; the error shows what was seen.
    pub fn wait_frame(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Frame) -> bool,
    ) -> anyhow::Result<Frame> {
        let mut found = None;
        let waited = wait_until(what, timeout, || {
            found = self.frames().into_iter().find(|f| pred(f));
            Ok(found.is_some())
        });
        match (waited, found) {
            (Ok(()), Some(frame)) => Ok(frame),
            (r, _) => Err(anyhow::anyhow!(
                "{}; captured:\n{}",
                r.err().map(|e| e.to_string()).unwrap_or_default(),
                self.raw_tail(30)
            )),
        }
    }

    /// The last `n` lines tcpdump printed, for failure messages.
    pub fn raw_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Stops tcpdump now (also done on drop).
    pub fn stop(&mut self) {
        self.daemon.stop();
    }
}

/// One frame as `tcpdump -e -nn` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub src_mac: String,
    pub dst_mac: String,
    /// The 802.1Q VLAN id, when the frame carries a tag.
    pub vlan: Option<u16>,
    /// `ARP`, `IPv4`, `IPv6`… (the innermost ethertype's name).
    pub ethertype: String,
    /// IP source and destination (without ports), for IPv4 and IPv6 frames.
    pub src_ip: Option<String>,
    pub dst_ip: Option<String>,
    /// The whole line.
    pub line: String,
}

impl Frame {
    /// Parses `<time> <src> > <dst>, ethertype 802.1Q (0x8100), length N: vlan 100, p 0,
    /// ethertype IPv4 (0x0800), 10.100.0.5 > 10.100.0.1: ICMP …` and the untagged form; `None`
    /// for tcpdump's own messages.
    pub fn parse(line: &str) -> Option<Self> {
        let mut words = line.split_whitespace();
        let _time = words.next()?;
        let src_mac = words.next()?;
        if words.next()? != ">" {
            return None;
        }
        let dst_mac = words.next()?.trim_end_matches(',');
        let is_mac = |m: &str| m.len() == 17 && m.bytes().filter(|b| *b == b':').count() == 5;
        if !is_mac(src_mac) || !is_mac(dst_mac) {
            return None;
        }
        let vlan = line
            .split("vlan ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|id| id.trim().parse().ok());
        // The innermost "ethertype NAME (0x…)": after the tag when there is one.
        let last = line.rsplit("ethertype ").next()?;
        let ethertype = last.split_whitespace().next()?.to_owned();
        let (mut src_ip, mut dst_ip) = (None, None);
        if ethertype == "IPv4" || ethertype == "IPv6" {
            // `(0x0800), length N: a > b: …` untagged; `(0x0800), a > b: …` after a tag.
            let after = last.split_once("), ")?.1;
            let after =
                after.split_once(": ").map_or(
                    after,
                    |(head, tail)| {
                        if head.starts_with("length ") { tail } else { after }
                    },
                );
            let mut parts = after.split_whitespace();
            let a = parts.next()?;
            if parts.next()? == ">" {
                let b = parts.next()?.trim_end_matches(':');
                src_ip = Some(strip_port(a));
                dst_ip = Some(strip_port(b));
            }
        }
        Some(Self {
            src_mac: src_mac.to_owned(),
            dst_mac: dst_mac.to_owned(),
            vlan,
            ethertype,
            src_ip,
            dst_ip,
            line: line.to_owned(),
        })
    }
}

/// `10.0.0.1.80` → `10.0.0.1`, `fd00::1.80` → `fd00::1` (tcpdump -nn appends the port with a
/// dot).
fn strip_port(addr: &str) -> String {
    if addr.contains(':') {
        return addr.split('.').next().unwrap_or(addr).to_owned();
    }
    let parts: Vec<&str> = addr.split('.').collect();
    if parts.len() == 5 {
        parts[..4].join(".")
    } else {
        addr.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tagged_untagged_and_arp() {
        let tagged = Frame::parse("12:00:00.000001 0a:00:00:64:00:05 > 2e:1f:00:00:00:01, ethertype 802.1Q (0x8100), length 102: vlan 100, p 0, ethertype IPv4 (0x0800), 10.100.0.5 > 10.100.0.1: ICMP echo request, id 7, seq 1, length 64").unwrap();
        assert_eq!(tagged.vlan, Some(100));
        assert_eq!(tagged.src_mac, "0a:00:00:64:00:05");
        assert_eq!(tagged.dst_mac, "2e:1f:00:00:00:01");
        assert_eq!(tagged.ethertype, "IPv4");
        assert_eq!(tagged.src_ip.as_deref(), Some("10.100.0.5"));
        assert_eq!(tagged.dst_ip.as_deref(), Some("10.100.0.1"));

        let plain = Frame::parse("12:00:00.000001 0a:00:00:64:00:05 > 2e:1f:00:00:00:01, ethertype IPv4 (0x0800), length 74: 10.0.0.5.41000 > 10.0.0.1.80: Flags [S], seq 1").unwrap();
        assert_eq!(plain.vlan, None);
        assert_eq!(plain.src_ip.as_deref(), Some("10.0.0.5"));
        assert_eq!(plain.dst_ip.as_deref(), Some("10.0.0.1"));

        let arp = Frame::parse("12:00:00.000001 0a:00:00:64:00:05 > ff:ff:ff:ff:ff:ff, ethertype 802.1Q (0x8100), length 46: vlan 200, p 0, ethertype ARP (0x0806), Request who-has 10.200.0.1 tell 10.200.0.5, length 28").unwrap();
        assert_eq!(arp.vlan, Some(200));
        assert_eq!(arp.ethertype, "ARP");
        assert_eq!(arp.src_ip, None);

        let v6 = Frame::parse("12:00:00.000001 0a:00:00:64:00:10 > 2e:1f:00:00:00:01, ethertype 802.1Q (0x8100), length 122: vlan 100, p 0, ethertype IPv6 (0x86dd), fd00:100::10 > fd00:100::1: ICMP6, echo request, id 7, seq 1, length 64").unwrap();
        assert_eq!((v6.vlan, v6.ethertype.as_str()), (Some(100), "IPv6"));
        assert_eq!(v6.src_ip.as_deref(), Some("fd00:100::10"));
        assert_eq!(v6.dst_ip.as_deref(), Some("fd00:100::1"));
        let v6 = Frame::parse("12:00:00.000001 0a:00:00:64:00:10 > 2e:1f:00:00:00:01, ethertype IPv6 (0x86dd), length 94: fd00::10.41000 > fd00::1.80: Flags [S], seq 1").unwrap();
        assert_eq!(v6.src_ip.as_deref(), Some("fd00::10"));
        assert_eq!(v6.dst_ip.as_deref(), Some("fd00::1"));

        assert_eq!(
            Frame::parse("listening on t1x0, link-type EN10MB (Ethernet)"),
            None
        );
    }
}
