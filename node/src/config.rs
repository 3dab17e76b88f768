//! `kube-ovn-daemon` flags: Kube-OVN's names and defaults where it has the flag (reference §4.8),
//! each also an environment variable, validated at start into a [`Config`] with messages that
//! name the flag.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ipnet::IpNet;

use kube_ovn_cni::version::CniVersion;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kube-ovn-daemon",
    version,
    // Go's pflag, which Kube-OVN's binaries use: a flag given twice takes the last value.
    args_override_self = true,
    about = "kube-ovn-rs node daemon: CNI server, br-int, ovn0, pod NICs on OVS"
)]
pub struct Flags {
    /// This node's name (the Node object and the OVN chassis hostname).
    /// Empty: `NODE_NAME` (as Kube-OVN's DaemonSet sets it), else the host name.
    #[arg(long, env = "KUBE_NODE_NAME", default_value = "")]
    pub node_name: String,
    /// Kubeconfig file; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Unix socket the CNI shim posts to.
    #[arg(long, env = "BIND_SOCKET", default_value = kube_ovn_api::wire::DAEMON_SOCKET)]
    pub bind_socket: PathBuf,
    /// The local Open_vSwitch database (`unix:PATH` or `tcp:HOST:PORT`).
    #[arg(long, env = "OVS_DB", default_value = "unix:/run/openvswitch/db.sock")]
    pub ovs_db: String,
    /// Kube-OVN's name for the same database, a socket path (its start-cniserver.sh passes
    /// `--ovs-socket=/run/openvswitch/db.sock`): when given, `--ovs-db` is `unix:` and it.
    #[arg(long, env = "OVS_SOCKET")]
    pub ovs_socket: Option<PathBuf>,
    /// klog's flags (`--logtostderr=false --log_file=…`, `-v`), which Kube-OVN's manifests pass.
    #[command(flatten)]
    pub klog: kube_ovn_support::klog::KlogFlags,
    /// OVN southbound remotes for ovn-controller (`external_ids:ovn-remote`); left as found
    /// when empty (Kube-OVN's start-ovs.sh sets it).
    #[arg(long, env = "OVN_SB_ADDR", default_value = "")]
    pub ovn_sb_addr: String,
    /// The ovn-central members' addresses, comma-separated (Kube-OVN's `OVN_DB_IPS`, from
    /// kube-ovn-config's `ovn-central-ips`): `ovn-remote` becomes `tcp:IP:6642` for each where
    /// `--ovn-sb-addr` is not given. Given but empty is an error (ovn-controller would wait for
    /// a southbound database forever).
    #[arg(long, env = "OVN_DB_IPS")]
    pub ovn_db_ips: Option<String>,
    /// Tunnel endpoint address (`external_ids:ovn-encap-ip`); else the first address of `--iface`.
    #[arg(long, env = "ENCAP_IP", default_value = "")]
    pub encap_ip: String,
    /// Interface whose address is the tunnel endpoint when `--encap-ip` is empty.
    #[arg(long, env = "IFACE", default_value = "")]
    pub iface: String,
    /// Tunnel type (`external_ids:ovn-encap-type`): geneve, vxlan or stt; `vlan` (Kube-OVN's
    /// underlay default network) keeps geneve tunnels for the overlay subnets and geneve's MTU
    /// rule, as Kube-OVN's daemon does.
    #[arg(long, env = "NETWORK_TYPE", default_value = "geneve")]
    pub network_type: String,
    /// The default provider network's NIC (Kube-OVN's flag, which its daemon accepts and leaves
    /// to the ProviderNetwork the controller creates): accepted and not used here.
    #[arg(long, env = "DEFAULT_INTERFACE_NAME", default_value = "")]
    pub default_interface_name: String,
    /// The daemon's own pod (Kube-OVN's daemon reads `POD_NAME`): it carries the provider
    /// networks' `err_mesg` annotations. Empty: not annotated.
    #[arg(long, env = "POD_NAME", default_value = "")]
    pub pod_name: String,
    /// The daemon's own pod's namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub pod_namespace: String,
    /// `other_config:mac-learning-fallback` on provider bridges (Kube-OVN's flag).
    #[arg(long, env = "MAC_LEARNING_FALLBACK", default_value_t = false, action = clap::ArgAction::Set)]
    pub mac_learning_fallback: bool,
    /// Checksums in tunnel packets (`external_ids:ovn-encap-csum`).
    #[arg(long, env = "ENCAP_CHECKSUM", default_value_t = true, action = clap::ArgAction::Set)]
    pub encap_checksum: bool,
    /// `br-int`'s datapath: `system` (kernel module) or `netdev` (userspace, where TX checksum
    /// offload must be off in every pod).
    #[arg(long, env = "OVS_DATAPATH_TYPE", default_value = "system")]
    pub ovs_datapath_type: String,
    /// Pod MTU when the subnet sets none (Kube-OVN derives it from the tunnel NIC minus the
    /// encapsulation; 0 keeps that rule: 1400 here, 1500 minus 100 for geneve).
    #[arg(long, env = "MTU", default_value_t = 0)]
    pub mtu: u32,
    /// OVS integration bridge.
    #[arg(long, env = "OVS_BRIDGE", default_value = "br-int")]
    pub ovs_bridge: String,
    /// The default VPC's router (subnets routed through `ovn0`).
    #[arg(long, env = "CLUSTER_ROUTER", default_value = "ovn-cluster")]
    pub cluster_router: String,
    /// The join subnet.
    #[arg(long, env = "NODE_SWITCH", default_value = "join")]
    pub node_switch: String,
    /// Namespace path where ovs-vswitchd runs (host ends of veths, `ovn0`, node routes); this
    /// process's own namespace when empty, as with Kube-OVN's hostNetwork DaemonSet.
    #[arg(long, env = "OVS_NETNS", default_value = "")]
    pub ovs_netns: String,
    /// File holding the chassis name (written by OVS packaging); the node name when absent.
    #[arg(
        long,
        env = "SYSTEM_ID_FILE",
        default_value = "/etc/openvswitch/system-id.conf"
    )]
    pub system_id_file: PathBuf,
    /// How long ADD waits for the controller's annotations.
    #[arg(long, env = "WAIT_ADDRESS_TIMEOUT", default_value = "20s", value_parser = parse_timeout)]
    pub wait_address_timeout: Duration,
    /// How long ADD waits for ovn-controller to bind the port (`ovn-installed`).
    #[arg(long, env = "WAIT_OVN_INSTALLED_TIMEOUT", default_value = "30s", value_parser = parse_timeout)]
    pub wait_ovn_installed_timeout: Duration,
    /// How many times ADD probes a pod's gateway (ARP for IPv4, ping for IPv6, one a second)
    /// before it fails, unless the subnet has `disableGatewayCheck` (ours: Kube-OVN's
    /// constant `gatewayCheckMaxRetry`, 200).
    #[arg(long, env = "GATEWAY_CHECK_MAX_RETRY", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub gateway_check_max_retry: u32,
    /// Plug a pod's port into `br-int` as soon as ADD names the pod (its logical port name is
    /// `<pod>.<namespace>`), while the controller's annotations are still awaited, so
    /// ovs-vswitchd opens it meanwhile and ovn-controller binds it as soon as the logical port
    /// exists; the address, MAC and QoS follow with the annotations. Our addition (Kube-OVN
    /// plugs after the annotations); `false` restores that order.
    #[arg(long, env = "EARLY_PLUG", default_value_t = true, action = clap::ArgAction::Set)]
    pub early_plug: bool,
    /// Mirror every packet on `br-int` onto `--mirror-iface` (Kube-OVN's flag); when off, only
    /// pods annotated `ovn.kubernetes.io/mirror: "true"` are mirrored.
    #[arg(long, env = "ENABLE_MIRROR", default_value_t = false, action = clap::ArgAction::Set)]
    pub enable_mirror: bool,
    /// The internal port on `br-int` mirrored packets go out of, made while anything is
    /// mirrored (Kube-OVN's flag).
    #[arg(long, env = "MIRROR_IFACE", default_value = "mirror0")]
    pub mirror_iface: String,
    /// Install the CNI binary and conflist at start.
    #[arg(long, env = "INSTALL_CNI_CONFIG", default_value_t = false, action = clap::ArgAction::Set)]
    pub install_cni_config: bool,
    /// Where the conflist goes.
    #[arg(long, env = "CNI_CONF_DIR", default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// Its file name.
    #[arg(long, env = "CNI_CONF_NAME", default_value = "01-kube-ovn.conflist")]
    pub cni_conf_name: String,
    /// The `cniVersion` the installed conflist declares. 1.0.0 by default: containerd 1.6 and
    /// 1.7 (libcni 1.1) refuse a 1.1.0 result; 1.1.0 for runtimes on libcni 1.2 or later, which
    /// then also send STATUS and GC. Ours (Kube-OVN's conflist says 0.3.1); the shim answers
    /// 0.3.0 to 1.1.0 whatever this says.
    #[arg(long, env = "CNI_CONF_VERSION", default_value = "1.0.0")]
    pub cni_conf_version: String,
    /// Where the `kube-ovn` binary goes.
    #[arg(long, env = "CNI_BIN_DIR", default_value = "/opt/cni/bin")]
    pub cni_bin_dir: PathBuf,
    /// The `kube-ovn` binary to install; next to this daemon's binary when empty.
    #[arg(long, env = "CNI_BIN", default_value = "")]
    pub cni_bin: String,
    /// Services' ClusterIP ranges, `v4`, `v6` or `v4,v6` (Kube-OVN's flag; kube-apiserver's
    /// `--service-cluster-ip-range`): the `ovn40services`/`ovn60services` sets of the egress NAT.
    #[arg(long, env = "SERVICE_CLUSTER_IP_RANGE", default_value = "10.96.0.0/12")]
    pub service_cluster_ip_range: String,
    /// How often the egress NAT table and policy routing are compared with the kernel and
    /// restored if someone changed them (ours; Kube-OVN's gateway loop runs every 3 s). Changes
    /// of subnets, nodes and pods are applied at once, whatever this says.
    #[arg(long, env = "GATEWAY_CHECK_INTERVAL", default_value = "3s", value_parser = parse_timeout)]
    pub gateway_check_interval: Duration,
    /// How often the join subnet's gateway is pinged through `ovn0` for the Node's
    /// `NetworkUnavailable` condition (ours; Kube-OVN's `loopOvn0Check` runs every 5 s).
    #[arg(long, env = "OVN0_CHECK_INTERVAL", default_value = "5s", value_parser = parse_timeout)]
    pub ovn0_check_interval: Duration,
    /// Metrics and health port (Kube-OVN `--pprof-port`).
    #[arg(long, env = "PPROF_PORT", default_value_t = 10665)]
    pub pprof_port: u16,
    /// Address the metrics listener binds.
    #[arg(long, env = "METRICS_ADDRESS", default_value = "0.0.0.0")]
    pub metrics_address: IpAddr,
    /// CIDRs (comma-separated) inside which a Service's `spec.externalIPs` are routed into
    /// `ovn0` and masqueraded; empty (the default): none are, as Kubernetes'
    /// `DenyServiceExternalIPs` intends. The same flag as the controller's and the speaker's.
    #[arg(long, env = "SERVICE_EXTERNAL_IP_CIDRS", default_value = "")]
    pub service_external_ip_cidrs: kube_ovn_api::external_ips::ExternalIpCidrs,
    /// The speaker's IPv4 peers given by flag (its `--neighbor-address`, comma-separated): never
    /// routed into `ovn0` for a Service. BgpPeer objects are read from the API.
    #[arg(long, env = "NEIGHBOR_ADDRESS", value_delimiter = ',')]
    pub neighbor_address: Vec<String>,
    /// The speaker's IPv6 peers given by flag (its `--neighbor-ipv6-address`).
    #[arg(long, env = "NEIGHBOR_IPV6_ADDRESS", value_delimiter = ',')]
    pub neighbor_ipv6_address: Vec<String>,
}

/// A timeout: a duration (`20s`, `500ms`) that is not zero.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    match kube_ovn_support::parse_duration(text).map_err(|e| e.to_string())? {
        d if d.is_zero() => Err(format!("{text:?} must be positive")),
        d => Ok(d),
    }
}

/// Which datapath `br-int` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datapath {
    /// The kernel module.
    System,
    /// The userspace datapath.
    Netdev,
}

impl Datapath {
    /// The `Bridge.datapath_type` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::Netdev => "netdev",
        }
    }
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The flags as given.
    pub flags: Flags,
    /// Parsed `--ovs-datapath-type`.
    pub datapath: Datapath,
    /// `external_ids:ovn-encap-type`: `--network-type`, geneve for `vlan`.
    pub encap_type: String,
    /// Parsed `--encap-ip`.
    pub encap_ip: Option<IpAddr>,
    /// Pod MTU when the subnet has none.
    pub default_mtu: u32,
    /// Parsed `--cni-conf-version`.
    pub cni_conf_version: CniVersion,
    /// Parsed `--service-cluster-ip-range`.
    pub service_cidrs: Vec<IpNet>,
    /// Parsed `--neighbor-address` and `--neighbor-ipv6-address`.
    pub bgp_neighbors: Vec<IpAddr>,
    /// `external_ids:ovn-remote` for ovn-controller: `--ovn-sb-addr`, else from `--ovn-db-ips`;
    /// empty: left as found.
    pub ovn_remote: String,
}

pub use kube_ovn_support::FlagError;
use kube_ovn_support::flag_error as bad;

/// Geneve's header with the outer IP and UDP (Kube-OVN subtracts 100 for geneve, 50 for vxlan).
const GENEVE_OVERHEAD: u32 = 100;
const VXLAN_OVERHEAD: u32 = 50;

impl Flags {
    /// Checks every flag.
    pub fn validate(mut self) -> Result<Config, FlagError> {
        if let Some(socket) = &self.ovs_socket {
            self.ovs_db = format!("unix:{}", socket.display());
        }
        if self.node_name.is_empty() {
            return Err(bad("node-name", "must not be empty"));
        }
        let datapath = match self.ovs_datapath_type.as_str() {
            "system" | "" => Datapath::System,
            "netdev" => Datapath::Netdev,
            other => {
                return Err(bad(
                    "ovs-datapath-type",
                    format!("{other:?} is neither system nor netdev"),
                ));
            }
        };
        let overhead = match self.network_type.as_str() {
            // Kube-OVN (pkg/daemon/config.go): vlan takes geneve's header off the MTU.
            "geneve" | "vlan" => GENEVE_OVERHEAD,
            "vxlan" => VXLAN_OVERHEAD,
            "stt" => 72,
            other => {
                return Err(bad(
                    "network-type",
                    format!("{other:?} is not geneve, vxlan, stt or vlan"),
                ));
            }
        };
        let encap_ip = match self.encap_ip.as_str() {
            "" => None,
            text => Some(
                text.parse()
                    .map_err(|_| bad("encap-ip", format!("{text:?} is not an IP address")))?,
            ),
        };
        let db_ips = self.ovn_db_ips.as_deref().map(parse_db_ips).transpose()?;
        let ovn_remote = match db_ips {
            Some(ips) if self.ovn_sb_addr.is_empty() => sb_remotes(&ips),
            _ => self.ovn_sb_addr.clone(),
        };
        if encap_ip.is_none() && self.iface.is_empty() && !ovn_remote.is_empty() {
            return Err(bad(
                "encap-ip",
                "needed (or --iface) when --ovn-sb-addr or --ovn-db-ips is set",
            ));
        }
        if self.mtu != 0 && !(68..=65535).contains(&self.mtu) {
            return Err(bad("mtu", format!("{} is outside 68..65535", self.mtu)));
        }
        let default_mtu = if self.mtu == 0 { 1500 - overhead } else { self.mtu };
        if self.ovs_bridge.is_empty() {
            return Err(bad("ovs-bridge", "must not be empty"));
        }
        crate::veth_name::check_ifname(&self.mirror_iface)
            .map_err(|e| bad("mirror-iface", format!("{:?} {}", e.name, e.problem)))?;
        if self.bind_socket.as_os_str().is_empty() {
            return Err(bad("bind-socket", "must not be empty"));
        }
        let cni_conf_version = self
            .cni_conf_version
            .parse()
            .map_err(|e: kube_ovn_cni::version::UnsupportedVersion| bad("cni-conf-version", e.to_string()))?;
        let service_cidrs = parse_service_cidrs(&self.service_cluster_ip_range)?;
        let mut bgp_neighbors = Vec::new();
        for (flag, list, v6) in [
            ("neighbor-address", &self.neighbor_address, false),
            ("neighbor-ipv6-address", &self.neighbor_ipv6_address, true),
        ] {
            for text in list.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
                match text.parse::<IpAddr>() {
                    Ok(ip) if ip.is_ipv6() == v6 => bgp_neighbors.push(ip),
                    _ => {
                        let family = if v6 { "IPv6" } else { "IPv4" };
                        return Err(bad(flag, format!("{text:?} is not an {family} address")));
                    }
                }
            }
        }
        let encap_type = match self.network_type.as_str() {
            "vlan" => "geneve".to_owned(),
            other => other.to_owned(),
        };
        Ok(Config {
            flags: self,
            datapath,
            encap_type,
            encap_ip,
            default_mtu,
            cni_conf_version,
            service_cidrs,
            bgp_neighbors,
            ovn_remote,
        })
    }
}

/// The southbound database's client port (Kube-OVN's, deploy/image/start-ovn-central.sh).
const SB_PORT: u16 = 6642;

/// `--ovn-db-ips`: one address per ovn-central member.
fn parse_db_ips(text: &str) -> Result<Vec<IpAddr>, FlagError> {
    let flag = "ovn-db-ips";
    if text.trim().is_empty() {
        return Err(bad(
            flag,
            "is empty: list the ovn-central members' addresses (kube-ovn-config's ovn-central-ips)",
        ));
    }
    text.split(',')
        .map(|ip| {
            ip.trim()
                .parse()
                .map_err(|_| bad(flag, format!("{ip:?} in {text:?} is not an IP address")))
        })
        .collect()
}

/// `tcp:IP:6642,...`, an IPv6 address in brackets (OVSDB's remote syntax).
fn sb_remotes(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(|ip| match ip {
            IpAddr::V4(v4) => format!("tcp:{v4}:{SB_PORT}"),
            IpAddr::V6(v6) => format!("tcp:[{v6}]:{SB_PORT}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `v4`, `v6` or a comma pair of one each, as kube-apiserver takes it.
fn parse_service_cidrs(text: &str) -> Result<Vec<IpNet>, FlagError> {
    let flag = "service-cluster-ip-range";
    let cidrs = text
        .split(',')
        .map(|c| {
            c.trim()
                .parse::<IpNet>()
                .map(|n| n.trunc())
                .map_err(|_| bad(flag, format!("{c:?} is not a CIDR")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if cidrs.len() > 2 || (cidrs.len() == 2 && cidrs[0].addr().is_ipv4() == cidrs[1].addr().is_ipv4()) {
        return Err(bad(flag, format!("{text:?}: one CIDR, or one IPv4 and one IPv6")));
    }
    Ok(cidrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        let mut all = vec!["kube-ovn-daemon", "--node-name", "n1"];
        all.extend_from_slice(args);
        Flags::try_parse_from(all).unwrap()
    }

    /// Kube-OVN's install.sh runs the daemon with `--network-type=vlan
    /// --default-interface-name=<nic>` for an underlay default network: accepted, geneve
    /// tunnels and geneve's MTU rule as Kube-OVN's daemon.
    #[test]
    fn vlan_network_type_is_accepted() {
        let config = flags(&["--network-type", "vlan", "--default-interface-name", "eth1"])
            .validate()
            .unwrap();
        assert_eq!(config.encap_type, "geneve");
        assert_eq!(config.default_mtu, 1400);
        assert_eq!(flags(&[]).validate().unwrap().encap_type, "geneve");
        assert_eq!(
            flags(&["--network-type", "vxlan"]).validate().unwrap().encap_type,
            "vxlan"
        );
    }

    #[test]
    fn defaults_follow_kube_ovn() {
        let config = flags(&[]).validate().unwrap();
        assert_eq!(
            config.flags.bind_socket,
            PathBuf::from("/run/openvswitch/kube-ovn-daemon.sock")
        );
        assert_eq!(config.default_mtu, 1400);
        assert_eq!(config.datapath, Datapath::System);
        assert_eq!(config.flags.wait_address_timeout, Duration::from_secs(20));
        assert_eq!(config.flags.pprof_port, 10665);
        assert!(config.flags.early_plug);
        assert_eq!(config.cni_conf_version, CniVersion::V1_0_0);
        let v11 = flags(&["--cni-conf-version", "1.1.0"]).validate().unwrap();
        assert_eq!(v11.cni_conf_version, CniVersion::V1_1_0);
        assert!(!flags(&["--early-plug=false"]).early_plug);
        assert_eq!(
            config.service_cidrs,
            vec!["10.96.0.0/12".parse::<IpNet>().unwrap()]
        );
        assert_eq!(config.flags.gateway_check_interval, Duration::from_secs(3));
        assert_eq!(config.flags.ovn0_check_interval, Duration::from_secs(5));
        let dual = flags(&["--service-cluster-ip-range", "10.96.0.0/12,fd00:10:96::/108"])
            .validate()
            .unwrap();
        assert_eq!(dual.service_cidrs.len(), 2);
        // No external IP is honoured unless the operator lists where they may be.
        assert!(config.flags.service_external_ip_cidrs.is_empty());
        let allowed = flags(&["--service-external-ip-cidrs", "198.51.100.0/24, 2001:db8::/64"]);
        assert!(
            allowed
                .service_external_ip_cidrs
                .allows("198.51.100.7".parse().unwrap())
        );
        let peers = flags(&[
            "--neighbor-address",
            "172.30.0.254, 172.30.1.254",
            "--neighbor-ipv6-address=",
        ])
        .validate()
        .unwrap();
        assert_eq!(peers.bgp_neighbors.len(), 2);
        let wrong = flags(&["--neighbor-address", "fd00::1"]).validate().unwrap_err();
        assert!(wrong.to_string().contains("--neighbor-address"), "{wrong}");
        let bad = Flags::try_parse_from([
            "kube-ovn-daemon",
            "--node-name",
            "n1",
            "--service-external-ip-cidrs",
            "nope",
        ]);
        assert!(bad.unwrap_err().to_string().contains("service-external-ip-cidrs"));
    }

    #[test]
    fn bad_values_name_the_flag() {
        for (args, flag) in [
            (vec!["--ovs-datapath-type", "dpdk"], "--ovs-datapath-type"),
            (vec!["--network-type", "gre"], "--network-type"),
            (vec!["--encap-ip", "1.2.3"], "--encap-ip"),
            (vec!["--mtu", "40"], "--mtu"),
            (vec!["--ovn-sb-addr", "tcp:1.1.1.1:6642"], "--encap-ip"),
            (vec!["--cni-conf-version", "0.2.0"], "--cni-conf-version"),
            (
                vec!["--service-cluster-ip-range", "10.96.0.0/33"],
                "--service-cluster-ip-range",
            ),
            (
                vec!["--service-cluster-ip-range", "10.96.0.0/12,10.97.0.0/16"],
                "--service-cluster-ip-range",
            ),
        ] {
            let err = flags(&args).validate().unwrap_err().to_string();
            assert!(err.starts_with(flag), "{args:?}: {err}");
        }
        assert!(
            Flags::try_parse_from([
                "kube-ovn-daemon",
                "--node-name",
                "n",
                "--wait-address-timeout",
                "soon"
            ])
            .is_err()
        );
    }

    #[test]
    fn ovn_remote_from_the_ovn_central_members() {
        let c = flags(&["--ovn-db-ips", "172.30.0.11, fd00::12", "--encap-ip=172.30.0.12"])
            .validate()
            .unwrap();
        assert_eq!(c.ovn_remote, "tcp:172.30.0.11:6642,tcp:[fd00::12]:6642");
        // An explicit --ovn-sb-addr wins.
        let c = flags(&[
            "--ovn-db-ips=172.30.0.11",
            "--ovn-sb-addr=tcp:10.0.0.1:6642",
            "--encap-ip=172.30.0.12",
        ])
        .validate()
        .unwrap();
        assert_eq!(c.ovn_remote, "tcp:10.0.0.1:6642");
        // Neither: left as found.
        assert_eq!(flags(&[]).validate().unwrap().ovn_remote, "");
        // The remote needs a tunnel endpoint, as with --ovn-sb-addr.
        let err = flags(&["--ovn-db-ips=172.30.0.11"]).validate().unwrap_err();
        assert!(err.to_string().starts_with("--encap-ip"), "{err}");
        for (value, why) in [
            ("", "is empty"),
            ("  ", "is empty"),
            ("172.30.0.11,", "\"\" in"),
            ("ovn-central", "\"ovn-central\" in"),
            ("[fd00::1]", "is not an IP address"),
        ] {
            let err = flags(&[&format!("--ovn-db-ips={value}"), "--encap-ip=172.30.0.12"])
                .validate()
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("--ovn-db-ips: ") && err.contains(why),
                "{value:?}: {err}"
            );
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_timeout("0s").is_err());
        assert!(parse_timeout("2").is_err(), "Go durations need a unit");
        assert_eq!(parse_timeout("1m"), Ok(Duration::from_mins(1)));
        // Too large for Go's Duration: an error naming the flag, not a panic.
        let err = Flags::try_parse_from([
            "kube-ovn-daemon",
            "--node-name=n1",
            "--wait-address-timeout=1e400s",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--wait-address-timeout"), "{err}");
        let err = Flags::try_parse_from([
            "kube-ovn-daemon",
            "--node-name=n1",
            "--wait-ovn-installed-timeout=99999999999999999h",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("--wait-ovn-installed-timeout") && err.contains("too large"),
            "{err}"
        );
    }
}
