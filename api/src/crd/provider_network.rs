//! `ProviderNetwork` (`provider-networks.kubeovn.io`): which host NIC carries an underlay
//! network on which nodes.
//!
//! The daemon on each selected node moves the NIC into an OVS bridge `br-<name>`, adds the
//! bridge mapping `<name>:br-<name>` and labels the node
//! (`<name>.provider-network.kubernetes.io/{ready,interface,mtu}`); the controller aggregates
//! those labels into the status. Interface names are Linux names: at most 15 characters, no `/`
//! or whitespace, which the schema enforces as Kube-OVN's does.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_core::ResourceExt;
use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::condition::ProviderNetworkCondition;
use super::schema::{ExtraFields, require, spec_absent_is_default};
use crate::selector::{Selector, SelectorError};

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

/// The OVS bridge a provider network's NIC joins on each node: `br-<name>` (Kube-OVN's
/// `ExternalBridgeName`).
pub fn provider_bridge_name(provider_network: &str) -> String {
    format!("br-{provider_network}")
}

impl ProviderNetwork {
    /// The NIC that carries this network on `node`: the first `customInterfaces` entry that lists
    /// the node, else `defaultInterface` (Kube-OVN's rule).
    pub fn nic_for(&self, node: &str) -> Option<&str> {
        self.spec
            .custom_interfaces
            .iter()
            .flatten()
            .find(|custom| custom.nodes.iter().flatten().any(|n| n == node))
            .and_then(|custom| custom.interface.as_deref())
            .or(self.spec.default_interface.as_deref())
    }

    /// Whether the node named `node` with `labels` is left out of this network. As Kube-OVN:
    /// when `nodeSelector` is set it alone decides (a node it does not select is left out and
    /// `excludeNodes` is ignored); otherwise the nodes named in `excludeNodes` are left out.
    pub fn excludes(&self, node: &str, labels: &BTreeMap<String, String>) -> Result<bool, SelectorError> {
        if let Some(selector) = &self.spec.node_selector {
            let selector = Selector::parse(Some(selector), "spec.nodeSelector")?;
            return Ok(!selector.matches(labels));
        }
        Ok(self.spec.exclude_nodes.iter().flatten().any(|n| n == node))
    }

    /// `br-<name>`, see [`provider_bridge_name`].
    pub fn bridge_name(&self) -> String {
        provider_bridge_name(&self.name_any())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn pn(spec: ProviderNetworkSpec) -> ProviderNetwork {
        ProviderNetwork::new("net1", spec)
    }

    fn custom(interface: &str, nodes: &[&str]) -> CustomInterface {
        CustomInterface {
            interface: Some(interface.into()),
            nodes: Some(nodes.iter().map(|n| (*n).to_owned()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn nic_is_the_first_custom_interface_listing_the_node_else_the_default() {
        let net = pn(ProviderNetworkSpec {
            default_interface: Some("eth1".into()),
            custom_interfaces: Some(vec![custom("bond0", &["n1", "n2"]), custom("eth9", &["n2"])]),
            ..Default::default()
        });
        assert_eq!(net.nic_for("n1"), Some("bond0"));
        assert_eq!(net.nic_for("n2"), Some("bond0"));
        assert_eq!(net.nic_for("n3"), Some("eth1"));
        assert_eq!(pn(ProviderNetworkSpec::default()).nic_for("n3"), None);
        assert_eq!(net.bridge_name(), "br-net1");
    }

    #[test]
    fn node_selector_alone_decides_when_set_else_exclude_nodes() {
        let labels = BTreeMap::from([("rack".to_owned(), "a".to_owned())]);
        let by_name = pn(ProviderNetworkSpec {
            exclude_nodes: Some(vec!["n1".into()]),
            ..Default::default()
        });
        assert!(by_name.excludes("n1", &labels).unwrap());
        assert!(!by_name.excludes("n2", &labels).unwrap());

        let by_selector = pn(ProviderNetworkSpec {
            exclude_nodes: Some(vec!["n1".into()]),
            node_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("rack".into(), "a".into())])),
                ..Default::default()
            }),
            ..Default::default()
        });
        // n1 is selected: excludeNodes is ignored once nodeSelector is set (Kube-OVN's rule).
        assert!(!by_selector.excludes("n1", &labels).unwrap());
        assert!(by_selector.excludes("n2", &BTreeMap::new()).unwrap());

        let bad = pn(ProviderNetworkSpec {
            node_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "rack".into(),
                    operator: "Near".into(),
                    values: None,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let err = bad.excludes("n1", &labels).unwrap_err();
        assert!(err.to_string().contains("spec.nodeSelector"), "{err}");
    }
}
