//! The node's egress plan: Kube-OVN's sets and chains (`setIPSet`, `setIptables` in its
//! `pkg/daemon/gateway_linux.go`), in one nftables table per family, plus the policy routing of
//! `externalEgressGateway`.
//!
//! The rules are fixed; what varies with the cluster is in named sets and one map, so a subnet
//! added, removed, turned to or from `natOutgoing` or failed over changes set elements only
//! ([`crate::Ruleset::updates_from`]). Only `natOutgoingPolicyRules` add rules (a chain per
//! subnet with rules, a rule per policy rule, as Kube-OVN has them).
//!
//! `OVN-POSTROUTING` (nat), in Kube-OVN's order after one rule of ours:
//!
//! 0. to a Service port on a LoadBalancer ingress IP of the default VPC (marked by
//!    `OVN-LB-INGRESS`, [`crate::ingress`]), into `ovn0`: masquerade to the join address (the
//!    join switch's load balancer takes it; the reply must return to this node);
//! 1. Service → pod traffic kube-proxy marked (0x4000): SNAT to the node's InternalIP;
//! 2. anything else kube-proxy marked: masquerade;
//! 3. pod → pod through the node (hairpin Service traffic): masquerade;
//! 4. NodePort traffic with `externalTrafficPolicy: Local` (0x80000; ours also marks ingress to
//!    a `Local` LoadBalancer IP with it, DNATed in `OVN-LB-LOCAL` to a local endpoint,
//!    [`crate::ingress_local`]) to a distributed subnet: keep the client's address;
//! 5. other such traffic: masquerade;
//! 6. TCP that is NEW but not a SYN (replies in direct routing): leave alone;
//! 7. from outside the cluster (not a pod, not another node) to a NATed subnet: routed ingress,
//!    e.g. over BGP, keeps the client's address;
//! 8. from a subnet with `natOutgoingPolicyRules` to outside: the policy chains mark it;
//! 9. marked `nat` (0x90001): masquerade; 10. marked `forward` (0x90002): leave alone;
//! 11. a centralized subnet this node is the active gateway of with a `node:ip` in
//!     `gatewayNode`: SNAT to that address (`@…subnets-snat-ip` map);
//! 12. from a NATed subnet to outside the cluster: masquerade.
//!
//! `OVN-MASQUERADE` clears the mark and masquerades with `fully-random` (Kube-OVN's
//! `--random-fully`). Pure: no I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::error::PlanError;
use crate::input::GatewayInput;
use crate::routing::{PolicyRouting, plan_routing};
use crate::ruleset::{BaseChain, Chain, Family, Ruleset, Set, Table};
use crate::subnet::{Gateway, PolicyAction, SubnetView, concerns_gateway, is_validated};

/// kube-proxy's masquerade mark, which Kube-OVN also sets for pod → Service traffic.
const SERVICE_MARK: u32 = 0x4000;
/// Kube-OVN's mark for NodePort traffic with `externalTrafficPolicy: Local` (ours sets it on
/// LoadBalancer ingress to a `Local` Service, [`crate::ingress_local`]).
const NODE_PORT_LOCAL_MARK: u32 = crate::ingress_local::LOCAL_MARK;
/// `natOutgoingPolicyRules` verdicts.
const POLICY_NAT_MARK: u32 = 0x90001;
const POLICY_FORWARD_MARK: u32 = 0x90002;
/// The node's port on the join subnet.
const OVN0: &str = "ovn0";

/// What the node should have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayPlan {
    pub ruleset: Ruleset,
    pub routing: PolicyRouting,
}

/// Subnets as last seen valid (by name), so that a subnet whose new spec is refused keeps its
/// previous plan while the others move on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LastGood(BTreeMap<String, SubnetView>);

/// A plan, the input it refused, and what to remember for the next one.
#[derive(Debug, Clone)]
pub struct Planned {
    pub plan: GatewayPlan,
    pub errors: Vec<PlanError>,
    pub last_good: LastGood,
}

/// The node's egress plan from `input`. A subnet whose gateway fields are refused here, or
/// whose spec the controller has not validated, keeps the plan of its last valid version (same
/// UID), or has none if it never had one; what this planner refused is in [`Planned::errors`].
pub fn plan(input: &GatewayInput<'_>, last_good: &LastGood) -> Planned {
    let mut views = Vec::new();
    let mut errors = Vec::new();
    let mut remembered = LastGood::default();
    let mut subnets: Vec<_> = input
        .subnets
        .iter()
        .filter(|s| concerns_gateway(s, input.cluster_router))
        .collect();
    subnets.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for subnet in subnets {
        let name = subnet.metadata.name.clone().unwrap_or_default();
        let view = match SubnetView::from_subnet(subnet) {
            Ok(view) if is_validated(subnet) => Some(view),
            // The controller refused the spec for a reason of its own (its condition says why).
            Ok(_) => None,
            Err(e) => {
                errors.push(e);
                None
            }
        };
        let uid = subnet.metadata.uid.clone().unwrap_or_default();
        let view = view.or_else(|| last_good.0.get(&name).filter(|v| v.uid == uid).cloned());
        if let Some(view) = view {
            remembered.0.insert(name, view.clone());
            views.push(view);
        }
    }
    let mut ruleset = Ruleset::default();
    for family in Family::ALL {
        if family_in_use(family, &views, input) {
            ruleset.tables.insert(family, table(family, &views, input));
        }
    }
    let (routing, routing_errors) = plan_routing(&views, input);
    errors.extend(routing_errors);
    Planned {
        plan: GatewayPlan { ruleset, routing },
        errors,
        last_good: remembered,
    }
}

/// A family gets a table once anything of it exists: a subnet, the join subnet, a Service
/// CIDR or the node's own address.
fn family_in_use(family: Family, views: &[SubnetView], input: &GatewayInput<'_>) -> bool {
    let node_ip = match family {
        Family::V4 => input.node.internal_ips.0,
        Family::V6 => input.node.internal_ips.1,
    };
    node_ip.is_some()
        || views.iter().any(|v| v.cidr(family).is_some())
        || input.join_cidrs.iter().any(|c| Family::of_net(c) == family)
        || input.service_cidrs.iter().any(|c| Family::of_net(c) == family)
        || input.lb_ingress.iter().any(|p| Family::of(&p.address) == family)
        || input
            .lb_local
            .iter()
            .any(|l| Family::of(&l.port.address) == family)
}

/// `(cidr, address)` for each centralized subnet this node SNATs to a `node:ip` address: while
/// it is the active gateway, or always with ECMP (Kube-OVN's `getEgressNatIPByNode`).
fn snat_addresses(family: Family, views: &[SubnetView], node: &str) -> Vec<(IpNet, IpAddr)> {
    let mut out = Vec::new();
    for view in views.iter().filter(|v| v.needs_nat()) {
        let Gateway::Centralized {
            nodes, active, ecmp, ..
        } = &view.gateway
        else {
            continue;
        };
        let Some(cidr) = view.cidr(family) else {
            continue;
        };
        let carrying = *ecmp || active.as_deref() == Some(node);
        let address = nodes
            .iter()
            .filter(|n| n.node == node)
            .find_map(|n| n.nat_ip.filter(|ip| Family::of(ip) == family));
        if let (true, Some(address)) = (carrying, address) {
            out.push((cidr, address));
        }
    }
    out
}

fn mark(value: u32) -> String {
    format!("0x{value:08x}")
}

fn table(family: Family, views: &[SubnetView], input: &GatewayInput<'_>) -> Table {
    let p = family.set_prefix();
    let ip = family.nft();
    let cidrs = |keep: &dyn Fn(&SubnetView) -> bool| -> Vec<IpNet> {
        views
            .iter()
            .filter(|v| keep(v))
            .filter_map(|v| v.cidr(family))
            .collect()
    };
    let of_family = |nets: &[IpNet]| -> Vec<IpNet> {
        nets.iter()
            .copied()
            .filter(|n| Family::of_net(n) == family)
            .collect()
    };
    let mut subnets = cidrs(&|_| true);
    subnets.extend(of_family(input.join_cidrs));
    let policy_views: Vec<&SubnetView> = views
        .iter()
        .filter(|v| v.needs_nat() && !v.policy_rules.is_empty() && v.cidr(family).is_some())
        .collect();
    let snat = snat_addresses(family, views, input.node.name);

    let mut sets = BTreeMap::new();
    let mut set = |name: &str, s: Set| {
        sets.insert(format!("{p}{name}"), s);
    };
    set("services", Set::addresses(of_family(input.service_cidrs)));
    set("subnets", Set::addresses(subnets));
    set("subnets-nat", Set::addresses(cidrs(&SubnetView::needs_nat)));
    set(
        "subnets-distributed-gw",
        Set::addresses(cidrs(&|v| !v.deleting && v.gateway == Gateway::Distributed)),
    );
    set(
        "other-node",
        Set::addresses(
            input
                .other_node_ips
                .iter()
                .filter(|a| Family::of(a) == family)
                .map(|a| IpNet::from(*a)),
        ),
    );
    set(
        "subnets-nat-policy",
        Set::addresses(policy_views.iter().filter_map(|v| v.cidr(family))),
    );
    set("subnets-snat", Set::addresses(snat.iter().map(|(c, _)| *c)));
    set("subnets-snat-ip", Set::address_map(snat));

    // Policy chains: one per subnet with rules, marking what each rule matches.
    let mut chains = vec![Chain {
        name: "OVN-MASQUERADE".into(),
        base: None,
        rules: vec![
            format!("meta mark set {}", mark(0)),
            "masquerade fully-random".into(),
        ],
    }];
    let mut dispatch = Vec::new();
    for view in &policy_views {
        let chain = format!("OVN-NAT-PSUBNET-{}", view.chain_suffix());
        let mut rules = Vec::new();
        for rule in view.policy_rules.iter().filter(|r| r.family == family) {
            let mut matches = Vec::new();
            for (dir, nets) in [("src", &rule.src), ("dst", &rule.dst)] {
                if nets.is_empty() {
                    continue;
                }
                let name = format!("{p}natpr-{}-{dir}", rule.id);
                sets.insert(name.clone(), Set::addresses(nets.iter().copied()));
                matches.push(format!("{ip} {}addr @{name}", &dir[..1]));
            }
            let value = match rule.action {
                PolicyAction::Nat => POLICY_NAT_MARK,
                PolicyAction::Forward => POLICY_FORWARD_MARK,
            };
            rules.push(format!(
                "{} meta mark set meta mark | {}",
                matches.join(" "),
                mark(value)
            ));
        }
        if let Some(cidr) = view.cidr(family) {
            dispatch.push(format!(
                "{ip} saddr {cidr} jump {chain} comment \"natPolicySubnet-{}\"",
                view.name
            ));
        }
        chains.push(Chain {
            name: chain,
            base: None,
            rules,
        });
    }
    chains.push(Chain {
        name: "OVN-NAT-POLICY".into(),
        base: None,
        rules: dispatch,
    });

    let node_ip = match family {
        Family::V4 => input.node.internal_ips.0,
        Family::V6 => input.node.internal_ips.1,
    };
    let svc = mark(SERVICE_MARK);
    let local = mark(NODE_PORT_LOCAL_MARK);
    let ingress = crate::ingress::mark_text();
    let mut post = vec![format!(
        "oifname \"{OVN0}\" meta mark & {ingress} == {ingress} jump OVN-MASQUERADE"
    )];
    if let Some(node_ip) = node_ip {
        post.push(format!(
            "{ip} saddr @{p}services {ip} daddr @{p}subnets meta mark & {svc} == {svc} snat to {node_ip} fully-random"
        ));
    }
    post.extend([
        format!("meta mark & {svc} == {svc} jump OVN-MASQUERADE"),
        format!("{ip} saddr @{p}subnets {ip} daddr @{p}subnets jump OVN-MASQUERADE"),
        format!("meta mark & {local} == {local} {ip} daddr @{p}subnets-distributed-gw return"),
        format!("meta mark & {local} == {local} jump OVN-MASQUERADE"),
        "tcp flags & syn == 0 ct state new return".into(),
        format!("{ip} saddr != @{p}subnets {ip} saddr != @{p}other-node {ip} daddr @{p}subnets-nat return"),
        format!("{ip} saddr @{p}subnets-nat-policy {ip} daddr != @{p}subnets jump OVN-NAT-POLICY"),
        format!(
            "meta mark & {0} == {0} jump OVN-MASQUERADE",
            mark(POLICY_NAT_MARK)
        ),
        format!("meta mark & {0} == {0} return", mark(POLICY_FORWARD_MARK)),
        format!("{ip} daddr != @{p}subnets snat to {ip} saddr map @{p}subnets-snat-ip fully-random"),
        format!("{ip} saddr @{p}subnets-nat {ip} daddr != @{p}subnets jump OVN-MASQUERADE"),
    ]);
    let base = |kind, hook, priority| Some(BaseChain { kind, hook, priority });
    // Forwarded traffic to a `Local` port is DNATed here to this node's endpoints instead
    // (marked 0x80000 for rules 4 and 5, or dropped); the node's own takes the `Cluster` path.
    let cluster_ports: Vec<_> = input
        .lb_ingress
        .iter()
        .filter(|p| !input.lb_local.iter().any(|l| l.port == **p))
        .copied()
        .collect();
    let mut ingress_rules = crate::ingress::marking_rules(family, &cluster_ports);
    ingress_rules.extend(crate::ingress_local::filter_rules(family, input.lb_local));
    let output_rules = crate::ingress::marking_rules(family, input.lb_ingress);
    let accepts = vec![
        format!("{ip} saddr @{p}subnets accept"),
        format!("{ip} daddr @{p}subnets accept"),
        format!("{ip} saddr @{p}services accept"),
        format!("{ip} daddr @{p}services accept"),
    ];
    chains.extend([
        Chain {
            name: "OVN-PREROUTING".into(),
            // Before kube-proxy's DNAT (priority dstnat): the destination is still the Service's.
            base: base("nat", "prerouting", "dstnat - 1"),
            rules: vec![format!(
                "iifname \"{OVN0}\" {ip} saddr @{p}subnets {ip} daddr @{p}services meta mark set meta mark | {svc}"
            )],
        },
        Chain {
            name: "OVN-LB-INGRESS".into(),
            // Before routing and before anyone's DNAT: the destination is still the address.
            base: base("filter", "prerouting", "mangle - 1"),
            rules: ingress_rules,
        },
        Chain {
            name: "OVN-LB-LOCAL".into(),
            // Beside OVN-PREROUTING, before kube-proxy's DNAT: to this node's own endpoints.
            base: base("nat", "prerouting", "dstnat - 1"),
            rules: crate::ingress_local::dnat_rules(family, input.lb_local),
        },
        Chain {
            name: "OVN-LB-INGRESS-OUTPUT".into(),
            // The node's own connections: a route chain re-routes a packet whose mark it set.
            base: base("route", "output", "mangle - 1"),
            rules: output_rules,
        },
        Chain {
            name: "OVN-POSTROUTING".into(),
            // Before kube-proxy's and Docker's masquerade (srcnat): the first NAT chain wins.
            base: base("nat", "postrouting", "srcnat - 1"),
            rules: post,
        },
        Chain {
            name: "OVN-MANGLE-POSTROUTING".into(),
            base: base("filter", "postrouting", "mangle - 1"),
            rules: vec![
                format!("{ip} saddr @{p}subnets tcp flags & rst == rst ct state invalid drop"),
                // A centralized subnet's mid-stream packets after a failover: drop rather than
                // let conntrack pick them up as NEW and SNAT them to an address the peer never
                // saw (Kube-OVN's centralizedNatOutgoingNonSynDropRule).
                format!(
                    "{ip} saddr @{p}subnets-snat tcp flags & syn == 0 ct state new {ip} daddr != @{p}subnets drop"
                ),
            ],
        },
        Chain {
            name: "OVN-INPUT".into(),
            base: base("filter", "input", "filter - 1"),
            rules: accepts.clone(),
        },
        Chain {
            name: "OVN-FORWARD".into(),
            base: base("filter", "forward", "filter - 1"),
            rules: accepts,
        },
        Chain {
            name: "OVN-OUTPUT".into(),
            // Tunnel packets must not carry kube-proxy's masquerade mark to postrouting (the
            // kernel's checksum bug with NATed VXLAN, flannel#1279).
            base: base("filter", "output", "filter - 1"),
            rules: vec![
                format!("udp dport 6081 meta mark set {}", mark(0)),
                format!("udp dport 4789 meta mark set {}", mark(0)),
            ],
        },
    ]);
    Table { family, sets, chains }
}
