//! `kube-ovn-speaker` flags with Kube-OVN's names and defaults (reference §5.1), each also an
//! environment variable, validated at start into a [`Config`]; a bad value or combination
//! stops the speaker with a message naming the flag.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kube_ovn_api::external_ips::ExternalIpCidrs;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kube-ovn-speaker",
    version,
    // Go's pflag, which Kube-OVN's binaries use: a flag given twice takes the last value.
    args_override_self = true,
    about = "kube-ovn-rs BGP speaker: announce pods, subnets, Services and EIPs to the ToR"
)]
pub struct Flags {
    /// This node (for the `local` policy). Kube-OVN reads it from `NODE_NAME`.
    #[arg(long, env = "NODE_NAME", default_value = "")]
    pub node_name: String,
    /// Kubeconfig file; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG", global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Local AS number (required).
    #[arg(long, env = "CLUSTER_AS", default_value_t = 0)]
    pub cluster_as: u32,
    /// The peers' AS number (required when peers are given by flags).
    #[arg(long, env = "NEIGHBOR_AS", default_value_t = 0)]
    pub neighbor_as: u32,
    /// IPv4 peers, comma-separated.
    #[arg(long, env = "NEIGHBOR_ADDRESS", value_delimiter = ',')]
    pub neighbor_address: Vec<String>,
    /// IPv6 peers, comma-separated.
    #[arg(long, env = "NEIGHBOR_IPV6_ADDRESS", value_delimiter = ',')]
    pub neighbor_ipv6_address: Vec<String>,
    /// BGP identifier (IPv4); else the first IPv4 of `--pod-ips`.
    #[arg(long, env = "ROUTER_ID", default_value = "")]
    pub router_id: String,
    /// This pod's addresses, comma-separated (the downward API's `status.podIPs`, as Kube-OVN's
    /// manifests set `POD_IPS`): the default router ID, and a source address that calls for
    /// `--node-ips` as the next hop.
    #[arg(long, env = "POD_IPS", value_delimiter = ',')]
    pub pod_ips: Vec<String>,
    /// The single-address form (`status.podIP`), used when `--pod-ips` is empty.
    #[arg(long, env = "POD_IP", default_value = "")]
    pub pod_ip: String,
    /// Node addresses to use as next hop when the speaker runs without host networking.
    #[arg(long, env = "NODE_IPS", value_delimiter = ',')]
    pub node_ips: Vec<String>,
    /// Local addresses the sessions may use (and then use as next hop).
    #[arg(long, env = "ALLOWED_SOURCE_ADDRESSES", value_delimiter = ',')]
    pub allowed_source_addresses: Vec<String>,
    /// The same for IPv6.
    #[arg(long, env = "ALLOWED_SOURCE_IPV6_ADDRESSES", value_delimiter = ',')]
    pub allowed_source_ipv6_addresses: Vec<String>,
    /// TCP MD5 password (RFC 2385).
    #[arg(long, env = "AUTH_PASSWORD", default_value = "", hide_env_values = true)]
    pub auth_password: String,
    /// Hold time (3s..65535s).
    #[arg(long, env = "HOLDTIME", default_value = "90s", value_parser = kube_ovn_support::parse_duration)]
    pub holdtime: Duration,
    /// Graceful restart (RFC 4724) as the restarting speaker.
    #[arg(long, env = "GRACEFUL_RESTART", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub graceful_restart: bool,
    /// Restart time advertised (1s..4095s).
    #[arg(long, env = "GRACEFUL_RESTART_TIME", default_value = "90s", value_parser = kube_ovn_support::parse_duration)]
    pub graceful_restart_time: Duration,
    /// How long to hold UPDATEs after a restart waiting for the caches (1s..18h).
    #[arg(long, env = "GRACEFUL_RESTART_DEFERRAL_TIME", default_value = "360s", value_parser = kube_ovn_support::parse_duration)]
    pub graceful_restart_deferral_time: Duration,
    /// The node label (`key=value`) that makes a node a BGP node (the DaemonSet's nodeSelector in
    /// `deploy/`). At SIGTERM, a node that no longer has it is being taken out of BGP: every
    /// session gets Cease and the ToRs withdraw our routes at once, instead of keeping them for
    /// a restart that will not come. Empty: every stop is a restart (graceful restart's way).
    #[arg(long, env = "BGP_NODE_LABEL", default_value = "ovn.kubernetes.io/bgp=true")]
    pub bgp_node_label: String,
    /// Only accept sessions; never connect.
    #[arg(long, env = "PASSIVEMODE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub passivemode: bool,
    /// TTL of eBGP sessions; multihop when not 1.
    #[arg(long, env = "EBGP_MULTIHOP", default_value_t = 1)]
    pub ebgp_multihop: u8,
    /// GTSM (RFC 5082) with the flag peers: send with TTL 255 and drop what arrives from them
    /// below 256 - hops (`--ebgp-multihop` counts the hops; 1: 255, a directly connected
    /// peer). The peers must enable it too (BIRD `ttl security on`, FRR `ttl-security hops`).
    /// Not a Kube-OVN flag.
    #[arg(long, env = "TTL_SECURITY", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub ttl_security: bool,
    /// Announce IPv4 routes to IPv6 peers and back (RFC 8950).
    #[arg(long, env = "EXTENDED_NEXTHOP", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub extended_nexthop: bool,
    /// The VRF (or any device) every session's sockets are bound to (`SO_BINDTODEVICE`), unless
    /// a BgpPeer names its own `vrf`, and the `--passivemode` listener too; empty: none. A
    /// peer's inbound connections are taken only when the kernel bound them to its device: on
    /// this listener, or for a VRF with `net.ipv4.tcp_l3mdev_accept=1`. Not a Kube-OVN flag.
    #[arg(long, env = "VRF", default_value = "")]
    pub vrf: String,
    /// Announce Services' ClusterIPs.
    #[arg(long, env = "ANNOUNCE_CLUSTER_IP", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub announce_cluster_ip: bool,
    /// BFD (RFC 5880/5881) on every peer.
    #[arg(long, env = "ENABLE_BFD", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub enable_bfd: bool,
    /// BFD desired minimum TX interval, ms.
    #[arg(long, env = "BFD_MIN_TX", default_value_t = 1000)]
    pub bfd_min_tx: u32,
    /// BFD required minimum RX interval, ms.
    #[arg(long, env = "BFD_MIN_RX", default_value_t = 1000)]
    pub bfd_min_rx: u32,
    /// BFD detection multiplier.
    #[arg(long, env = "BFD_DETECTION_MULTIPLIER", default_value_t = 3)]
    pub bfd_detection_multiplier: u8,
    /// Address the BGP listener binds (for passive peers and collisions).
    #[arg(long, env = "LISTEN_ADDRESS", default_value = "0.0.0.0")]
    pub listen_address: IpAddr,
    /// BGP port (ours; 179 unless testing).
    #[arg(long, env = "BGP_PORT", default_value_t = 179)]
    pub bgp_port: u16,
    /// Metrics port (Kube-OVN `--pprof-port`).
    #[arg(long, env = "PPROF_PORT", default_value_t = 10667)]
    pub pprof_port: u16,
    /// Address the metrics listener binds.
    #[arg(long, env = "METRICS_ADDRESS", default_value = "0.0.0.0")]
    pub metrics_address: IpAddr,
    /// Where the speaker keeps the file that tells a restart from a first start (graceful
    /// restart's R bit); ours.
    #[arg(long, env = "STATE_DIR", default_value = "/var/run/kube-ovn-speaker")]
    pub state_dir: PathBuf,
    /// Network namespace for BGP, BFD and route lookups (ours; for nodes that are network
    /// namespaces, as in the tests and the lab); this process's own when empty.
    #[arg(long, env = "BGP_NETNS", default_value = "")]
    pub bgp_netns: String,
    /// The default VPC's name, as the controller's `--cluster-router` (ours here): its
    /// centralized-gateway subnets are announced only from their gateway nodes.
    #[arg(long, env = "CLUSTER_ROUTER", default_value = "ovn-cluster")]
    pub cluster_router: String,
    /// CIDRs inside which a BGP-annotated Service's `spec.externalIPs` are announced,
    /// comma-separated; empty (the default): none are. `externalIPs` is the Service author's to
    /// write, so announcing it as written lets a tenant take any address (CVE-2020-8554's
    /// kind); the same flag on the controller and the daemon.
    #[arg(long, env = "SERVICE_EXTERNAL_IP_CIDRS", default_value = "")]
    pub service_external_ip_cidrs: ExternalIpCidrs,
    /// Full recompute interval, the safety net behind the event-driven path.
    #[arg(long, env = "RESYNC_PERIOD", default_value = "300s", value_parser = kube_ovn_support::parse_duration)]
    pub resync_period: Duration,
    /// klog's flags (`--logtostderr=false --log_file=…`, `-v`), which Kube-OVN's manifests pass.
    #[command(flatten)]
    pub klog: kube_ovn_support::klog::KlogFlags,
    /// A command instead of the daemon.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What `kube-ovn-speaker <command>` does instead of running the speaker.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Print the routes a speaker sends one peer, with their attributes (its `/bgp/routes`,
    /// read through the API server's pod proxy, or directly with `--url`).
    Routes(RoutesArgs),
}

/// `kube-ovn-speaker routes`.
#[derive(Debug, Clone, clap::Args)]
pub struct RoutesArgs {
    /// The peer's address (as in `--neighbor-address` or a BgpPeer's `peerAddress`).
    #[arg(long, env = "ROUTES_PEER")]
    pub peer: IpAddr,
    /// The node whose speaker to ask; may be left out when one speaker runs. Inside a speaker
    /// pod, `NODE_NAME` names its own node.
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,
    /// `json` (the endpoint's own rows) or `wide` (more columns); a table when absent.
    #[arg(short = 'o', long, env = "ROUTES_OUTPUT", value_enum)]
    pub output: Option<RoutesOutput>,
    /// Read the speaker at this address (`http://host:port`, its `--pprof-port`) instead of
    /// through the API server.
    #[arg(long, env = "SPEAKER_URL")]
    pub url: Option<String>,
    /// The speakers' namespace.
    #[arg(long, env = "SPEAKER_NAMESPACE", default_value = "kube-system")]
    pub namespace: String,
    /// The speaker pods' label selector (the DaemonSet's, `deploy/base/speaker.yaml`).
    #[arg(long, env = "SPEAKER_SELECTOR", default_value = "app=kube-ovn-speaker")]
    pub selector: String,
    /// The speakers' metrics port (their `--pprof-port`).
    #[arg(long, env = "PPROF_PORT", default_value_t = 10667)]
    pub port: u16,
}

/// `-o` of `kube-ovn-speaker routes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RoutesOutput {
    Json,
    Wide,
}

pub use kube_ovn_support::FlagError;
use kube_ovn_support::flag_error as bad;

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The flags as given.
    pub flags: Flags,
    /// Peers from `--neighbor-address` and `--neighbor-ipv6-address`.
    pub neighbors: Vec<IpAddr>,
    /// The BGP identifier.
    pub router_id: Ipv4Addr,
    /// `--node-ips`.
    pub node_ips: Vec<IpAddr>,
    /// `--pod-ips`, else `--pod-ip`.
    pub pod_ips: Vec<IpAddr>,
    /// `--allowed-source-addresses` and the IPv6 list together.
    pub allowed_sources: Vec<IpAddr>,
}

fn ip_list(flag: &'static str, values: &[String], v6: Option<bool>) -> Result<Vec<IpAddr>, FlagError> {
    values
        .iter()
        .filter(|v| !v.trim().is_empty())
        .map(|v| {
            let ip: IpAddr = v
                .trim()
                .parse()
                .map_err(|_| bad(flag, format!("{v:?} is not an IP address")))?;
            match v6 {
                Some(true) if ip.is_ipv4() => Err(bad(flag, format!("{ip} is not IPv6"))),
                Some(false) if ip.is_ipv6() => Err(bad(flag, format!("{ip} is not IPv4"))),
                _ => Ok(ip),
            }
        })
        .collect()
}

impl Flags {
    /// Checks every flag and their combinations.
    pub fn validate(self) -> Result<Config, FlagError> {
        if self.cluster_as == 0 {
            return Err(bad("cluster-as", "required (the local AS number)"));
        }
        if !self.bgp_node_label.is_empty()
            && self
                .bgp_node_label
                .split_once('=')
                .is_none_or(|(k, _)| k.is_empty())
        {
            return Err(bad(
                "bgp-node-label",
                "a node label as key=value (e.g. ovn.kubernetes.io/bgp=true), or empty",
            ));
        }
        let mut neighbors = ip_list("neighbor-address", &self.neighbor_address, Some(false))?;
        neighbors.extend(ip_list(
            "neighbor-ipv6-address",
            &self.neighbor_ipv6_address,
            Some(true),
        )?);
        if !neighbors.is_empty() && self.neighbor_as == 0 {
            return Err(bad(
                "neighbor-as",
                "required with --neighbor-address/--neighbor-ipv6-address",
            ));
        }
        if self.node_name.is_empty() {
            return Err(bad(
                "node-name",
                "required (or NODE_NAME): the `local` policy needs it",
            ));
        }
        if self.cluster_router.is_empty() {
            return Err(bad(
                "cluster-router",
                "must name the default VPC (Kube-OVN's is ovn-cluster)",
            ));
        }
        let pod_ips = if self.pod_ips.iter().any(|v| !v.trim().is_empty()) {
            ip_list("pod-ips", &self.pod_ips, None)?
        } else {
            ip_list("pod-ip", std::slice::from_ref(&self.pod_ip), None)?
        };
        let router_id = if self.router_id.is_empty() {
            pod_ips
                .iter()
                .find_map(|ip| match ip {
                    IpAddr::V4(v4) => Some(*v4),
                    IpAddr::V6(_) => None,
                })
                .unwrap_or(Ipv4Addr::UNSPECIFIED)
        } else {
            self.router_id.parse().map_err(|_| {
                bad(
                    "router-id",
                    format!("{:?} is not an IPv4 address", self.router_id),
                )
            })?
        };
        if router_id.is_unspecified() {
            // RFC 6286 §2.1: the identifier must be non-zero.
            return Err(bad(
                "router-id",
                "required when --pod-ips (POD_IPS) has no IPv4 address (must not be 0.0.0.0)",
            ));
        }
        let secs = self.holdtime.as_secs_f64();
        if !(3.0..=65535.0).contains(&secs) {
            return Err(bad(
                "holdtime",
                format!("{:?} is outside 3s..65535s (RFC 4271 §4.2)", self.holdtime),
            ));
        }
        let restart = self.graceful_restart_time.as_secs_f64();
        if self.graceful_restart && !(1.0..=4095.0).contains(&restart) {
            return Err(bad(
                "graceful-restart-time",
                "must be 1s..4095s (12 bits, RFC 4724 §3)",
            ));
        }
        let deferral = self.graceful_restart_deferral_time.as_secs_f64();
        if self.graceful_restart && !(1.0..=18.0 * 3600.0).contains(&deferral) {
            return Err(bad("graceful-restart-deferral-time", "must be 1s..18h"));
        }
        if self.ebgp_multihop == 0 {
            return Err(bad("ebgp-multihop", "a TTL of 0 would never leave the host"));
        }
        if self.ttl_security && self.ebgp_multihop == u8::MAX {
            return Err(bad(
                "ebgp-multihop",
                "with --ttl-security it counts hops, and 255 would accept any TTL (RFC 5082 §3)",
            ));
        }
        if self.vrf.len() > 15 || self.vrf.contains(['/', ':', ' ']) {
            return Err(bad("vrf", format!("{:?} is not an interface name", self.vrf)));
        }
        if self.auth_password.len() > 80 {
            return Err(bad("auth-password", "at most 80 bytes (TCP_MD5SIG_MAXKEYLEN)"));
        }
        if self.enable_bfd {
            for (flag, v) in [("bfd-min-tx", self.bfd_min_tx), ("bfd-min-rx", self.bfd_min_rx)] {
                if v == 0 || v > 4_294_967 {
                    return Err(bad(flag, format!("{v} ms is outside 1..4294967")));
                }
            }
            if self.bfd_detection_multiplier == 0 {
                return Err(bad("bfd-detection-multiplier", "must be 1..255"));
            }
        }
        let node_ips = ip_list("node-ips", &self.node_ips, None)?;
        let mut allowed_sources = ip_list(
            "allowed-source-addresses",
            &self.allowed_source_addresses,
            Some(false),
        )?;
        allowed_sources.extend(ip_list(
            "allowed-source-ipv6-addresses",
            &self.allowed_source_ipv6_addresses,
            Some(true),
        )?);
        Ok(Config {
            flags: self,
            neighbors,
            router_id,
            node_ips,
            pod_ips,
            allowed_sources,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        let mut all = vec!["kube-ovn-speaker", "--node-name=n1", "--cluster-as=65000"];
        all.extend_from_slice(args);
        Flags::try_parse_from(all).unwrap()
    }

    #[test]
    fn kube_ovn_defaults() {
        let c = flags(&[
            "--neighbor-address=10.0.0.1",
            "--neighbor-as=65001",
            "--pod-ips=fd00::5,10.1.0.5",
        ])
        .validate()
        .unwrap();
        assert_eq!(c.router_id, Ipv4Addr::new(10, 1, 0, 5));
        assert_eq!(
            c.pod_ips,
            ["fd00::5".parse::<IpAddr>().unwrap(), "10.1.0.5".parse().unwrap()]
        );
        assert_eq!(c.flags.holdtime, Duration::from_secs(90));
        assert_eq!(c.flags.graceful_restart_deferral_time, Duration::from_mins(6));
        assert_eq!(c.flags.pprof_port, 10667);
        assert_eq!(c.flags.ebgp_multihop, 1);
        assert_eq!(c.flags.cluster_router, "ovn-cluster");
        assert!(
            c.flags.service_external_ip_cidrs.is_empty(),
            "no external IP is announced unless the operator lists CIDRs"
        );
        assert!(!c.flags.passivemode && !c.flags.graceful_restart);
        let c = flags(&[
            "--neighbor-address=10.0.0.1",
            "--neighbor-as=65001",
            "--graceful-restart",
            "--passivemode",
            "--pod-ip=10.1.0.6",
            "--service-external-ip-cidrs=203.0.113.0/24,2001:db8:5::/64",
        ])
        .validate()
        .unwrap();
        assert!(c.flags.graceful_restart && c.flags.passivemode);
        assert_eq!(
            c.router_id,
            Ipv4Addr::new(10, 1, 0, 6),
            "POD_IP when POD_IPS is empty"
        );
        assert!(
            c.flags
                .service_external_ip_cidrs
                .allows("2001:db8:5::7".parse().unwrap())
        );
        let err = Flags::try_parse_from(["kube-ovn-speaker", "--service-external-ip-cidrs=8.8.8.8"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--service-external-ip-cidrs") && err.contains("8.8.8.8"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_and_combinations_name_the_flag() {
        for (mut args, pod_ips, flag) in [
            (vec!["--neighbor-address=10.0.0.1"], "10.1.0.5", "--neighbor-as"),
            (
                vec!["--neighbor-address=fd00::1", "--neighbor-as=1"],
                "10.1.0.5",
                "--neighbor-address",
            ),
            (
                vec!["--neighbor-ipv6-address=10.0.0.1", "--neighbor-as=1"],
                "10.1.0.5",
                "--neighbor-ipv6-address",
            ),
            (vec!["--router-id=fd00::1"], "10.1.0.5", "--router-id"),
            (vec![], "fd00::5", "--router-id"),
            (vec!["--holdtime=2s"], "10.1.0.5", "--holdtime"),
            (
                vec!["--graceful-restart", "--graceful-restart-time=5000s"],
                "10.1.0.5",
                "--graceful-restart-time",
            ),
            (vec!["--ebgp-multihop=0"], "10.1.0.5", "--ebgp-multihop"),
            (
                vec!["--ttl-security", "--ebgp-multihop=255"],
                "10.1.0.5",
                "--ebgp-multihop",
            ),
            (vec!["--enable-bfd", "--bfd-min-tx=0"], "10.1.0.5", "--bfd-min-tx"),
            (vec!["--node-ips=nope"], "10.1.0.5", "--node-ips"),
            (vec![], "10.1.0.5,bad", "--pod-ips"),
            (vec!["--cluster-router="], "10.1.0.5", "--cluster-router"),
            (vec!["--vrf=a/b"], "10.1.0.5", "--vrf"),
            (vec!["--vrf=sixteen-bytes-xx"], "10.1.0.5", "--vrf"),
        ] {
            let pod_ips = format!("--pod-ips={pod_ips}");
            args.push(&pod_ips);
            let err = flags(&args).validate().unwrap_err().to_string();
            assert!(err.starts_with(flag), "{args:?}: {err}");
        }
        let no_as = Flags::try_parse_from(["kube-ovn-speaker", "--node-name=n1", "--pod-ips=10.1.0.5"])
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(no_as.to_string().starts_with("--cluster-as"));
    }

    #[test]
    fn the_routes_command_parses_without_the_daemon_s_flags() {
        let flags = Flags::try_parse_from([
            "kube-ovn-speaker",
            "routes",
            "--peer=2001:db8::1",
            "-o",
            "wide",
            "--kubeconfig=/etc/k",
        ])
        .unwrap();
        assert_eq!(flags.kubeconfig.as_deref(), Some(std::path::Path::new("/etc/k")));
        let Some(Command::Routes(args)) = flags.command else {
            panic!("no routes command: {flags:?}");
        };
        assert_eq!(args.peer, "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(args.output, Some(RoutesOutput::Wide));
        assert_eq!(
            (args.namespace.as_str(), args.selector.as_str(), args.port),
            ("kube-system", "app=kube-ovn-speaker", 10667)
        );
        let err = Flags::try_parse_from(["kube-ovn-speaker", "routes", "--peer=nope"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--peer"), "{err}");
    }

    #[test]
    fn durations_in_go_style() {
        assert_eq!(
            kube_ovn_support::parse_duration("90s"),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(kube_ovn_support::parse_duration("6m"), Ok(Duration::from_mins(6)));
        assert_eq!(
            kube_ovn_support::parse_duration("500ms"),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(
            kube_ovn_support::parse_duration("1m30s"),
            Ok(Duration::from_secs(90))
        );
        assert!(kube_ovn_support::parse_duration("fast").is_err());
        // Go refuses a bare number, so Kube-OVN does, and so do we.
        assert!(kube_ovn_support::parse_duration("30").is_err());
        // A value too large for Go is an error naming the flag, not a panic.
        let err = Flags::try_parse_from(["kube-ovn-speaker", "--holdtime=99999999999999999h"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--holdtime") && err.contains("too large"), "{err}");
    }
}
