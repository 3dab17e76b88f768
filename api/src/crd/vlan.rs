//! `Vlan` (`vlans.kubeovn.io`): a VLAN ID on a provider network, referenced by underlay subnets.
//!
//! A subnet using a Vlan waits until the Vlan's name appears in its ProviderNetwork's
//! `status.vlans`. Two Vlans with the same provider and the same non-zero ID conflict
//! (`status.conflict`), and subnets using the conflicting one are rejected.

use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::condition::Condition;
use super::schema::{ExtraFields, require, spec_absent_is_default};

/// Desired state of a Vlan.
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
    kind = "Vlan",
    singular = "vlan",
    plural = "vlans",
    shortname = "vlan",
    status = "VlanStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN VLAN: a VLAN ID on a provider network, used by underlay subnets.",
    printcolumn(name = "ID", type_ = "string", json_path = ".spec.id"),
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider"),
    printcolumn(name = "conflict", type_ = "boolean", json_path = ".status.conflict")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
#[schemars(transform = required_fields)]
pub struct VlanSpec {
    /// VLAN ID, 0-4095 (0 = untagged; immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "vlan_id")]
    pub id: Option<u16>,
    /// ProviderNetwork name (required, immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Deprecated: use `provider`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_interface_name: Option<String>,
    /// Deprecated: use `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "vlan_id")]
    pub vlan_id: Option<u16>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(VlanSpec);

impl VlanSpec {
    /// The VLAN ID: `id`, else the deprecated `vlanId`, else 0 (untagged).
    pub fn effective_id(&self) -> u16 {
        self.id.or(self.vlan_id).unwrap_or(0)
    }

    /// The ProviderNetwork: `provider`, else the deprecated `providerInterfaceName`.
    pub fn effective_provider(&self) -> Option<&str> {
        self.provider
            .as_deref()
            .or(self.provider_interface_name.as_deref())
            .filter(|p| !p.is_empty())
    }
}

fn required_fields(schema: &mut Schema) {
    require(schema, &["provider"]);
}

/// A plain `integer` bounded to the 12-bit VLAN ID space, as in Kube-OVN's CRD.
fn vlan_id(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "minimum": 0, "maximum": 4095 })
}

/// Observed state of a Vlan.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct VlanStatus {
    /// `Ready`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Another Vlan has the same provider and ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<bool>,
    /// Subnets using this Vlan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnets: Option<Vec<String>>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
