//! Typed rows of Open_vSwitch (ovs-vswitchd.conf.db(5)), the tables the node daemon writes:
//! `br-int`, pod ports with `external_ids:iface-id`, `ovn0`, and QoS for pod rate limits.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::ovsdb_table;

type Map = BTreeMap<String, String>;

ovsdb_table! {
    /// The root row: bridges, and `external_ids` where ovn-controller reads its chassis settings
    /// (`system-id`, `ovn-remote`, `ovn-encap-type`, `ovn-encap-ip`, `ovn-bridge-datapath-type`).
    pub struct OpenVSwitch in "Open_vSwitch" {
        bridges: Vec<Uuid> => "bridges",
        external_ids: Map => "external_ids",
        other_config: Map => "other_config",
        ovs_version: Option<String> => "ovs_version",
        db_version: Option<String> => "db_version",
        datapath_types: Vec<String> => "datapath_types",
        iface_types: Vec<String> => "iface_types",
        next_cfg: i64 => "next_cfg",
        cur_cfg: i64 => "cur_cfg",
    }
}

ovsdb_table! {
    /// A bridge: `br-int` (`datapath_type` `netdev` on machines without the kernel module).
    pub struct Bridge in "Bridge" {
        name: String => "name",
        ports: Vec<Uuid> => "ports",
        datapath_type: String => "datapath_type",
        fail_mode: Option<String> => "fail_mode",
        protocols: Vec<String> => "protocols",
        other_config: Map => "other_config",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A port: one interface for pods and `ovn0`; `qos` holds the pod's ingress shaping.
    pub struct Port in "Port" {
        name: String => "name",
        interfaces: Vec<Uuid> => "interfaces",
        qos: Option<Uuid> => "qos",
        tag: Option<i64> => "tag",
        other_config: Map => "other_config",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// An interface. The daemon sets `external_ids:iface-id`; ovn-controller answers with
    /// `external_ids:ovn-installed=true`. `ofport` -1 or a non-empty `error` means it failed.
    pub struct Interface in "Interface" {
        name: String => "name",
        r#type: String => "type",
        options: Map => "options",
        external_ids: Map => "external_ids",
        other_config: Map => "other_config",
        status: Map => "status",
        error: Option<String> => "error",
        ofport: Option<i64> => "ofport",
        ofport_request: Option<i64> => "ofport_request",
        ifindex: Option<i64> => "ifindex",
        mac: Option<String> => "mac",
        mac_in_use: Option<String> => "mac_in_use",
        mtu: Option<i64> => "mtu",
        mtu_request: Option<i64> => "mtu_request",
        link_state: Option<String> => "link_state",
        admin_state: Option<String> => "admin_state",
        /// kbit/s; the pod's `egress_rate` (directions are reversed between pod and OVS).
        ingress_policing_rate: i64 => "ingress_policing_rate",
        ingress_policing_burst: i64 => "ingress_policing_burst",
    }
}

ovsdb_table! {
    /// A QoS configuration (`linux-htb`, `linux-netem`) with its queues.
    pub struct Qos in "QoS" {
        r#type: String => "type",
        queues: BTreeMap<i64, Uuid> => "queues",
        other_config: Map => "other_config",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A queue of a QoS row (`other_config:max-rate` in bit/s).
    pub struct Queue in "Queue" {
        dscp: Option<i64> => "dscp",
        other_config: Map => "other_config",
        external_ids: Map => "external_ids",
    }
}
