//! `IPPool` (`ippools.kubeovn.io`): a named slice of a subnet's addresses, bound to namespaces.
//!
//! Pools of one subnet must not overlap; the rest of the subnet forms its default pool. With
//! `enableAddressSet` the controller mirrors the pool into an OVN address set named after the
//! pool with `-` replaced by `.` ([`crate::names::ippool_address_set_name`]). Status counters
//! use upper-case `Available`/`Using` and `IPRange`, unlike Subnet's.

use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::condition::Condition;
use super::schema::{ExtraFields, IpCount, require, spec_absent_is_default};

/// Desired state of an IPPool.
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
    kind = "IPPool",
    singular = "ippool",
    plural = "ippools",
    shortname = "ippool",
    status = "IPPoolStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN IP pool: a named set of addresses from one subnet, bound to namespaces.",
    printcolumn(name = "Subnet", type_ = "string", json_path = ".spec.subnet"),
    printcolumn(
        name = "enableAddressSet",
        type_ = "boolean",
        json_path = ".spec.enableAddressSet"
    ),
    printcolumn(name = "IPs", type_ = "string", json_path = ".spec.ips"),
    printcolumn(name = "V4Used", type_ = "number", json_path = ".status.v4UsingIPs"),
    printcolumn(name = "V4Available", type_ = "number", json_path = ".status.v4AvailableIPs"),
    printcolumn(name = "V6Used", type_ = "number", json_path = ".status.v6UsingIPs"),
    printcolumn(name = "V6Available", type_ = "number", json_path = ".status.v6AvailableIPs")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
#[schemars(transform = required_fields)]
pub struct IPPoolSpec {
    /// Mirror the pool into an OVN address set (CRD default `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enable_address_set: Option<bool>,
    /// Addresses: single IPs, CIDRs or `a..b` ranges (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ips: Option<Vec<String>>,
    /// Namespaces whose pods allocate from this pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    /// Subnet the addresses belong to (required, immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(IPPoolSpec);

fn required_fields(schema: &mut Schema) {
    require(schema, &["ips", "subnet"]);
}

/// Observed state of an IPPool.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct IPPoolStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Free IPv4 addresses as ranges.
    #[serde(
        rename = "v4AvailableIPRange",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub v4_available_ip_range: Option<String>,
    /// Number of free IPv4 addresses.
    #[serde(rename = "v4AvailableIPs", default, skip_serializing_if = "Option::is_none")]
    pub v4_available_ips: Option<IpCount>,
    /// Allocated IPv4 addresses as ranges.
    #[serde(rename = "v4UsingIPRange", default, skip_serializing_if = "Option::is_none")]
    pub v4_using_ip_range: Option<String>,
    /// Number of allocated IPv4 addresses.
    #[serde(rename = "v4UsingIPs", default, skip_serializing_if = "Option::is_none")]
    pub v4_using_ips: Option<IpCount>,
    /// Free IPv6 addresses as ranges.
    #[serde(
        rename = "v6AvailableIPRange",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub v6_available_ip_range: Option<String>,
    /// Number of free IPv6 addresses.
    #[serde(rename = "v6AvailableIPs", default, skip_serializing_if = "Option::is_none")]
    pub v6_available_ips: Option<IpCount>,
    /// Allocated IPv6 addresses as ranges.
    #[serde(rename = "v6UsingIPRange", default, skip_serializing_if = "Option::is_none")]
    pub v6_using_ip_range: Option<String>,
    /// Number of allocated IPv6 addresses.
    #[serde(rename = "v6UsingIPs", default, skip_serializing_if = "Option::is_none")]
    pub v6_using_ips: Option<IpCount>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
