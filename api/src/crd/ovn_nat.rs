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
    /// The node where the address lives now (a kube-ovn-rs extension, not in Kube-OVN; the
    /// Subnet's spelling and meaning): for a VPC router's `lrp` EIP the node whose chassis holds
    /// the router's gateway port (`cr-<lrp>` in the southbound database), for an EIP of a
    /// distributed OvnFip the node of the pod. Written by the controller only; the BGP speaker
    /// of that node announces the address when it carries `ovn.kubernetes.io/bgp: "true"`.
    #[serde(rename = "activateGateway", default, skip_serializing_if = "Option::is_none")]
    pub activate_gateway: Option<String>,
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

/// A value of a spec field this version does not know: the field (`spec.<name>`), the value, and
/// the values it takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.{field} {value:?} is not one of {allowed}")]
pub struct UnknownValue {
    pub field: &'static str,
    pub value: String,
    pub allowed: &'static str,
}

/// An OvnEip's type (`spec.type`, Kube-OVN's `OvnEipType*`): `lrp` (a VPC router's port on the
/// external subnet), `lsp` (a node-side BFD/ECMP next hop), `nat` (used by FIP, SNAT and DNAT
/// rules; an empty type means `nat`, as Kube-OVN fills it in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OvnEipType {
    Lrp,
    Lsp,
    Nat,
}

impl OvnEipType {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Lrp => "lrp",
            Self::Lsp => "lsp",
            Self::Nat => "nat",
        }
    }

    /// `spec.type`: absent or empty is `nat`; anything else unknown is refused (Kube-OVN's
    /// controller would carry an unknown type into the label and status unchecked).
    pub fn parse(value: Option<&str>) -> Result<Self, UnknownValue> {
        match value.unwrap_or_default() {
            "" | "nat" => Ok(Self::Nat),
            "lrp" => Ok(Self::Lrp),
            "lsp" => Ok(Self::Lsp),
            other => Err(UnknownValue {
                field: "type",
                value: other.to_owned(),
                allowed: "lrp, lsp, nat",
            }),
        }
    }
}

impl std::fmt::Display for OvnEipType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind of rule that uses an OvnEip, as `status.nat` lists them. The order of the variants is
/// Kube-OVN's order in that list (`getOvnEipNat`: dnat, fip, snat).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NatKind {
    Dnat,
    Fip,
    Snat,
}

impl NatKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Dnat => "dnat",
            Self::Fip => "fip",
            Self::Snat => "snat",
        }
    }

    /// `status.nat` for these users: each kind once, in Kube-OVN's order, comma-joined; empty
    /// when nothing uses the EIP.
    pub fn status_value(kinds: impl IntoIterator<Item = Self>) -> String {
        let set: std::collections::BTreeSet<Self> = kinds.into_iter().collect();
        set.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(",")
    }

    /// The kinds a `status.nat` value names (unknown words are skipped: they came from someone
    /// else's writer and mean nothing to us).
    pub fn parse_status(value: &str) -> Vec<Self> {
        let mut kinds: Vec<Self> = value
            .split(',')
            .filter_map(|w| match w.trim() {
                "dnat" => Some(Self::Dnat),
                "fip" => Some(Self::Fip),
                "snat" => Some(Self::Snat),
                _ => None,
            })
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

/// Where an OvnFip's NAT runs (`spec.type`): `None` when empty, which Kube-OVN resolves from the
/// `ovn-external-gw-config` ConfigMap's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FipType {
    Distributed,
    Centralized,
}

impl FipType {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Distributed => "distributed",
            Self::Centralized => "centralized",
        }
    }

    /// `spec.type` of an OvnFip: absent or empty is `None`; an unknown value is refused.
    pub fn parse(value: Option<&str>) -> Result<Option<Self>, UnknownValue> {
        match value.unwrap_or_default() {
            "" => Ok(None),
            "distributed" => Ok(Some(Self::Distributed)),
            "centralized" => Ok(Some(Self::Centralized)),
            other => Err(UnknownValue {
                field: "type",
                value: other.to_owned(),
                allowed: "distributed, centralized",
            }),
        }
    }
}

/// What a rule's `spec.ipName` names (`spec.ipType`): an IP CR (`ip`, also when empty) or a Vip
/// CR (`vip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpType {
    Ip,
    Vip,
}

impl IpType {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ip => "ip",
            Self::Vip => "vip",
        }
    }

    /// `spec.ipType`: absent, empty or `ip` is an IP CR, `vip` a Vip CR; anything else is refused
    /// (Kube-OVN treats every value but `vip` as `ip`; a typo there would silently look up the
    /// wrong kind).
    pub fn parse(value: Option<&str>) -> Result<Self, UnknownValue> {
        match value.unwrap_or_default() {
            "" | "ip" => Ok(Self::Ip),
            "vip" => Ok(Self::Vip),
            other => Err(UnknownValue {
                field: "ipType",
                value: other.to_owned(),
                allowed: "ip, vip",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nat_status_lists_each_kind_once_in_kube_ovns_order() {
        use NatKind::{Dnat, Fip, Snat};
        assert_eq!(NatKind::status_value([Snat, Fip, Dnat, Snat]), "dnat,fip,snat");
        assert_eq!(NatKind::status_value([Snat]), "snat");
        assert_eq!(NatKind::status_value([]), "");
        assert_eq!(NatKind::parse_status("snat,dnat"), vec![Dnat, Snat]);
        assert_eq!(NatKind::parse_status(""), vec![]);
    }

    #[test]
    fn enum_fields_parse_and_refuse_unknown_values_naming_the_field() {
        assert_eq!(OvnEipType::parse(None), Ok(OvnEipType::Nat));
        assert_eq!(OvnEipType::parse(Some("")), Ok(OvnEipType::Nat));
        assert_eq!(OvnEipType::parse(Some("lrp")), Ok(OvnEipType::Lrp));
        assert_eq!(OvnEipType::parse(Some("lsp")), Ok(OvnEipType::Lsp));
        assert_eq!(FipType::parse(None), Ok(None));
        assert_eq!(
            FipType::parse(Some("centralized")),
            Ok(Some(FipType::Centralized))
        );
        assert_eq!(IpType::parse(None), Ok(IpType::Ip));
        assert_eq!(IpType::parse(Some("vip")), Ok(IpType::Vip));
        for (err, field) in [
            (OvnEipType::parse(Some("LRP")).unwrap_err(), "type"),
            (FipType::parse(Some("central")).unwrap_err(), "type"),
            (IpType::parse(Some("vips")).unwrap_err(), "ipType"),
        ] {
            assert!(err.to_string().starts_with(&format!("spec.{field} ")), "{err}");
        }
    }

    #[test]
    fn activate_gateway_is_our_status_field() {
        let status: OvnEipStatus =
            serde_json::from_value(serde_json::json!({"v4Ip": "10.200.0.100", "activateGateway": "node1"}))
                .unwrap();
        assert_eq!(status.activate_gateway.as_deref(), Some("node1"));
        assert!(status.extra.is_empty(), "a modelled field, not an extra one");
        assert_eq!(serde_json::to_value(&status).unwrap()["activateGateway"], "node1");
    }
}
