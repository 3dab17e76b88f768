//! OVN-native NAT on a VPC's logical router: `OvnEip`, `OvnFip`, `OvnSnatRule`, `OvnDnatRule`.
//!
//! An OvnEip is an address on an external subnet (type `lrp` for the router's own external port,
//! `lsp` for a node-side BFD/ECMP next hop, `nat` for use by the three rule kinds). FIP and SNAT
//! become OVN NAT rows (`dnat_and_snat`, `snat`) on the VPC router; DNAT becomes an OVN load
//! balancer VIP `eip:externalPort -> ip:internalPort` attached to that router. Rules name their
//! internal side either by `ipName` (an IP or Vip CR, per `ipType` `ip`/`vip`) or by explicit
//! `v4Ip`/`v6Ip` (`v4IpCidr`/`v6IpCidr` for SNAT).

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::condition::Condition;
use super::schema::{ExtraFields, spec_absent_is_default};

/// Desired state of an OvnEip.
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
    kind = "OvnEip",
    singular = "ovn-eip",
    plural = "ovn-eips",
    shortname = "oeip",
    status = "OvnEipStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN OVN EIP: an external-subnet address for OVN-native NAT on a VPC router.",
    printcolumn(name = "V4IP", type_ = "string", json_path = ".status.v4Ip"),
    printcolumn(name = "V6IP", type_ = "string", json_path = ".status.v6Ip"),
    printcolumn(name = "Mac", type_ = "string", json_path = ".status.macAddress"),
    printcolumn(name = "Type", type_ = "string", json_path = ".status.type"),
    printcolumn(name = "Nat", type_ = "string", json_path = ".status.nat"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready"),
    printcolumn(name = "ExternalSubnet", type_ = "string", json_path = ".spec.externalSubnet")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct OvnEipSpec {
    /// External subnet the address comes from (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_subnet: Option<String>,
    /// Requested MAC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    /// `lrp`, `lsp` or `nat`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Requested IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_ip: Option<String>,
    /// Requested IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_ip: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(OvnEipSpec);

/// Observed state of an OvnEip.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OvnEipStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Allocated MAC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    /// Which NAT kinds use the address (`fip`, `snat`, `dnat`, comma-separated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat: Option<String>,
    /// The address is allocated and realised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Type in effect.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Allocated IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_ip: Option<String>,
    /// Allocated IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_ip: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Desired state of an OvnFip (a 1:1 `dnat_and_snat`).
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
    kind = "OvnFip",
    singular = "ovn-fip",
    plural = "ovn-fips",
    shortname = "ofip",
    status = "OvnFipStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN OVN floating IP: 1:1 NAT between an OvnEip and an internal address.",
    printcolumn(name = "Vpc", type_ = "string", json_path = ".status.vpc"),
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "V4Eip", type_ = "string", json_path = ".status.v4Eip"),
    printcolumn(name = "V6Eip", type_ = "string", json_path = ".status.v6Eip"),
    printcolumn(name = "V4Ip", type_ = "string", json_path = ".status.v4Ip"),
    printcolumn(name = "V6Ip", type_ = "string", json_path = ".status.v6Ip"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready"),
    printcolumn(name = "IpType", type_ = "string", json_path = ".spec.ipType"),
    printcolumn(name = "IpName", type_ = "string", json_path = ".spec.ipName")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct OvnFipSpec {
    /// IP or Vip CR naming the internal address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_name: Option<String>,
    /// `ip` or `vip`: what `ipName` refers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_type: Option<String>,
    /// OvnEip to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ovn_eip: Option<String>,
    /// `distributed` (NAT on the pod's chassis) or `centralized`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Internal IPv4 address when no `ipName` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_ip: Option<String>,
    /// Internal IPv6 address when no `ipName` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_ip: Option<String>,
    /// VPC of the internal address (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(OvnFipSpec);

/// Observed state of an OvnFip.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OvnFipStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// MAC of the internal port (distributed FIP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    /// The NAT row exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// External IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_eip: Option<String>,
    /// Internal IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_ip: Option<String>,
    /// External IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_eip: Option<String>,
    /// Internal IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_ip: Option<String>,
    /// VPC whose router carries the NAT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Desired state of an OvnSnatRule.
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
    kind = "OvnSnatRule",
    singular = "ovn-snat-rule",
    plural = "ovn-snat-rules",
    shortname = "osnat",
    status = "OvnSnatRuleStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN OVN SNAT rule: source NAT of internal addresses to an OvnEip.",
    printcolumn(name = "Vpc", type_ = "string", json_path = ".status.vpc"),
    printcolumn(name = "V4Eip", type_ = "string", json_path = ".status.v4Eip"),
    printcolumn(name = "V6Eip", type_ = "string", json_path = ".status.v6Eip"),
    printcolumn(name = "V4IpCidr", type_ = "string", json_path = ".status.v4IpCidr"),
    printcolumn(name = "V6IpCidr", type_ = "string", json_path = ".status.v6IpCidr"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct OvnSnatRuleSpec {
    /// IP CR whose address is translated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_name: Option<String>,
    /// OvnEip to translate to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ovn_eip: Option<String>,
    /// Internal IPv4 CIDR when neither `vpcSubnet` nor `ipName` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_ip_cidr: Option<String>,
    /// Internal IPv6 CIDR when neither `vpcSubnet` nor `ipName` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_ip_cidr: Option<String>,
    /// VPC whose router carries the NAT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<String>,
    /// Subnet whose CIDR is translated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_subnet: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(OvnSnatRuleSpec);

/// Observed state of an OvnSnatRule.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OvnSnatRuleStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The NAT row exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// External IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_eip: Option<String>,
    /// Internal IPv4 CIDR in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_ip_cidr: Option<String>,
    /// External IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_eip: Option<String>,
    /// Internal IPv6 CIDR in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_ip_cidr: Option<String>,
    /// VPC whose router carries the NAT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Desired state of an OvnDnatRule (a port forward through an OVN load balancer VIP).
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
    kind = "OvnDnatRule",
    singular = "ovn-dnat-rule",
    plural = "ovn-dnat-rules",
    shortname = "odnat",
    status = "OvnDnatRuleStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN OVN DNAT rule: forwards a port of an OvnEip to an internal address.",
    printcolumn(name = "Vpc", type_ = "string", json_path = ".status.vpc"),
    printcolumn(name = "Eip", type_ = "string", json_path = ".spec.ovnEip"),
    printcolumn(name = "Protocol", type_ = "string", json_path = ".status.protocol"),
    printcolumn(name = "V4Eip", type_ = "string", json_path = ".status.v4Eip"),
    printcolumn(name = "V6Eip", type_ = "string", json_path = ".status.v6Eip"),
    printcolumn(name = "V4Ip", type_ = "string", json_path = ".status.v4Ip"),
    printcolumn(name = "V6Ip", type_ = "string", json_path = ".status.v6Ip"),
    printcolumn(name = "InternalPort", type_ = "string", json_path = ".status.internalPort"),
    printcolumn(name = "ExternalPort", type_ = "string", json_path = ".status.externalPort"),
    printcolumn(name = "IpName", type_ = "string", json_path = ".spec.ipName"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct OvnDnatRuleSpec {
    /// External port (string, as in Kube-OVN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_port: Option<String>,
    /// Internal port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_port: Option<String>,
    /// IP or Vip CR naming the internal address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_name: Option<String>,
    /// `ip` or `vip`: what `ipName` refers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_type: Option<String>,
    /// OvnEip to forward from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ovn_eip: Option<String>,
    /// `tcp` or `udp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Internal IPv4 address when no `ipName` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_ip: Option<String>,
    /// Internal IPv6 address when no `ipName` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_ip: Option<String>,
    /// VPC whose router carries the load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(OvnDnatRuleSpec);

/// Observed state of an OvnDnatRule.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OvnDnatRuleStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// External port in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_port: Option<String>,
    /// Internal port in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_port: Option<String>,
    /// IP or Vip CR in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_name: Option<String>,
    /// Protocol in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The load balancer VIP exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// External IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_eip: Option<String>,
    /// Internal IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_ip: Option<String>,
    /// External IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_eip: Option<String>,
    /// Internal IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_ip: Option<String>,
    /// VPC whose router carries the load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
