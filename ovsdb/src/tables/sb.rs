//! Typed rows of OVN_Southbound (ovn-sb(5)), the tables the controller reads: which chassis
//! holds a logical port. Columns of SB schema 20.27.0 (OVN 23.03); the controller never writes
//! the southbound database (ovn-northd and ovn-controller own it).

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::ovsdb_table;

type Map = BTreeMap<String, String>;

ovsdb_table! {
    /// A logical port bound (or not) to a chassis. For a router port with Gateway_Chassis rows
    /// ovn-northd makes a `chassisredirect` binding `cr-<lrp>`, and the chassis that holds the
    /// port (the highest-priority one alive) writes itself into `chassis`.
    pub struct PortBinding in "Port_Binding" {
        logical_port: String => "logical_port",
        r#type: String => "type",
        chassis: Option<Uuid> => "chassis",
        up: Option<bool> => "up",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A hypervisor or gateway running ovn-controller: `name` is its OVS `system-id`, the value
    /// the node daemon writes into the node's `ovn.kubernetes.io/chassis` annotation.
    pub struct Chassis in "Chassis" {
        name: String => "name",
        hostname: String => "hostname",
        external_ids: Map => "external_ids",
        other_config: Map => "other_config",
    }
}

/// The `chassisredirect` port ovn-northd makes for a gateway router port: `cr-<lrp>`.
pub fn chassis_redirect_port(lrp: &str) -> String {
    format!("cr-{lrp}")
}
