//! Command-line flags, with Kube-OVN's names and defaults (reference §3.1), each also an
//! environment variable; and their validation into a [`Config`] the rest of the controller
//! trusts. An invalid value stops the controller at start with a message naming the flag.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ipnet::IpNet;
use kube_ovn_api::annotations::IpRange;

pub mod external;
pub mod underlay;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kube-ovn-controller",
    version,
    // Go's pflag, which Kube-OVN's binaries use: a flag given twice takes the last value.
    args_override_self = true,
    about = "kube-ovn-rs controller: IPAM, VPCs, subnets, pods and nodes on OVN"
)]
pub struct Flags {
    /// Kubeconfig file; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// OVN northbound remotes: comma-separated `tcp:HOST:PORT` / `unix:PATH` (every RAFT member).
    /// Required unless `--ovn-db-ips` is given; wins over it.
    #[arg(long, env = "OVN_NB_ADDR", default_value = "")]
    pub ovn_nb_addr: String,
    /// OVN southbound remotes, comma-separated like `--ovn-nb-addr`: the controller reads which
    /// chassis holds each gateway port (`Port_Binding`, `Chassis`). Optional: without it (and
    /// without `--ovn-db-ips`), or while it is unreachable, everything else still runs.
    #[arg(long, env = "OVN_SB_ADDR", default_value = "")]
    pub ovn_sb_addr: String,
    /// The ovn-central members' addresses, comma-separated (Kube-OVN's `OVN_DB_IPS`, from
    /// kube-ovn-config's `ovn-central-ips`): the northbound remotes are `tcp:IP:6641` and the
    /// southbound `tcp:IP:6642` for each, where `--ovn-nb-addr` / `--ovn-sb-addr` are not given.
    /// The members' own addresses, not a ClusterIP: with host networking a ClusterIP needs
    /// kube-proxy or our own node routing, which needs OVN first. Given but empty is an error.
    #[arg(long, env = "OVN_DB_IPS")]
    pub ovn_db_ips: Option<String>,
    /// CIDR of the default subnet (`v4`, `v6` or `v4,v6`).
    #[arg(long, env = "DEFAULT_CIDR", default_value = "10.16.0.0/16")]
    pub default_cidr: String,
    /// Gateway of the default subnet; the first usable address when empty.
    #[arg(long, env = "DEFAULT_GATEWAY", default_value = "")]
    pub default_gateway: String,
    /// Addresses of the default subnet never handed out (`a`, `a..b`, comma-separated).
    #[arg(long, env = "DEFAULT_EXCLUDE_IPS", default_value = "")]
    pub default_exclude_ips: String,
    /// Whether daemons check the default subnet's gateway before reporting a pod ready.
    #[arg(long, env = "DEFAULT_GATEWAY_CHECK", default_value_t = true, action = clap::ArgAction::Set)]
    pub default_gateway_check: bool,
    /// Name of the default subnet.
    #[arg(long, env = "DEFAULT_LS", default_value = "ovn-default")]
    pub default_ls: String,
    /// Name of the default VPC's logical router.
    #[arg(long, env = "CLUSTER_ROUTER", default_value = "ovn-cluster")]
    pub cluster_router: String,
    /// Name of the node (join) subnet.
    #[arg(long, env = "NODE_SWITCH", default_value = "join")]
    pub node_switch: String,
    /// CIDR of the node (join) subnet.
    #[arg(long, env = "NODE_SWITCH_CIDR", default_value = "100.64.0.0/16")]
    pub node_switch_cidr: String,
    /// Gateway of the join subnet; the first usable address when empty.
    #[arg(long, env = "NODE_SWITCH_GATEWAY", default_value = "")]
    pub node_switch_gateway: String,
    /// Concurrent reconciles per kind.
    #[arg(long, env = "WORKER_NUM", default_value_t = 3)]
    pub worker_num: u16,
    /// Concurrent pod reconciles. Beyond Kube-OVN, whose `--worker-num` goroutines block on each
    /// call: ours wait on the network without holding a thread, so many pods can be in flight and
    /// their northbound writes share transactions.
    #[arg(long, env = "POD_WORKERS", default_value_t = 64)]
    pub pod_workers: u16,
    /// Seconds between garbage collections of ports and IP CRs whose pod is gone; 0 disables.
    #[arg(long, env = "GC_INTERVAL", default_value_t = 360)]
    pub gc_interval: u64,
    /// OVSDB connect timeout, seconds.
    #[arg(long, env = "OVSDB_CON_TIMEOUT", default_value_t = 3)]
    pub ovsdb_con_timeout: u64,
    /// OVSDB inactivity probe, seconds.
    #[arg(long, env = "OVSDB_INACTIVITY_TIMEOUT", default_value_t = 10)]
    pub ovsdb_inactivity_timeout: u64,
    /// Timeout of one OVN request, seconds.
    #[arg(long, env = "OVN_TIMEOUT", default_value_t = 60)]
    pub ovn_timeout: u64,
    /// Port of the metrics and health endpoints (Kube-OVN serves them on its pprof port).
    #[arg(long, env = "PPROF_PORT", default_value_t = 10660)]
    pub pprof_port: u16,
    /// Serve `/metrics` (health endpoints are always served).
    #[arg(long, env = "ENABLE_METRICS", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_metrics: bool,
    /// Address the metrics and health endpoints bind to.
    #[arg(long, env = "BIND_ADDRESS", default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// Elect a leader with a Lease, so two replicas never both write.
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease (the controller's own namespace).
    #[arg(long, env = "KUBE_NAMESPACE", default_value = "kube-system")]
    pub lease_namespace: String,
    /// This replica's identity in the Lease.
    #[arg(long, env = "POD_NAME", default_value = "")]
    pub pod_name: String,
    /// How long a follower waits after the leader's last renewal before taking over (a Go
    /// duration in whole seconds; Kube-OVN's flag and default).
    #[arg(long, env = "LEADER_ELECT_LEASE_DURATION", default_value = "30s")]
    pub leader_elect_lease_duration: String,
    /// How long the leader keeps leading without a successful renewal before it gives up.
    #[arg(long, env = "LEADER_ELECT_RENEW_DEADLINE", default_value = "20s")]
    pub leader_elect_renew_deadline: String,
    /// How often the leader renews, and followers look (whole seconds).
    #[arg(long, env = "LEADER_ELECT_RETRY_PERIOD", default_value = "6s")]
    pub leader_elect_retry_period: String,
    /// Attach the VPC's load balancers to every subnet whose `enableLb` is unset (Services on
    /// OVN load balancers; see `reconcile/service.rs`).
    #[arg(long, env = "ENABLE_LB", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_lb: bool,
    /// The default VPC's load balancers (`--cluster-*-loadbalancer`).
    #[command(flatten)]
    pub cluster_lbs: crate::ovn::lb::LbFlags,
    /// NetworkPolicies as OVN port groups, address sets and ACLs (acted on).
    #[arg(long, env = "ENABLE_NP", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_np: bool,
    /// CIDRs (comma-separated) inside which a Service's `spec.externalIPs` get VIPs; empty, the
    /// default, honours none (Kubernetes' `DenyServiceExternalIPs`). The daemon and the speaker
    /// take the same list.
    #[arg(long, env = "SERVICE_EXTERNAL_IP_CIDRS", default_value = "")]
    pub service_external_ip_cidrs: kube_ovn_api::external_ips::ExternalIpCidrs,
    /// `--network-type` and the default underlay's flags (`config/underlay.rs`).
    #[command(flatten)]
    pub underlay: underlay::UnderlayFlags,
    /// The external gateway's and BFD's flags (`config/external.rs`).
    #[command(flatten)]
    pub external: external::ExternalFlags,
    /// The Service CIDRs (`v4,v6`): where a U2O subnet without load balancing sends Service
    /// traffic to the nodes (`reconcile/subnet/u2o_features.rs`); empty: nowhere.
    #[arg(long, env = "SERVICE_CLUSTER_IP_RANGE", default_value = "10.96.0.0/12")]
    pub service_cluster_ip_range: String,
    /// klog's flags (`--logtostderr=false --log_file=…`, `-v`), which Kube-OVN's manifests pass.
    #[command(flatten)]
    pub klog: kube_ovn_support::klog::KlogFlags,
}

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub kubeconfig: Option<PathBuf>,
    pub nb_remotes: Vec<kube_ovn_ovsdb::Remote>,
    pub sb_remotes: Vec<kube_ovn_ovsdb::Remote>,
    pub default_subnet: DefaultSubnet,
    pub node_subnet: DefaultSubnet,
    pub default_gateway_check: bool,
    pub cluster_router: String,
    pub worker_num: u16,
    pub pod_workers: u16,
    pub gc_interval: Option<Duration>,
    pub ovsdb_connect_timeout: Duration,
    pub ovsdb_inactivity_probe: Duration,
    pub ovn_timeout: Duration,
    pub metrics_addr: std::net::SocketAddr,
    pub enable_metrics: bool,
    pub leader_elect: bool,
    pub lease_namespace: String,
    pub identity: String,
    pub leader_election: LeaderElection,
    /// `--enable-lb`: a subnet's `enableLb` when unset.
    pub enable_lb: bool,
    /// The default VPC's load balancers (`--cluster-*-loadbalancer`).
    pub cluster_lbs: crate::ovn::lb::LbNames,
    /// `--enable-np`: NetworkPolicies become OVN ACLs (off: the controller removes its policy rows).
    pub enable_np: bool,
    /// `--service-external-ip-cidrs`: where `spec.externalIPs` are honoured (empty: nowhere).
    pub service_external_ip_cidrs: kube_ovn_api::external_ips::ExternalIpCidrs,
    /// `--service-cluster-ip-range`, one CIDR per family.
    pub service_cidrs: Vec<IpNet>,
    /// `--network-type`.
    pub network_type: underlay::NetworkType,
    /// `--default-provider-name`: the provider of a Vlan whose `spec.provider` is empty.
    pub default_provider_name: String,
    /// What `--network-type=vlan` creates at start; `None` otherwise.
    pub default_underlay: Option<underlay::DefaultUnderlay>,
    /// `--external-gateway-*`, `--enable-eip-snat`, the BFD timers.
    pub external: external::ExternalSettings,
}

/// Leader-election timing (Kube-OVN's `--leader-elect-*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderElection {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// A subnet the controller creates at start (`ovn-default`, `join`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultSubnet {
    pub name: String,
    /// One CIDR per family, normalised to the network address; written as `cidrBlock`.
    pub cidrs: Vec<IpNet>,
    pub gateways: Vec<IpAddr>,
    pub exclude_ips: Vec<String>,
}

/// Items as Kube-OVN writes a dual-stack list: `v4,v6`.
pub fn comma_joined<T: ToString>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

impl DefaultSubnet {
    pub fn cidr_block(&self) -> String {
        comma_joined(&self.cidrs)
    }

    pub fn gateway(&self) -> String {
        comma_joined(&self.gateways)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("invalid --{flag} {value:?}: {reason}")]
pub struct FlagError {
    pub flag: &'static str,
    pub value: String,
    pub reason: String,
}

fn bad(flag: &'static str, value: &str, reason: impl Into<String>) -> FlagError {
    FlagError {
        flag,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

/// Parses a `cidrBlock`-style list: one CIDR per family, `v4,v6`.
fn cidrs(flag: &'static str, value: &str) -> Result<Vec<IpNet>, FlagError> {
    let mut out: Vec<IpNet> = Vec::new();
    for part in value.split(',') {
        let net: IpNet = part
            .trim()
            .parse()
            .map_err(|e| bad(flag, value, format!("{part:?} is not a CIDR: {e}")))?;
        if out
            .iter()
            .any(|n| n.network().is_ipv4() == net.network().is_ipv4())
        {
            return Err(bad(flag, value, "at most one CIDR per address family"));
        }
        out.push(net.trunc());
    }
    Ok(out)
}

fn gateways(flag: &'static str, value: &str, cidrs: &[IpNet]) -> Result<Vec<IpAddr>, FlagError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|g| {
            let ip: IpAddr = g
                .trim()
                .parse()
                .map_err(|_| bad(flag, value, format!("{g:?} is not an IP address")))?;
            if !cidrs.iter().any(|c| c.contains(&ip)) {
                return Err(bad(flag, value, format!("{ip} is in none of the subnet's CIDRs")));
            }
            Ok(ip)
        })
        .collect()
}

fn exclude_ips(flag: &'static str, value: &str) -> Result<Vec<String>, FlagError> {
    let parts: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    for p in &parts {
        kube_ovn_api::annotations::parse::<IpRange>(flag, p).map_err(|e| bad(flag, value, e.to_string()))?;
    }
    Ok(parts)
}

/// A Go `time.Duration` string (`30s`, `1m30s`, `1.5h`, `500ms`), as Kube-OVN's duration flags
/// take; the one parser every binary uses.
fn go_duration(flag: &'static str, value: &str) -> Result<Duration, FlagError> {
    kube_ovn_support::parse_duration(value).map_err(|e| bad(flag, value, e.problem.to_string()))
}

fn whole_seconds(flag: &'static str, value: &str, d: Duration) -> Result<Duration, FlagError> {
    if d.subsec_nanos() != 0 || d.is_zero() {
        return Err(bad(
            flag,
            value,
            "must be a positive whole number of seconds (a Lease counts seconds)",
        ));
    }
    Ok(d)
}

/// Kube-OVN's rules: every period positive, lease > renew deadline > 1.2 × retry period (client-go's
/// jitter factor); and ours: lease > renew deadline + retry period, because our watchdog notices a
/// missed deadline only at its next look, one retry period later. So a leader that cannot renew
/// stops before anyone may take over.
fn leader_election(f: &Flags) -> Result<LeaderElection, FlagError> {
    let lease_flag = "leader-elect-lease-duration";
    let renew_flag = "leader-elect-renew-deadline";
    let retry_flag = "leader-elect-retry-period";
    let lease = go_duration(lease_flag, &f.leader_elect_lease_duration)?;
    let lease = whole_seconds(lease_flag, &f.leader_elect_lease_duration, lease)?;
    let renew = go_duration(renew_flag, &f.leader_elect_renew_deadline)?;
    let retry = go_duration(retry_flag, &f.leader_elect_retry_period)?;
    let retry = whole_seconds(retry_flag, &f.leader_elect_retry_period, retry)?;
    if renew.is_zero() {
        return Err(bad(
            renew_flag,
            &f.leader_elect_renew_deadline,
            "must be greater than zero",
        ));
    }
    if lease <= renew {
        return Err(bad(
            lease_flag,
            &f.leader_elect_lease_duration,
            format!(
                "must be greater than --{renew_flag} {}",
                f.leader_elect_renew_deadline
            ),
        ));
    }
    if lease <= renew + retry {
        return Err(bad(
            lease_flag,
            &f.leader_elect_lease_duration,
            format!(
                "must be greater than --{renew_flag} {} plus --{retry_flag} {} (a leader that \
                 cannot renew notices one retry period after its deadline)",
                f.leader_elect_renew_deadline, f.leader_elect_retry_period
            ),
        ));
    }
    if renew.as_secs_f64() <= 1.2 * retry.as_secs_f64() {
        return Err(bad(
            renew_flag,
            &f.leader_elect_renew_deadline,
            format!(
                "must be greater than 1.2 × --{retry_flag} {}",
                f.leader_elect_retry_period
            ),
        ));
    }
    Ok(LeaderElection {
        lease_duration: lease,
        renew_deadline: renew,
        retry_period: retry,
    })
}

fn remotes(flag: &'static str, value: &str) -> Result<Vec<kube_ovn_ovsdb::Remote>, FlagError> {
    kube_ovn_ovsdb::Remote::parse_list(value).map_err(|e| bad(flag, value, e.to_string()))
}

/// The client ports of ovn-central's databases (Kube-OVN's, deploy/image/start-ovn-central.sh).
const NB_PORT: u16 = 6641;
const SB_PORT: u16 = 6642;

/// `--ovn-db-ips`: one address per ovn-central member, comma-separated. Empty (the ConfigMap key
/// left unset) is an error here rather than a controller that waits for a database forever.
fn db_ips(value: &str) -> Result<Vec<IpAddr>, FlagError> {
    let flag = "ovn-db-ips";
    if value.trim().is_empty() {
        return Err(bad(
            flag,
            value,
            "is empty: list the ovn-central members' addresses (kube-ovn-config's ovn-central-ips)",
        ));
    }
    value
        .split(',')
        .map(|ip| {
            ip.trim()
                .parse()
                .map_err(|_| bad(flag, value, format!("{ip:?} is not an IP address")))
        })
        .collect()
}

/// `tcp:IP:PORT` for each member; an IPv6 address is bracketed when printed (`tcp:[IP]:PORT`).
fn db_remotes(ips: &[IpAddr], port: u16) -> Vec<kube_ovn_ovsdb::Remote> {
    ips.iter()
        .map(|ip| kube_ovn_ovsdb::Remote::Tcp {
            host: ip.to_string(),
            port,
        })
        .collect()
}

fn name(flag: &'static str, value: &str) -> Result<String, FlagError> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(value.to_owned())
    } else {
        Err(bad(flag, value, "must be a lowercase DNS label"))
    }
}

impl Flags {
    pub fn validate(&self) -> Result<Config, FlagError> {
        let db_ips = self.ovn_db_ips.as_deref().map(db_ips).transpose()?;
        let nb_remotes = match (self.ovn_nb_addr.is_empty(), &db_ips) {
            (false, _) => remotes("ovn-nb-addr", &self.ovn_nb_addr)?,
            (true, Some(ips)) => db_remotes(ips, NB_PORT),
            (true, None) => {
                return Err(bad(
                    "ovn-nb-addr",
                    "",
                    "is required, or --ovn-db-ips (OVN_DB_IPS) with the ovn-central members' addresses",
                ));
            }
        };
        let sb_remotes = match (self.ovn_sb_addr.is_empty(), &db_ips) {
            (false, _) => remotes("ovn-sb-addr", &self.ovn_sb_addr)?,
            (true, Some(ips)) => db_remotes(ips, SB_PORT),
            (true, None) => Vec::new(),
        };
        let default_cidrs = cidrs("default-cidr", &self.default_cidr)?;
        let node_cidrs = cidrs("node-switch-cidr", &self.node_switch_cidr)?;
        for d in &default_cidrs {
            if node_cidrs
                .iter()
                .any(|n| n.contains(&d.network()) || d.contains(&n.network()))
            {
                return Err(bad(
                    "node-switch-cidr",
                    &self.node_switch_cidr,
                    format!("overlaps --default-cidr {d}"),
                ));
            }
        }
        if self.worker_num == 0 {
            return Err(bad("worker-num", "0", "must be at least 1"));
        }
        if self.pod_workers == 0 {
            return Err(bad("pod-workers", "0", "must be at least 1"));
        }
        for (flag, secs) in [
            ("ovsdb-con-timeout", self.ovsdb_con_timeout),
            ("ovsdb-inactivity-timeout", self.ovsdb_inactivity_timeout),
            ("ovn-timeout", self.ovn_timeout),
        ] {
            if secs == 0 {
                return Err(bad(flag, "0", "must be at least 1 second"));
            }
        }
        let default_ls = name("default-ls", &self.default_ls)?;
        let node_switch = name("node-switch", &self.node_switch)?;
        if default_ls == node_switch {
            return Err(bad(
                "node-switch",
                &self.node_switch,
                "must differ from --default-ls",
            ));
        }
        let identity = if self.pod_name.is_empty() {
            format!("kube-ovn-controller-{}", uuid::Uuid::new_v4().simple())
        } else {
            self.pod_name.clone()
        };
        let (network_type, default_provider_name, default_underlay) = self.underlay.validate()?;
        let service_cidrs = if self.service_cluster_ip_range.trim().is_empty() {
            Vec::new()
        } else {
            cidrs("service-cluster-ip-range", &self.service_cluster_ip_range)?
        };
        Ok(Config {
            kubeconfig: self.kubeconfig.clone(),
            nb_remotes,
            sb_remotes,
            default_subnet: DefaultSubnet {
                name: default_ls,
                gateways: gateways("default-gateway", &self.default_gateway, &default_cidrs)?,
                cidrs: default_cidrs,
                exclude_ips: exclude_ips("default-exclude-ips", &self.default_exclude_ips)?,
            },
            node_subnet: DefaultSubnet {
                name: node_switch,
                gateways: gateways("node-switch-gateway", &self.node_switch_gateway, &node_cidrs)?,
                cidrs: node_cidrs,
                exclude_ips: Vec::new(),
            },
            default_gateway_check: self.default_gateway_check,
            cluster_router: name("cluster-router", &self.cluster_router)?,
            worker_num: self.worker_num,
            pod_workers: self.pod_workers,
            gc_interval: (self.gc_interval > 0).then(|| Duration::from_secs(self.gc_interval)),
            ovsdb_connect_timeout: Duration::from_secs(self.ovsdb_con_timeout),
            ovsdb_inactivity_probe: Duration::from_secs(self.ovsdb_inactivity_timeout),
            ovn_timeout: Duration::from_secs(self.ovn_timeout),
            metrics_addr: std::net::SocketAddr::new(self.bind_address, self.pprof_port),
            enable_metrics: self.enable_metrics,
            leader_elect: self.leader_elect,
            lease_namespace: self.lease_namespace.clone(),
            identity,
            leader_election: leader_election(self)?,
            enable_lb: self.enable_lb,
            cluster_lbs: self.cluster_lbs.names(),
            enable_np: self.enable_np,
            service_external_ip_cidrs: self.service_external_ip_cidrs.clone(),
            service_cidrs,
            network_type,
            default_provider_name,
            default_underlay,
            external: self.external.validate()?,
        })
    }
}

#[cfg(test)]
mod tests;
