//! How a default-VPC subnet's traffic leaves the cluster: its priority-29000 gateway policies on
//! `ovn-cluster` (Kube-OVN's `GatewayRouterPolicyPriority`).
//!
//! - distributed: a port group `<subnet>.<node>` per node holding the subnet's pods on that node,
//!   and per node `ip4.src == $<subnet>.<node>_ip4` rerouted to that node's join address, so each
//!   pod leaves through its own node;
//! - centralized, active/standby: `ip4.src == <cidr>` rerouted to one gateway node's join
//!   address. The active node (`status.activateGateway`) stays while it is Ready and listed;
//!   otherwise the first Ready node of `gatewayNode` (or of the nodes `gatewayNodeSelectors`
//!   select, by name) takes over;
//! - centralized with `enableEcmp`: one such policy whose next hops are all Ready gateways.
//!
//! "Ready" is [`crate::reconcile::node_state::node_ready`]: the node's `Ready` condition, and its
//! `NetworkUnavailable` condition not True (the node daemon sets it when `ovn0` cannot reach the
//! join gateway), as Kube-OVN's `nodeReady`.
//!
//! `status.activateGateway` names the active node; with `enableEcmp` it lists every gateway in
//! use, comma-separated, in `gatewayNode` order (Kube-OVN leaves it unwritten with ECMP). The
//! speakers read it to announce the subnet only from its gateways.
//!
//! Policy `external_ids` are Kube-OVN's: `subnet`, plus `node` (distributed) or `<node>=<join
//! ip>` for each next hop (centralized), which Kube-OVN's gateway checker reads back.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kube_ovn_api::annotations::{GatewayNodes, parse};
use kube_ovn_api::crd::SubnetSpec;
use kube_ovn_api::names;

use crate::ovn::owned::PolicySpec;
use crate::ovn::plan::owned_ids;
use crate::ovn::priority::POLICY_GATEWAY;
use crate::reconcile::subnet_spec::Effective;
use kube_ovn_api::selector::Selector;

/// What the gateway logic needs to know of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Ready to carry traffic: see [`crate::reconcile::node_state::node_ready`].
    pub ready: bool,
    /// Its join addresses, once the node reconciler has finished it.
    pub joins: Vec<IpAddr>,
}

/// The gateway rows and status of one subnet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayPlan {
    /// 29000 policies with their full `external_ids`.
    pub policies: Vec<(PolicySpec, BTreeMap<String, String>)>,
    /// Nodes that get a `<subnet>.<node>` port group (distributed only).
    pub port_group_nodes: Vec<String>,
    /// `status.activateGateway`: the active node of an active/standby centralized subnet, or
    /// every gateway in use (comma-separated) with ECMP; empty for a distributed one.
    pub active: String,
    /// Why no gateway could be chosen: the caller keeps the policies it has and reports this.
    pub no_gateway: Option<String>,
}

fn suffix(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "ip4" } else { "ip6" }
}

/// The gateway nodes a centralized subnet names, in order: `gatewayNode` entries, or the nodes
/// `gatewayNodeSelectors` select (sorted by name). Errors name the field.
pub fn gateway_candidates(spec: &SubnetSpec, nodes: &[NodeView]) -> Result<Vec<String>, (String, String)> {
    // Kube-OVN trims each entry (its docs write `node1:ip1, node2:ip2`).
    let listed = spec
        .gateway_node
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    if !listed.is_empty() {
        let parsed = parse::<GatewayNodes>("spec.gatewayNode", &listed)
            .map_err(|e| ("spec.gatewayNode".to_owned(), e.to_string()))?;
        let mut out: Vec<String> = Vec::new();
        for gw in parsed.0 {
            if !out.contains(&gw.node) {
                out.push(gw.node);
            }
        }
        return Ok(out);
    }
    let selectors = spec.gateway_node_selectors.as_deref().unwrap_or_default();
    if selectors.is_empty() {
        return Err((
            "spec.gatewayNode".to_owned(),
            "a centralized subnet needs gatewayNode or gatewayNodeSelectors".to_owned(),
        ));
    }
    let selectors = selectors
        .iter()
        .enumerate()
        .map(|(i, sel)| Selector::parse(Some(sel), &format!("spec.gatewayNodeSelectors[{i}]")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| (e.field, e.problem))?;
    let mut out: Vec<String> = nodes
        .iter()
        .filter(|n| selectors.iter().any(|s| s.matches(&n.labels)))
        .map(|n| n.name.clone())
        .collect();
    out.sort();
    Ok(out)
}

/// The gateway plan of a default-VPC subnet. `previous` is its `status.activateGateway`.
pub fn gateway_plan(
    subnet: &str,
    eff: &Effective,
    spec: &SubnetSpec,
    previous: &str,
    nodes: &[NodeView],
) -> Result<GatewayPlan, (String, String)> {
    let base = owned_ids(&[("subnet", subnet)]);
    let mut plan = GatewayPlan::default();
    if eff.gateway_type != "centralized" {
        for n in nodes.iter().filter(|n| !n.joins.is_empty()) {
            let pg = names::subnet_node_port_group(subnet, &n.name);
            plan.port_group_nodes.push(n.name.clone());
            for join in &n.joins {
                if !eff.cidrs.iter().any(|c| c.addr().is_ipv4() == join.is_ipv4()) {
                    continue;
                }
                let v = suffix(join);
                let mut ids = base.clone();
                ids.insert("node".into(), n.name.clone());
                plan.policies.push((
                    PolicySpec {
                        priority: POLICY_GATEWAY,
                        // OVN gives every port group address sets `$<pg>_ip4` / `$<pg>_ip6`.
                        r#match: format!("{v}.src == ${pg}_{v}"),
                        action: "reroute".into(),
                        nexthops: vec![join.to_string()],
                    },
                    ids,
                ));
            }
        }
        return Ok(plan);
    }
    let candidates = gateway_candidates(spec, nodes)?;
    let usable: Vec<&NodeView> = candidates
        .iter()
        .filter_map(|c| nodes.iter().find(|n| n.name == *c))
        .filter(|n| n.ready && !n.joins.is_empty())
        .collect();
    if usable.is_empty() {
        plan.no_gateway = Some(format!(
            "no gateway node of subnet {subnet} is ready (candidates: {})",
            if candidates.is_empty() {
                "none".to_owned()
            } else {
                candidates.join(", ")
            }
        ));
        return Ok(plan);
    }
    let hops: Vec<&NodeView> = if spec.enable_ecmp == Some(true) {
        plan.active = usable
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(",");
        usable
    } else {
        // Stay on the active gateway while it is fit, so a failover is the only move.
        let active = usable
            .iter()
            .find(|n| n.name == previous)
            .copied()
            .unwrap_or(usable[0]);
        plan.active.clone_from(&active.name);
        vec![active]
    };
    for cidr in &eff.cidrs {
        let v4 = cidr.addr().is_ipv4();
        let mut ids = base.clone();
        let mut nexthops = Vec::new();
        for n in &hops {
            if let Some(join) = n.joins.iter().find(|j| j.is_ipv4() == v4) {
                ids.insert(n.name.clone(), join.to_string());
                nexthops.push(join.to_string());
            }
        }
        if nexthops.is_empty() {
            continue;
        }
        let v = if v4 { "ip4" } else { "ip6" };
        plan.policies.push((
            PolicySpec {
                priority: POLICY_GATEWAY,
                r#match: format!("{v}.src == {cidr}"),
                action: "reroute".into(),
                nexthops,
            },
            ids,
        ));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::subnet_spec::effective;
    use serde_json::json;

    fn node(name: &str, ready: bool, join: &str) -> NodeView {
        NodeView {
            name: name.into(),
            labels: BTreeMap::from([("gw".to_owned(), name.to_owned())]),
            ready,
            joins: vec![join.parse().unwrap()],
        }
    }

    fn subnet(spec: serde_json::Value) -> kube_ovn_api::crd::Subnet {
        let mut object = json!({"metadata": {"name": "net1"}});
        object["spec"] = spec;
        serde_json::from_value(object).unwrap()
    }

    fn plan_of(spec: serde_json::Value, previous: &str, nodes: &[NodeView]) -> GatewayPlan {
        let s = subnet(spec);
        let eff = effective(&s, "ovn-cluster").unwrap();
        gateway_plan("net1", &eff, &s.spec, previous, nodes).unwrap()
    }

    #[test]
    fn distributed_reroutes_each_node_group_to_its_node() {
        let nodes = [node("n1", true, "100.64.0.2"), node("n2", false, "100.64.0.3")];
        let p = plan_of(json!({"cidrBlock": "10.20.0.0/16"}), "", &nodes);
        assert_eq!(p.port_group_nodes, ["n1", "n2"]);
        assert_eq!(p.policies[0].0.r#match, "ip4.src == $net1.n1_ip4");
        assert_eq!(p.policies[0].0.nexthops, ["100.64.0.2"]);
        assert_eq!(p.policies[0].1.get("node").map(String::as_str), Some("n1"));
        assert!(p.active.is_empty());
    }

    #[test]
    fn centralized_keeps_a_fit_active_gateway_and_fails_over() {
        let spec = json!({"cidrBlock": "10.20.0.0/16", "gatewayType": "centralized",
            "gatewayNode": "n1, n2:172.18.0.9"});
        let nodes = [node("n1", true, "100.64.0.2"), node("n2", true, "100.64.0.3")];
        let p = plan_of(spec.clone(), "", &nodes);
        assert_eq!(p.active, "n1");
        assert_eq!(p.policies.len(), 1);
        assert_eq!(p.policies[0].0.r#match, "ip4.src == 10.20.0.0/16");
        assert_eq!(p.policies[0].0.nexthops, ["100.64.0.2"]);
        assert_eq!(p.policies[0].1.get("n1").map(String::as_str), Some("100.64.0.2"));
        // An active gateway that is still fit stays, even if it is not first.
        assert_eq!(plan_of(spec.clone(), "n2", &nodes).active, "n2");
        // It goes when it is not Ready, or no longer exists.
        let down = [node("n1", true, "100.64.0.2"), node("n2", false, "100.64.0.3")];
        assert_eq!(plan_of(spec.clone(), "n2", &down).active, "n1");
        assert_eq!(plan_of(spec.clone(), "n2", &nodes[..1]).active, "n1");
        let none = [node("n1", false, "100.64.0.2")];
        let p = plan_of(spec, "n1", &none);
        assert!(p.no_gateway.is_some() && p.policies.is_empty());
    }

    #[test]
    fn ecmp_uses_every_ready_gateway() {
        let spec = json!({"cidrBlock": "10.20.0.0/16", "gatewayType": "centralized",
            "gatewayNode": "n1,n2,n3", "enableEcmp": true});
        let nodes = [
            node("n1", true, "100.64.0.2"),
            node("n2", true, "100.64.0.3"),
            node("n3", false, "100.64.0.4"),
        ];
        let p = plan_of(spec, "", &nodes);
        assert_eq!(p.policies[0].0.nexthops, ["100.64.0.2", "100.64.0.3"]);
        assert_eq!(p.active, "n1,n2", "every gateway in use, for the speakers");
    }

    #[test]
    fn selectors_pick_gateways_and_bad_input_names_the_field() {
        let nodes = [node("n2", true, "100.64.0.3"), node("n1", true, "100.64.0.2")];
        let spec = json!({"cidrBlock": "10.20.0.0/16", "gatewayType": "centralized",
            "gatewayNodeSelectors": [{"matchExpressions": [{"key": "gw", "operator": "In", "values": ["n1", "n2"]}]}]});
        assert_eq!(plan_of(spec, "", &nodes).active, "n1");
        let s = subnet(json!({"cidrBlock": "10.20.0.0/16", "gatewayType": "centralized"}));
        let eff = effective(&s, "ovn-cluster").unwrap();
        let e = gateway_plan("net1", &eff, &s.spec, "", &nodes).unwrap_err();
        assert_eq!(e.0, "spec.gatewayNode");
        let s = subnet(
            json!({"cidrBlock": "10.20.0.0/16", "gatewayType": "centralized", "gatewayNode": "n1:nope"}),
        );
        let e = gateway_plan("net1", &eff, &s.spec, "", &nodes).unwrap_err();
        assert_eq!(e.0, "spec.gatewayNode");
    }
}
