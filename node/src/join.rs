//! The node's address on the join subnet, as the controller writes it on the Node (Kube-OVN's
//! `ovn.kubernetes.io/ip_address`, `cidr`, `gateway`, `mac_address`, once `allocated`), and the
//! name of the port that carries it (`ovn0`). Read by the node task (which makes `ovn0` and its
//! routes), the ovn0 check (which pings the gateways) and the egress task (which routes into
//! `ovn0`); it depends on none of them.

use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node as K8sNode;
use kube_ovn_api::annotations::{CidrPair, IpPair, MacAddr, get, is_true, keys};

/// The node port on `br-int` (Kube-OVN's name).
pub const OVN0: &str = "ovn0";

/// The join-subnet settings the controller wrote on the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinAddress {
    /// `ip_address` with the join CIDR's prefix length, per family.
    pub addresses: Vec<IpNet>,
    /// `gateway`, per family.
    pub gateways: Vec<IpAddr>,
    /// `mac_address`.
    pub mac: MacAddr,
}

/// Reads the controller's join annotations from the Node; `Ok(None)` until they are complete.
pub fn join_address(
    node: &K8sNode,
) -> Result<Option<JoinAddress>, kube_ovn_api::annotations::AnnotationError> {
    let ann = node.metadata.annotations.as_ref();
    if !is_true(ann, keys::ALLOCATED) {
        return Ok(None);
    }
    let (Some(ips), Some(cidrs), Some(gateways), Some(mac)) = (
        get::<IpPair>(ann, keys::IP_ADDRESS)?,
        get::<CidrPair>(ann, keys::CIDR)?,
        get::<IpPair>(ann, keys::GATEWAY)?,
        get::<MacAddr>(ann, keys::MAC_ADDRESS)?,
    ) else {
        return Ok(None);
    };
    let addresses = ips
        .addrs()
        .filter_map(|ip| {
            cidrs
                .nets()
                .find(|n| n.contains(&ip))
                .and_then(|n| IpNet::new(ip, n.prefix_len()).ok())
        })
        .collect();
    Ok(Some(JoinAddress {
        addresses,
        gateways: gateways.addrs().collect(),
        mac,
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn node(annotations: &[(&str, &str)]) -> K8sNode {
        let ann: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        serde_json::from_value(serde_json::json!({"metadata": {"name": "n1", "annotations": ann}})).unwrap()
    }

    #[test]
    fn join_address_needs_the_whole_handshake() {
        let full = [
            (keys::ALLOCATED, "true"),
            (keys::IP_ADDRESS, "100.64.0.2"),
            (keys::CIDR, "100.64.0.0/16"),
            (keys::GATEWAY, "100.64.0.1"),
            (keys::MAC_ADDRESS, "0a:00:00:64:00:02"),
        ];
        let join = join_address(&node(&full)).unwrap().unwrap();
        assert_eq!(join.addresses, vec!["100.64.0.2/16".parse::<IpNet>().unwrap()]);
        assert_eq!(join.gateways, vec!["100.64.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            join_address(&node(&full[1..])).unwrap(),
            None,
            "not allocated yet"
        );
        let mut bad = full;
        bad[1] = (keys::IP_ADDRESS, "100.64.0");
        assert_eq!(join_address(&node(&bad)).unwrap_err().key, keys::IP_ADDRESS);
    }
}
