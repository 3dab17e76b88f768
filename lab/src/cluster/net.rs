//! The lab's wires: namespaces, the ToR's bridge, a veth per machine, addresses, routes and the
//! sysctls, made with `ip`, `sysctl` and `ethtool` (the commands an operator would type, so the
//! log of `up` reads as a recipe).
//!
//! Every veth is created with both ends already in their namespaces (one `ip link add … netns
//! A … peer … netns B`), so no name ever appears in the host's namespace. TX checksum offload is
//! off on every veth end outside OVS: ovs-vswitchd's userspace datapath reads its ports with
//! AF_PACKET and drops TCP and UDP whose checksum the sender left to "hardware"
//! (`../shared/reference/dataplane.md` §5.6), and packets from the control plane, the ToR and the
//! outside host all end in a node's OVS bridge.
//!
//! Commands, namespaces by name and veth pairs are `kube_ovn_testkit`'s (`run`, `netns`), the
//! same the tests use; this module is the lab's wiring made of them.

use kube_ovn_testkit::netns::veth_pair;
pub use kube_ovn_testkit::netns::{add_netns, del_netns, exec, ip, netns_exists};
pub use kube_ovn_testkit::{CommandError, run};

use super::topology::{
    EXTERNAL_NIC, EXTERNAL_PREFIX, FABRIC_PREFIX, FABRIC6_PREFIX, MGMT_PREFIX, NodePlan, OUTSIDE_PREFIX,
    OUTSIDE6_PREFIX, PROVIDER_NIC, TOR_EXTERNAL_PORT, TOR_MGMT_PORT, TOR_VLAN_PORT, Topology,
    UNDERLAY_PREFIX,
};

fn sysctl(ns: &str, setting: &str) -> Result<(), CommandError> {
    exec(ns, "sysctl", &["-q", "-w", setting]).map(drop)
}

/// An IPv6 address on `dev`, usable at once: `nodad` skips duplicate address detection (the
/// lab's addresses are its own), which would otherwise keep it tentative, unusable as a source
/// or for a BGP listener, for a second or more.
fn addr6(ns: &str, address: std::net::Ipv6Addr, prefix: u8, dev: &str) -> Result<(), CommandError> {
    ip(
        ns,
        &[
            "-6",
            "addr",
            "add",
            &format!("{address}/{prefix}"),
            "dev",
            dev,
            "nodad",
        ],
    )
    .map(drop)
}

fn default6(ns: &str, via: std::net::Ipv6Addr) -> Result<(), CommandError> {
    ip(ns, &["-6", "route", "add", "default", "via", &via.to_string()]).map(drop)
}

fn tx_off(ns: &str, dev: &str) -> Result<(), CommandError> {
    exec(ns, "ethtool", &["-K", dev, "tx", "off"]).map(drop)
}

/// A veth `a_dev` in `a_ns` joined to `b_dev` in `b_ns`, both up, MTU 1500, TX offload off.
fn veth(a_ns: &str, a_dev: &str, b_ns: &str, b_dev: &str) -> Result<(), CommandError> {
    veth_pair(a_ns, a_dev, b_ns, b_dev, 1500)?;
    for (ns, dev) in [(a_ns, a_dev), (b_ns, b_dev)] {
        tx_off(ns, dev)?;
        ip(ns, &["link", "set", dev, "up"])?;
    }
    Ok(())
}

/// The ToR's bridge and its routing, the control plane's and the outside host's links. The
/// namespaces exist already.
pub fn wire_fabric(t: &Topology) -> Result<(), CommandError> {
    let tor = t.tor_netns();
    let fabric = format!("{}/{FABRIC_PREFIX}", Topology::tor_ip());
    ip(&tor, &["link", "add", "fabric", "type", "bridge"])?;
    ip(&tor, &["addr", "add", &fabric, "dev", "fabric"])?;
    addr6(&tor, Topology::tor_ip6(), FABRIC6_PREFIX, "fabric")?;
    ip(&tor, &["link", "set", "fabric", "up"])?;
    sysctl(&tor, "net.ipv4.ip_forward=1")?;
    sysctl(&tor, "net.ipv6.conf.all.forwarding=1")?;

    let cp = t.cp_netns();
    veth(&cp, "eth0", &tor, "cp")?;
    ip(&tor, &["link", "set", "cp", "master", "fabric"])?;
    ip(
        &cp,
        &[
            "addr",
            "add",
            &format!("{}/{FABRIC_PREFIX}", Topology::cp_ip()),
            "dev",
            "eth0",
        ],
    )?;
    ip(
        &cp,
        &["route", "add", "default", "via", &Topology::tor_ip().to_string()],
    )?;
    addr6(&cp, Topology::cp_ip6(), FABRIC6_PREFIX, "eth0")?;
    default6(&cp, Topology::tor_ip6())?;

    let outside = t.outside_netns();
    veth(&outside, "eth0", &tor, "out0")?;
    ip(
        &tor,
        &[
            "addr",
            "add",
            &format!("{}/{OUTSIDE_PREFIX}", Topology::tor_outside_ip()),
            "dev",
            "out0",
        ],
    )?;
    ip(
        &outside,
        &[
            "addr",
            "add",
            &format!("{}/{OUTSIDE_PREFIX}", Topology::outside_ip()),
            "dev",
            "eth0",
        ],
    )?;
    ip(
        &outside,
        &[
            "route",
            "add",
            "default",
            "via",
            &Topology::tor_outside_ip().to_string(),
        ],
    )?;
    addr6(&tor, Topology::tor_outside_ip6(), OUTSIDE6_PREFIX, "out0")?;
    addr6(&outside, Topology::outside_ip6(), OUTSIDE6_PREFIX, "eth0")?;
    default6(&outside, Topology::tor_outside_ip6())?;
    Ok(())
}

/// A node's links to the ToR: its `eth0` (which becomes a port of the node's OVS bridge `br-ul`
/// once OVS runs: see [`address_node`]) and its `eth1` on the VLAN fabric, whose ToR end becomes
/// a trunk of the ToR's OVS bridge ([`super::tor_vlan`]); `eth1` has the node's address on the
/// untagged management network, as a machine's second NIC would before an underlay
/// ProviderNetwork moves it onto `br-<provider>`; and its `eth2` on the external network, whose
/// ToR end becomes an access port of VLAN 200, with the node's address there. And the node's
/// forwarding sysctls.
pub fn wire_node(t: &Topology, node: &NodePlan) -> Result<(), CommandError> {
    veth(&node.netns, "eth0", &t.tor_netns(), &node.tor_port)?;
    ip(
        &t.tor_netns(),
        &["link", "set", &node.tor_port, "master", "fabric"],
    )?;
    for (nic, port, address) in [
        (
            PROVIDER_NIC,
            &node.trunk_port,
            format!("{}/{MGMT_PREFIX}", node.mgmt_ip),
        ),
        (
            EXTERNAL_NIC,
            &node.ext_port,
            format!("{}/{EXTERNAL_PREFIX}", node.ext_ip),
        ),
    ] {
        veth(&node.netns, nic, &t.tor_netns(), port)?;
        // The ToR's end is a switch port of the ToR's OVS bridge (read with AF_PACKET), but the
        // ToR's kernel still sees its frames: it must not answer ARP there for the ToR's own
        // addresses (Linux's weak host model would, with the veth's MAC, beside the internal
        // port's answer), nor speak IPv6 on it.
        sysctl(&t.tor_netns(), &format!("net.ipv4.conf.{port}.arp_ignore=8"))?;
        sysctl(&t.tor_netns(), &format!("net.ipv6.conf.{port}.disable_ipv6=1"))?;
        ip(&node.netns, &["addr", "add", &address, "dev", nic])?;
    }
    // The node forwards between its fabric address and ovn0 (outside → pod over BGP routes)
    // and, later, for egress NAT; reverse-path filtering would drop the asymmetric halves of
    // ECMP'd flows.
    sysctl(&node.netns, "net.ipv4.ip_forward=1")?;
    sysctl(&node.netns, "net.ipv6.conf.all.forwarding=1")?;
    sysctl(&node.netns, "net.ipv4.conf.all.rp_filter=0")?;
    sysctl(&node.netns, "net.ipv4.conf.default.rp_filter=0")?;
    Ok(())
}

/// The node's address on `br-ul` (where ovs-vswitchd's userspace tunnels look for the route to
/// other nodes, `dataplane.md` §5.4) and its default route through the ToR. `br-ul` exists.
pub fn address_node(node: &NodePlan) -> Result<(), CommandError> {
    address_node_on(node, "br-ul")
}

/// The node's addresses (IPv4 and IPv6) and default routes on `dev`: `eth0` for a node whose
/// `ovs-ovn` pod moves them onto its OVS bridge itself (`up --install manifests`,
/// `deploy/image/start-ovs.sh`), as a real machine boots with its addresses on its NIC.
pub fn address_node_on(node: &NodePlan, dev: &str) -> Result<(), CommandError> {
    let ns = &node.netns;
    ip(
        ns,
        &["addr", "add", &format!("{}/{FABRIC_PREFIX}", node.ip), "dev", dev],
    )?;
    addr6(ns, node.ip6, FABRIC6_PREFIX, dev)?;
    ip(ns, &["link", "set", dev, "up"])?;
    ip(
        ns,
        &["route", "add", "default", "via", &Topology::tor_ip().to_string()],
    )?;
    default6(ns, Topology::tor_ip6())
}

/// The ToR's addresses on the VLAN fabric, once its ovs-vswitchd made the internal ports
/// ([`super::tor_vlan`]): the management network's, VLAN 100's gateway and the external
/// network's (VLAN 200). The ToR forwards already (`ip_forward`), so both VLANs are routed to the
/// outside host and back at once, as connected networks (no BGP).
pub fn address_tor_vlan(t: &Topology) -> Result<(), CommandError> {
    let tor = t.tor_netns();
    for (dev, addr) in [
        (
            TOR_MGMT_PORT,
            format!("{}/{MGMT_PREFIX}", Topology::tor_mgmt_ip()),
        ),
        (
            TOR_VLAN_PORT,
            format!("{}/{UNDERLAY_PREFIX}", Topology::underlay_gateway()),
        ),
        (
            TOR_EXTERNAL_PORT,
            format!("{}/{EXTERNAL_PREFIX}", Topology::external_gateway()),
        ),
    ] {
        ip(&tor, &["addr", "add", &addr, "dev", dev])?;
        // A router's VLAN interface answers ARP for its own address only: Linux's default
        // (arp_ignore=0) would answer for 10.100.0.1 on mgmt0 and vlan200 too, joining what
        // the VLANs separate.
        sysctl(&tor, &format!("net.ipv4.conf.{dev}.arp_ignore=1"))?;
        ip(&tor, &["link", "set", dev, "up"])?;
    }
    Ok(())
}
