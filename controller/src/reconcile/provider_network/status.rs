//! A ProviderNetwork's status from the nodes, as Kube-OVN's `resyncProviderNetworkStatus`
//! (`pkg/controller/provider_network.go`) computes it, and the checks of its spec. Pure.
//!
//! For each node the network applies to (not excluded by `nodeSelector` / `excludeNodes`): the
//! daemon's label `<pn>.provider-network.kubernetes.io/ready=true` makes it ready (condition
//! `Ready` True, reason `InitOVSBridgeSucceeded`); otherwise it is not ready (condition `Ready`
//! False, reason `InitOVSBridgeFailed`) with the message the node's kube-ovn-cni pod left in its
//! `<pn>.provider-network.kubernetes.io/err_mesg` annotation, `unknown error` when it left none,
//! or `kube-ovn-cni pod on node <n> not found`. Conditions of other nodes go. `ready` is true
//! when no node is not ready. `vlans` is the Vlan reconciler's and passes through.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube_ovn_api::annotations::keys::provider_network_label;
use kube_ovn_api::crd::condition::{Condition, ConditionStatus, READY, VALIDATED};
use kube_ovn_api::crd::{ProviderNetwork, ProviderNetworkCondition, ProviderNetworkStatus};
use kube_ovn_api::selector::Selector;

use crate::config::underlay::MAX_PROVIDER_NAME;

/// Kube-OVN's reasons of the per-node `Ready` condition.
pub const REASON_READY: &str = "InitOVSBridgeSucceeded";
pub const REASON_NOT_READY: &str = "InitOVSBridgeFailed";
/// The Warning event's and the `Validated` condition's reason for an unusable spec (ours).
pub const REASON_INVALID: &str = "InvalidProviderNetwork";

/// A node as the planner needs it.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// What a node's kube-ovn-cni pod says about this network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CniPod<'a> {
    /// No kube-ovn-cni pod on the node.
    Missing,
    /// The pod, and its `err_mesg` annotation for this network if any.
    Found(Option<&'a str>),
}

fn interface_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.len() > 15 {
        Some("is longer than 15 characters (a Linux interface name)")
    } else if name.contains('/') || name.chars().any(char::is_whitespace) {
        Some("contains '/' or whitespace (not a Linux interface name)")
    } else {
        None
    }
}

/// Why the spec cannot be used, naming the object and the field; `Ok` when it can. The schema
/// refuses most of this already; objects stored before it (or by another schema) are checked
/// here so that no node is half-configured from them.
pub fn validate(pn: &ProviderNetwork) -> Result<(), String> {
    let name = pn.name_any();
    let fail = |field: &str, why: &str| Err(format!("provider network {name}: {field} {why}"));
    if name.len() > MAX_PROVIDER_NAME {
        return fail(
            "metadata.name",
            &format!(
                "is longer than {MAX_PROVIDER_NAME} characters: its bridge br-{name} would not fit a \
                 15-character interface name"
            ),
        );
    }
    match pn.spec.default_interface.as_deref() {
        None => return fail("spec.defaultInterface", "is missing"),
        Some(nic) => {
            if let Some(why) = interface_problem(nic) {
                return fail("spec.defaultInterface", &format!("{nic:?} {why}"));
            }
        }
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, custom) in pn.spec.custom_interfaces.iter().flatten().enumerate() {
        let nic = custom.interface.as_deref().unwrap_or_default();
        if let Some(why) = interface_problem(nic) {
            return fail(
                &format!("spec.customInterfaces[{i}].interface"),
                &format!("{nic:?} {why}"),
            );
        }
        for node in custom.nodes.iter().flatten() {
            if let Some(first) = seen.insert(node, i) {
                return fail(
                    &format!("spec.customInterfaces[{i}].nodes"),
                    &format!("lists node {node} already in spec.customInterfaces[{first}]"),
                );
            }
        }
    }
    if let Err(e) = Selector::parse(pn.spec.node_selector.as_ref(), "spec.nodeSelector") {
        return Err(format!("provider network {name}: {e}"));
    }
    Ok(())
}

/// Kube-OVN's `setNodeConditionValue`: the node's `Ready` condition set to `status`, `reason`,
/// `message`; timestamps move only when something changed (`lastTransitionTime` only when the
/// status flips). Returns whether it changed.
fn set_node(
    conditions: &mut Vec<ProviderNetworkCondition>,
    node: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: &Time,
) -> bool {
    let existing = conditions
        .iter_mut()
        .find(|c| c.node.as_deref() == Some(node) && c.condition.type_ == READY);
    let Some(c) = existing else {
        let mut condition = Condition::new(READY, status, reason, message);
        condition.last_update_time = Some(now.clone());
        condition.last_transition_time = Some(now.clone());
        conditions.push(ProviderNetworkCondition {
            condition,
            node: Some(node.to_owned()),
        });
        return true;
    };
    let c = &mut c.condition;
    if c.status == status && c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message) {
        return false;
    }
    c.last_update_time = Some(now.clone());
    if c.status != status {
        c.last_transition_time = Some(now.clone());
    }
    c.status = status;
    c.reason = Some(reason.to_owned());
    c.message = Some(message.to_owned());
    true
}

/// The status the network should have, or `None` when it has it already. `cni` maps a node name
/// to its kube-ovn-cni pod (absent: no pod). The spec must have passed [`validate`].
pub fn plan_status(
    pn: &ProviderNetwork,
    nodes: &[NodeView<'_>],
    cni: &BTreeMap<&str, CniPod<'_>>,
    now: &Time,
) -> Option<ProviderNetworkStatus> {
    let name = pn.name_any();
    let ready_label = provider_network_label(&name, "ready");
    let old = pn.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let mut conditions = status.conditions.take().unwrap_or_default();
    let mut changed = false;
    let (mut ready, mut not_ready) = (Vec::new(), Vec::new());
    let mut nodes: Vec<NodeView<'_>> = nodes.to_vec();
    nodes.sort_by_key(|n| n.name);
    for node in nodes {
        // validate() parsed the selector already; a node it cannot judge is skipped as Kube-OVN does.
        if pn.excludes(node.name, node.labels).unwrap_or(true) {
            continue;
        }
        if node.labels.get(&ready_label).map(String::as_str) == Some("true") {
            changed |= set_node(
                &mut conditions,
                node.name,
                ConditionStatus::True,
                REASON_READY,
                "",
                now,
            );
            ready.push(node.name.to_owned());
        } else {
            let message = match cni.get(node.name).copied().unwrap_or(CniPod::Missing) {
                CniPod::Missing => format!("kube-ovn-cni pod on node {} not found", node.name),
                CniPod::Found(Some(m)) if !m.is_empty() => m.to_owned(),
                CniPod::Found(_) => "unknown error".to_owned(),
            };
            changed |= set_node(
                &mut conditions,
                node.name,
                ConditionStatus::False,
                REASON_NOT_READY,
                &message,
                now,
            );
            not_ready.push(node.name.to_owned());
        }
    }
    // Conditions of nodes neither ready nor not ready (excluded, gone), and the spec's
    // `Validated` condition once the spec is fine again.
    let before = conditions.len();
    conditions.retain(|c| {
        c.node
            .as_deref()
            .is_some_and(|n| ready.iter().chain(&not_ready).any(|m| m == n))
    });
    changed |= conditions.len() != before;
    let list = |v: Vec<String>| (!v.is_empty()).then_some(v);
    let sorted = |v: &Option<Vec<String>>| {
        let mut v = v.clone().unwrap_or_default();
        v.sort();
        v
    };
    changed |= sorted(&old.ready_nodes) != ready || sorted(&old.not_ready_nodes) != not_ready;
    changed |= old.ready != Some(not_ready.is_empty());
    status.ready = Some(not_ready.is_empty());
    status.ready_nodes = list(ready);
    status.not_ready_nodes = list(not_ready);
    status.conditions = (!conditions.is_empty()).then_some(conditions);
    changed.then_some(status)
}

/// The status of a network whose spec failed [`validate`]: a `Validated` False condition with
/// no node (reason [`REASON_INVALID`], the message naming the field), the rest left as it was;
/// `None` when it says so already.
pub fn invalid_status(pn: &ProviderNetwork, message: &str, now: &Time) -> Option<ProviderNetworkStatus> {
    let mut status = pn.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.take().unwrap_or_default();
    let existing = conditions
        .iter()
        .position(|c| c.node.is_none() && c.condition.type_ == VALIDATED);
    if let Some(i) = existing {
        let c = &conditions[i].condition;
        if c.status == ConditionStatus::False && c.message.as_deref() == Some(message) {
            return None;
        }
        conditions.remove(i);
    }
    let mut condition = Condition::new(VALIDATED, ConditionStatus::False, REASON_INVALID, message);
    condition.last_update_time = Some(now.clone());
    condition.last_transition_time = Some(now.clone());
    conditions.push(ProviderNetworkCondition {
        condition,
        node: None,
    });
    status.conditions = Some(conditions);
    Some(status)
}

#[cfg(test)]
mod tests;
