//! Where everything of one lab lives: namespace names, addresses, AS numbers, ports and paths.
//! Pure: the same inputs give the same plan, so `up`, `status`, `down` and the other verbs agree
//! on names without asking each other.
//!
//! ```text
//!                     outside (198.51.100.10, fd00:198:51:100::10)
//!                        │ out0
//!                        │ 198.51.100.0/24, fd00:198:51:100::/64
//!                     ┌──┴──────────────────────────────┐
//!                     │ tor: bridge `fabric` 172.30.0.1 │  BIRD or FRR, AS 65001
//!                     │           fd00:172:30::1        │  (IPv4 and IPv6 sessions per node)
//!                     │      OVS bridge `tor-vlan`      │  (the VLAN fabric, below)
//!                     └──┬──────────┬──────────┬────────┘
//!        172.30.0.0/24   │          │          │
//!    fd00:172:30::/64    │          │          │
//!                  cp 172.30.0.2  node1 .11  node2 .12 …  (each node: eth0 in OVS bridge br-ul,
//!                     ::2          ::11       ::12        its addresses on br-ul; speakers AS 65000)
//!     API :6443, NB :6641, SB :6642 │          │
//!                                 eth1       eth1 …       (each node: 172.31.0.1x/24 on eth1)
//!                                   │          │
//!                     tor-vlan:  n1-trunk   n2-trunk …    trunks: every VLAN, tagged on the wire
//!                                mgmt0    untagged  172.31.0.1/24  the nodes' management network
//!                                vlan100  tag 100   10.100.0.1/24  VLAN 100's gateway
//!                                vlan200  tag 200   10.200.0.1/24  the external gateway
//!                     tor-vlan:  n1-ext     n2-ext …      access ports of VLAN 200, untagged
//!                                  │          │
//!                                eth2       eth2 …       (each node: 10.200.0.1x/24 on eth2)
//! ```
//!
//! The VLAN fabric is a second, separate wire per node: the nodes' `eth0` already belongs to
//! `br-ul` (the tunnel endpoint's bridge), and Kube-OVN's underlay moves a NIC of its own into
//! `br-<provider>`. VLANs terminate on the ToR's own ovs-vswitchd (userspace datapath, as the
//! nodes': the lab's kernel has no 8021q), so the ToR is the VLAN's physical router, as a
//! datacenter's would be: `10.100.0.0/24` is a connected route of the ToR and the outside host
//! reaches it with no BGP route.
//!
//! The external network (Kube-OVN's `external` provider network and subnet, where OVN EIPs live)
//! is a third wire per node, `eth2`, on an access port of VLAN [`EXTERNAL_VLAN`]: a segment of the
//! physical network behind the ToR, not the outside host's network, so the outside host reaches
//! an EIP only through the ToR (by its connected route, or a BGP /32 that overrides it), which is
//! what makes the announcement of EIPs observable. Each node has an address of its own there
//! (what the ProviderNetwork `external` moves onto `br-external`), the next hop's way in.
//!
//! The fabric and the outside network are dual stack (ULA prefixes, RFC 4193, whose last group
//! reads as the IPv4 address's last byte: node1 is 172.30.0.11 and fd00:172:30::11): each node
//! peers with the ToR over IPv4 and over IPv6, the ToR installs both families' routes with ECMP,
//! and pods of a dual-stack subnet are reached from the outside host over IPv6. One speaker (see
//! [`NodePlan::extended_nexthop`]) also sends its IPv4 routes over its IPv6 session with an IPv6
//! next hop (RFC 8950); the ToR keeps them as the backup of the same routes learnt over IPv4.
//! The VLAN fabric and the external network stay IPv4 only.
//!
//! Address spaces are per lab (every lab has its own namespaces), so two labs use the same
//! addresses without meeting; only namespace names and the state directory must be unique, and
//! both carry the lab's name. Namespaces are `kl_<lab>_<role>`: lab names have no `_`, so the
//! prefix `kl_<lab>_` belongs to one lab only (`kl_a_` is not a prefix of `kl_a-b_…`).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;

/// The ToR's routing daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TorKind {
    Bird,
    Frr,
}

impl std::fmt::Display for TorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Bird => "bird",
            Self::Frr => "frr",
        })
    }
}

/// The most nodes a lab may have: node addresses are `.11` upwards in one /24.
pub const MAX_NODES: usize = 200;
/// The speakers' AS (Kube-OVN's `--cluster-as`) and the ToR's (`--neighbor-as`).
pub const CLUSTER_AS: u32 = 65000;
pub const TOR_AS: u32 = 65001;
pub const FABRIC_PREFIX: u8 = 24;
pub const OUTSIDE_PREFIX: u8 = 24;
/// The IPv6 prefixes of the fabric (`fd00:172:30::/64`) and of the outside host's network
/// (`fd00:198:51:100::/64`).
pub const FABRIC6_PREFIX: u8 = 64;
pub const OUTSIDE6_PREFIX: u8 = 64;
/// The join subnet (the controller's `--node-switch-cidr`, Kube-OVN's dual-stack default): each
/// node's `ovn0` gets an address of both families, so the nodes route IPv6 pod subnets into OVN
/// and OVN sends their IPv6 egress to the pod's node, as it does for IPv4.
pub const JOIN_CIDR: &str = "100.64.0.0/16,fd00:100:64::/112";
pub const API_PORT: u16 = 6443;
pub const NB_PORT: u16 = 6641;
pub const SB_PORT: u16 = 6642;
/// Port of the controller's health and metrics endpoints (Kube-OVN's `--pprof-port`).
pub const CONTROLLER_METRICS_PORT: u16 = 10660;
pub const DAEMON_METRICS_PORT: u16 = 10665;
pub const SPEAKER_METRICS_PORT: u16 = 10667;
/// kube-ovn-monitor's (Kube-OVN's `--metrics-port` default).
pub const MONITOR_METRICS_PORT: u16 = 10661;
/// Services' ClusterIPs come from here (kube-apiserver's `--service-cluster-ip-range`, and the
/// same flag of the controller and daemons): kube-apiserver's default IPv4 range and an IPv6
/// one (dual stack: a Service asking for both families gets both; the first is the default).
pub const SERVICE_CIDR: &str = "10.96.0.0/12,fd00:10:96::/108";
/// etcd's client and peer ports, on 127.0.0.1 of the control plane's namespace.
pub const ETCD_CLIENT_PORT: u16 = 2379;
pub const ETCD_PEER_PORT: u16 = 2380;
/// LoadBalancer Services' ingress IPs come from here (the agent's `load_balancers`, as MetalLB
/// would give them); TEST-NET-3, routed to the nodes only by the speakers' announcements.
pub const LOAD_BALANCER_CIDR: &str = "203.0.113.0/24";
/// The operator's allowed range for Services' `spec.externalIPs` (`--service-external-ip-cidrs` on
/// the controller, daemons and speakers): TEST-NET-1. A tenant's external IP outside it is refused
/// (the issue's attack on the API server's, a node's and the ToR's addresses).
pub const EXTERNAL_IP_CIDR: &str = "192.0.2.0/24";
/// The port the outside host's netexec server listens on (TCP and UDP).
pub const OUTSIDE_PORT: u16 = 80;
/// Each node's second NIC, on the ToR's VLAN fabric (an underlay ProviderNetwork's
/// `defaultInterface`).
pub const PROVIDER_NIC: &str = "eth1";
/// The ToR's OVS bridge of the VLAN fabric, and its internal ports: the untagged management
/// network's address and VLAN [`VLAN_ID`]'s gateway.
pub const TOR_VLAN_BRIDGE: &str = "tor-vlan";
pub const TOR_MGMT_PORT: &str = "mgmt0";
pub const TOR_VLAN_PORT: &str = "vlan100";
/// The VLAN the ToR routes (the underlay example's `Vlan` id), its subnet and gateway.
pub const VLAN_ID: u16 = 100;
pub const UNDERLAY_CIDR: &str = "10.100.0.0/24";
pub const UNDERLAY_PREFIX: u8 = 24;
/// The nodes' management network on [`PROVIDER_NIC`], untagged: the address and connected route
/// an underlay ProviderNetwork moves onto its bridge (and gives back).
pub const MGMT_PREFIX: u8 = 24;
/// Each node's third NIC, on an access port of VLAN [`EXTERNAL_VLAN`] (untagged on the wire):
/// the external network's `defaultInterface` (Kube-OVN's `external-gw-nic`).
pub const EXTERNAL_NIC: &str = "eth2";
/// The external network's VLAN on [`TOR_VLAN_BRIDGE`] (the nodes never see its tag), its subnet
/// and the ToR's port holding its gateway [`Topology::external_gateway`].
pub const EXTERNAL_VLAN: u16 = 200;
pub const EXTERNAL_CIDR: &str = "10.200.0.0/24";
pub const EXTERNAL_PREFIX: u8 = 24;
pub const TOR_EXTERNAL_PORT: &str = "vlan200";

/// The lab agent's user (its client certificate's CN).
pub const AGENT_USER: &str = "kube-ovn-lab:agent";

/// `fd00:<a>:<b>:<c>::<host>` with `host` written in decimal digits (node1's `.11` is `::11`),
/// so an IPv6 address of the lab reads like its IPv4 twin.
fn v6_like(a: u16, b: u16, c: u16, host: u8) -> Ipv6Addr {
    let last = u16::from_str_radix(&host.to_string(), 16).unwrap_or(u16::from(host));
    Ipv6Addr::new(0xfd00, a, b, c, 0, 0, 0, last)
}

/// A lab's name must be usable in namespace names and paths.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 20 {
        return Err(format!(
            "lab name {name:?}: 1 to 20 characters (it is part of network namespace names)"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        || name.starts_with('-')
    {
        return Err(format!(
            "lab name {name:?}: lower-case letters, digits and '-', not starting with '-'"
        ));
    }
    Ok(())
}

/// One node's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlan {
    /// `node1`, `node2`, …: the Kubernetes Node name and the name in every verb.
    pub name: String,
    pub netns: String,
    /// Its address on the fabric: the Node's InternalIP, the tunnel endpoint, the BGP next hop.
    pub ip: Ipv4Addr,
    /// Its IPv6 address on the fabric: its IPv6 session's end and its IPv6 routes' next hop.
    pub ip6: Ipv6Addr,
    /// Whether its speaker runs with `--extended-nexthop` (RFC 8950) when the lab starts the
    /// speakers itself (`--install processes`): the last node's. Its IPv4 routes then go over
    /// both of its sessions; the ToR prefers the IPv4 session's copy (ECMP stays among IPv4 next
    /// hops, and whatever reads "via 172.30.0.x" still does) and keeps the IPv6 session's, with
    /// its IPv6 next hop, as the backup (`birdc show route all`, `show bgp ipv4 unicast`).
    /// `deploy/` has no per-node flags, so with `--install manifests` no speaker has it.
    pub extended_nexthop: bool,
    /// The ToR's end of the node's link.
    pub tor_port: String,
    /// The ToR's end of the node's [`PROVIDER_NIC`]: a trunk port of [`TOR_VLAN_BRIDGE`].
    pub trunk_port: String,
    /// The node's address on [`PROVIDER_NIC`] (the untagged management network).
    pub mgmt_ip: Ipv4Addr,
    /// The ToR's end of the node's [`EXTERNAL_NIC`]: an access port of [`TOR_VLAN_BRIDGE`],
    /// `tag` [`EXTERNAL_VLAN`].
    pub ext_port: String,
    /// The node's address on the external network ([`EXTERNAL_NIC`]).
    pub ext_ip: Ipv4Addr,
}

/// Everything of one lab that follows from its name, its node count and its ToR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub name: String,
    pub dir: PathBuf,
    pub tor_kind: TorKind,
    pub nodes: Vec<NodePlan>,
}

/// kube-proxy's identity (`kube-proxy.crt` in the PKI): one of the control plane's clients
/// ([`Topology::control_plane`]) and what [`super::kube_proxy`]'s kubeconfig names.
pub fn kube_proxy_identity() -> crate::kubernetes::pki::ClientIdentity {
    crate::kubernetes::pki::ClientIdentity::new("kube-proxy", "system:kube-proxy", None)
}

impl Topology {
    /// The plan for lab `name` with `nodes` nodes under `run_dir` (`/var/lib/kube-ovn-lab`).
    pub fn new(
        name: &str,
        nodes: usize,
        tor_kind: TorKind,
        run_dir: &std::path::Path,
    ) -> Result<Self, String> {
        validate_name(name)?;
        if run_dir.starts_with("/run") || run_dir.starts_with("/var/run") {
            return Err(format!(
                "labs directory {}: not under /run (the ToR's daemons run with a /run of their own, where the lab's files would not be)",
                run_dir.display()
            ));
        }
        if nodes == 0 || nodes > MAX_NODES {
            return Err(format!("--nodes {nodes}: between 1 and {MAX_NODES}"));
        }
        let count = nodes;
        let nodes = (1..=nodes)
            .map(|i| {
                let host = u8::try_from(10 + i).unwrap_or(u8::MAX);
                NodePlan {
                    name: format!("node{i}"),
                    netns: format!("kl_{name}_node{i}"),
                    ip: Ipv4Addr::new(172, 30, 0, host),
                    ip6: v6_like(0x172, 0x30, 0, host),
                    extended_nexthop: i == count,
                    tor_port: format!("n{i}"),
                    trunk_port: format!("n{i}-trunk"),
                    mgmt_ip: Ipv4Addr::new(172, 31, 0, host),
                    ext_port: format!("n{i}-ext"),
                    ext_ip: Ipv4Addr::new(10, 200, 0, host),
                }
            })
            .collect();
        Ok(Self {
            name: name.to_owned(),
            dir: run_dir.join(name),
            tor_kind,
            nodes,
        })
    }

    /// The prefix of every network namespace of this lab (pods' included).
    pub fn netns_prefix(&self) -> String {
        format!("kl_{}_", self.name)
    }

    /// Pods' namespaces are `<this><hash>`.
    pub fn pod_netns_prefix(&self) -> String {
        format!("kl_{}_p", self.name)
    }

    pub fn cp_netns(&self) -> String {
        format!("kl_{}_cp", self.name)
    }

    pub fn tor_netns(&self) -> String {
        format!("kl_{}_tor", self.name)
    }

    pub fn outside_netns(&self) -> String {
        format!("kl_{}_outside", self.name)
    }

    pub fn tor_ip() -> Ipv4Addr {
        Ipv4Addr::new(172, 30, 0, 1)
    }

    /// The ToR's IPv6 address on the fabric (every node's IPv6 peer and default gateway).
    pub fn tor_ip6() -> Ipv6Addr {
        v6_like(0x172, 0x30, 0, 1)
    }

    pub fn cp_ip6() -> Ipv6Addr {
        v6_like(0x172, 0x30, 0, 2)
    }

    pub fn tor_outside_ip6() -> Ipv6Addr {
        v6_like(0x198, 0x51, 0x100, 1)
    }

    pub fn outside_ip6() -> Ipv6Addr {
        v6_like(0x198, 0x51, 0x100, 10)
    }

    pub fn cp_ip() -> Ipv4Addr {
        Ipv4Addr::new(172, 30, 0, 2)
    }

    /// The ToR's address toward the outside host.
    pub fn tor_outside_ip() -> Ipv4Addr {
        Ipv4Addr::new(198, 51, 100, 1)
    }

    pub fn outside_ip() -> Ipv4Addr {
        Ipv4Addr::new(198, 51, 100, 10)
    }

    /// The ToR's address on the nodes' untagged management network ([`TOR_MGMT_PORT`]).
    pub fn tor_mgmt_ip() -> Ipv4Addr {
        Ipv4Addr::new(172, 31, 0, 1)
    }

    /// VLAN [`VLAN_ID`]'s gateway, the ToR's [`TOR_VLAN_PORT`]: the underlay subnet's `gateway`.
    pub fn underlay_gateway() -> Ipv4Addr {
        Ipv4Addr::new(10, 100, 0, 1)
    }

    /// The external network's gateway, the ToR's [`TOR_EXTERNAL_PORT`]: the `external` subnet's
    /// `gateway` (Kube-OVN's `external-gw-addr`).
    pub fn external_gateway() -> Ipv4Addr {
        Ipv4Addr::new(10, 200, 0, 1)
    }

    pub fn api_addr() -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Self::cp_ip(), API_PORT))
    }

    pub fn nb_remote() -> String {
        format!("tcp:{}:{NB_PORT}", Self::cp_ip())
    }

    pub fn sb_remote() -> String {
        format!("tcp:{}:{SB_PORT}", Self::cp_ip())
    }

    pub fn node(&self, name: &str) -> Option<&NodePlan> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Every namespace `up` creates itself (pods' namespaces are the kubelet stand-in's).
    pub fn netns_names(&self) -> Vec<String> {
        let mut names = vec![self.cp_netns(), self.tor_netns(), self.outside_netns()];
        names.extend(self.nodes.iter().map(|n| n.netns.clone()));
        names
    }

    // Paths inside the state directory.

    pub fn state_file(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    pub fn cp_dir(&self) -> PathBuf {
        self.dir.join("cp")
    }

    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.dir.join("nodes").join(node)
    }

    pub fn tor_dir(&self) -> PathBuf {
        self.dir.join("tor")
    }

    /// The ToR's ovsdb-server and ovs-vswitchd (the VLAN fabric): database, sockets, PID files.
    pub fn tor_ovs_dir(&self) -> PathBuf {
        self.tor_dir().join("ovs")
    }

    /// What the ToR's processes see as `/run` (so `birdc` and `vtysh` find their sockets at the
    /// default paths, inside `tor -- …`, without touching the host's `/run/bird` or `/run/frr`).
    pub fn tor_run_dir(&self) -> PathBuf {
        self.tor_dir().join("run")
    }

    pub fn sandbox_dir(&self) -> PathBuf {
        self.dir.join("sandboxes")
    }

    /// The lab's Kubernetes control plane: its files in the control plane's directory, the API
    /// on [`Self::api_addr`], the audit log among the logs. The agent has a client certificate
    /// of its own in `system:masters` (its kubelets write every node's objects, which Node
    /// authorization would allow each `system:node:<name>` only for its own node).
    pub fn control_plane(&self) -> crate::kubernetes::lab::ControlPlane {
        crate::kubernetes::lab::ControlPlane {
            dir: self.cp_dir(),
            api: Self::api_addr(),
            etcd_client_port: ETCD_CLIENT_PORT,
            etcd_peer_port: ETCD_PEER_PORT,
            service_cidrs: SERVICE_CIDR.split(',').map(str::to_owned).collect(),
            audit_log: self.log("kube-apiserver-audit"),
            // The agent, a kubelet per node and kube-proxy (`up --install manifests` runs them).
            extra_clients: std::iter::once(crate::kubernetes::pki::ClientIdentity::new(
                "agent",
                AGENT_USER,
                Some("system:masters"),
            ))
            .chain(
                self.nodes
                    .iter()
                    .map(|n| crate::kubernetes::kubelet::identity(&n.name)),
            )
            .chain([kube_proxy_identity()])
            .collect(),
        }
    }

    /// The administrator's kubeconfig (`kube-ovn-lab kubectl` uses it).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// A component's kubeconfig (its own ServiceAccount token).
    pub fn kubeconfig(&self, component: &str) -> PathBuf {
        self.dir.join("kubeconfig").join(component)
    }

    pub fn log(&self, component: &str) -> PathBuf {
        self.logs_dir().join(format!("{component}.log"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_lab_name() {
        let t = Topology::new("demo", 3, TorKind::Bird, std::path::Path::new("/var/lib/x")).unwrap();
        assert_eq!(t.cp_netns(), "kl_demo_cp");
        assert_eq!(t.nodes[2].netns, "kl_demo_node3");
        assert_eq!(t.nodes[2].ip, Ipv4Addr::new(172, 30, 0, 13));
        assert_eq!(t.nodes[2].mgmt_ip, Ipv4Addr::new(172, 31, 0, 13));
        assert_eq!(t.nodes[2].trunk_port, "n3-trunk");
        // Interface names fit Linux's 15 characters for the largest lab.
        let big = Topology::new(
            "big",
            MAX_NODES,
            TorKind::Bird,
            std::path::Path::new("/var/lib/x"),
        )
        .unwrap();
        assert!(
            big.nodes
                .iter()
                .all(|n| n.trunk_port.len() <= 15 && n.ext_port.len() <= 15)
        );
        let gw: ipnet::Ipv4Net = UNDERLAY_CIDR.parse().unwrap();
        assert!(gw.contains(&Topology::underlay_gateway()));
        assert_eq!(gw.prefix_len(), UNDERLAY_PREFIX);
        assert_eq!(t.dir, PathBuf::from("/var/lib/x/demo"));
        assert!(t.netns_names().iter().all(|n| n.starts_with(&t.netns_prefix())));
        assert!(t.pod_netns_prefix().starts_with(&t.netns_prefix()));
        // No node's namespace can be mistaken for a pod's, nor one lab's for another's.
        let other = Topology::new("demo-p", 1, TorKind::Bird, std::path::Path::new("/var/lib/x")).unwrap();
        assert!(
            other
                .netns_names()
                .iter()
                .all(|n| !n.starts_with(&t.netns_prefix()))
        );
        assert!(
            t.netns_names()
                .iter()
                .all(|n| !n.starts_with(&t.pod_netns_prefix()))
        );
    }

    #[test]
    fn every_node_has_an_address_and_an_access_port_on_the_external_network() {
        let t = Topology::new("demo", 3, TorKind::Bird, std::path::Path::new("/var/lib/x")).unwrap();
        assert_eq!(t.nodes[0].ext_port, "n1-ext");
        assert_eq!(t.nodes[2].ext_ip, Ipv4Addr::new(10, 200, 0, 13));
        let ext: ipnet::Ipv4Net = EXTERNAL_CIDR.parse().unwrap();
        assert_eq!(ext.prefix_len(), EXTERNAL_PREFIX);
        assert!(ext.contains(&Topology::external_gateway()));
        // Every node of the largest lab has its own address inside the subnet, none the gateway's,
        // and the external network shares no address space with the other wires.
        let big = Topology::new(
            "big",
            MAX_NODES,
            TorKind::Bird,
            std::path::Path::new("/var/lib/x"),
        )
        .unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for n in &big.nodes {
            assert!(ext.contains(&n.ext_ip) && n.ext_ip != Topology::external_gateway());
            assert!(seen.insert(n.ext_ip), "{} twice", n.ext_ip);
            assert_ne!(n.ext_port, n.trunk_port);
        }
        let underlay: ipnet::Ipv4Net = UNDERLAY_CIDR.parse().unwrap();
        let mgmt = ipnet::Ipv4Net::new(Topology::tor_mgmt_ip(), MGMT_PREFIX)
            .unwrap()
            .trunc();
        let fabric = ipnet::Ipv4Net::new(Topology::tor_ip(), FABRIC_PREFIX)
            .unwrap()
            .trunc();
        for other in [underlay, mgmt, fabric] {
            assert!(
                !ext.contains(&other.network()) && !other.contains(&ext.network()),
                "{other}"
            );
        }
        assert_ne!(EXTERNAL_VLAN, VLAN_ID);
        assert_ne!(EXTERNAL_NIC, PROVIDER_NIC);
    }

    #[test]
    fn the_fabric_and_the_outside_network_are_dual_stack() {
        let t = Topology::new("demo", 3, TorKind::Bird, std::path::Path::new("/var/lib/x")).unwrap();
        assert_eq!(t.nodes[0].ip6, "fd00:172:30::11".parse::<Ipv6Addr>().unwrap());
        assert_eq!(t.nodes[2].ip6, "fd00:172:30::13".parse::<Ipv6Addr>().unwrap());
        assert_eq!(Topology::tor_ip6().to_string(), "fd00:172:30::1");
        assert_eq!(Topology::cp_ip6().to_string(), "fd00:172:30::2");
        assert_eq!(Topology::tor_outside_ip6().to_string(), "fd00:198:51:100::1");
        assert_eq!(Topology::outside_ip6().to_string(), "fd00:198:51:100::10");
        // Only the last node's speaker sends IPv4 routes over IPv6.
        let ext: Vec<bool> = t.nodes.iter().map(|n| n.extended_nexthop).collect();
        assert_eq!(ext, [false, false, true]);
        let fabric = ipnet::Ipv6Net::new(Topology::tor_ip6(), FABRIC6_PREFIX)
            .unwrap()
            .trunc();
        let outside = ipnet::Ipv6Net::new(Topology::outside_ip6(), OUTSIDE6_PREFIX)
            .unwrap()
            .trunc();
        assert!(outside.contains(&Topology::tor_outside_ip6()) && !fabric.contains(&Topology::outside_ip6()));
        let big = Topology::new(
            "big",
            MAX_NODES,
            TorKind::Bird,
            std::path::Path::new("/var/lib/x"),
        )
        .unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for n in &big.nodes {
            assert!(fabric.contains(&n.ip6) && n.ip6 != Topology::tor_ip6() && n.ip6 != Topology::cp_ip6());
            assert!(seen.insert(n.ip6), "{} twice", n.ip6);
        }
    }

    #[test]
    fn bad_names_and_counts_are_refused() {
        let run = std::path::Path::new("/var/lib/x");
        for bad in ["", "Lab", "a b", "-x", "a/b", "abcdefghijklmnopqrstu"] {
            assert!(Topology::new(bad, 2, TorKind::Bird, run).is_err(), "{bad:?}");
        }
        assert!(Topology::new("ok", 0, TorKind::Bird, run).is_err());
        assert!(Topology::new("ok", MAX_NODES + 1, TorKind::Bird, run).is_err());
        assert!(Topology::new("ok-2", MAX_NODES, TorKind::Frr, run).is_ok());
        assert!(Topology::new("ok", 1, TorKind::Bird, std::path::Path::new("/run/labs")).is_err());
    }
}
