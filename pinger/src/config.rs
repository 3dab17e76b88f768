//! `kube-ovn-pinger` flags with Kube-OVN's names and defaults (v1.16.2 `pkg/pinger/config.go`),
//! each also an environment variable, checked at start into a [`Config`]. A bad value stops the
//! pinger with a message naming the flag.
//!
//! Kube-OVN reads the pod's identity (`POD_NAME`, `POD_NAMESPACE`, `POD_IP`, `HOST_IP`,
//! `NODE_NAME`, set by the DaemonSet from the downward API) from the environment only; here they
//! are flags too, under those environment names.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use kube_ovn_support::klog::KlogFlags;
use kube_ovn_support::{FlagError, flag_error};

/// `--mode`: Kube-OVN's two modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Probe every `--interval` and serve the metrics.
    Server,
    /// One round, no metrics; exit with `--exit-code` when a probe failed.
    Job,
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kube-ovn-pinger",
    version,
    about = "kube-ovn-pinger: network-quality probes from every node with Kube-OVN's metric names"
)]
pub struct Flags {
    /// Metrics port (`/metrics`, `/healthz`, `/livez`, `/readyz`).
    // Not `KUBE_OVN_PINGER_PORT`: Kubernetes puts `<SERVICE>_PORT=tcp://<ip>:<port>` into every
    // pod of a namespace holding a Service of that name, and ours is `kube-ovn-pinger` (the
    // manifests lab's pingers crashed on it).
    #[arg(long, env = "KUBE_OVN_PINGER_LISTEN_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Also check TCP and UDP reachability of the peers on the two ports below, and answer on
    /// them (Kube-OVN's `kubectl ko` connectivity check runs pingers with this).
    #[arg(long, env = "KUBE_OVN_PINGER_ENABLE_VERBOSE_CONN_CHECK", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub enable_verbose_conn_check: bool,
    #[arg(long, env = "KUBE_OVN_PINGER_TCP_CONN_CHECK_PORT", default_value_t = 8100)]
    pub tcp_conn_check_port: u16,
    #[arg(long, env = "KUBE_OVN_PINGER_UDP_CONN_CHECK_PORT", default_value_t = 8101)]
    pub udp_conn_check_port: u16,
    /// Kubeconfig file; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Seconds between rounds.
    #[arg(long, env = "KUBE_OVN_PINGER_INTERVAL", default_value_t = 5)]
    pub interval: u64,
    #[arg(long, env = "KUBE_OVN_PINGER_MODE", value_enum, default_value_t = Mode::Server)]
    pub mode: Mode,
    /// Exit code of `--mode=job` when a probe failed; 0 (Kube-OVN's default) exits 0 anyway.
    #[arg(long, env = "KUBE_OVN_PINGER_EXIT_CODE", default_value_t = 0)]
    pub exit_code: u8,
    /// Name resolved through the pod's resolver each round; empty: none (a cluster without DNS).
    #[arg(
        long,
        env = "KUBE_OVN_PINGER_INTERNAL_DNS",
        default_value = "kubernetes.default"
    )]
    pub internal_dns: String,
    /// External name resolved each round; empty: none.
    #[arg(long, env = "KUBE_OVN_PINGER_EXTERNAL_DNS", default_value = "")]
    pub external_dns: String,
    /// External addresses pinged each round, comma-separated; empty: none.
    #[arg(long, env = "KUBE_OVN_PINGER_EXTERNAL_ADDRESS", default_value = "")]
    pub external_address: String,
    /// `proto-ip-port` targets, comma-separated (`tcp-169.254.1.1-8080,udp-10.0.0.1-53`).
    #[arg(long, env = "KUBE_OVN_PINGER_TARGET_IP_PORTS", default_value = "")]
    pub target_ip_ports: String,
    /// `kube-ovn` checks OVS, ovn-controller and port bindings too; any other value skips them.
    #[arg(long, env = "KUBE_OVN_PINGER_NETWORK_MODE", default_value = "kube-ovn")]
    pub network_mode: String,
    #[arg(long, env = "KUBE_OVN_PINGER_ENABLE_METRICS", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub enable_metrics: bool,

    /// Timeout in seconds of each request to OVS and ovn-controller.
    #[arg(
        long = "ovs.timeout",
        env = "KUBE_OVN_PINGER_OVS_TIMEOUT",
        default_value_t = 2
    )]
    pub ovs_timeout: u64,
    /// Accepted for Kube-OVN's OVS exporter (not implemented here).
    #[arg(
        long = "ovs.poll-interval",
        env = "KUBE_OVN_PINGER_OVS_POLL_INTERVAL",
        default_value_t = 15
    )]
    pub ovs_poll_interval: u64,
    /// Where ovsdb-server and ovs-vswitchd keep their pidfiles and control sockets.
    #[arg(
        long = "system.run.dir",
        env = "KUBE_OVN_PINGER_SYSTEM_RUN_DIR",
        default_value = "/var/run/openvswitch"
    )]
    pub system_run_dir: PathBuf,
    #[arg(
        long = "database.vswitch.name",
        env = "KUBE_OVN_PINGER_DATABASE_VSWITCH_NAME",
        default_value = "Open_vSwitch"
    )]
    pub database_vswitch_name: String,
    /// The Open_vSwitch database (the port-binding check reads its Interface table).
    #[arg(
        long = "database.vswitch.socket.remote",
        env = "KUBE_OVN_PINGER_DATABASE_VSWITCH_SOCKET_REMOTE",
        default_value = "unix:/var/run/openvswitch/db.sock"
    )]
    pub database_vswitch_socket_remote: String,
    #[arg(
        long = "database.vswitch.file.data.path",
        env = "KUBE_OVN_PINGER_DATABASE_VSWITCH_FILE_DATA_PATH",
        default_value = "/etc/openvswitch/conf.db"
    )]
    pub database_vswitch_file_data_path: PathBuf,
    #[arg(
        long = "database.vswitch.file.log.path",
        env = "KUBE_OVN_PINGER_DATABASE_VSWITCH_FILE_LOG_PATH",
        default_value = "/var/log/openvswitch/ovsdb-server.log"
    )]
    pub database_vswitch_file_log_path: PathBuf,
    /// ovsdb-server's pidfile: its control socket is `ovsdb-server.<pid>.ctl` beside it.
    #[arg(
        long = "database.vswitch.file.pid.path",
        env = "KUBE_OVN_PINGER_DATABASE_VSWITCH_FILE_PID_PATH",
        default_value = "/var/run/openvswitch/ovsdb-server.pid"
    )]
    pub database_vswitch_file_pid_path: PathBuf,
    #[arg(
        long = "database.vswitch.file.system.id.path",
        env = "KUBE_OVN_PINGER_DATABASE_VSWITCH_FILE_SYSTEM_ID_PATH",
        default_value = "/etc/openvswitch/system-id.conf"
    )]
    pub database_vswitch_file_system_id_path: PathBuf,
    #[arg(
        long = "service.vswitchd.file.log.path",
        env = "KUBE_OVN_PINGER_SERVICE_VSWITCHD_FILE_LOG_PATH",
        default_value = "/var/log/openvswitch/ovs-vswitchd.log"
    )]
    pub service_vswitchd_file_log_path: PathBuf,
    /// ovs-vswitchd's pidfile: its control socket is `ovs-vswitchd.<pid>.ctl` beside it.
    #[arg(
        long = "service.vswitchd.file.pid.path",
        env = "KUBE_OVN_PINGER_SERVICE_VSWITCHD_FILE_PID_PATH",
        default_value = "/var/run/openvswitch/ovs-vswitchd.pid"
    )]
    pub service_vswitchd_file_pid_path: PathBuf,
    #[arg(
        long = "service.ovncontroller.file.log.path",
        env = "KUBE_OVN_PINGER_SERVICE_OVNCONTROLLER_FILE_LOG_PATH",
        default_value = "/var/log/ovn/ovn-controller.log"
    )]
    pub service_ovncontroller_file_log_path: PathBuf,
    /// ovn-controller's pidfile: its control socket is `ovn-controller.<pid>.ctl` beside it.
    #[arg(
        long = "service.ovncontroller.file.pid.path",
        env = "KUBE_OVN_PINGER_SERVICE_OVNCONTROLLER_FILE_PID_PATH",
        default_value = "/var/run/ovn/ovn-controller.pid"
    )]
    pub service_ovncontroller_file_pid_path: PathBuf,
    /// Accepted (Kube-OVN's log file mode); the log file is the klog helper's.
    #[arg(long = "log-perm", env = "KUBE_OVN_PINGER_LOG_PERM", default_value = "640")]
    pub log_perm: String,

    /// The Southbound database, injected by Kubernetes for the `ovn-sb` Service as Kube-OVN reads
    /// it; with the port below it makes `tcp:HOST:PORT`.
    #[arg(long, env = "OVN_SB_SERVICE_HOST", default_value = "")]
    pub ovn_sb_service_host: String,
    #[arg(long, env = "OVN_SB_SERVICE_PORT", default_value = "6642")]
    pub ovn_sb_service_port: u16,
    /// The Southbound database as OVSDB remotes (`tcp:IP:6642,…` or `unix:PATH`), instead of the
    /// Service variables above (ours: Kube-OVN has no such flag; the lab's processes use it).
    #[arg(long, env = "OVN_SB_ADDRESS", default_value = "")]
    pub ovn_sb_address: String,

    /// This pod (downward API), to find its DaemonSet and so the other pingers.
    #[arg(long, env = "POD_NAME", default_value = "")]
    pub pod_name: String,
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub pod_namespace: String,
    /// This pod's address (a metric label).
    #[arg(long, env = "POD_IP", default_value = "")]
    pub pod_ip: String,
    /// This node's address (a metric label).
    #[arg(long, env = "HOST_IP", default_value = "")]
    pub host_ip: String,
    /// This node: the metrics' `nodeName` and the chassis whose port bindings are checked.
    #[arg(long, env = "NODE_NAME", default_value = "")]
    pub node_name: String,

    #[command(flatten)]
    pub klog: KlogFlags,
}

/// One `--target-ip-ports` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub proto: TargetProto,
    pub addr: SocketAddr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetProto {
    Tcp,
    Udp,
}

/// The checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub flags: Flags,
    pub interval: Duration,
    pub ovs_timeout: Duration,
    pub external_addresses: Vec<IpAddr>,
    pub targets: Vec<Target>,
    /// `None` when no Southbound address is known (the port-binding check then fails, naming why).
    pub sb_remote: Option<String>,
}

impl Config {
    pub fn from_flags(flags: Flags) -> Result<Self, FlagError> {
        if flags.interval == 0 {
            return Err(flag_error("interval", "must be at least 1 second"));
        }
        if flags.ovs_timeout == 0 {
            return Err(flag_error("ovs.timeout", "must be at least 1 second"));
        }
        let external_addresses =
            parse_addresses(&flags.external_address).map_err(|p| flag_error("external-address", p))?;
        let targets = parse_targets(&flags.target_ip_ports).map_err(|p| flag_error("target-ip-ports", p))?;
        let sb_remote = if flags.ovn_sb_address.trim().is_empty() {
            sb_remote(&flags.ovn_sb_service_host, flags.ovn_sb_service_port)
        } else {
            Some(flags.ovn_sb_address.trim().to_owned())
        };
        Ok(Self {
            interval: Duration::from_secs(flags.interval),
            ovs_timeout: Duration::from_secs(flags.ovs_timeout),
            external_addresses,
            targets,
            sb_remote,
            flags,
        })
    }

    pub fn kube_ovn_mode(&self) -> bool {
        self.flags.network_mode == "kube-ovn"
    }
}

/// `tcp:HOST:PORT` (brackets for IPv6), as Kube-OVN's `OvsdbServerAddress` builds it.
pub fn sb_remote(host: &str, port: u16) -> Option<String> {
    let host = host.trim();
    if host.is_empty() {
        return None;
    }
    Some(match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("tcp:[{v6}]:{port}"),
        _ => format!("tcp:{host}:{port}"),
    })
}

/// Comma-separated addresses; blanks between commas are skipped.
pub fn parse_addresses(list: &str) -> Result<Vec<IpAddr>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| format!("{s:?} is not an IP address")))
        .collect()
}

/// Kube-OVN's `proto-ip-port` list. Kube-OVN skips malformed entries with a log line; a typo in
/// a health check is better caught at start, so here it is an error naming the entry.
pub fn parse_targets(list: &str) -> Result<Vec<Target>, String> {
    let mut out = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let bad = |why: &str| format!("{entry:?}: {why} (expected proto-ip-port, e.g. tcp-10.0.0.1-80)");
        // The address may be IPv6 (colons, no dashes): split at the first and last dash.
        let (proto, rest) = entry.split_once('-').ok_or_else(|| bad("no protocol"))?;
        let (ip, port) = rest.rsplit_once('-').ok_or_else(|| bad("no port"))?;
        let proto = match proto {
            "tcp" => TargetProto::Tcp,
            "udp" => TargetProto::Udp,
            other => return Err(bad(&format!("protocol {other:?} is neither tcp nor udp"))),
        };
        let ip: IpAddr = ip
            .parse()
            .map_err(|_| bad(&format!("{ip:?} is not an IP address")))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad(&format!("{port:?} is not a port")))?;
        out.push(Target {
            proto,
            addr: SocketAddr::new(ip, port),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
