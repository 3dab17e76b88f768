//! Policy routing for `externalEgressGateway` (Kube-OVN's `setPolicyRouting`): traffic of a
//! subnet without `natOutgoing` leaves through a router of the user's choosing instead of the
//! node's default route.
//!
//! - distributed: on each node, `ip rule from <pod ip>/32 lookup <table> priority <priority>` for
//!   each local pod of the subnet;
//! - centralized: on each gateway node (listed in `gatewayNode`, or selected by
//!   `gatewayNodeSelectors`), `ip rule from <cidr> lookup <table> priority <priority>`;
//! - in both, `default via <externalEgressGateway> table <table>`;
//! - for ingress to the Services' ports ([`crate::ingress`]), per family with ports and a join
//!   gateway: `ip rule fwmark <mark>/<mark> lookup <ingress table>` and `default via <join
//!   gateway> table <ingress table>`.
//!
//! Pure: no I/O. The rules and routes are `kube_ovn_dataplane`'s [`PolicyRule`] and
//! [`TableRoute`], the types the node daemon hands to netlink: one definition of a rule, not a
//! plan's copy to convert. (`crate::PolicyRule` is something else: a `natOutgoingPolicyRules`
//! entry.)

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use kube_ovn_dataplane::{PolicyRule, TableRoute};

use crate::error::PlanError;
use crate::ingress::{LB_INGRESS_MARK, LB_INGRESS_PRIORITY, LB_INGRESS_TABLE};
use crate::input::GatewayInput;
use crate::ruleset::Family;
use crate::subnet::{ExternalEgress, Gateway, SubnetView};

/// Every rule and route the node should have for `externalEgressGateway` (and ingress to the
/// Services' ports), in `dataplane`'s types, which the node daemon applies as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyRouting {
    pub rules: BTreeSet<PolicyRule>,
    pub routes: BTreeSet<TableRoute>,
}

fn gateway_of(egress: &ExternalEgress, family: Family) -> Option<IpAddr> {
    egress.gateways.iter().copied().find(|g| Family::of(g) == family)
}

/// Whether this node is one of a centralized subnet's gateway nodes (active or not: the rule
/// waits there for the traffic OVN sends).
pub fn is_gateway_node(gateway: &Gateway, input: &GatewayInput<'_>) -> bool {
    match gateway {
        Gateway::Distributed => false,
        Gateway::Centralized { nodes, selectors, .. } => {
            if nodes.is_empty() {
                !selectors.is_empty() && selectors.iter().any(|s| s.matches(input.node.labels))
            } else {
                nodes.iter().any(|n| n.node == input.node.name)
            }
        }
    }
}

/// The policy routing of `views` on this node. A table that two subnets would fill with
/// different gateways is refused for the later subnet (by name), as Kube-OVN's controller
/// refuses a second subnet with the same `policyRoutingTableID`.
pub fn plan_routing(views: &[SubnetView], input: &GatewayInput<'_>) -> (PolicyRouting, Vec<PlanError>) {
    let mut routing = PolicyRouting::default();
    let mut errors = Vec::new();
    // (table, family) → (subnet, gateway) already planned.
    let mut tables: BTreeMap<(u32, Family), (String, IpAddr)> = BTreeMap::new();
    for view in views {
        let Some(egress) = &view.external_egress else {
            continue;
        };
        if view.deleting {
            continue;
        }
        if egress.table == LB_INGRESS_TABLE {
            errors.push(PlanError::ExternalEgress {
                subnet: view.name.clone(),
                field: "spec.policyRoutingTableID".into(),
                value: egress.table.to_string(),
                problem: "the node's table for ingress to LoadBalancer IPs".into(),
            });
            continue;
        }
        let mut rules = Vec::new();
        let mut routes = Vec::new();
        for family in Family::ALL {
            let Some(gateway) = gateway_of(egress, family) else {
                continue;
            };
            let sources: Vec<IpNet> = match &view.gateway {
                Gateway::Distributed => input
                    .local_pods
                    .iter()
                    .filter(|p| p.subnet == view.name)
                    .flat_map(|p| p.ips.iter())
                    .filter(|ip| Family::of(ip) == family)
                    .map(|ip| IpNet::from(*ip))
                    .collect(),
                Gateway::Centralized { .. } if is_gateway_node(&view.gateway, input) => {
                    view.cidr(family).into_iter().collect()
                }
                Gateway::Centralized { .. } => Vec::new(),
            };
            if sources.is_empty() {
                continue;
            }
            rules.extend(sources.into_iter().map(|src| PolicyRule {
                priority: egress.priority,
                src,
                table: egress.table,
                fwmark: None,
            }));
            routes.push((family, gateway));
        }
        let conflict = routes.iter().find_map(|(family, gateway)| {
            tables
                .get(&(egress.table, *family))
                .filter(|(_, g)| g != gateway)
                .cloned()
        });
        if let Some((other, other_gw)) = conflict {
            errors.push(PlanError::ExternalEgress {
                subnet: view.name.clone(),
                field: "spec.policyRoutingTableID".into(),
                value: egress.table.to_string(),
                problem: format!("table already routes subnet {other} through {other_gw}"),
            });
            continue;
        }
        for (family, gateway) in routes {
            tables.insert((egress.table, family), (view.name.clone(), gateway));
            routing.routes.insert(TableRoute {
                table: egress.table,
                gateway,
            });
        }
        routing.rules.extend(rules);
    }
    plan_ingress(input, &mut routing);
    (routing, errors)
}

/// The fwmark rule and the table route of ingress to the Services' ports, per family that has
/// ports and a join gateway.
fn plan_ingress(input: &GatewayInput<'_>, routing: &mut PolicyRouting) {
    for family in Family::ALL {
        if !input.lb_ingress.iter().any(|p| Family::of(&p.address) == family) {
            continue;
        }
        let Some(gateway) = input
            .join_gateways
            .iter()
            .copied()
            .find(|g| Family::of(g) == family)
        else {
            continue;
        };
        let any = match family {
            Family::V4 => IpNet::from(IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED)),
            Family::V6 => IpNet::from(IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED)),
        };
        routing.rules.insert(PolicyRule {
            priority: LB_INGRESS_PRIORITY,
            src: IpNet::new(any.addr(), 0).expect("a /0 is valid"),
            table: LB_INGRESS_TABLE,
            fwmark: Some(LB_INGRESS_MARK),
        });
        routing.routes.insert(TableRoute {
            table: LB_INGRESS_TABLE,
            gateway,
        });
    }
}
