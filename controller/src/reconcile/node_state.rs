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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::reconcile::triggers::node_for_subnets;

    fn node(conditions: &serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {"conditions": conditions}}))
            .unwrap()
    }

    /// The node daemon's `ovn0` check writes `NetworkUnavailable` with Kube-OVN's reasons; a node
    /// whose join gateway is unreachable carries no gateway traffic, however Ready it is.
    #[test]
    fn network_unavailable_takes_a_ready_node_out_of_the_gateways() {
        let ready = json!({"type": "Ready", "status": "True"});
        let reachable = json!({"type": "NetworkUnavailable", "status": "False",
            "reason": "JoinSubnetGatewayReachable", "message": "ping check to gateway succeeded"});
        let unreachable = json!({"type": "NetworkUnavailable", "status": "True",
            "reason": "JoinSubnetGatewayUnreachable", "message": "ping check to gateway failed"});
        let up = node(&json!([ready, reachable]));
        let down = node(&json!([ready, unreachable]));
        assert!(node_ready(&up));
        assert!(!node_ready(&down));
        assert!(!node_ready(&node(
            &json!([{"type": "Ready", "status": "False"}, reachable])
        )));
        assert!(
            node_ready(&node(&json!([]))),
            "no kubelet has reported: taken as ready"
        );
        // The flip reaches the subnets, so a gateway moves as soon as it is written.
        assert!(node_for_subnets(&up, &down));
        assert!(!node_for_subnets(&up, &up.clone()));
    }
}
