//! Typed rows of OVN_Northbound (ovn-nb(5)), the tables the controller writes.
//!
//! Columns are those of NB schema 7.0.0 (OVN 23.03, Debian 12) that Kube-OVN's controller uses;
//! newer servers have more columns and still decode (see [`crate::table`]). Column names are kept
//! as field names, so `type` and `match` are raw identifiers.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::ovsdb_table;

type Map = BTreeMap<String, String>;

ovsdb_table! {
    /// The one global row: options such as `ls_dnat_mod_dl_dst`, and the `nb_cfg` sequence that
    /// `ovn-nbctl --wait` watches.
    pub struct NbGlobal in "NB_Global" {
        name: String => "name",
        nb_cfg: i64 => "nb_cfg",
        sb_cfg: i64 => "sb_cfg",
        hv_cfg: i64 => "hv_cfg",
        options: Map => "options",
        external_ids: Map => "external_ids",
        connections: Vec<Uuid> => "connections",
        ipsec: bool => "ipsec",
    }
}

ovsdb_table! {
    /// A logical switch: one per Kube-OVN subnet, plus `join`.
    pub struct LogicalSwitch in "Logical_Switch" {
        name: String => "name",
        ports: Vec<Uuid> => "ports",
        acls: Vec<Uuid> => "acls",
        load_balancer: Vec<Uuid> => "load_balancer",
        load_balancer_group: Vec<Uuid> => "load_balancer_group",
        qos_rules: Vec<Uuid> => "qos_rules",
        dns_records: Vec<Uuid> => "dns_records",
        other_config: Map => "other_config",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A logical switch port: `<pod>.<ns>` for pods, `node-<node>` on `join`, `<subnet>-<router>`
    /// router ports, `localnet.<subnet>` for underlay.
    pub struct LogicalSwitchPort in "Logical_Switch_Port" {
        name: String => "name",
        r#type: String => "type",
        addresses: Vec<String> => "addresses",
        port_security: Vec<String> => "port_security",
        dynamic_addresses: Option<String> => "dynamic_addresses",
        options: Map => "options",
        external_ids: Map => "external_ids",
        parent_name: Option<String> => "parent_name",
        tag: Option<i64> => "tag",
        tag_request: Option<i64> => "tag_request",
        enabled: Option<bool> => "enabled",
        up: Option<bool> => "up",
        dhcpv4_options: Option<Uuid> => "dhcpv4_options",
        dhcpv6_options: Option<Uuid> => "dhcpv6_options",
        ha_chassis_group: Option<Uuid> => "ha_chassis_group",
    }
}

ovsdb_table! {
    /// A logical router: `ovn-cluster` for the default VPC, one per custom VPC.
    pub struct LogicalRouter in "Logical_Router" {
        name: String => "name",
        ports: Vec<Uuid> => "ports",
        static_routes: Vec<Uuid> => "static_routes",
        policies: Vec<Uuid> => "policies",
        nat: Vec<Uuid> => "nat",
        load_balancer: Vec<Uuid> => "load_balancer",
        load_balancer_group: Vec<Uuid> => "load_balancer_group",
        enabled: Option<bool> => "enabled",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A logical router port: `<router>-<subnet>`, peered with the switch's `<subnet>-<router>`.
    pub struct LogicalRouterPort in "Logical_Router_Port" {
        name: String => "name",
        mac: String => "mac",
        networks: Vec<String> => "networks",
        peer: Option<String> => "peer",
        gateway_chassis: Vec<Uuid> => "gateway_chassis",
        ha_chassis_group: Option<Uuid> => "ha_chassis_group",
        enabled: Option<bool> => "enabled",
        ipv6_prefix: Vec<String> => "ipv6_prefix",
        ipv6_ra_configs: Map => "ipv6_ra_configs",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A static route: a VPC's `staticRoutes`, the default VPC's route to the join gateway.
    pub struct LogicalRouterStaticRoute in "Logical_Router_Static_Route" {
        ip_prefix: String => "ip_prefix",
        nexthop: String => "nexthop",
        /// `src-ip` or `dst-ip` (the default when empty).
        policy: Option<String> => "policy",
        output_port: Option<String> => "output_port",
        route_table: String => "route_table",
        bfd: Option<Uuid> => "bfd",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A router policy: Kube-OVN's 31000 subnet allow, 30000 node, 29250 north gateway and 29000
    /// gateway reroute priorities, and VPC `policyRoutes`.
    pub struct LogicalRouterPolicy in "Logical_Router_Policy" {
        priority: i64 => "priority",
        r#match: String => "match",
        /// `allow`, `drop` or `reroute`.
        action: String => "action",
        nexthop: Option<String> => "nexthop",
        nexthops: Vec<String> => "nexthops",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// An ACL on a switch or port group.
    pub struct Acl in "ACL" {
        name: Option<String> => "name",
        priority: i64 => "priority",
        /// `from-lport` or `to-lport`.
        direction: String => "direction",
        r#match: String => "match",
        /// `allow`, `allow-related`, `allow-stateless`, `drop`, `reject`.
        action: String => "action",
        log: bool => "log",
        severity: Option<String> => "severity",
        meter: Option<String> => "meter",
        label: i64 => "label",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A named set of addresses, usable in matches as `$name`.
    pub struct AddressSet in "Address_Set" {
        name: String => "name",
        addresses: Vec<String> => "addresses",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A rate limit, e.g. for ACL logging (a NetworkPolicy's `enable_log`).
    pub struct Meter in "Meter" {
        name: String => "name",
        /// `kbps` or `pktps`.
        unit: String => "unit",
        bands: Vec<Uuid> => "bands",
        fair: Option<bool> => "fair",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A band of a [`Meter`]: what happens above `rate`.
    pub struct MeterBand in "Meter_Band" {
        /// `drop`.
        action: String => "action",
        rate: i64 => "rate",
        burst_size: i64 => "burst_size",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A group of switch ports with shared ACLs: `<subnet>.<node>`, `node.<node>`, policies.
    pub struct PortGroup in "Port_Group" {
        name: String => "name",
        ports: Vec<Uuid> => "ports",
        acls: Vec<Uuid> => "acls",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A load balancer: `"vip:port" -> "backend:port,…"`.
    pub struct LoadBalancer in "Load_Balancer" {
        name: String => "name",
        vips: Map => "vips",
        protocol: Option<String> => "protocol",
        selection_fields: Vec<String> => "selection_fields",
        health_check: Vec<Uuid> => "health_check",
        ip_port_mappings: Map => "ip_port_mappings",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A NAT rule on a router: `snat`, `dnat`, `dnat_and_snat` (OVN EIP/FIP/SNAT).
    pub struct Nat in "NAT" {
        r#type: String => "type",
        external_ip: String => "external_ip",
        external_mac: Option<String> => "external_mac",
        external_port_range: String => "external_port_range",
        logical_ip: String => "logical_ip",
        logical_port: Option<String> => "logical_port",
        gateway_port: Option<Uuid> => "gateway_port",
        allowed_ext_ips: Option<Uuid> => "allowed_ext_ips",
        exempted_ext_ips: Option<Uuid> => "exempted_ext_ips",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// Where a distributed gateway port is bound, by priority.
    pub struct GatewayChassis in "Gateway_Chassis" {
        name: String => "name",
        chassis_name: String => "chassis_name",
        priority: i64 => "priority",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// DHCP options of a subnet (`enableDHCP`).
    pub struct DhcpOptions in "DHCP_Options" {
        cidr: String => "cidr",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    /// A BFD session OVN runs toward a next hop (VPC `enableBfd`, ECMP gateways).
    pub struct Bfd in "BFD" {
        logical_port: String => "logical_port",
        dst_ip: String => "dst_ip",
        min_tx: Option<i64> => "min_tx",
        min_rx: Option<i64> => "min_rx",
        detect_mult: Option<i64> => "detect_mult",
        /// Written by ovn-controller: `down`, `init`, `up`, `admin_down`.
        status: Option<String> => "status",
        options: Map => "options",
        external_ids: Map => "external_ids",
    }
}
