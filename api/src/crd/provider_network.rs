//! `ProviderNetwork` (`provider-networks.kubeovn.io`): which host NIC carries an underlay
//! network on which nodes.
//!
//! The daemon on each selected node moves the NIC into an OVS bridge `br-<name>`, adds the
//! bridge mapping `<name>:br-<name>` and labels the node
//! (`<name>.provider-network.kubernetes.io/{ready,interface,mtu}`); the controller aggregates
//! those labels into the status. Interface names are Linux names: at most 15 characters, no `/`
//! or whitespace, which the schema enforces as Kube-OVN's does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::condition::ProviderNetworkCondition;
use super::schema::{ExtraFields, require, spec_absent_is_default};

/// Desired state of a ProviderNetwork.
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
    kind = "ProviderNetwork",
    singular = "provider-network",
    plural = "provider-networks",
    shortname = "pn",
    status = "ProviderNetworkStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN provider network: the host NIC that carries an underlay network, per node.",
    printcolumn(
        name = "DefaultInterface",
        type_ = "string",
        json_path = ".spec.defaultInterface"
    ),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
#[schemars(transform = required_fields)]
pub struct ProviderNetworkSpec {
    /// Create missing VLAN sub-interfaces listed in `vlanInterfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_create_vlan_subinterfaces: Option<bool>,
    /// Per-node interface overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_interfaces: Option<Vec<CustomInterface>>,
    /// Interface used on nodes without an override (required, immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 15), regex(pattern = r"^[^/\s]+$"))]
    pub default_interface: Option<String>,
    /// Swap the names of the NIC and the bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange_link_name: Option<bool>,
    /// Nodes left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_nodes: Option<Vec<String>>,
    /// Nodes included (all when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Keep VLAN sub-interfaces of the NIC working after it joins the bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_vlan_interfaces: Option<bool>,
    /// VLAN sub-interfaces (`name.vid`) to preserve or create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan_interfaces: Option<Vec<String>>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(ProviderNetworkSpec);

fn required_fields(schema: &mut Schema) {
    require(schema, &["defaultInterface"]);
}

/// An interface override for some nodes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CustomInterface {
    /// Interface name on those nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 15), regex(pattern = r"^[^/\s]+$"))]
    pub interface: Option<String>,
    /// Nodes using this interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Observed state of a ProviderNetwork.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProviderNetworkStatus {
    /// One condition per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<ProviderNetworkCondition>>,
    /// Selected nodes where the network is not (yet) set up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready_nodes: Option<Vec<String>>,
    /// Ready on every selected node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Nodes where the network is set up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_nodes: Option<Vec<String>>,
    /// Vlans accepted on this network (a subnet's Vlan must be listed before it is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlans: Option<Vec<String>>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
