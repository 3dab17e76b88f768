//! The gauges, under Kube-OVN's names and labels (pkg/ovnmonitor/metric.go, v1.16.2; the help
//! texts are ours), and [`Metrics::apply`], which replaces them all with one [`Snapshot`]. Pure:
//! no I/O.
//!
//! Kube-OVN resets a family before it sets it again, so a switch that was deleted, or a member
//! that is no longer leader, disappears from the next scrape instead of lingering; so do we.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::cluster_status::ClusterStatus;
use crate::inventory::Inventory;

type Labels = Vec<(&'static str, String)>;
type GaugeFamily = Family<Labels, Gauge<f64, AtomicU64>>;

/// Everything one collection found. A part that could not be read is absent (and counted in
/// `failed_requests`), and its gauges are absent from the scrape.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub hostname: String,
    /// `(component, status)`: 1 leader/active, 2 follower/standby, 0 unhealthy.
    pub ovn_status: Vec<(String, u8)>,
    /// `(component, the text after "Servers:" in cluster/status)`.
    pub status_content: Vec<(String, String)>,
    /// Failed requests to OVN since start (Kube-OVN's `failed_req_count`).
    pub failed_requests: u64,
    /// `(component, path, bytes)`.
    pub log_files: Vec<(String, String, u64)>,
    /// `(database, bytes)`.
    pub db_files: Vec<(String, u64)>,
    /// `(database, storage ok)`.
    pub db_status: Vec<(String, bool)>,
    /// `(NB file path, clustered)`: Kube-OVN labels `cluster_enabled` with the NB file's path.
    pub cluster_enabled: Option<(String, bool)>,
    /// `(database, its RAFT status)`.
    pub clusters: Vec<(String, ClusterStatus)>,
    pub inventory: Option<Inventory>,
}

macro_rules! gauges {
    ($( $field:ident = $name:literal, $help:literal; )*) => {
        /// Every gauge kube-ovn-monitor exports.
        pub struct Metrics {
            $( $field: GaugeFamily, )*
            /// Held while a snapshot is applied and while the registry is encoded, so a scrape
            /// never sees half of a collection.
            lock: Mutex<()>,
            registry: Registry,
        }

        impl Metrics {
            pub fn new() -> Self {
                let mut registry = Registry::with_prefix("kube_ovn");
                $(
                    let $field = GaugeFamily::default();
                    // prometheus-client ends each help with a full stop.
                    registry.register($name, $help, $field.clone());
                )*
                Self { $( $field, )* lock: Mutex::new(()), registry }
            }

            fn clear(&self) {
                $( self.$field.clear(); )*
            }
        }
    };
}

gauges! {
    ovn_status = "ovn_status", "Health of an OVN component: 1 leader or active, 2 follower or standby, 0 unhealthy";
    ovn_status_content = "ovn_status_content", "Always 1; the status label carries the member list of the database's cluster/status";
    failed_req_count = "failed_req_count", "Requests to OVN that failed since the monitor started";
    log_file_size = "log_file_size_bytes", "Size in bytes of an OVN component's log file";
    db_file_size = "db_file_size_bytes", "Size in bytes of an OVN database file";
    db_status = "db_status", "Storage status of the NB or SB database: 1 ok, 0 in error";
    chassis_info = "chassis_info", "Always 1, one sample per chassis in the southbound database";
    ls_info = "logical_switch_info", "Always 1, one sample per logical switch";
    ls_external_id = "logical_switch_external_id", "Always 1, one sample per external_ids key of a logical switch";
    ls_port_binding = "logical_switch_port_binding", "Always 1, one sample per port of a logical switch";
    ls_tunnel_key = "logical_switch_tunnel_key", "Tunnel key of a logical switch's datapath (0 before ovn-northd made it)";
    ls_ports_num = "logical_switch_ports_num", "Number of ports on a logical switch";
    lsp_info = "logical_switch_port_info", "Always 1, one sample per logical switch port, with its binding";
    lsp_tunnel_key = "logical_switch_port_tunnel_key", "Tunnel key of a logical switch port's binding";
    cluster_enabled = "cluster_enabled", "Whether the northbound database file is clustered (RAFT): 1 or 0";
    cluster_role = "cluster_role", "Always 1; the server_role label is the member's RAFT role";
    cluster_status = "cluster_status", "Always 1; the server_status label is the member's cluster status";
    cluster_term = "cluster_term", "RAFT term as this member knows it";
    cluster_leader_self = "cluster_leader_self", "Whether this member is the leader: 1 or 0";
    cluster_vote_self = "cluster_vote_self", "Whether this member voted for itself: 1 or 0";
    cluster_election_timer = "cluster_election_timer", "RAFT election timer in milliseconds";
    cluster_log_not_committed = "cluster_log_not_committed", "Log entries this member has not committed yet";
    cluster_log_not_applied = "cluster_log_not_applied", "Log entries this member has not applied yet";
    cluster_log_index_start = "cluster_log_index_start", "First index of this member's RAFT log";
    cluster_log_index_next = "cluster_log_index_next", "Next index of this member's RAFT log";
    cluster_in_conn = "cluster_inbound_connections_total", "Inbound RAFT connections of this member";
    cluster_out_conn = "cluster_outbound_connections_total", "Outbound RAFT connections of this member";
    cluster_in_conn_err = "cluster_inbound_connections_error_total", "Inbound RAFT connections of this member that are not up";
    cluster_out_conn_err = "cluster_outbound_connections_error_total", "Outbound RAFT connections of this member that are not up";
    cluster_peer_count = "cluster_peer_count", "Members of this member's cluster, itself included";
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

// The call sites build each label set inline; taking it by value keeps them short.
#[allow(clippy::needless_pass_by_value)]
fn set(family: &GaugeFamily, labels: Labels, value: f64) {
    family.get_or_create(&labels).set(value);
}

#[allow(clippy::cast_precision_loss)] // counts and sizes far below 2^53
fn f(n: u64) -> f64 {
    n as f64
}

impl Metrics {
    /// The OpenMetrics text of every gauge.
    pub fn encode(&self) -> String {
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kube_ovn_support::endpoints::encode(&self.registry)
    }

    /// Replaces every gauge with what `s` found.
    pub fn apply(&self, s: &Snapshot) {
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.clear();
        let host = || ("hostname", s.hostname.clone());
        for (component, status) in &s.ovn_status {
            set(
                &self.ovn_status,
                vec![host(), ("component", component.clone())],
                f64::from(*status),
            );
        }
        for (component, content) in &s.status_content {
            let labels = vec![
                host(),
                ("component", component.clone()),
                ("status", content.clone()),
            ];
            set(&self.ovn_status_content, labels, 1.0);
        }
        set(&self.failed_req_count, vec![host()], f(s.failed_requests));
        for (component, path, size) in &s.log_files {
            let labels = vec![
                host(),
                ("component", component.clone()),
                ("filename", path.clone()),
            ];
            set(&self.log_file_size, labels, f(*size));
        }
        for (db, size) in &s.db_files {
            set(
                &self.db_file_size,
                vec![host(), ("db_name", db.clone())],
                f(*size),
            );
        }
        for (db, ok) in &s.db_status {
            set(
                &self.db_status,
                vec![host(), ("db_name", db.clone())],
                f(u64::from(*ok)),
            );
        }
        if let Some((path, clustered)) = &s.cluster_enabled {
            set(
                &self.cluster_enabled,
                vec![host(), ("db_name", path.clone())],
                f(u64::from(*clustered)),
            );
        }
        for (db, c) in &s.clusters {
            self.apply_cluster(&host(), db, c);
        }
        if let Some(inventory) = &s.inventory {
            self.apply_inventory(&s.hostname, inventory);
        }
    }

    fn apply_cluster(&self, host: &(&'static str, String), db: &str, c: &ClusterStatus) {
        let ids = || {
            vec![
                host.clone(),
                ("db_name", db.to_owned()),
                ("server_id", c.server_id.clone()),
                ("cluster_id", c.cluster_id.clone()),
            ]
        };
        let with = |key: &'static str, value: &str| {
            let mut labels = ids();
            labels.push((key, value.to_owned()));
            labels
        };
        set(&self.cluster_role, with("server_role", &c.role), 1.0);
        set(&self.cluster_status, with("server_status", &c.status), 1.0);
        set(&self.cluster_term, ids(), f(c.term));
        set(&self.cluster_leader_self, ids(), f(u64::from(c.is_leader())));
        set(&self.cluster_vote_self, ids(), f(u64::from(c.voted_self())));
        set(&self.cluster_election_timer, ids(), f(c.election_timer));
        set(&self.cluster_log_not_committed, ids(), f(c.log_not_committed));
        set(&self.cluster_log_not_applied, ids(), f(c.log_not_applied));
        set(&self.cluster_log_index_start, ids(), f(c.log_index_start));
        set(&self.cluster_log_index_next, ids(), f(c.log_index_next));
        set(&self.cluster_in_conn, ids(), f(c.connections.inbound));
        set(&self.cluster_out_conn, ids(), f(c.connections.outbound));
        set(&self.cluster_in_conn_err, ids(), f(c.connections.inbound_failed));
        set(
            &self.cluster_out_conn_err,
            ids(),
            f(c.connections.outbound_failed),
        );
        // Kube-OVN registers this one but never sets it; `Servers:` lists every member.
        set(&self.cluster_peer_count, ids(), f(c.servers.len() as u64));
    }

    fn apply_inventory(&self, hostname: &str, inv: &Inventory) {
        let host = || ("hostname", hostname.to_owned());
        for ch in &inv.chassis {
            // Kube-OVN labels a chassis with its own hostname, not the monitor's.
            let labels = vec![
                ("hostname", ch.hostname.clone()),
                ("uuid", ch.uuid.clone()),
                ("name", ch.name.clone()),
                ("ip", ch.ip.clone()),
            ];
            set(&self.chassis_info, labels, 1.0);
        }
        for ls in &inv.switches {
            let id = || vec![host(), ("uuid", ls.uuid.clone())];
            let mut info = id();
            info.push(("name", ls.name.clone()));
            set(&self.ls_info, info, 1.0);
            let mut named = id();
            named.push(("logical_switch_name", ls.name.clone()));
            set(&self.ls_ports_num, named.clone(), f(ls.ports.len() as u64));
            set(&self.ls_tunnel_key, named, f(ls.tunnel_key));
            for port in &ls.ports {
                let mut labels = id();
                labels.push(("port", port.clone()));
                labels.push(("logical_switch_name", ls.name.clone()));
                set(&self.ls_port_binding, labels, 1.0);
            }
            for (key, value) in &ls.external_ids {
                let mut labels = id();
                labels.push(("key", key.clone()));
                labels.push(("value", value.clone()));
                labels.push(("logical_switch_name", ls.name.clone()));
                set(&self.ls_external_id, labels, 1.0);
            }
        }
        for p in &inv.ports {
            let labels = vec![
                host(),
                ("uuid", p.uuid.clone()),
                ("name", p.name.clone()),
                ("chassis", p.chassis.clone()),
                ("logical_switch_name", p.switch.clone()),
                ("datapath", p.datapath.clone()),
                ("port_binding", p.port_binding.clone()),
                ("mac_address", p.mac.clone()),
                ("ip_address", p.ip.clone()),
            ];
            set(&self.lsp_info, labels, 1.0);
            let labels = vec![
                host(),
                ("uuid", p.uuid.clone()),
                ("logical_switch_name", p.switch.clone()),
                ("port_name", p.name.clone()),
            ];
            set(&self.lsp_tunnel_key, labels, f(p.tunnel_key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster_status::parse;
    use crate::inventory::{Inventory, SwitchInfo};

    fn line<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn names_and_labels_are_kube_ovns() {
        let m = Metrics::new();
        let leader = parse(include_str!("testdata/leader.txt")).unwrap();
        m.apply(&Snapshot {
            hostname: "master-1".into(),
            ovn_status: vec![("ovsdb-server-northbound".into(), 1), ("ovn-northd".into(), 1)],
            failed_requests: 3,
            db_files: vec![("OVN_Northbound".into(), 4096)],
            cluster_enabled: Some(("/etc/ovn/ovnnb_db.db".into(), true)),
            clusters: vec![("OVN_Northbound".into(), leader)],
            inventory: Some(Inventory {
                switches: vec![SwitchInfo {
                    uuid: "u1".into(),
                    name: "ovn-default".into(),
                    ports: vec!["p1".into(), "p2".into()],
                    tunnel_key: 7,
                    ..SwitchInfo::default()
                }],
                ..Inventory::default()
            }),
            ..Snapshot::default()
        });
        let text = m.encode();
        let ids = "db_name=\"OVN_Northbound\",server_id=\"6c574d2f-400d-4ef3-9d78-b0c8e7f6c369\",cluster_id=\"3984679c-624e-45c3-a941-942d90fd53a9\"";
        for expected in [
            "kube_ovn_ovn_status{hostname=\"master-1\",component=\"ovn-northd\"} 1.0".to_owned(),
            "kube_ovn_failed_req_count{hostname=\"master-1\"} 3.0".to_owned(),
            "kube_ovn_db_file_size_bytes{hostname=\"master-1\",db_name=\"OVN_Northbound\"} 4096.0".to_owned(),
            "kube_ovn_cluster_enabled{hostname=\"master-1\",db_name=\"/etc/ovn/ovnnb_db.db\"} 1.0".to_owned(),
            format!("kube_ovn_cluster_role{{hostname=\"master-1\",{ids},server_role=\"leader\"}} 1.0"),
            format!("kube_ovn_cluster_term{{hostname=\"master-1\",{ids}}} 1.0"),
            format!("kube_ovn_cluster_leader_self{{hostname=\"master-1\",{ids}}} 1.0"),
            format!("kube_ovn_cluster_log_index_next{{hostname=\"master-1\",{ids}}} 5.0"),
            format!("kube_ovn_cluster_inbound_connections_total{{hostname=\"master-1\",{ids}}} 2.0"),
            format!("kube_ovn_cluster_peer_count{{hostname=\"master-1\",{ids}}} 3.0"),
            "kube_ovn_logical_switch_ports_num{hostname=\"master-1\",uuid=\"u1\",logical_switch_name=\"ovn-default\"} 2.0".to_owned(),
            "kube_ovn_logical_switch_tunnel_key{hostname=\"master-1\",uuid=\"u1\",logical_switch_name=\"ovn-default\"} 7.0".to_owned(),
        ] {
            assert!(text.lines().any(|l| l == expected), "no {expected} in\n{text}");
        }
        assert!(text.contains("# TYPE kube_ovn_cluster_role gauge"));
    }

    #[test]
    fn a_new_snapshot_replaces_the_old() {
        let m = Metrics::new();
        let mut s = Snapshot {
            hostname: "h".into(),
            clusters: vec![(
                "OVN_Northbound".into(),
                parse(include_str!("testdata/leader.txt")).unwrap(),
            )],
            ..Snapshot::default()
        };
        m.apply(&s);
        s.clusters = vec![(
            "OVN_Northbound".into(),
            parse(include_str!("testdata/follower-after-failover.txt")).unwrap(),
        )];
        m.apply(&s);
        let text = m.encode();
        let roles = line(&text, "kube_ovn_cluster_role{");
        assert_eq!(roles.len(), 1, "{text}");
        assert!(roles[0].contains("server_role=\"follower\""));
        let terms = line(&text, "kube_ovn_cluster_term{");
        assert!(terms.len() == 1 && terms[0].ends_with(" 2.0"), "{text}");
    }
}
