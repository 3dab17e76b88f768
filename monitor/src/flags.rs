//! kube-ovn-monitor's flags: Kube-OVN's (pkg/ovnmonitor/config.go, v1.16.2), with its dotted
//! names and defaults, each also an environment variable (dots and dashes become underscores).
//!
//! Kube-OVN reads some of them only to fill its OVSDB client's configuration (the Open_vSwitch
//! paths, the TCP/SSL/RAFT ports); they are accepted here so its manifests start us, and unused.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kube_ovn_support::klog::KlogFlags;
use kube_ovn_support::{FlagError, flag_error};

#[derive(Debug, Parser)]
#[command(
    name = "kube-ovn-monitor",
    version,
    about = "OVN NB/SB/northd status and RAFT metrics"
)]
#[allow(clippy::struct_field_names)]
pub struct Flags {
    /// Timeout in seconds of each request to OVN (an `ovn-appctl` call).
    #[arg(long = "ovs.timeout", env = "OVS_TIMEOUT", default_value_t = 2)]
    pub ovs_timeout: u64,
    /// Seconds between two collections from OVN.
    #[arg(long = "ovs.poll-interval", env = "OVS_POLL_INTERVAL", default_value_t = 30)]
    pub ovs_poll_interval: u64,
    /// Serve `/metrics` (the health endpoints are always served).
    #[arg(long = "enable-metrics", env = "ENABLE_METRICS", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_metrics: bool,
    /// Serve over TLS. Not implemented: only `false` is accepted.
    #[arg(long = "secure-serving", env = "SECURE_SERVING", default_value_t = false, action = clap::ArgAction::Set)]
    pub secure_serving: bool,
    /// Port of `/metrics`, `/livez`, `/readyz`, `/healthz`.
    #[arg(long = "metrics-port", env = "METRICS_PORT", default_value_t = 10661)]
    pub metrics_port: u16,

    /// OVS run directory (unused).
    #[arg(
        long = "system.run.dir",
        env = "SYSTEM_RUN_DIR",
        default_value = "/var/run/openvswitch"
    )]
    pub system_run_dir: PathBuf,
    #[command(flatten)]
    pub vswitch: VswitchFlags,

    /// Name of the northbound database.
    #[arg(
        long = "database.northbound.name",
        env = "DATABASE_NORTHBOUND_NAME",
        default_value = "OVN_Northbound"
    )]
    pub nb_name: String,
    /// OVSDB remote of the northbound database (for its logical switches and ports).
    #[arg(
        long = "database.northbound.socket.remote",
        env = "DATABASE_NORTHBOUND_SOCKET_REMOTE",
        default_value = "unix:/run/ovn/ovnnb_db.sock"
    )]
    pub nb_socket_remote: String,
    /// Control socket of the northbound ovsdb-server (`cluster/status`, storage status).
    #[arg(
        long = "database.northbound.socket.control",
        env = "DATABASE_NORTHBOUND_SOCKET_CONTROL",
        default_value = "unix:/run/ovn/ovnnb_db.ctl"
    )]
    pub nb_socket_control: String,
    /// The northbound database file (its size, whether it is clustered).
    #[arg(
        long = "database.northbound.file.data.path",
        env = "DATABASE_NORTHBOUND_FILE_DATA_PATH",
        default_value = "/etc/ovn/ovnnb_db.db"
    )]
    pub nb_file_data_path: PathBuf,
    /// The northbound ovsdb-server's log file (its size).
    #[arg(
        long = "database.northbound.file.log.path",
        env = "DATABASE_NORTHBOUND_FILE_LOG_PATH",
        default_value = "/var/log/ovn/ovsdb-server-nb.log"
    )]
    pub nb_file_log_path: PathBuf,
    /// Unused.
    #[arg(
        long = "database.northbound.file.pid.path",
        env = "DATABASE_NORTHBOUND_FILE_PID_PATH",
        default_value = "/run/ovn/ovnnb_db.pid"
    )]
    pub nb_file_pid_path: PathBuf,
    /// Unused.
    #[arg(
        long = "database.northbound.port.default",
        env = "DATABASE_NORTHBOUND_PORT_DEFAULT",
        default_value_t = 6641
    )]
    pub nb_port_default: u16,
    /// Unused.
    #[arg(
        long = "database.northbound.port.ssl",
        env = "DATABASE_NORTHBOUND_PORT_SSL",
        default_value_t = 6631
    )]
    pub nb_port_ssl: u16,
    /// Unused.
    #[arg(
        long = "database.northbound.port.raft",
        env = "DATABASE_NORTHBOUND_PORT_RAFT",
        default_value_t = 6643
    )]
    pub nb_port_raft: u16,

    /// Name of the southbound database.
    #[arg(
        long = "database.southbound.name",
        env = "DATABASE_SOUTHBOUND_NAME",
        default_value = "OVN_Southbound"
    )]
    pub sb_name: String,
    /// OVSDB remote of the southbound database (chassis, datapath and port bindings).
    #[arg(
        long = "database.southbound.socket.remote",
        env = "DATABASE_SOUTHBOUND_SOCKET_REMOTE",
        default_value = "unix:/run/ovn/ovnsb_db.sock"
    )]
    pub sb_socket_remote: String,
    /// Control socket of the southbound ovsdb-server.
    #[arg(
        long = "database.southbound.socket.control",
        env = "DATABASE_SOUTHBOUND_SOCKET_CONTROL",
        default_value = "unix:/run/ovn/ovnsb_db.ctl"
    )]
    pub sb_socket_control: String,
    /// The southbound database file.
    #[arg(
        long = "database.southbound.file.data.path",
        env = "DATABASE_SOUTHBOUND_FILE_DATA_PATH",
        default_value = "/etc/ovn/ovnsb_db.db"
    )]
    pub sb_file_data_path: PathBuf,
    /// The southbound ovsdb-server's log file.
    #[arg(
        long = "database.southbound.file.log.path",
        env = "DATABASE_SOUTHBOUND_FILE_LOG_PATH",
        default_value = "/var/log/ovn/ovsdb-server-sb.log"
    )]
    pub sb_file_log_path: PathBuf,
    /// Unused.
    #[arg(
        long = "database.southbound.file.pid.path",
        env = "DATABASE_SOUTHBOUND_FILE_PID_PATH",
        default_value = "/run/ovn/ovnsb_db.pid"
    )]
    pub sb_file_pid_path: PathBuf,
    /// Unused.
    #[arg(
        long = "database.southbound.port.default",
        env = "DATABASE_SOUTHBOUND_PORT_DEFAULT",
        default_value_t = 6642
    )]
    pub sb_port_default: u16,
    /// Unused.
    #[arg(
        long = "database.southbound.port.ssl",
        env = "DATABASE_SOUTHBOUND_PORT_SSL",
        default_value_t = 6632
    )]
    pub sb_port_ssl: u16,
    /// Unused.
    #[arg(
        long = "database.southbound.port.raft",
        env = "DATABASE_SOUTHBOUND_PORT_RAFT",
        default_value_t = 6644
    )]
    pub sb_port_raft: u16,

    /// Unused.
    #[arg(
        long = "service.vswitchd.file.log.path",
        env = "SERVICE_VSWITCHD_FILE_LOG_PATH",
        default_value = "/var/log/openvswitch/ovs-vswitchd.log"
    )]
    pub vswitchd_file_log_path: PathBuf,
    /// Unused.
    #[arg(
        long = "service.vswitchd.file.pid.path",
        env = "SERVICE_VSWITCHD_FILE_PID_PATH",
        default_value = "/var/run/openvswitch/ovs-vswitchd.pid"
    )]
    pub vswitchd_file_pid_path: PathBuf,
    /// ovn-northd's log file (its size).
    #[arg(
        long = "service.ovn.northd.file.log.path",
        env = "SERVICE_OVN_NORTHD_FILE_LOG_PATH",
        default_value = "/var/log/ovn/ovn-northd.log"
    )]
    pub northd_file_log_path: PathBuf,
    /// ovn-northd's pidfile: its control socket is `ovn-northd.<pid>.ctl` beside it, as
    /// `ovn-appctl -t ovn-northd` finds it.
    #[arg(
        long = "service.ovn.northd.file.pid.path",
        env = "SERVICE_OVN_NORTHD_FILE_PID_PATH",
        default_value = "/var/run/ovn/ovn-northd.pid"
    )]
    pub northd_file_pid_path: PathBuf,

    /// Permission of the log file (octal; klog's file).
    #[arg(long = "log-perm", env = "LOG_PERM", default_value = "640")]
    pub log_perm: String,
    /// Accepted for Kube-OVN's secure serving (unused: no TLS).
    #[arg(long = "tls-min-version", env = "TLS_MIN_VERSION", default_value = "")]
    pub tls_min_version: String,
    /// Accepted for Kube-OVN's secure serving (unused: no TLS).
    #[arg(long = "tls-max-version", env = "TLS_MAX_VERSION", default_value = "")]
    pub tls_max_version: String,
    /// Accepted for Kube-OVN's secure serving (unused: no TLS).
    #[arg(long = "tls-cipher-suites", env = "TLS_CIPHER_SUITES", value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,

    /// The `hostname` label of every metric (Kube-OVN reads `NODE_NAME`).
    #[arg(long = "node-name", env = "NODE_NAME", default_value = "")]
    pub node_name: String,
    /// Listen on the pod's addresses (`POD_IPS`) instead of every address, as Kube-OVN does
    /// when its manifests set `ENABLE_BIND_LOCAL_IP=true`.
    #[arg(long = "enable-bind-local-ip", env = "ENABLE_BIND_LOCAL_IP", default_value_t = false, action = clap::ArgAction::Set)]
    pub enable_bind_local_ip: bool,
    /// The pod's addresses, comma-separated (a hostNetwork pod: the node's).
    #[arg(long = "pod-ips", env = "POD_IPS", value_delimiter = ',')]
    pub pod_ips: Vec<IpAddr>,

    #[command(flatten)]
    pub klog: KlogFlags,
}

/// The Open_vSwitch flags Kube-OVN's monitor accepts; nothing it exports comes from them.
#[derive(Debug, clap::Args)]
pub struct VswitchFlags {
    #[arg(
        long = "database.vswitch.name",
        env = "DATABASE_VSWITCH_NAME",
        default_value = "Open_vSwitch"
    )]
    pub name: String,
    #[arg(
        long = "database.vswitch.socket.remote",
        env = "DATABASE_VSWITCH_SOCKET_REMOTE",
        default_value = "unix:/var/run/openvswitch/db.sock"
    )]
    pub socket_remote: String,
    #[arg(
        long = "database.vswitch.file.data.path",
        env = "DATABASE_VSWITCH_FILE_DATA_PATH",
        default_value = "/etc/openvswitch/conf.db"
    )]
    pub file_data_path: PathBuf,
    #[arg(
        long = "database.vswitch.file.log.path",
        env = "DATABASE_VSWITCH_FILE_LOG_PATH",
        default_value = "/var/log/openvswitch/ovsdb-server.log"
    )]
    pub file_log_path: PathBuf,
    #[arg(
        long = "database.vswitch.file.pid.path",
        env = "DATABASE_VSWITCH_FILE_PID_PATH",
        default_value = "/var/run/openvswitch/ovsdb-server.pid"
    )]
    pub file_pid_path: PathBuf,
    #[arg(
        long = "database.vswitch.file.system.id.path",
        env = "DATABASE_VSWITCH_FILE_SYSTEM_ID_PATH",
        default_value = "/etc/openvswitch/system-id.conf"
    )]
    pub file_system_id_path: PathBuf,
}

/// One OVN database as the monitor watches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Database {
    /// `OVN_Northbound` or `OVN_Southbound`: the `db_name` label.
    pub name: String,
    /// `ovsdb-server-northbound` / `-southbound`: the `component` label.
    pub component: &'static str,
    pub remote: String,
    /// The control socket's path (without `unix:`).
    pub control: PathBuf,
    pub data_file: PathBuf,
    pub log_file: PathBuf,
}

/// The checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub hostname: String,
    pub timeout: Duration,
    pub poll_interval: Duration,
    pub enable_metrics: bool,
    pub listen: Vec<std::net::SocketAddr>,
    pub nb: Database,
    pub sb: Database,
    pub northd_pid_file: PathBuf,
    pub northd_log_file: PathBuf,
}

impl Flags {
    /// Checks the flags that matter and resolves the listen addresses.
    pub fn config(&self) -> Result<Config, FlagError> {
        if self.secure_serving {
            return Err(flag_error(
                "secure-serving",
                "TLS serving is not implemented; set it to false (Kube-OVN's default)",
            ));
        }
        if self.ovs_poll_interval == 0 {
            return Err(flag_error("ovs.poll-interval", "must be at least 1 (seconds)"));
        }
        if self.ovs_timeout == 0 {
            return Err(flag_error("ovs.timeout", "must be at least 1 (seconds)"));
        }
        u32::from_str_radix(&self.log_perm, 8)
            .map_err(|_| flag_error("log-perm", format!("{:?} is not an octal mode", self.log_perm)))?;
        // Kube-OVN's GetDefaultListenAddr: the pod's addresses when binding locally, which it
        // refuses to do without them.
        let addrs: Vec<IpAddr> = if self.enable_bind_local_ip {
            if self.pod_ips.is_empty() {
                return Err(flag_error(
                    "pod-ips",
                    "POD_IPS is empty but ENABLE_BIND_LOCAL_IP=true needs the addresses to bind",
                ));
            }
            self.pod_ips.clone()
        } else {
            vec![IpAddr::from([0, 0, 0, 0])]
        };
        Ok(Config {
            hostname: self.node_name.clone(),
            timeout: Duration::from_secs(self.ovs_timeout),
            poll_interval: Duration::from_secs(self.ovs_poll_interval),
            enable_metrics: self.enable_metrics,
            listen: addrs
                .into_iter()
                .map(|ip| std::net::SocketAddr::new(ip, self.metrics_port))
                .collect(),
            nb: Database {
                name: self.nb_name.clone(),
                component: "ovsdb-server-northbound",
                remote: self.nb_socket_remote.clone(),
                control: control_path("database.northbound.socket.control", &self.nb_socket_control)?,
                data_file: self.nb_file_data_path.clone(),
                log_file: self.nb_file_log_path.clone(),
            },
            sb: Database {
                name: self.sb_name.clone(),
                component: "ovsdb-server-southbound",
                remote: self.sb_socket_remote.clone(),
                control: control_path("database.southbound.socket.control", &self.sb_socket_control)?,
                data_file: self.sb_file_data_path.clone(),
                log_file: self.sb_file_log_path.clone(),
            },
            northd_pid_file: self.northd_file_pid_path.clone(),
            northd_log_file: self.northd_file_log_path.clone(),
        })
    }
}

/// `unix:/run/ovn/ovnnb_db.ctl` (or a bare path) → the path `ovn-appctl -t` takes.
fn control_path(flag: &'static str, value: &str) -> Result<PathBuf, FlagError> {
    let path = value.strip_prefix("unix:").unwrap_or(value);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(flag_error(flag, format!("{value:?} is not unix:<absolute path>")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let mut argv = vec!["kube-ovn-monitor"];
        argv.extend_from_slice(args);
        let flags = Flags::try_parse_from(argv).map_err(|e| e.to_string())?;
        flags.config().map_err(|e| e.to_string())
    }

    #[test]
    fn kube_ovn_defaults() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.poll_interval, Duration::from_secs(30));
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert_eq!(c.listen, vec!["0.0.0.0:10661".parse().unwrap()]);
        assert_eq!(c.nb.control, PathBuf::from("/run/ovn/ovnnb_db.ctl"));
        assert_eq!(c.sb.remote, "unix:/run/ovn/ovnsb_db.sock");
        assert_eq!(c.nb.data_file, PathBuf::from("/etc/ovn/ovnnb_db.db"));
        assert_eq!(c.northd_pid_file, PathBuf::from("/var/run/ovn/ovn-northd.pid"));
        assert!(c.enable_metrics);
    }

    #[test]
    fn dotted_names_and_bind_local() {
        let c = parse(&[
            "--ovs.poll-interval=1",
            "--database.northbound.socket.control=/tmp/x.ctl",
            "--enable-bind-local-ip=true",
            "--pod-ips=127.0.0.1,::1",
            "--metrics-port=1234",
        ])
        .unwrap();
        assert_eq!(c.poll_interval, Duration::from_secs(1));
        assert_eq!(c.nb.control, PathBuf::from("/tmp/x.ctl"));
        assert_eq!(c.listen.len(), 2);
        assert_eq!(c.listen[1], "[::1]:1234".parse().unwrap());
    }

    #[test]
    fn bad_values_name_the_flag() {
        let e = parse(&["--secure-serving=true"]).unwrap_err();
        assert!(e.starts_with("--secure-serving:"), "{e}");
        let e = parse(&["--enable-bind-local-ip=true"]).unwrap_err();
        assert!(e.starts_with("--pod-ips:"), "{e}");
        let e = parse(&["--database.southbound.socket.control=tcp:1.2.3.4:1"]).unwrap_err();
        assert!(e.starts_with("--database.southbound.socket.control:"), "{e}");
        let e = parse(&["--log-perm=9"]).unwrap_err();
        assert!(e.starts_with("--log-perm:"), "{e}");
        assert!(
            parse(&["--ovs.poll-interval=0"])
                .unwrap_err()
                .contains("ovs.poll-interval")
        );
    }
}
