//! Which speakers announce a centralized-gateway subnet: only those on its gateway nodes.
//!
//! A default-VPC subnet with `gatewayType: centralized` sends every packet leaving it through
//! its active gateway node (the controller's priority-29000 policy reroutes `ip4.src == <cidr>`
//! to that node's join address), or through one of its gateways with `enableEcmp`. Were the
//! subnet announced from every speaker, as Kube-OVN does, the ToR would send traffic for it to
//! any node while the answers leave through the gateway: an asymmetric path that a stateful
//! firewall, `rp_filter` or the gateway's NAT state (which drops mid-stream packets it has not
//! seen start) breaks. So here the subnet's CIDR, and its pods' addresses whatever
//! their policy (`cluster` or `local`, the pod's own or the subnet's), are announced only by the
//! speakers on the nodes `status.activateGateway` names: one node, or with ECMP every gateway in
//! use, comma-separated. The controller rewrites that field on failover, and the speaker
//! watches Subnets, so the old gateway withdraws and the new one announces on that event.
//!
//! A centralized subnet whose status names no gateway (none is ready, or the controller has not
//! chosen yet) is announced by no speaker: no node could carry its traffic either. Subnets of
//! custom VPCs have no node gateways (Kube-OVN applies `gatewayType` only in the default VPC),
//! so they keep Kube-OVN's rule.
//!
//! Pure: no I/O.

use kube_ovn_api::crd::Subnet;

/// Where a subnet's routes are announced from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Kube-OVN's rule: `cluster` from every speaker, `local` from the pod's node.
    ByPolicy,
    /// Only from these nodes (the subnet's gateways in use; possibly none).
    Gateways(Vec<String>),
}

impl Placement {
    /// Whether the speaker on `node` announces for a subnet placed by its gateways; `None` for
    /// one placed by policy.
    pub fn gateway_here(&self, node: &str) -> Option<bool> {
        match self {
            Placement::ByPolicy => None,
            Placement::Gateways(nodes) => Some(nodes.iter().any(|n| n == node)),
        }
    }
}

/// The placement of `subnet`; `cluster_router` is the default VPC's name (`--cluster-router`).
pub fn placement(subnet: &Subnet, cluster_router: &str) -> Placement {
    let spec = &subnet.spec;
    let vpc = spec.vpc.as_deref().unwrap_or_default();
    let default_vpc = vpc.is_empty() || vpc == cluster_router;
    if !default_vpc || spec.gateway_type.as_deref() != Some("centralized") {
        return Placement::ByPolicy;
    }
    let active = subnet
        .status
        .as_ref()
        .and_then(|s| s.activate_gateway.as_deref())
        .unwrap_or_default();
    Placement::Gateways(
        active
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn subnet(spec: &Value, active: Option<&str>) -> Subnet {
        let mut v = json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": "s"}, "spec": spec.clone()});
        if let Some(a) = active {
            v["status"] = json!({"activateGateway": a});
        }
        serde_json::from_value(v).unwrap()
    }

    fn gateways(names: &[&str]) -> Placement {
        Placement::Gateways(names.iter().map(|n| (*n).to_owned()).collect())
    }

    #[test]
    fn a_centralized_subnet_is_placed_on_its_active_gateways() {
        let central = json!({"cidrBlock": "10.30.0.0/16", "vpc": "ovn-cluster",
            "gatewayType": "centralized", "gatewayNode": "n1,n2"});
        let p = placement(&subnet(&central, Some("n2")), "ovn-cluster");
        assert_eq!(p, gateways(&["n2"]));
        assert_eq!(p.gateway_here("n2"), Some(true));
        assert_eq!(p.gateway_here("n1"), Some(false));
        // ECMP: every gateway in use, as the controller lists them.
        let p = placement(&subnet(&central, Some("n1, n2")), "ovn-cluster");
        assert_eq!(p, gateways(&["n1", "n2"]));
        // No gateway chosen (yet, or none ready): nobody.
        assert_eq!(
            placement(&subnet(&central, Some("")), "ovn-cluster"),
            gateways(&[])
        );
        assert_eq!(placement(&subnet(&central, None), "ovn-cluster"), gateways(&[]));
    }

    #[test]
    fn other_subnets_keep_kube_ovns_rule() {
        for spec in [
            json!({"cidrBlock": "10.30.0.0/16"}),
            json!({"cidrBlock": "10.30.0.0/16", "gatewayType": "distributed"}),
            // gatewayType means nothing in a custom VPC.
            json!({"cidrBlock": "10.30.0.0/16", "vpc": "vpc1", "gatewayType": "centralized"}),
        ] {
            assert_eq!(
                placement(&subnet(&spec, Some("n1")), "ovn-cluster"),
                Placement::ByPolicy
            );
        }
        // The default VPC under another name (`--cluster-router`), and a spec not yet defaulted.
        let renamed = json!({"cidrBlock": "10.30.0.0/16", "vpc": "main", "gatewayType": "centralized"});
        assert_eq!(
            placement(&subnet(&renamed, Some("n1")), "main"),
            gateways(&["n1"])
        );
        let bare = json!({"cidrBlock": "10.30.0.0/16", "gatewayType": "centralized"});
        assert_eq!(
            placement(&subnet(&bare, Some("n1")), "ovn-cluster"),
            gateways(&["n1"])
        );
    }
}
