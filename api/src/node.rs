//! What a Node object says about the machine, read the way Kube-OVN reads it, for every binary
//! that needs it (the controller's node policies and IPAM, the node daemon's route sources).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node;

/// The node's `InternalIP` addresses (`status.addresses`), in the order the Node lists them;
/// entries that do not parse as an address are left out.
pub fn internal_ips(node: &Node) -> Vec<IpAddr> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect()
}

/// The first `InternalIP` of each family, `(IPv4, IPv6)`, as Kube-OVN's `GetNodeInternalIP`
/// splits them; `None` for a family the node has no address of.
pub fn internal_ip_per_family(node: &Node) -> (Option<IpAddr>, Option<IpAddr>) {
    let ips = internal_ips(node);
    (
        ips.iter().copied().find(IpAddr::is_ipv4),
        ips.iter().copied().find(IpAddr::is_ipv6),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_ips_by_family_skip_other_types_and_garbage() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {"addresses": [
                {"type": "Hostname", "address": "n1"},
                {"type": "ExternalIP", "address": "203.0.113.9"},
                {"type": "InternalIP", "address": "fd00::5"},
                {"type": "InternalIP", "address": "not-an-ip"},
                {"type": "InternalIP", "address": "172.18.0.2"},
                {"type": "InternalIP", "address": "172.18.0.3"},
            ]}
        }))
        .unwrap();
        let v4: IpAddr = "172.18.0.2".parse().unwrap();
        let v6: IpAddr = "fd00::5".parse().unwrap();
        assert_eq!(internal_ips(&node), vec![v6, v4, "172.18.0.3".parse().unwrap()]);
        assert_eq!(internal_ip_per_family(&node), (Some(v4), Some(v6)));
        let bare: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n2"}})).unwrap();
        assert_eq!(internal_ip_per_family(&bare), (None, None));
    }
}
