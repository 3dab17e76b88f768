use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::json;

use super::{Endpoint, PodView, allows};

fn policy(namespace: &str, spec: &serde_json::Value) -> NetworkPolicy {
    serde_json::from_value(json!({"metadata": {"name": "p", "namespace": namespace}, "spec": spec})).unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

struct Pod {
    ip: IpAddr,
    namespace: &'static str,
    labels: BTreeMap<String, String>,
    namespace_labels: BTreeMap<String, String>,
    named_ports: BTreeMap<String, u16>,
}

impl Pod {
    fn new(ip: &str, namespace: &'static str, app: &str) -> Self {
        Pod {
            ip: ip.parse().unwrap(),
            namespace,
            labels: labels(&[("app", app)]),
            namespace_labels: labels(&[("kubernetes.io/metadata.name", namespace)]),
            named_ports: [("http".to_owned(), 8080)].into(),
        }
    }
    fn end(&self) -> Endpoint<'_> {
        Endpoint {
            ip: self.ip,
            pod: Some(PodView {
                namespace: self.namespace,
                labels: &self.labels,
                namespace_labels: &self.namespace_labels,
                named_ports: &self.named_ports,
            }),
        }
    }
}

fn outside() -> Endpoint<'static> {
    Endpoint {
        ip: "198.51.100.10".parse().unwrap(),
        pod: None,
    }
}

#[test]
fn no_policy_allows_everything() {
    let (a, b) = (
        Pod::new("10.16.0.2", "demo", "a"),
        Pod::new("10.16.0.3", "demo", "b"),
    );
    assert!(allows(&[], &a.end(), &b.end(), 8080));
    assert!(allows(&[], &outside(), &b.end(), 8080));
}

#[test]
fn default_deny_ingress_isolates_the_selected_pods_only() {
    let deny = policy("demo", &json!({"podSelector": {"matchLabels": {"app": "b"}}}));
    let (a, b) = (
        Pod::new("10.16.0.2", "demo", "a"),
        Pod::new("10.16.0.3", "demo", "b"),
    );
    let other = Pod::new("10.17.0.2", "bgp", "b");
    assert!(!allows(std::slice::from_ref(&deny), &a.end(), &b.end(), 8080));
    assert!(
        allows(std::slice::from_ref(&deny), &b.end(), &a.end(), 8080),
        "egress is not isolated"
    );
    assert!(
        allows(std::slice::from_ref(&deny), &a.end(), &other.end(), 8080),
        "another namespace's pod"
    );
}

#[test]
fn namespace_and_pod_selectors_and_their_combination() {
    let (a, b) = (
        Pod::new("10.16.0.2", "demo", "a"),
        Pod::new("10.16.0.3", "demo", "b"),
    );
    let from_bgp = Pod::new("10.17.0.2", "bgp", "x");
    let by_namespace = policy(
        "demo",
        &json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "bgp"}}}]}]}),
    );
    assert!(allows(
        std::slice::from_ref(&by_namespace),
        &from_bgp.end(),
        &b.end(),
        8080
    ));
    assert!(!allows(
        std::slice::from_ref(&by_namespace),
        &a.end(),
        &b.end(),
        8080
    ));
    let both = policy(
        "demo",
        &json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "bgp"}},
                                                          "podSelector": {"matchLabels": {"app": "y"}}}]}]}),
    );
    assert!(
        !allows(std::slice::from_ref(&both), &from_bgp.end(), &b.end(), 8080),
        "AND, not OR"
    );
    let same_ns_pods = policy(
        "demo",
        &json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "a"}}}]}]}),
    );
    assert!(allows(
        std::slice::from_ref(&same_ns_pods),
        &a.end(),
        &b.end(),
        8080
    ));
    assert!(
        !allows(
            std::slice::from_ref(&same_ns_pods),
            &Pod::new("10.17.0.3", "bgp", "a").end(),
            &b.end(),
            8080
        ),
        "a pod selector alone means the policy's namespace"
    );
    // Two policies: the union of what they allow.
    assert!(allows(&[by_namespace, same_ns_pods], &a.end(), &b.end(), 8080));
}

#[test]
fn ip_blocks_ports_and_egress() {
    let b = Pod::new("10.16.0.3", "demo", "b");
    let block = policy(
        "demo",
        &json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "198.51.100.0/24", "except": ["198.51.100.10/32"]}}]}]}),
    );
    assert!(
        !allows(std::slice::from_ref(&block), &outside(), &b.end(), 8080),
        "in the except"
    );
    let mut near = outside();
    near.ip = "198.51.100.11".parse().unwrap();
    assert!(allows(std::slice::from_ref(&block), &near, &b.end(), 8080));
    let named = policy(
        "demo",
        &json!({"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}),
    );
    assert!(allows(std::slice::from_ref(&named), &outside(), &b.end(), 8080));
    assert!(!allows(std::slice::from_ref(&named), &outside(), &b.end(), 81));
    let range = policy(
        "demo",
        &json!({"podSelector": {}, "ingress": [{"ports": [{"port": 8000, "endPort": 8100}]}]}),
    );
    assert!(allows(std::slice::from_ref(&range), &outside(), &b.end(), 8080));
    let udp_only = policy(
        "demo",
        &json!({"podSelector": {}, "ingress": [{"ports": [{"protocol": "UDP", "port": 8080}]}]}),
    );
    assert!(!allows(
        std::slice::from_ref(&udp_only),
        &outside(),
        &b.end(),
        8080
    ));
    let egress = policy(
        "demo",
        &json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "198.51.100.0/24"}}], "ports": [{"port": 80}]}]}),
    );
    assert!(allows(std::slice::from_ref(&egress), &b.end(), &outside(), 80));
    assert!(!allows(std::slice::from_ref(&egress), &b.end(), &outside(), 8080));
    let a = Pod::new("10.16.0.2", "demo", "a");
    assert!(
        !allows(std::slice::from_ref(&egress), &b.end(), &a.end(), 80),
        "egress isolated toward pods"
    );
    let elsewhere = Pod::new("10.17.0.2", "bgp", "a");
    assert!(
        allows(std::slice::from_ref(&egress), &elsewhere.end(), &b.end(), 8080),
        "ingress not isolated"
    );
}
