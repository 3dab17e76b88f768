//! NAT inside a VPC NAT gateway pod: `IptablesEIP`, `IptablesFIPRule`, `IptablesSnatRule`,
//! `IptablesDnatRule`.
//!
//! An IptablesEIP is an address of an external subnet placed on the gateway's external NIC; its
//! `natGwDp` names the VpcNatGateway. FIP is 1:1 DNAT+SNAT, SNAT translates an internal CIDR,
//! DNAT forwards one port. Kube-OVN applies these as iptables rules inside the gateway pod and
//! uses the `redo` status fields as a handshake to re-apply after a gateway restart. DNAT rules
//! of type `share` may share one EIP:port among several, load-balanced backends (IPv4 only);
//! `exclusive` (the CRD default) allows one.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::condition::Condition;
use super::schema::{ExtraFields, spec_absent_is_default};

/// Desired state of an IptablesEIP.
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
    kind = "IptablesEIP",
    singular = "iptables-eip",
    plural = "iptables-eips",
    shortname = "eip",
    status = "IptablesEIPStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN iptables EIP: an external address held by a VPC NAT gateway.",
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.namespace"),
    printcolumn(name = "ExternalSubnet", type_ = "string", json_path = ".spec.externalSubnet"),
    printcolumn(name = "IP", type_ = "string", json_path = ".status.ip"),
    printcolumn(name = "Mac", type_ = "string", json_path = ".spec.macAddress"),
    printcolumn(name = "Nat", type_ = "string", json_path = ".status.nat"),
    printcolumn(name = "NatGwDp", type_ = "string", json_path = ".spec.natGwDp"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct IptablesEIPSpec {
    /// External subnet the address comes from (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_subnet: Option<String>,
    /// MAC of the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    /// Namespace of the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// VpcNatGateway holding the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_gw_dp: Option<String>,
    /// QoSPolicy applied to the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_policy: Option<String>,
    /// Requested IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4ip: Option<String>,
    /// Requested IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6ip: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(IptablesEIPSpec);

/// Observed state of an IptablesEIP.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IptablesEIPStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Allocated address(es).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// Which NAT kinds use the address (`fip`, `snat`, `dnat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat: Option<String>,
    /// QoSPolicy in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_policy: Option<String>,
    /// The address is configured in the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Re-apply marker (a timestamp string) set after a gateway restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redo: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Desired state of an IptablesFIPRule.
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
    kind = "IptablesFIPRule",
    singular = "iptables-fip-rule",
    plural = "iptables-fip-rules",
    shortname = "fip",
    status = "IptablesFIPRuleStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN iptables floating IP: 1:1 NAT between an IptablesEIP and an internal address.",
    printcolumn(name = "Eip", type_ = "string", json_path = ".spec.eip"),
    printcolumn(name = "V4ip", type_ = "string", json_path = ".status.v4ip"),
    printcolumn(name = "InternalIp", type_ = "string", json_path = ".spec.internalIp"),
    printcolumn(name = "V6ip", type_ = "string", json_path = ".status.v6ip"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready"),
    printcolumn(name = "NatGwDp", type_ = "string", json_path = ".status.natGwDp")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct IptablesFIPRuleSpec {
    /// IptablesEIP to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eip: Option<String>,
    /// Internal address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_ip: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(IptablesFIPRuleSpec);

/// Observed state of an IptablesFIPRule.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IptablesFIPRuleStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Internal address in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_ip: Option<String>,
    /// Gateway the rule lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_gw_dp: Option<String>,
    /// The rule is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Re-apply marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redo: Option<String>,
    /// External IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4ip: Option<String>,
    /// External IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6ip: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Desired state of an IptablesSnatRule.
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
    kind = "IptablesSnatRule",
    singular = "iptables-snat-rule",
    plural = "iptables-snat-rules",
    shortname = "snat",
    status = "IptablesSnatRuleStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN iptables SNAT rule: source NAT of an internal CIDR to an IptablesEIP.",
    printcolumn(name = "EIP", type_ = "string", json_path = ".spec.eip"),
    printcolumn(name = "V4ip", type_ = "string", json_path = ".status.v4ip"),
    printcolumn(name = "V6ip", type_ = "string", json_path = ".status.v6ip"),
    printcolumn(name = "InternalCIDR", type_ = "string", json_path = ".spec.internalCIDR"),
    printcolumn(name = "NatGwDp", type_ = "string", json_path = ".status.natGwDp"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct IptablesSnatRuleSpec {
    /// IptablesEIP to translate to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eip: Option<String>,
    /// Internal CIDR to translate.
    #[serde(rename = "internalCIDR", default, skip_serializing_if = "Option::is_none")]
    pub internal_cidr: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(IptablesSnatRuleSpec);

/// Observed state of an IptablesSnatRule.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IptablesSnatRuleStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Internal CIDR in effect.
    #[serde(rename = "internalCIDR", default, skip_serializing_if = "Option::is_none")]
    pub internal_cidr: Option<String>,
    /// Gateway the rule lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_gw_dp: Option<String>,
    /// The rule is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Re-apply marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redo: Option<String>,
    /// External IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4ip: Option<String>,
    /// External IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6ip: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Whether an IptablesDnatRule owns its external `eip:port` alone or shares it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DnatType {
    /// One rule per external `eip:port` (CRD default).
    #[default]
    Exclusive,
    /// Several rules on one `eip:port`, load-balanced (IPv4 only).
    Share,
}

/// Desired state of an IptablesDnatRule.
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
    kind = "IptablesDnatRule",
    singular = "iptables-dnat-rule",
    plural = "iptables-dnat-rules",
    shortname = "dnat",
    status = "IptablesDnatRuleStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN iptables DNAT rule: forwards a port of an IptablesEIP to an internal address.",
    printcolumn(name = "Eip", type_ = "string", json_path = ".spec.eip"),
    printcolumn(name = "Protocol", type_ = "string", json_path = ".spec.protocol"),
    printcolumn(name = "V4ip", type_ = "string", json_path = ".status.v4ip"),
    printcolumn(name = "V6ip", type_ = "string", json_path = ".status.v6ip"),
    printcolumn(name = "InternalIp", type_ = "string", json_path = ".spec.internalIp"),
    printcolumn(name = "ExternalPort", type_ = "string", json_path = ".spec.externalPort"),
    printcolumn(name = "InternalPort", type_ = "string", json_path = ".spec.internalPort"),
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "NatGwDp", type_ = "string", json_path = ".status.natGwDp"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct IptablesDnatRuleSpec {
    /// IptablesEIP to forward from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eip: Option<String>,
    /// External port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_port: Option<String>,
    /// Internal address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_ip: Option<String>,
    /// Internal port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_port: Option<String>,
    /// `tcp` or `udp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// `exclusive` (CRD default) or `share`; unset reads as `exclusive` on a server that applied
    /// the default.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "exclusive"))]
    pub type_: Option<DnatType>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(IptablesDnatRuleSpec);

/// Observed state of an IptablesDnatRule.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IptablesDnatRuleStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// External port in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_port: Option<String>,
    /// Internal address in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_ip: Option<String>,
    /// Internal port in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_port: Option<String>,
    /// Gateway the rule lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_gw_dp: Option<String>,
    /// Protocol in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The rule is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Re-apply marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redo: Option<String>,
    /// External IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4ip: Option<String>,
    /// External IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6ip: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
