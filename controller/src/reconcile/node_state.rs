//! What a Node object says that several reconcilers read: its own addresses and whether it may
//! carry traffic. Pure: no I/O.

use k8s_openapi::api::core::v1::Node;

/// The node's own addresses (`InternalIP`): the node policy (30000) matches them, no pod is given
/// one, and no default-VPC subnet may hold one. Read as the node daemon reads them.
pub use kube_ovn_api::node::internal_ips;

/// Whether a node may carry gateway traffic: its `Ready` condition is not `False` or `Unknown` and
/// its network is not unavailable. Kube-OVN also requires `Ready` to be present; we take a node
/// without one (no kubelet has reported yet, or none runs, as in tests) as ready, and rely on the
/// node lifecycle controller, which sets `Unknown` when a kubelet stops reporting.
pub fn node_ready(node: &Node) -> bool {
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    conditions.iter().all(|c| match c.type_.as_str() {
        "Ready" => c.status == "True",
        "NetworkUnavailable" => c.status != "True",
        _ => true,
    })
}
