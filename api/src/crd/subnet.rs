//! `Subnet` (`subnets.kubeovn.io`): one logical switch, its CIDR(s), gateway and the policy for
//! traffic leaving it.
//!
//! Kube-OVN normalises most spec fields in its controller, not with CRD defaults (the protocol is
//! recomputed from `cidrBlock`, `vpc` defaults to `ovn-cluster`, `provider` to `ovn`,
//! `gatewayType` to `distributed`, the gateway to the first usable address), so the schema below
//! has no defaults and every field is optional. Note the status counter spellings:
//! `v4availableIPs` / `v4usingIPrange` (lower-case `available`/`using`, `IPrange`), unlike
//! IPPool's `v4AvailableIPs` / `v4AvailableIPRange`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::condition::Condition;
use super::schema::{ExtraFields, IpCount, int32, integer, spec_absent_is_default};

/// Desired state of a Subnet.
// Each `printcolumn(...)` repeats keys such as `type_ = "string"`, which clippy takes for a
// duplicated attribute.
#[allow(
    clippy::duplicated_attributes,
    reason = "kube-derive printcolumn arguments repeat by design"
)]
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kubeovn.io",
    version = "v1",
    kind = "Subnet",
    singular = "subnet",
    plural = "subnets",
    shortname = "subnet",
    status = "SubnetStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN subnet: one OVN logical switch with its CIDR, gateway and egress policy.",
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider"),
    printcolumn(name = "Vpc", type_ = "string", json_path = ".spec.vpc"),
    printcolumn(name = "Vlan", type_ = "string", json_path = ".spec.vlan"),
    printcolumn(name = "Protocol", type_ = "string", json_path = ".spec.protocol"),
    printcolumn(name = "CIDR", type_ = "string", json_path = ".spec.cidrBlock"),
    printcolumn(name = "Private", type_ = "boolean", json_path = ".spec.private"),
    printcolumn(name = "NAT", type_ = "boolean", json_path = ".spec.natOutgoing"),
    printcolumn(name = "Default", type_ = "boolean", json_path = ".spec.default"),
    printcolumn(name = "GatewayType", type_ = "string", json_path = ".spec.gatewayType"),
    printcolumn(name = "V4Used", type_ = "number", json_path = ".status.v4usingIPs"),
    printcolumn(name = "V4Available", type_ = "number", json_path = ".status.v4availableIPs"),
    printcolumn(name = "V6Used", type_ = "number", json_path = ".status.v6usingIPs"),
    printcolumn(name = "V6Available", type_ = "number", json_path = ".status.v6availableIPs"),
    printcolumn(name = "ExcludeIPs", type_ = "string", json_path = ".spec.excludeIps"),
    printcolumn(
        name = "U2OInterconnectionIP",
        type_ = "string",
        json_path = ".status.u2oInterconnectionIP"
    )
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct SubnetSpec {
    /// Extra OVN ACLs on the logical switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acls: Option<Vec<Acl>>,
    /// With `private`, also allow east-west traffic inside the subnet.
    #[serde(rename = "allowEWTraffic", default, skip_serializing_if = "Option::is_none")]
    pub allow_ew_traffic: Option<bool>,
    /// Subnets (by CIDR) still reachable when `private` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_subnets: Option<Vec<String>>,
    /// One CIDR, or `v4,v6` for dual stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr_block: Option<String>,
    /// Whether this is the cluster's default subnet (only `ovn-default` keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
    /// OVN DHCPv4 options (`k=v,...`).
    #[serde(rename = "dhcpV4Options", default, skip_serializing_if = "Option::is_none")]
    pub dhcp_v4_options: Option<String>,
    /// OVN DHCPv6 options (`k=v,...`).
    #[serde(rename = "dhcpV6Options", default, skip_serializing_if = "Option::is_none")]
    pub dhcp_v6_options: Option<String>,
    /// Skip the daemon's gateway reachability check for pods of this subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_gateway_check: Option<bool>,
    /// Keep this subnet out of OVN interconnection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_inter_connection: Option<bool>,
    /// Serve DHCP from OVN.
    #[serde(rename = "enableDHCP", default, skip_serializing_if = "Option::is_none")]
    pub enable_dhcp: Option<bool>,
    /// With a centralized gateway, use every ready gateway node at once (ECMP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_ecmp: Option<bool>,
    /// Allow LoadBalancer Service addresses from this subnet.
    #[serde(
        rename = "enableExternalLBAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_external_lb_address: Option<bool>,
    /// Send IPv6 router advertisements.
    #[serde(rename = "enableIPv6RA", default, skip_serializing_if = "Option::is_none")]
    pub enable_ipv6_ra: Option<bool>,
    /// Attach the VPC's load balancers to this switch (controller `--enable-lb` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_lb: Option<bool>,
    /// Enable OVN multicast snooping on the switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_multicast_snoop: Option<bool>,
    /// Addresses never handed out: `a.b.c.d` or `a..b` ranges; the gateway is always added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_ips: Option<Vec<String>>,
    /// Next hop(s) for node policy routing of this subnet's egress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_egress_gateway: Option<String>,
    /// Gateway address(es), `v4,v6` for dual stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Centralized gateway nodes, comma-separated `node` or `node:natIP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_node: Option<String>,
    /// Centralized gateway nodes chosen by label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_node_selectors: Option<Vec<LabelSelector>>,
    /// `distributed` (leave through the pod's node) or `centralized`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_type: Option<String>,
    /// OVN IPv6 RA configuration (`k=v,...`).
    #[serde(rename = "ipv6RAConfigs", default, skip_serializing_if = "Option::is_none")]
    pub ipv6_ra_configs: Option<String>,
    /// For an underlay subnet, still route through an OVN logical router port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_gateway: Option<bool>,
    /// MTU for pods of this subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int32")]
    pub mtu: Option<u32>,
    /// Namespaces bound to the subnet by label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selectors: Option<Vec<LabelSelector>>,
    /// Namespaces bound to the subnet by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    /// Masquerade traffic leaving the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_outgoing: Option<bool>,
    /// Finer-grained NAT-or-forward rules for egress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_outgoing_policy_rules: Option<Vec<NatOutgoingPolicyRule>>,
    /// Node network (multi network plane) whose address is the tunnel endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_network: Option<String>,
    /// Priority of the node policy-routing rule for `externalEgressGateway`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int32")]
    pub policy_routing_priority: Option<u32>,
    /// Routing table of the node policy-routing rule for `externalEgressGateway`.
    #[serde(
        rename = "policyRoutingTableID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "int32")]
    pub policy_routing_table_id: Option<u32>,
    /// Isolate the subnet with ACLs (see `allowSubnets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<bool>,
    /// `IPv4`, `IPv6`, `Dual` or `Mac`; recomputed by the controller from `cidrBlock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// `ovn`, `<nad>.<ns>.ovn` for attachment networks, `<nad>.<ns>` for IPAM-only NADs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// VPC route table the subnet's router port uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_table: Option<String>,
    /// Underlay-to-overlay interconnection options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub u2o_features: Option<U2oFeatures>,
    /// Connect this underlay subnet to the overlay through the VPC router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub u2o_interconnection: Option<bool>,
    /// Address of the underlay-to-overlay router port.
    #[serde(
        rename = "u2oInterconnectionIP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub u2o_interconnection_ip: Option<String>,
    /// Addresses reserved as virtual IPs on the switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vips: Option<Vec<String>>,
    /// Vlan CR name; makes the subnet an underlay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<String>,
    /// VPC the subnet belongs to (`ovn-cluster` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(SubnetSpec);

/// An OVN ACL added to the subnet's logical switch.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Acl {
    /// OVN ACL action (`allow`, `allow-related`, `drop`, `reject`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// `from-lport` or `to-lport`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    /// OVN match expression.
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub match_: Option<String>,
    /// ACL priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "integer")]
    pub priority: Option<i32>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// One egress rule: NAT or forward traffic matching source/destination sets.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NatOutgoingPolicyRule {
    /// `nat` or `forward`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Which traffic the rule applies to.
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub match_: Option<NatOutgoingPolicyMatch>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Source and destination address sets of a [`NatOutgoingPolicyRule`] (comma lists).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct NatOutgoingPolicyMatch {
    /// Destination addresses or CIDRs, comma-separated.
    #[serde(rename = "dstIPs", default, skip_serializing_if = "Option::is_none")]
    pub dst_ips: Option<String>,
    /// Source addresses or CIDRs, comma-separated.
    #[serde(rename = "srcIPs", default, skip_serializing_if = "Option::is_none")]
    pub src_ips: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// A [`NatOutgoingPolicyRule`] as realised, with the ID the controller generated for it
/// (used to name the node ipsets).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NatOutgoingPolicyRuleStatus {
    /// `nat` or `forward`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Which traffic the rule applies to.
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub match_: Option<NatOutgoingPolicyMatch>,
    /// Generated rule ID.
    #[serde(rename = "ruleID", default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Underlay-to-overlay interconnection options.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct U2oFeatures {
    /// Route only overlay-bound traffic through the interconnection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay_only_routing: Option<bool>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Observed state of a Subnet.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct SubnetStatus {
    /// The centralized gateway node in use; with ECMP, every gateway in use, comma-separated.
    #[serde(rename = "activateGateway", default, skip_serializing_if = "Option::is_none")]
    pub activate_gateway: Option<String>,
    /// `Ready`, `Validated`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// UUID of the OVN DHCPv4 options row.
    #[serde(
        rename = "dhcpV4OptionsUUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dhcp_v4_options_uuid: Option<String>,
    /// UUID of the OVN DHCPv6 options row.
    #[serde(
        rename = "dhcpV6OptionsUUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dhcp_v6_options_uuid: Option<String>,
    /// Multicast querier address.
    #[serde(rename = "mcastQuerierIP", default, skip_serializing_if = "Option::is_none")]
    pub mcast_querier_ip: Option<String>,
    /// Multicast querier MAC.
    #[serde(rename = "mcastQuerierMAC", default, skip_serializing_if = "Option::is_none")]
    pub mcast_querier_mac: Option<String>,
    /// `natOutgoingPolicyRules` with their generated IDs.
    #[serde(
        rename = "natOutgoingPolicyRules",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nat_outgoing_policy_rules: Option<Vec<NatOutgoingPolicyRuleStatus>>,
    /// Address of the underlay-to-overlay router port in use.
    #[serde(
        rename = "u2oInterconnectionIP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub u2o_interconnection_ip: Option<String>,
    /// MAC of the underlay-to-overlay router port.
    #[serde(
        rename = "u2oInterconnectionMAC",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub u2o_interconnection_mac: Option<String>,
    /// VPC the underlay-to-overlay port connects to.
    #[serde(
        rename = "u2oInterconnectionVPC",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub u2o_interconnection_vpc: Option<String>,
    /// Free IPv4 addresses as ranges (`a-b,c-d`).
    #[serde(
        rename = "v4availableIPrange",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub v4_available_ip_range: Option<String>,
    /// Number of free IPv4 addresses.
    #[serde(rename = "v4availableIPs", default, skip_serializing_if = "Option::is_none")]
    pub v4_available_ips: Option<IpCount>,
    /// Allocated IPv4 addresses as ranges.
    #[serde(rename = "v4usingIPrange", default, skip_serializing_if = "Option::is_none")]
    pub v4_using_ip_range: Option<String>,
    /// Number of allocated IPv4 addresses.
    #[serde(rename = "v4usingIPs", default, skip_serializing_if = "Option::is_none")]
    pub v4_using_ips: Option<IpCount>,
    /// Free IPv6 addresses as ranges.
    #[serde(
        rename = "v6availableIPrange",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub v6_available_ip_range: Option<String>,
    /// Number of free IPv6 addresses.
    #[serde(rename = "v6availableIPs", default, skip_serializing_if = "Option::is_none")]
    pub v6_available_ips: Option<IpCount>,
    /// Allocated IPv6 addresses as ranges.
    #[serde(rename = "v6usingIPrange", default, skip_serializing_if = "Option::is_none")]
    pub v6_using_ip_range: Option<String>,
    /// Number of allocated IPv6 addresses.
    #[serde(rename = "v6usingIPs", default, skip_serializing_if = "Option::is_none")]
    pub v6_using_ips: Option<IpCount>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
