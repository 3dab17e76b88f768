//! A subnet as the gateway needs it, checked once: which subnets concern a node's egress, and
//! what their gateway fields say.
//!
//! Kube-OVN's node daemon looks at subnets of the default VPC that are overlay (no `vlan`, or
//! `logicalGateway`); so do we, and take a spec only once the controller has validated it (as
//! the node's routes, `cni`'s `node_routes`, do): a CIDR the controller refused, say one holding
//! the node's own address, must not be masqueraded either. A subnet whose new spec the
//! controller refuses keeps the plan of its last validated spec.

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use kube_ovn_api::annotations::{GatewayNode, GatewayNodes, parse};
use kube_ovn_api::crd::Subnet;
use kube_ovn_api::crd::condition::{ConditionStatus, VALIDATED, find_condition};
use kube_ovn_api::selector::Selector;

use crate::error::PlanError;
use crate::ruleset::Family;

/// How a subnet's traffic leaves the cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Gateway {
    /// Through each pod's own node.
    Distributed,
    /// Through the gateway nodes.
    Centralized {
        /// `gatewayNode` entries, in order (`node` or `node:ip`).
        nodes: Vec<GatewayNode>,
        /// `gatewayNodeSelectors`, used when `gatewayNode` is empty.
        selectors: Vec<Selector>,
        /// `status.activateGateway`.
        active: Option<String>,
        /// `enableEcmp`: every ready gateway node carries traffic.
        ecmp: bool,
    },
}

/// `nat` or `forward`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyAction {
    Nat,
    Forward,
}

/// One `status.natOutgoingPolicyRules` entry with its controller-given ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRule {
    pub id: String,
    pub action: PolicyAction,
    pub family: Family,
    pub src: Vec<IpNet>,
    pub dst: Vec<IpNet>,
}

/// `externalEgressGateway` with its policy-routing settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalEgress {
    /// One address, or one per family.
    pub gateways: Vec<IpAddr>,
    pub priority: u32,
    pub table: u32,
}

/// A validated subnet of the default VPC's overlay.
#[derive(Debug, Clone, PartialEq)]
pub struct SubnetView {
    pub name: String,
    /// `metadata.uid`: a subnet deleted and made again under the same name is another subnet.
    pub uid: String,
    pub cidrs: Vec<IpNet>,
    /// Being deleted: still a cluster subnet, no longer NATed (Kube-OVN's `isSubnetNeedNat`).
    pub deleting: bool,
    pub nat_outgoing: bool,
    pub gateway: Gateway,
    /// Only while `natOutgoing`; rules the controller has not given an ID yet are left out.
    pub policy_rules: Vec<PolicyRule>,
    /// Only without `natOutgoing`.
    pub external_egress: Option<ExternalEgress>,
}

impl SubnetView {
    /// The CIDR of `family`, if the subnet has one.
    pub fn cidr(&self, family: Family) -> Option<IpNet> {
        self.cidrs.iter().copied().find(|c| Family::of_net(c) == family)
    }

    /// Kube-OVN's `isSubnetNeedNat`.
    pub fn needs_nat(&self) -> bool {
        self.nat_outgoing && !self.deleting
    }

    /// The per-subnet policy chain's suffix: the last 12 characters of the UID, as Kube-OVN
    /// names `OVN-NAT-PSUBNET-<uid>`; the name when there is no UID (objects made by hand).
    pub fn chain_suffix(&self) -> &str {
        if self.uid.len() >= 12 {
            &self.uid[self.uid.len() - 12..]
        } else {
            &self.name
        }
    }
}

/// Whether `subnet` concerns node egress at all: the default VPC's, overlay, with a CIDR.
pub fn concerns_gateway(subnet: &Subnet, cluster_router: &str) -> bool {
    let spec = &subnet.spec;
    let vpc = spec.vpc.as_deref().unwrap_or_default();
    if !vpc.is_empty() && vpc != cluster_router {
        return false;
    }
    if spec.vlan.as_deref().is_some_and(|v| !v.is_empty()) && spec.logical_gateway != Some(true) {
        return false;
    }
    !spec.cidr_block.as_deref().unwrap_or_default().is_empty()
}

/// Whether the controller has validated the subnet's spec (condition `Validated=True`). One it
/// refused keeps its previous plan: the controller leaves OVN as it was too.
pub fn is_validated(subnet: &Subnet) -> bool {
    subnet
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .and_then(|c| find_condition(c, VALIDATED))
        .is_some_and(|c| c.status == ConditionStatus::True)
}

fn parse_net(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

/// A comma list of addresses or CIDRs, entries trimmed (as Kube-OVN's `SplitTrimmed`), all of
/// one family. `Ok(None)` when empty.
fn address_list(text: &str) -> Result<Option<(Family, Vec<IpNet>)>, String> {
    let entries: Vec<&str> = text.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
    let Some(first) = entries.first() else {
        return Ok(None);
    };
    let mut nets = Vec::with_capacity(entries.len());
    for entry in &entries {
        nets.push(parse_net(entry).ok_or_else(|| format!("{entry:?} is not an IP address or CIDR"))?);
    }
    let family = Family::of_net(&nets[0]);
    if let Some(other) = nets.iter().find(|n| Family::of_net(n) != family) {
        return Err(format!("{other} is not of the same family as {first}"));
    }
    Ok(Some((family, nets)))
}

impl SubnetView {
    /// Checks `subnet`'s gateway fields. Call only for subnets that [`concerns_gateway`].
    pub fn from_subnet(subnet: &Arc<Subnet>) -> Result<Self, PlanError> {
        let name = subnet.metadata.name.clone().unwrap_or_default();
        let spec = &subnet.spec;
        let status = subnet.status.clone().unwrap_or_default();
        let cidr_block = spec.cidr_block.clone().unwrap_or_default();
        let cidrs = cidr_block
            .split(',')
            .map(|c| c.trim().parse::<IpNet>().map(|n| n.trunc()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| PlanError::Cidr {
                subnet: name.clone(),
                value: cidr_block.clone(),
            })?;
        let nat_outgoing = spec.nat_outgoing == Some(true);
        let gateway = match spec.gateway_type.as_deref().unwrap_or_default() {
            "" | "distributed" => Gateway::Distributed,
            "centralized" => centralized(&name, subnet, status.activate_gateway.clone())?,
            other => {
                return Err(PlanError::GatewayType {
                    subnet: name,
                    value: other.to_owned(),
                });
            }
        };
        let policy_rules = if nat_outgoing {
            policy_rules(&name, &status)?
        } else {
            Vec::new()
        };
        let external_egress = external_egress(&name, subnet, nat_outgoing)?;
        Ok(Self {
            uid: subnet.metadata.uid.clone().unwrap_or_default(),
            deleting: subnet.metadata.deletion_timestamp.is_some(),
            name,
            cidrs,
            nat_outgoing,
            gateway,
            policy_rules,
            external_egress,
        })
    }
}

fn centralized(name: &str, subnet: &Subnet, active: Option<String>) -> Result<Gateway, PlanError> {
    let spec = &subnet.spec;
    // Kube-OVN's documentation writes `node1:ip1, node2:ip2`: entries are trimmed.
    let raw = spec.gateway_node.clone().unwrap_or_default();
    let listed: Vec<&str> = raw.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
    let nodes = if listed.is_empty() {
        Vec::new()
    } else {
        parse::<GatewayNodes>("spec.gatewayNode", &listed.join(","))
            .map_err(|e| PlanError::GatewayNode {
                subnet: name.to_owned(),
                field: "spec.gatewayNode".into(),
                value: raw.clone(),
                problem: e.problem.to_string(),
            })?
            .0
    };
    let selectors = spec
        .gateway_node_selectors
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let field = format!("spec.gatewayNodeSelectors[{i}]");
            Selector::parse(Some(s), &field).map_err(|e| PlanError::GatewayNode {
                subnet: name.to_owned(),
                field: e.field,
                value: format!("{s:?}"),
                problem: e.problem,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Gateway::Centralized {
        nodes,
        selectors,
        active: active.filter(|a| !a.is_empty()),
        ecmp: spec.enable_ecmp == Some(true),
    })
}

fn policy_rules(name: &str, status: &kube_ovn_api::crd::SubnetStatus) -> Result<Vec<PolicyRule>, PlanError> {
    let mut rules = Vec::new();
    for (i, rule) in status.nat_outgoing_policy_rules.iter().flatten().enumerate() {
        let fail = |field: &str, value: &str, problem: String| PlanError::PolicyRule {
            subnet: name.to_owned(),
            field: format!("status.natOutgoingPolicyRules[{i}]{field}"),
            value: value.to_owned(),
            problem,
        };
        // The controller writes the ID; until it has, the rule waits (Kube-OVN skips it too).
        let id = rule.rule_id.clone().unwrap_or_default();
        if id.is_empty() {
            continue;
        }
        // The ID names nft sets; the controller writes 12 hex digits.
        if id.len() > 32 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(fail(
                ".ruleID",
                &id,
                "not a rule ID (letters and digits, at most 32)".into(),
            ));
        }
        let action_text = rule.action.clone().unwrap_or_default();
        let action = match action_text.as_str() {
            "nat" => PolicyAction::Nat,
            "forward" => PolicyAction::Forward,
            _ => return Err(fail(".action", &action_text, "neither nat nor forward".into())),
        };
        let matched = rule.match_.clone().unwrap_or_default();
        let src_text = matched.src_ips.unwrap_or_default();
        let dst_text = matched.dst_ips.unwrap_or_default();
        let src = address_list(&src_text).map_err(|p| fail(".match.srcIPs", &src_text, p))?;
        let dst = address_list(&dst_text).map_err(|p| fail(".match.dstIPs", &dst_text, p))?;
        let family = match (&src, &dst) {
            (None, None) => continue,
            (Some((a, _)), Some((b, _))) if a != b => {
                return Err(fail(
                    ".match",
                    &format!("{src_text} -> {dst_text}"),
                    "srcIPs and dstIPs are of different families".into(),
                ));
            }
            (Some((f, _)), _) | (None, Some((f, _))) => *f,
        };
        rules.push(PolicyRule {
            id,
            action,
            family,
            src: src.map(|(_, n)| n).unwrap_or_default(),
            dst: dst.map(|(_, n)| n).unwrap_or_default(),
        });
    }
    Ok(rules)
}

fn external_egress(
    name: &str,
    subnet: &Subnet,
    nat_outgoing: bool,
) -> Result<Option<ExternalEgress>, PlanError> {
    let spec = &subnet.spec;
    let text = spec.external_egress_gateway.clone().unwrap_or_default();
    let fail = |field: &str, value: String, problem: &str| PlanError::ExternalEgress {
        subnet: name.to_owned(),
        field: field.to_owned(),
        value,
        problem: problem.to_owned(),
    };
    let entries: Vec<&str> = text.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
    if entries.is_empty() {
        return Ok(None);
    }
    if nat_outgoing {
        return Err(fail(
            "spec.externalEgressGateway",
            text,
            "conflicts with natOutgoing (Kube-OVN refuses the pair too)",
        ));
    }
    let gateways = entries
        .iter()
        .map(|e| e.parse::<IpAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            fail(
                "spec.externalEgressGateway",
                text.clone(),
                "not a list of IP addresses",
            )
        })?;
    if gateways.len() > 2 || (gateways.len() == 2 && gateways[0].is_ipv4() == gateways[1].is_ipv4()) {
        return Err(fail(
            "spec.externalEgressGateway",
            text,
            "one address, or one IPv4 and one IPv6",
        ));
    }
    // Priority 0 would come before the local table and steal the node's own traffic; 32766 and
    // 32767 are the main and default rules.
    let priority = spec.policy_routing_priority.unwrap_or_default();
    if !(1..=32765).contains(&priority) {
        return Err(fail(
            "spec.policyRoutingPriority",
            priority.to_string(),
            "needed with externalEgressGateway: 1 to 32765",
        ));
    }
    // 0 is no table at all, 253-255 are the kernel's default, main and local tables.
    let table = spec.policy_routing_table_id.unwrap_or_default();
    if table == 0 || (253..=255).contains(&table) {
        return Err(fail(
            "spec.policyRoutingTableID",
            table.to_string(),
            "needed with externalEgressGateway: a table other than 0, 253, 254 and 255",
        ));
    }
    Ok(Some(ExternalEgress {
        gateways,
        priority,
        table,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::needless_pass_by_value, reason = "called with json! literals")]
    fn subnet(name: &str, spec: serde_json::Value, status: serde_json::Value) -> Arc<Subnet> {
        let mut status = status;
        status["conditions"] = serde_json::json!([{"type": "Validated", "status": "True"}]);
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kubeovn.io/v1", "kind": "Subnet",
                "metadata": {"name": name, "uid": "0b1c2d3e-aaaa-bbbb-cccc-0123456789ab"},
                "spec": spec, "status": status,
            }))
            .unwrap(),
        )
    }

    #[test]
    fn which_subnets_concern_the_gateway() {
        let yes = subnet(
            "a",
            serde_json::json!({"cidrBlock": "10.16.0.0/16"}),
            serde_json::json!({}),
        );
        assert!(concerns_gateway(&yes, "ovn-cluster"));
        for spec in [
            serde_json::json!({"cidrBlock": "10.16.0.0/16", "vpc": "vpc1"}),
            serde_json::json!({"cidrBlock": "10.16.0.0/16", "vlan": "v1"}),
            serde_json::json!({"cidrBlock": ""}),
        ] {
            assert!(
                !concerns_gateway(&subnet("b", spec.clone(), serde_json::json!({})), "ovn-cluster"),
                "{spec}"
            );
        }
        let lgw = subnet(
            "c",
            serde_json::json!({"cidrBlock": "10.16.0.0/16", "vlan": "v1", "logicalGateway": true}),
            serde_json::json!({}),
        );
        assert!(concerns_gateway(&lgw, "ovn-cluster"));
        let mut unvalidated = (*yes).clone();
        unvalidated.status = None;
        assert!(!is_validated(&unvalidated));
    }

    #[test]
    fn centralized_fields_are_read_with_kube_ovns_trimming() {
        let s = subnet(
            "c",
            serde_json::json!({"cidrBlock": "10.20.0.0/16,fd00:20::/64", "gatewayType": "centralized",
                "gatewayNode": "node1:172.30.0.50, node2", "enableEcmp": true, "natOutgoing": true}),
            serde_json::json!({"activateGateway": "node1"}),
        );
        let view = SubnetView::from_subnet(&s).unwrap();
        let Gateway::Centralized {
            nodes, active, ecmp, ..
        } = &view.gateway
        else {
            panic!("{view:?}")
        };
        assert_eq!(nodes[0].nat_ip, Some("172.30.0.50".parse().unwrap()));
        assert_eq!(nodes[1].node, "node2");
        assert_eq!(active.as_deref(), Some("node1"));
        assert!(*ecmp);
        assert_eq!(view.chain_suffix(), "0123456789ab");
        assert_eq!(view.cidr(Family::V6), Some("fd00:20::/64".parse().unwrap()));
    }

    #[test]
    fn bad_input_names_subnet_and_field() {
        let cases = [
            (
                serde_json::json!({"cidrBlock": "10.20.0.0/16", "gatewayType": "centralized", "gatewayNode": "node1:172.30.0.500"}),
                serde_json::json!({}),
                "spec.gatewayNode",
            ),
            (
                serde_json::json!({"cidrBlock": "10.20.0.0/16", "gatewayType": "central"}),
                serde_json::json!({}),
                "spec.gatewayType",
            ),
            (
                serde_json::json!({"cidrBlock": "10.20.0.0/16", "natOutgoing": true}),
                serde_json::json!({"natOutgoingPolicyRules": [
                    {"action": "nat", "match": {"dstIPs": "1.1.1.1"}, "ruleID": "aaaaaaaaaaaa"},
                    {"action": "forward", "match": {"dstIPs": "8.8.8.0/33"}, "ruleID": "bbbbbbbbbbbb"}]}),
                "status.natOutgoingPolicyRules[1].match.dstIPs",
            ),
            (
                serde_json::json!({"cidrBlock": "10.20.0.0/16", "natOutgoing": true}),
                serde_json::json!({"natOutgoingPolicyRules": [
                    {"action": "drop", "match": {"dstIPs": "1.1.1.1"}, "ruleID": "aaaaaaaaaaaa"}]}),
                "status.natOutgoingPolicyRules[0].action",
            ),
            (
                serde_json::json!({"cidrBlock": "10.20.0.0/16", "natOutgoing": true}),
                serde_json::json!({"natOutgoingPolicyRules": [
                    {"action": "nat", "match": {"srcIPs": "10.20.0.0/24", "dstIPs": "fd00::1"}, "ruleID": "aaaaaaaaaaaa"}]}),
                "status.natOutgoingPolicyRules[0].match",
            ),
            (
                serde_json::json!({"cidrBlock": "10.20.0.0/16", "externalEgressGateway": "172.30.0.254", "policyRoutingTableID": 1000}),
                serde_json::json!({}),
                "spec.policyRoutingPriority",
            ),
            (
                serde_json::json!({"cidrBlock": "10.20.0.0/16", "externalEgressGateway": "172.30.0.254", "policyRoutingPriority": 1000, "policyRoutingTableID": 254}),
                serde_json::json!({}),
                "spec.policyRoutingTableID",
            ),
            (
                serde_json::json!({"cidrBlock": "10.20.0.0/16", "externalEgressGateway": "172.30.0.254", "natOutgoing": true}),
                serde_json::json!({}),
                "spec.externalEgressGateway",
            ),
        ];
        for (spec, status, field) in cases {
            let err = SubnetView::from_subnet(&subnet("s1", spec.clone(), status)).unwrap_err();
            assert_eq!(err.subnet(), "s1");
            assert_eq!(err.field(), field, "{spec}: {err}");
            assert!(
                err.to_string().starts_with(&format!("subnet s1: {field}")),
                "{err}"
            );
        }
    }

    #[test]
    fn policy_rules_without_an_id_wait_and_lists_are_trimmed() {
        let s = subnet(
            "p",
            serde_json::json!({"cidrBlock": "10.20.0.0/16", "natOutgoing": true}),
            serde_json::json!({"natOutgoingPolicyRules": [
                {"action": "nat", "match": {"dstIPs": "1.1.1.1"}},
                {"action": "forward", "match": {"srcIPs": "10.20.0.0/24 , 10.20.1.5", "dstIPs": "198.51.100.0/24"}, "ruleID": "0123456789ab"}]}),
        );
        let view = SubnetView::from_subnet(&s).unwrap();
        assert_eq!(view.policy_rules.len(), 1);
        let rule = &view.policy_rules[0];
        assert_eq!(rule.action, PolicyAction::Forward);
        assert_eq!(
            rule.src,
            [
                "10.20.0.0/24".parse::<IpNet>().unwrap(),
                "10.20.1.5/32".parse().unwrap()
            ]
        );
        // Without natOutgoing the rules are not looked at (the controller empties them).
        let mut off = (*s).clone();
        off.spec.nat_outgoing = Some(false);
        assert!(
            SubnetView::from_subnet(&Arc::new(off))
                .unwrap()
                .policy_rules
                .is_empty()
        );
    }
}
