// Builders take JSON by value so that cases read as literals.
#![allow(clippy::needless_pass_by_value)]

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

const V4: Families = Families { v4: true, v6: false };
const DUAL: Families = Families { v4: true, v6: true };

fn policy(name: &str, ns: &str, spec: Value) -> NetworkPolicy {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "spec": spec})).unwrap()
}

fn pod(ns: &str, name: &str, labels: Value, ips: &str, ports: Value) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels,
                "annotations": {"ovn.kubernetes.io/ip_address": ips}},
            "spec": {"containers": [{"name": "c", "ports": ports}]}
        }))
        .unwrap(),
    )
}

fn namespace(name: &str, labels: Value) -> Arc<Namespace> {
    Arc::new(serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap())
}

fn world() -> (Vec<Arc<Pod>>, Vec<Arc<Namespace>>) {
    let pods = vec![
        pod(
            "a",
            "web",
            json!({"app": "web"}),
            "10.16.0.2",
            json!([{"name": "http", "containerPort": 8080}]),
        ),
        pod("a", "db", json!({"app": "db"}), "10.16.0.3", json!([])),
        pod(
            "b",
            "client",
            json!({"app": "client"}),
            "10.16.0.4,fd00::4",
            json!([]),
        ),
        pod("c", "client", json!({"app": "client"}), "10.16.0.5", json!([])),
    ];
    let nss = vec![
        namespace("a", json!({})),
        namespace("b", json!({"team": "x"})),
        namespace("c", json!({"team": "y"})),
    ];
    (pods, nss)
}

/// The test pods' allocated addresses: in these tests, those of their `ip_address` annotation
/// (standing in for their ports' addresses, which the controller reads).
fn annotated(p: &Pod) -> Vec<IpAddr> {
    p.annotations()
        .get(keys::IP_ADDRESS)
        .map(|s| s.split(',').filter_map(|a| a.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn plan_with(
    np: &NetworkPolicy,
    pods: &[Arc<Pod>],
    nss: &[Arc<Namespace>],
    families: Families,
    lax: bool,
) -> Result<PolicyRows, PolicyError> {
    let world = World {
        pods,
        namespaces: nss,
        policies: &[],
        addresses: &annotated,
        families,
    };
    plan_policy(np, &world, lax)
}

fn plan(np: &NetworkPolicy, families: Families) -> Result<PolicyRows, PolicyError> {
    let (pods, nss) = world();
    plan_with(np, &pods, &nss, families, false)
}

fn matches(rows: &PolicyRows) -> Vec<(&str, i64, &str, &str)> {
    rows.acls
        .iter()
        .map(|a| {
            (
                a.direction.as_str(),
                a.priority,
                a.r#match.as_str(),
                a.action.as_str(),
            )
        })
        .collect()
}

#[test]
fn port_group_names_follow_kube_ovn() {
    assert_eq!(port_group_name("allow-web", "my-ns"), "allow.web.my.ns");
    assert_eq!(port_group_name("1st", "a"), "np1st.a");
    let rows = plan(&policy("deny-all", "a", json!({"podSelector": {}})), V4).unwrap();
    assert_eq!(rows.port_group, "deny.all.a");
    assert_eq!(rows.key, "a/deny-all");
    // An empty pod selector selects every pod of the namespace, and only those.
    assert_eq!(
        rows.ports,
        BTreeSet::from(["db.a".to_owned(), "web.a".to_owned()])
    );
}

#[test]
fn default_deny_ingress_and_egress() {
    let rows = plan(
        &policy(
            "d",
            "a",
            json!({"podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress", "Egress"]}),
        ),
        V4,
    )
    .unwrap();
    assert_eq!(
        matches(&rows),
        [
            ("to-lport", 2000, "outport == @d.a && ip", "drop"),
            ("from-lport", 2000, "inport == @d.a && ip", "drop"),
        ]
    );
    assert!(rows.acls[0].options.is_empty());
    // Egress is judged after DNAT, so a Service is judged by its backend.
    assert_eq!(
        rows.acls[1].options.get("apply-after-lb").map(String::as_str),
        Some("true")
    );
    assert_eq!(rows.ports, BTreeSet::from(["web.a".to_owned()]));
    assert!(rows.address_sets.is_empty());
}

#[test]
fn policy_types_default_to_ingress_plus_egress_when_egress_rules_exist() {
    let only_ingress = plan(&policy("p", "a", json!({"podSelector": {}})), V4).unwrap();
    assert_eq!(only_ingress.acls.len(), 1);
    let both = plan(&policy("p", "a", json!({"podSelector": {}, "egress": [{}]})), V4).unwrap();
    assert_eq!(
        matches(&both),
        [
            ("to-lport", 2000, "outport == @p.a && ip", "drop"),
            ("from-lport", 2000, "inport == @p.a && ip", "drop"),
            ("from-lport", 2001, "inport == @p.a && ip4", "allow-related"),
        ]
    );
}

#[test]
fn namespace_and_pod_selectors_fill_address_sets_per_rule_and_family() {
    let rows = plan(
        &policy(
            "from-x",
            "a",
            json!({"podSelector": {}, "ingress": [
                {"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]},
                {"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "client"}}}]},
                {"from": [{"podSelector": {"matchLabels": {"app": "db"}}}]}
            ]}),
        ),
        DUAL,
    )
    .unwrap();
    let sets: Vec<(&str, Vec<&str>, &str)> = rows
        .address_sets
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.addresses.iter().map(String::as_str).collect(),
                s.direction,
            )
        })
        .collect();
    assert_eq!(
        sets,
        [
            ("from.x.a.ingress.allow.IPv4.0", vec!["10.16.0.4"], "ingress"),
            ("from.x.a.ingress.allow.IPv6.0", vec!["fd00::4"], "ingress"),
            (
                "from.x.a.ingress.allow.IPv4.1",
                vec!["10.16.0.4", "10.16.0.5"],
                "ingress"
            ),
            ("from.x.a.ingress.allow.IPv6.1", vec!["fd00::4"], "ingress"),
            // No namespace selector: the policy's own namespace only.
            ("from.x.a.ingress.allow.IPv4.2", vec!["10.16.0.3"], "ingress"),
            ("from.x.a.ingress.allow.IPv6.2", vec![], "ingress"),
        ]
    );
    let m = matches(&rows);
    assert_eq!(m[0], ("to-lport", 2000, "outport == @from.x.a && ip", "drop"));
    // Dual stack: neighbour discovery passes the default drop.
    assert_eq!(
        m[1],
        (
            "to-lport",
            2001,
            "outport == @from.x.a && (nd || nd_rs || nd_ra)",
            "allow-stateless"
        )
    );
    assert_eq!(
        m[2],
        (
            "to-lport",
            2001,
            "outport == @from.x.a && ip4.src == $from.x.a.ingress.allow.IPv4.0",
            "allow-related"
        )
    );
    assert_eq!(
        m[3],
        (
            "to-lport",
            2001,
            "outport == @from.x.a && ip6.src == $from.x.a.ingress.allow.IPv6.0",
            "allow-related"
        )
    );
}

#[test]
fn ip_block_with_except_and_port_range() {
    let rows = plan(
        &policy(
            "out",
            "a",
            json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [
                {"to": [{"ipBlock": {"cidr": "172.19.0.0/16", "except": ["172.19.0.128/25"]}}],
                 "ports": [{"port": 80, "endPort": 90}, {"protocol": "UDP", "port": 53}]}
            ]}),
        ),
        V4,
    )
    .unwrap();
    assert_eq!(
        matches(&rows)[1..],
        [
            (
                "from-lport",
                2001,
                "inport == @out.a && ip4.dst == 172.19.0.0/16 && ip4.dst != {172.19.0.128/25} && 80 <= tcp.dst <= 90",
                "allow-related"
            ),
            (
                "from-lport",
                2001,
                "inport == @out.a && ip4.dst == 172.19.0.0/16 && ip4.dst != {172.19.0.128/25} && udp.dst == 53",
                "allow-related"
            ),
        ]
    );
    assert!(
        rows.acls
            .iter()
            .all(|a| a.options.get("apply-after-lb").map(String::as_str) == Some("true"))
    );
}

#[test]
fn named_ports_resolve_through_the_receivers() {
    let with = |name: &str| {
        plan(
            &policy(
                "n",
                "a",
                json!({"podSelector": {"matchLabels": {"app": "web"}},
                    "ingress": [{"ports": [{"port": name}]}]}),
            ),
            V4,
        )
        .unwrap()
    };
    assert_eq!(
        matches(&with("http"))[1],
        (
            "to-lport",
            2001,
            "outport == @n.a && ip4 && tcp.dst == 8080",
            "allow-related"
        )
    );
    // A name no selected pod declares allows nothing: only the drop is left.
    assert_eq!(matches(&with("nope")).len(), 1);
}

#[test]
fn bad_input_names_the_field() {
    let err = plan(
        &policy(
            "b",
            "a",
            json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}),
        ),
        V4,
    )
    .unwrap_err();
    assert_eq!(err.field, "spec.ingress[0].from[0].ipBlock.cidr");
    let err = plan(
        &policy(
            "b",
            "a",
            json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}]}]}),
        ),
        V4,
    )
    .unwrap_err();
    assert_eq!(err.field, "spec.ingress[0].from[0].ipBlock.except[0]");
    let err = plan(
        &policy(
            "b",
            "a",
            json!({"podSelector": {}, "ingress": [{"ports": [{"port": 90, "endPort": 80}]}]}),
        ),
        V4,
    )
    .unwrap_err();
    assert_eq!(err.field, "spec.ingress[0].ports[0].endPort");
    let err = plan(
        &policy("b", "a", json!({"podSelector": {}, "policyTypes": ["Sideways"]})),
        V4,
    )
    .unwrap_err();
    assert_eq!(err.field, "spec.policyTypes[0]");
}

#[test]
fn lax_drops_only_transport_and_logging_marks_acls() {
    let (pods, nss) = world();
    let mut np = policy("l", "a", json!({"podSelector": {}, "ingress": [{}]}));
    np.metadata.annotations = Some(
        [
            ("ovn.kubernetes.io/enable_log".to_owned(), "true".to_owned()),
            (
                "ovn.kubernetes.io/log_acl_actions".to_owned(),
                "drop,allow".to_owned(),
            ),
        ]
        .into(),
    );
    let rows = plan_with(&np, &pods, &nss, V4, true).unwrap();
    assert_eq!(
        rows.acls[0].r#match,
        "outport == @l.a && ip && (tcp || udp || sctp)"
    );
    assert!(
        rows.acls
            .iter()
            .all(|a| a.log && a.name.as_deref() == Some("l.a"))
    );
    assert_eq!(rows.acls[0].severity.as_deref(), Some("warning"));
    assert_eq!(rows.acls[1].severity.as_deref(), Some("info"));
    // Log messages are rate-limited by a meter per direction.
    assert!(
        rows.acls
            .iter()
            .all(|a| a.meter.as_deref() == Some("l.a_to-lport_meter"))
    );
    assert_eq!(rows.meters, [("l.a_to-lport_meter".to_owned(), DEFAULT_LOG_RATE)]);
    let quiet = plan_with(
        &policy("q", "a", json!({"podSelector": {}})),
        &pods,
        &nss,
        V4,
        false,
    )
    .unwrap();
    assert!(quiet.meters.is_empty() && quiet.acls.iter().all(|a| !a.log && a.meter.is_none()));
}

#[test]
fn finished_and_host_network_pods_are_neither_selected_nor_peers() {
    let (mut pods, nss) = world();
    let mut done = (*pods[0]).clone();
    done.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    pods[0] = Arc::new(done);
    let rows = plan_with(
        &policy("p", "a", json!({"podSelector": {}})),
        &pods,
        &nss,
        V4,
        false,
    )
    .unwrap();
    assert_eq!(rows.ports, BTreeSet::from(["db.a".to_owned()]));
}

#[test]
fn node_acls_let_the_node_in_and_its_pods_out() {
    let acls = node_acls("kind-worker", &["172.18.0.2".parse().unwrap()]);
    let m: Vec<(&str, i64, &str)> = acls
        .iter()
        .map(|a| (a.direction.as_str(), a.priority, a.r#match.as_str()))
        .collect();
    assert_eq!(
        m,
        [
            (
                "to-lport",
                3000,
                "ip4.src == 172.18.0.2 && ip4.dst == $node.kind.worker_ip4"
            ),
            (
                "from-lport",
                3000,
                "ip4.dst == 172.18.0.2 && ip4.src == $node.kind.worker_ip4"
            ),
        ]
    );
}

#[test]
fn namespace_selecting_policies_are_known() {
    assert!(!selects_namespaces(&policy(
        "p",
        "a",
        json!({"podSelector": {}, "ingress": [{}]})
    )));
    assert!(selects_namespaces(&policy(
        "p",
        "a",
        json!({"podSelector": {}, "egress": [{"to": [{"namespaceSelector": {}}]}]})
    )));
}

#[test]
fn address_sets_hold_allocated_addresses_not_annotated_ones() {
    // `client` in namespace c forged web's address (and its own) in its annotation; what the
    // controller allocated to it (its port) is 10.16.0.5 only, and `nobody` has no port yet.
    let (mut pods, nss) = world();
    pods.push(pod(
        "a",
        "nobody",
        json!({"app": "client"}),
        "10.16.0.9",
        json!([]),
    ));
    pods.push(pod(
        "a",
        "forger",
        json!({"app": "client"}),
        "10.16.0.2",
        json!([]),
    ));
    let ports = |p: &Pod| -> Vec<IpAddr> {
        match p.name_any().as_str() {
            "nobody" => Vec::new(),
            "forger" => vec!["10.16.0.7".parse().unwrap()],
            _ => annotated(p),
        }
    };
    let world = World {
        pods: &pods,
        namespaces: &nss,
        policies: &[],
        addresses: &ports,
        families: V4,
    };
    let np = policy(
        "p",
        "a",
        json!({"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}]}),
    );
    let rows = plan_policy(&np, &world, false).unwrap();
    assert_eq!(
        rows.address_sets[0].addresses,
        BTreeSet::from(["10.16.0.7".to_owned()]),
        "the forger's port address only: not web's 10.16.0.2 nor nobody's 10.16.0.9"
    );
}

#[test]
fn a_port_groups_name_an_older_policy_has_is_hashed_and_so_are_its_sets() {
    let old: Arc<NetworkPolicy> = Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "allow", "namespace": "team-x",
            "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}}))
        .unwrap(),
    );
    let young: Arc<NetworkPolicy> = Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "allow-team", "namespace": "x",
            "creationTimestamp": "2026-01-02T00:00:00Z"},
            "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}}))
        .unwrap(),
    );
    let (pods, nss) = world();
    let policies = [young.clone(), old.clone()];
    let world = World {
        pods: &pods,
        namespaces: &nss,
        policies: &policies,
        addresses: &annotated,
        families: V4,
    };
    let o = plan_policy(&old, &world, false).unwrap();
    let y = plan_policy(&young, &world, false).unwrap();
    assert_eq!(o.port_group, "allow.team.x");
    let hashed = crate::reconcile::network_policy::names::hashed_name(&young);
    assert_eq!(y.port_group, hashed);
    assert_eq!(y.address_sets[0].name, format!("{hashed}.ingress.allow.IPv4.0"));
    assert!(y.acls.iter().all(|a| a.r#match.contains(&format!("@{hashed} "))));
    assert_ne!(o.address_sets[0].name, y.address_sets[0].name);
}

#[test]
fn a_ports_addresses_are_the_ips_of_its_entries() {
    assert_eq!(
        port_ips(["00:00:00:aa:bb:cc 10.16.0.5 fd00::5", "dynamic", "router"]),
        ["10.16.0.5".parse::<IpAddr>().unwrap(), "fd00::5".parse().unwrap()]
    );
    assert!(port_ips([]).is_empty());
}
