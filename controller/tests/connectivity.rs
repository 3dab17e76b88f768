//! What the controller writes to OVN, checked with ovn-trace against real ovn-northd output.

mod common;

use common::{Env, ann, icmp};
use kube::ResourceExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pods_in_the_default_subnet_reach_each_other() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.pod("ns1", "a", "node1", &[]).await;
    env.pod("ns1", "b", "node1", &[]).await;
    let a = env.routed("ns1", "a").await;
    let b = env.routed("ns1", "b").await;
    assert_eq!(ann(&a, "logical_switch"), "ovn-default");
    assert_eq!(ann(&a, "cidr"), "10.16.0.0/16");
    assert_eq!(ann(&a, "gateway"), "10.16.0.1");
    assert_ne!(ann(&a, "ip_address"), ann(&b, "ip_address"));
    let flow = icmp(&a, ann(&b, "mac_address"), ann(&b, "ip_address"));
    let trace = env.ovn.trace("ovn-default", &flow).unwrap();
    assert!(trace.delivers_to("b.ns1"), "{}", trace.text);
    assert_eq!(b.name_any(), "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_in_two_subnets_reach_each_other_through_the_cluster_router() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.namespace("ns2").await;
    env.apply_yaml(
        serde_json::json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "net2"},
        "spec": {"cidrBlock": "10.17.0.0/16", "namespaces": ["ns2"]}}),
    )
    .await;
    env.pod("ns1", "a", "node1", &[]).await;
    env.pod("ns2", "b", "node1", &[]).await;
    let a = env.routed("ns1", "a").await;
    let b = env.routed("ns2", "b").await;
    assert_eq!(ann(&b, "logical_switch"), "net2", "namespace binding");
    assert!(
        ann(&b, "ip_address").starts_with("10.17."),
        "{}",
        ann(&b, "ip_address")
    );
    // To another subnet the pod sends to its gateway's MAC: the router port ovn-cluster-ovn-default.
    let gw_mac = env
        .ovn
        .nbctl(&["get", "Logical_Router_Port", "ovn-cluster-ovn-default", "mac"])
        .unwrap();
    let flow = icmp(&a, gw_mac.trim().trim_matches('"'), ann(&b, "ip_address"));
    let trace = env.ovn.trace("ovn-default", &flow).unwrap();
    assert!(trace.delivers_to("b.ns2"), "{}", trace.text);
    assert!(
        trace.text.contains("ip.ttl--"),
        "routed, not switched: {}",
        trace.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn northbound_rows_have_kube_ovn_names_and_priorities() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.pod("ns1", "a", "node1", &[]).await;
    env.routed("ns1", "a").await;
    let nbctl = |args: &[&str]| env.ovn.nbctl(args).unwrap();
    let switches = nbctl(&["--bare", "--columns=name", "list", "Logical_Switch"]);
    assert!(
        switches.contains("ovn-default") && switches.contains("join"),
        "{switches}"
    );
    assert!(nbctl(&["lr-list"]).contains("ovn-cluster"));
    let lrps = nbctl(&["--bare", "--columns=name", "list", "Logical_Router_Port"]);
    assert!(
        lrps.contains("ovn-cluster-ovn-default") && lrps.contains("ovn-cluster-join"),
        "{lrps}"
    );
    let lsps = nbctl(&["--bare", "--columns=name", "list", "Logical_Switch_Port"]);
    for port in [
        "ovn-default-ovn-cluster",
        "join-ovn-cluster",
        "a.ns1",
        "node-node1",
    ] {
        assert!(lsps.contains(port), "{port} missing from {lsps}");
    }
    let pgs = nbctl(&["--bare", "--columns=name", "list", "Port_Group"]);
    assert!(
        pgs.contains("ovn.default.node1") && pgs.contains("node.node1"),
        "{pgs}"
    );
    let policies = nbctl(&["lr-policy-list", "ovn-cluster"]);
    assert!(
        policies.contains("31000")
            && policies.contains("ip4.dst == 10.16.0.0/16")
            && policies.contains("allow"),
        "{policies}"
    );
    assert!(
        policies.contains("30000")
            && policies.contains("ip4.dst == 172.18.0.2")
            && policies.contains("reroute"),
        "{policies}"
    );
    assert!(
        policies.contains("29000") && policies.contains("ip4.src == $ovn.default.node1_ip4"),
        "{policies}"
    );
    let join_ip = nbctl(&["get", "Logical_Switch_Port", "node-node1", "addresses"]);
    let join_ip = join_ip
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_matches(|c| c == '"' || c == ']');
    assert!(join_ip.starts_with("100.64."), "{join_ip}");
    assert!(
        policies.contains(&format!("reroute                {join_ip}")) || policies.contains(join_ip),
        "{policies}"
    );
}
