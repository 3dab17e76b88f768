//! `Vip` (`vips.kubeovn.io`): an address reserved in a subnet for use as a virtual IP (keepalived,
//! allowed-address-pairs, switch load balancers) rather than by one pod.
//!
//! Vip has a `status` field but Kube-OVN registers the CRD without the status subresource (the
//! controller updates the whole object); [`super::crds`] removes the subresource that
//! `kube-derive` adds.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::condition::Condition;
use super::schema::{ExtraFields, spec_absent_is_default};

/// Desired state of a Vip.
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
    kind = "Vip",
    singular = "vip",
    plural = "vips",
    shortname = "vip",
    status = "VipStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN virtual IP: an address reserved in a subnet for shared or floating use.",
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.namespace"),
    printcolumn(name = "V4IP", type_ = "string", json_path = ".status.v4ip"),
    printcolumn(name = "V6IP", type_ = "string", json_path = ".status.v6ip"),
    printcolumn(name = "Mac", type_ = "string", json_path = ".status.mac"),
    printcolumn(name = "Subnet", type_ = "string", json_path = ".spec.subnet"),
    printcolumn(name = "Type", type_ = "string", json_path = ".status.type")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct VipSpec {
    /// Subnets of attachment networks to reserve on as well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_subnets: Option<Vec<String>>,
    /// Requested MAC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    /// Namespace of the pods using the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Pod selector (`key: value` strings) for allowed-address-pair use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<Vec<String>>,
    /// Subnet to reserve in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    /// Kind of VIP (empty, `switch_lb_vip`, ...).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
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
spec_absent_is_default!(VipSpec);

/// Observed state of a Vip.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct VipStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Allocated MAC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Selector in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<Vec<String>>,
    /// Kind of VIP in effect.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Allocated IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4ip: Option<String>,
    /// Allocated IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6ip: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
