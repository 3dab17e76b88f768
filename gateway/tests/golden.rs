//! The planner from input to output: golden rulesets (regenerate with `GOLDEN_UPDATE=1 cargo
//! test -p kube-ovn-gateway --test golden` and read the diff), and what a change of input
//! changes.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use ipnet::IpNet;
use kube_ovn_api::crd::Subnet;
use kube_ovn_dataplane::{PolicyRule, TableRoute};
use kube_ovn_gateway::{
    Family, GatewayInput, IngressPort, LB_INGRESS_MARK, LB_INGRESS_PRIORITY, LB_INGRESS_TABLE, LastGood,
    LocalIngress, LocalPod, NodeFacts, PlanError, Planned, Protocol, plan,
};
use serde_json::{Value, json};

fn subnet(name: &str, spec: Value, status: Value) -> Arc<Subnet> {
    let (spec, mut status) = (spec, status);
    status["conditions"] = json!([{"type": "Validated", "status": "True"}]);
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": name, "uid": format!("00000000-0000-0000-0000-{:0>12}", name.replace('-', ""))},
            "spec": spec, "status": status,
        }))
        .unwrap(),
    )
}

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

/// A cluster with every kind of subnet, seen from `node`.
struct Cluster {
    subnets: Vec<Arc<Subnet>>,
    labels: BTreeMap<String, String>,
    joins: Vec<IpNet>,
    services: Vec<IpNet>,
    others: Vec<IpAddr>,
    pods: Vec<LocalPod>,
}

impl Cluster {
    fn new() -> Self {
        Self {
            subnets: vec![
                subnet(
                    "join",
                    json!({"cidrBlock": "100.64.0.0/16,fd00:100:64::/112"}),
                    json!({}),
                ),
                subnet(
                    "ovn-default",
                    json!({"cidrBlock": "10.16.0.0/16,fd00:10:16::/64", "natOutgoing": true, "vpc": "ovn-cluster"}),
                    json!({}),
                ),
                subnet("routed", json!({"cidrBlock": "10.17.0.0/16"}), json!({})),
                subnet(
                    "central",
                    json!({"cidrBlock": "10.20.0.0/16", "natOutgoing": true, "gatewayType": "centralized",
                           "gatewayNode": "node1:172.30.0.50, node2:172.30.0.51"}),
                    json!({"activateGateway": "node1"}),
                ),
                subnet(
                    "policy",
                    json!({"cidrBlock": "10.21.0.0/16", "natOutgoing": true}),
                    json!({"natOutgoingPolicyRules": [
                        {"action": "forward", "match": {"dstIPs": "198.51.100.0/24"}, "ruleID": "aaaaaaaaaaaa"},
                        {"action": "nat", "match": {"srcIPs": "10.21.0.0/24", "dstIPs": "203.0.113.7"}, "ruleID": "bbbbbbbbbbbb"}]}),
                ),
                subnet(
                    "egress",
                    json!({"cidrBlock": "10.22.0.0/16", "externalEgressGateway": "172.31.0.254",
                           "policyRoutingPriority": 1000, "policyRoutingTableID": 1000}),
                    json!({}),
                ),
                subnet(
                    "egress-central",
                    json!({"cidrBlock": "10.23.0.0/16", "gatewayType": "centralized", "gatewayNode": "node1",
                           "externalEgressGateway": "172.31.0.254", "policyRoutingPriority": 1001, "policyRoutingTableID": 1001}),
                    json!({"activateGateway": "node1"}),
                ),
                // Not the default VPC's overlay: not looked at, however odd its fields.
                subnet(
                    "tenant",
                    json!({"cidrBlock": "10.30.0.0/16", "vpc": "vpc1", "gatewayNode": "::bad::"}),
                    json!({}),
                ),
                subnet(
                    "underlay",
                    json!({"cidrBlock": "10.31.0.0/16", "vlan": "v1", "natOutgoing": true}),
                    json!({}),
                ),
            ],
            labels: BTreeMap::new(),
            joins: nets(&["100.64.0.0/16", "fd00:100:64::/112"]),
            services: nets(&["10.96.0.0/12", "fd00:10:96::/108"]),
            others: ips(&["172.30.0.2", "fd00:172:30::2"]),
            pods: vec![LocalPod {
                key: "default/egress-pod".into(),
                subnet: "egress".into(),
                ips: ips(&["10.22.0.5"]),
            }],
        }
    }

    fn plan(&self, node: &str, last_good: &LastGood) -> Planned {
        plan(
            &GatewayInput {
                node: NodeFacts {
                    name: node,
                    labels: &self.labels,
                    internal_ips: (
                        Some("172.30.0.1".parse().unwrap()),
                        Some("fd00:172:30::1".parse().unwrap()),
                    ),
                },
                subnets: &self.subnets,
                cluster_router: "ovn-cluster",
                join_cidrs: &self.joins,
                service_cidrs: &self.services,
                other_node_ips: &self.others,
                local_pods: &self.pods,
                lb_ingress: &[
                    IngressPort {
                        address: "203.0.113.10".parse().unwrap(),
                        protocol: Protocol::Tcp,
                        port: 80,
                    },
                    IngressPort {
                        address: "203.0.113.10".parse().unwrap(),
                        protocol: Protocol::Udp,
                        port: 53,
                    },
                    IngressPort {
                        address: "203.0.113.11".parse().unwrap(),
                        protocol: Protocol::Tcp,
                        port: 80,
                    },
                ],
                lb_local: &[LocalIngress {
                    port: IngressPort {
                        address: "203.0.113.11".parse().unwrap(),
                        protocol: Protocol::Tcp,
                        port: 80,
                    },
                    endpoints: vec![
                        "10.16.0.5:8080".parse().unwrap(),
                        "10.16.0.6:8080".parse().unwrap(),
                    ],
                }],
                join_gateways: &ips(&["100.64.0.1", "fd00:100:64::1"]),
            },
            last_good,
        )
    }

    fn set(&mut self, name: &str, spec: Value, status: Value) {
        let new = subnet(name, spec, status);
        self.subnets.retain(|s| s.metadata.name.as_deref() != Some(name));
        self.subnets.push(new);
    }
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("GOLDEN_UPDATE").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (GOLDEN_UPDATE=1 writes it)", path.display()));
    assert_eq!(
        actual, expected,
        "{name} differs from the golden file (GOLDEN_UPDATE=1 rewrites it)"
    );
}

#[test]
fn every_kind_of_subnet_on_the_active_gateway() {
    let planned = Cluster::new().plan("node1", &LastGood::default());
    assert_eq!(planned.errors, vec![]);
    golden("node1.nft", &planned.plan.ruleset.script());
    // A distributed egress subnet routes its local pods; a centralized one routes its CIDR on
    // the gateway nodes.
    assert_eq!(
        planned.plan.routing.rules.iter().cloned().collect::<Vec<_>>(),
        vec![
            // Marked ingress to the Services' ports, IPv4 only: no IPv6 ingress address.
            PolicyRule {
                priority: LB_INGRESS_PRIORITY,
                src: "0.0.0.0/0".parse().unwrap(),
                table: LB_INGRESS_TABLE,
                fwmark: Some(LB_INGRESS_MARK),
            },
            PolicyRule {
                priority: 1000,
                src: "10.22.0.5/32".parse().unwrap(),
                table: 1000,
                fwmark: None,
            },
            PolicyRule {
                priority: 1001,
                src: "10.23.0.0/16".parse().unwrap(),
                table: 1001,
                fwmark: None,
            },
        ]
    );
    assert_eq!(
        planned.plan.routing.routes.iter().cloned().collect::<Vec<_>>(),
        vec![
            TableRoute {
                table: 1000,
                gateway: "172.31.0.254".parse().unwrap()
            },
            TableRoute {
                table: 1001,
                gateway: "172.31.0.254".parse().unwrap()
            },
            TableRoute {
                table: LB_INGRESS_TABLE,
                gateway: "100.64.0.1".parse().unwrap()
            },
        ]
    );
}

#[test]
fn a_standby_gateway_masquerades_but_does_not_snat_to_its_address() {
    let mut cluster = Cluster::new();
    cluster.pods.clear();
    let planned = cluster.plan("node2", &LastGood::default());
    golden("node2.nft", &planned.plan.ruleset.script());
    let elements = planned.plan.ruleset.elements();
    assert!(elements[&(Family::V4, "ovn40subnets-snat-ip".into())].is_empty());
    assert!(
        elements[&(Family::V4, "ovn40subnets-nat".into())].contains(&("10.20.0.0/16".parse().unwrap(), None))
    );
    // Not a gateway of egress-central, no pod of egress: no external egress routing, only
    // the ingress table's.
    assert!(
        planned
            .plan
            .routing
            .rules
            .iter()
            .all(|r| r.table == LB_INGRESS_TABLE)
    );
    assert!(
        planned
            .plan
            .routing
            .routes
            .iter()
            .all(|r| r.table == LB_INGRESS_TABLE)
    );
}

#[test]
fn subnet_changes_and_failovers_are_element_updates() {
    let mut cluster = Cluster::new();
    let before = cluster.plan("node1", &LastGood::default()).plan.ruleset;
    cluster.set(
        "added",
        json!({"cidrBlock": "10.40.0.0/16", "natOutgoing": true}),
        json!({}),
    );
    cluster
        .subnets
        .retain(|s| s.metadata.name.as_deref() != Some("routed"));
    cluster.set(
        "central",
        json!({"cidrBlock": "10.20.0.0/16", "natOutgoing": true, "gatewayType": "centralized",
               "gatewayNode": "node1:172.30.0.50, node2:172.30.0.51"}),
        json!({"activateGateway": "node2"}),
    );
    let after = cluster.plan("node1", &LastGood::default()).plan.ruleset;
    let updates = after.updates_from(&before).expect("only elements changed");
    let summary: Vec<String> = updates
        .iter()
        .map(|u| format!("{} -{} +{}", u.set, u.delete.len(), u.add.len()))
        .collect();
    assert_eq!(
        summary,
        [
            "ovn40subnets -1 +1",
            "ovn40subnets-distributed-gw -1 +1",
            "ovn40subnets-nat -0 +1",
            "ovn40subnets-snat -1 +0",
            "ovn40subnets-snat-ip -1 +0",
        ]
    );
    // A new policy rule is a new rule and new sets: the table is rebuilt.
    cluster.set(
        "policy",
        json!({"cidrBlock": "10.21.0.0/16", "natOutgoing": true}),
        json!({"natOutgoingPolicyRules": [{"action": "forward", "match": {"dstIPs": "192.0.2.0/24"}, "ruleID": "cccccccccccc"}]}),
    );
    assert_eq!(
        cluster
            .plan("node1", &LastGood::default())
            .plan
            .ruleset
            .updates_from(&after),
        None
    );
}

#[test]
fn refused_input_keeps_the_subnets_previous_plan() {
    let mut cluster = Cluster::new();
    let first = cluster.plan("node1", &LastGood::default());
    // A typo in the active gateway's entry (which the controller refuses too: not validated),
    // and a bad destination in a policy rule.
    cluster.set(
        "central",
        json!({"cidrBlock": "10.20.0.0/16", "natOutgoing": true, "gatewayType": "centralized",
               "gatewayNode": "node1:172.30.0.500"}),
        json!({"activateGateway": "node1"}),
    );
    refuse(&mut cluster, "central");
    cluster.set(
        "policy",
        json!({"cidrBlock": "10.21.0.0/16", "natOutgoing": true}),
        json!({"natOutgoingPolicyRules": [{"action": "nat", "match": {"dstIPs": "203.0.113.0/33"}, "ruleID": "bbbbbbbbbbbb"}]}),
    );
    cluster.set(
        "added",
        json!({"cidrBlock": "10.40.0.0/16", "natOutgoing": true}),
        json!({}),
    );
    let second = cluster.plan("node1", &first.last_good);
    let fields: Vec<(&str, &str)> = second.errors.iter().map(|e| (e.subnet(), e.field())).collect();
    assert_eq!(
        fields,
        [
            ("central", "spec.gatewayNode"),
            ("policy", "status.natOutgoingPolicyRules[0].match.dstIPs")
        ]
    );
    assert!(
        matches!(&second.errors[0], PlanError::GatewayNode { value, .. } if value == "node1:172.30.0.500")
    );
    // The good change went through; the refused subnets kept what they had.
    let updates = second
        .plan
        .ruleset
        .updates_from(&first.plan.ruleset)
        .expect("same shape");
    assert!(updates.iter().all(|u| u.delete.is_empty()), "{updates:?}");
    assert!(
        updates
            .iter()
            .any(|u| u.set == "ovn40subnets-nat" && u.add == [("10.40.0.0/16".parse().unwrap(), None)])
    );
    // Without a previous version (a fresh daemon), a refused subnet has no plan at all.
    let fresh = cluster.plan("node1", &LastGood::default());
    assert!(
        !fresh.plan.ruleset.elements()[&(Family::V4, "ovn40subnets".into())]
            .contains(&("10.20.0.0/16".parse().unwrap(), None))
    );
    // A spec the controller refused for a reason of its own (valid to us): the previous plan
    // stays, and it is the controller's to report.
    cluster.set("routed", json!({"cidrBlock": "10.99.0.0/16"}), json!({}));
    refuse(&mut cluster, "routed");
    let third = cluster.plan("node1", &second.last_good);
    assert_eq!(third.errors.len(), 2, "{:?}", third.errors);
    let subnets = &third.plan.ruleset.elements()[&(Family::V4, "ovn40subnets".into())];
    assert!(subnets.contains(&("10.17.0.0/16".parse().unwrap(), None)));
    assert!(!subnets.contains(&("10.99.0.0/16".parse().unwrap(), None)));
}

/// Marks subnet `name` as the controller marks a spec it refuses.
fn refuse(cluster: &mut Cluster, name: &str) {
    let subnet = cluster
        .subnets
        .iter_mut()
        .find(|s| s.metadata.name.as_deref() == Some(name))
        .expect("the subnet");
    let mut refused = (**subnet).clone();
    refused.status.as_mut().unwrap().conditions = Some(
        serde_json::from_value(
            json!([{"type": "Validated", "status": "False", "reason": "ValidateLogicalSwitchFailed"}]),
        )
        .unwrap(),
    );
    *subnet = Arc::new(refused);
}

#[test]
fn conflicting_policy_routing_tables_refuse_the_later_subnet() {
    let mut cluster = Cluster::new();
    cluster.set(
        "egress-central",
        json!({"cidrBlock": "10.23.0.0/16", "gatewayType": "centralized", "gatewayNode": "node1",
               "externalEgressGateway": "172.31.0.253", "policyRoutingPriority": 1001, "policyRoutingTableID": 1000}),
        json!({}),
    );
    let planned = cluster.plan("node1", &LastGood::default());
    assert_eq!(planned.errors.len(), 1);
    assert_eq!(
        (planned.errors[0].subnet(), planned.errors[0].field()),
        ("egress-central", "spec.policyRoutingTableID")
    );
    assert_eq!(
        planned
            .plan
            .routing
            .routes
            .iter()
            .filter(|r| r.table != LB_INGRESS_TABLE)
            .count(),
        1
    );
}

#[test]
fn an_ipv4_only_cluster_deletes_any_ipv6_table() {
    let subnets = vec![subnet(
        "ovn-default",
        json!({"cidrBlock": "10.16.0.0/16", "natOutgoing": true}),
        json!({}),
    )];
    let labels = BTreeMap::new();
    let planned = plan(
        &GatewayInput {
            node: NodeFacts {
                name: "n",
                labels: &labels,
                internal_ips: (None, None),
            },
            subnets: &subnets,
            cluster_router: "ovn-cluster",
            join_cidrs: &[],
            service_cidrs: &nets(&["10.96.0.0/12"]),
            other_node_ips: &[],
            local_pods: &[],
            lb_ingress: &[],
            lb_local: &[],
            join_gateways: &[],
        },
        &LastGood::default(),
    );
    let script = planned.plan.ruleset.script();
    assert!(
        script.ends_with("table ip6 kube-ovn\ndelete table ip6 kube-ovn\n"),
        "{script}"
    );
    // Without the node's address, Service → pod traffic has no SNAT rule (Kube-OVN's too).
    assert!(!script.contains("snat to 1"), "{script}");
}

#[test]
fn ingress_marks_only_the_services_ports_and_routes_marked_packets_into_ovn0() {
    let planned = Cluster::new().plan("node1", &LastGood::default());
    let script = planned.plan.ruleset.script();
    // Only (address, protocol, port) of the Service's ports is marked; nothing routes the
    // whole address (no set of ingress addresses, no /32 route).
    assert!(script.contains(
        "\tchain OVN-LB-INGRESS {\n\t\ttype filter hook prerouting priority mangle - 1; policy accept;\n\
         \t\tiifname != \"ovn0\" ip daddr 203.0.113.10 tcp dport { 80 } meta mark set meta mark | 0x00400000\n\
         \t\tiifname != \"ovn0\" ip daddr 203.0.113.10 udp dport { 53 } meta mark set meta mark | 0x00400000\n\
         \t\tiifname != \"ovn0\" ip daddr 203.0.113.11 tcp dport { 80 } meta mark set meta mark | 0x00080000\n\t}\n"
    ), "{script}");
    // The `Local` port: forwarded traffic DNATed to this node's endpoints (marked 0x80000 above,
    // for OVN-POSTROUTING's keep-the-source rule), the node's own routed as for `Cluster`.
    assert!(script.contains(
        "iifname != \"ovn0\" ip daddr 203.0.113.11 tcp dport 80 dnat ip to numgen random mod 2 map { 0 : 10.16.0.5 . 8080, 1 : 10.16.0.6 . 8080 }"
    ), "{script}");
    assert!(
        script.contains("meta mark & 0x00080000 == 0x00080000 ip daddr @ovn40subnets-distributed-gw return"),
        "{script}"
    );
    assert!(
        script.contains("type route hook output priority mangle - 1;"),
        "{script}"
    );
    assert!(
        script.contains("oifname \"ovn0\" meta mark & 0x00400000 == 0x00400000 jump OVN-MASQUERADE"),
        "{script}"
    );
    assert!(!script.contains("lb-ingress"), "{script}");
    // A subnet cannot take the ingress table for its external egress.
    let mut cluster = Cluster::new();
    cluster.set(
        "egress",
        json!({"cidrBlock": "10.22.0.0/16", "externalEgressGateway": "172.31.0.254",
               "policyRoutingPriority": 1000, "policyRoutingTableID": LB_INGRESS_TABLE}),
        json!({}),
    );
    let planned = cluster.plan("node1", &LastGood::default());
    assert_eq!(planned.errors.len(), 1, "{:?}", planned.errors);
    assert_eq!(planned.errors[0].field(), "spec.policyRoutingTableID");
    assert!(
        !planned
            .plan
            .routing
            .rules
            .iter()
            .any(|r| r.table == LB_INGRESS_TABLE && r.fwmark.is_none()),
        "{:?}",
        planned.plan.routing.rules
    );
}
