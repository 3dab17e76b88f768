//! Custom VPCs on real OVN: their routers, routes, policies and peerings, checked in the
//! northbound database and with ovn-trace.

mod common;
mod netkit;

use common::{Env, WAIT, ann};
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::Api;
use kube_ovn_api::crd::Vpc;
use kube_ovn_testkit::wait_until_async;
use netkit::{
    delete_subnet, delete_vpc, icmp_routed, icmp_to, lrp_mac, nb_until, port, vpc_condition, vpc_until,
};
use serde_json::json;

async fn vpc(env: &Env, name: &str, spec: serde_json::Value) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

async fn subnet(env: &Env, name: &str, spec: serde_json::Value) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

/// A node, VPC `vpc1` (namespace `nsv`) with subnets `s1` (10.1.0.0/24, bound to `nsv`) and `s2`
/// (10.2.0.0/24), pods `a` (in s1) and `b` (in s2), and pod `d` in the default subnet.
async fn custom_vpc_with_two_subnets() -> (Env, Pod, Pod, Pod) {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    vpc(&env, "vpc1", json!({"namespaces": ["nsv"]})).await;
    subnet(
        &env,
        "s1",
        json!({"vpc": "vpc1", "cidrBlock": "10.1.0.0/24", "namespaces": ["nsv"]}),
    )
    .await;
    subnet(&env, "s2", json!({"vpc": "vpc1", "cidrBlock": "10.2.0.0/24"})).await;
    env.pod("nsv", "a", "node1", &[]).await;
    env.pod("nsv", "b", "node1", &[("ovn.kubernetes.io/logical_switch", "s2")])
        .await;
    env.pod("ns1", "d", "node1", &[]).await;
    let a = env.routed("nsv", "a").await;
    let b = env.routed("nsv", "b").await;
    let d = env.routed("ns1", "d").await;
    (env, a, b, d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_vpc_pods_reach_each_other_across_its_subnets() {
    let (env, a, b, _) = custom_vpc_with_two_subnets().await;
    assert_eq!(ann(&a, "logical_switch"), "s1", "namespace binding");
    assert_eq!(ann(&a, "logical_router"), "vpc1");
    assert!(
        ann(&a, "ip_address").starts_with("10.1.0."),
        "{}",
        ann(&a, "ip_address")
    );
    assert_eq!(ann(&b, "logical_switch"), "s2");
    assert!(
        ann(&b, "ip_address").starts_with("10.2.0."),
        "{}",
        ann(&b, "ip_address")
    );
    let v = vpc_until(&env, "vpc1", "status lists both subnets", |v| {
        v.status.as_ref().and_then(|s| s.subnets.clone()) == Some(vec!["s1".into(), "s2".into()])
    })
    .await;
    let status = v.status.unwrap();
    assert_eq!(status.router.as_deref(), Some("vpc1"));
    assert_eq!(status.standby, Some(true));
    assert_eq!(status.default, Some(false));
    let lrps = env
        .ovn
        .nbctl(&["--bare", "--columns=name", "list", "Logical_Router_Port"])
        .unwrap();
    assert!(lrps.contains("vpc1-s1") && lrps.contains("vpc1-s2"), "{lrps}");
    let trace = env
        .ovn
        .trace("s1", &icmp_routed(&env, &a, "vpc1-s1", &b))
        .unwrap();
    assert!(trace.delivers_to(&port(&b)), "{}", trace.text);
    // The subnets' cluster-internal allow sits on the VPC's own router.
    let policies = env.ovn.nbctl(&["lr-policy-list", "vpc1"]).unwrap();
    assert!(
        policies.contains("31000") && policies.contains("ip4.dst == 10.2.0.0/24"),
        "{policies}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_vpc_and_the_default_vpc_cannot_reach_each_other() {
    let (env, a, _, d) = custom_vpc_with_two_subnets().await;
    let out = env
        .ovn
        .trace(
            "s1",
            &icmp_to(&a, &lrp_mac(&env, "vpc1-s1"), ann(&d, "ip_address")),
        )
        .unwrap();
    assert!(out.outputs.is_empty(), "custom VPC → default VPC: {}", out.text);
    let back = env
        .ovn
        .trace(
            "ovn-default",
            &icmp_to(
                &d,
                &lrp_mac(&env, "ovn-cluster-ovn-default"),
                ann(&a, "ip_address"),
            ),
        )
        .unwrap();
    assert!(
        !back.delivers_to(&port(&a)),
        "default VPC → custom VPC: {}",
        back.text
    );
    // To the default VPC the custom VPC's addresses are outside the cluster: out through the
    // pod's node, like any other external address.
    assert!(back.delivers_to("node-node1"), "{}", back.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_and_policy_routes_follow_the_spec() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    vpc(
        &env,
        "vpc1",
        json!({
            "staticRoutes": [
                {"cidr": "0.0.0.0/0", "nextHopIP": "10.1.0.254", "policy": "policyDst"},
                {"cidr": "10.1.0.0/24", "nextHopIP": "10.1.0.253", "policy": "policySrc", "routeTable": "rt1"}],
            "policyRoutes": [
                {"priority": 1000, "match": "ip4.dst == 1.1.1.1", "action": "drop"},
                {"priority": 1100, "match": "ip4.src == 10.1.0.0/24 && ip4.dst == 8.8.8.8", "action": "reroute",
                 "nextHopIP": "10.1.0.252"},
                {"priority": 1200, "match": "ip4.dst == 9.9.9.9", "action": "allow"}]}),
    )
    .await;
    subnet(&env, "s1", json!({"vpc": "vpc1", "cidrBlock": "10.1.0.0/24"})).await;
    let routes = nb_until(&env, &["lr-route-list", "vpc1"], "vpc1's static routes", |o| {
        o.contains("10.1.0.254") && o.contains("10.1.0.253")
    })
    .await;
    assert!(
        routes.contains("0.0.0.0/0") && routes.contains("dst-ip"),
        "{routes}"
    );
    assert!(
        routes.contains("Route Table rt1") && routes.contains("src-ip"),
        "{routes}"
    );
    let policies = nb_until(&env, &["lr-policy-list", "vpc1"], "vpc1's policies", |o| {
        o.contains("1200") && o.contains("31000")
    })
    .await;
    assert!(
        policies.contains("ip4.dst == 1.1.1.1") && policies.contains("drop"),
        "{policies}"
    );
    assert!(
        policies.contains("reroute") && policies.contains("10.1.0.252"),
        "{policies}"
    );
    // Kube-OVN owns a custom VPC's whole router: a policy someone else adds goes; the subnet's
    // own policy (priority 31000) stays.
    env.ovn
        .nbctl(&["lr-policy-add", "vpc1", "500", "ip4.dst == 5.5.5.5", "drop"])
        .unwrap();
    vpc(
        &env,
        "vpc1",
        json!({
            "staticRoutes": [{"cidr": "0.0.0.0/0", "nextHopIP": "10.1.0.254"}],
            "policyRoutes": [{"priority": 1000, "match": "ip4.dst == 1.1.1.1", "action": "drop"}]}),
    )
    .await;
    let policies = nb_until(&env, &["lr-policy-list", "vpc1"], "removed policies to go", |o| {
        !o.contains("1200") && !o.contains("5.5.5.5")
    })
    .await;
    assert!(
        policies.contains("1.1.1.1") && policies.contains("31000"),
        "{policies}"
    );
    assert!(!policies.contains("reroute"), "{policies}");
    let routes = nb_until(&env, &["lr-route-list", "vpc1"], "the src route to go", |o| {
        !o.contains("10.1.0.253")
    })
    .await;
    assert!(routes.contains("10.1.0.254"), "{routes}");
    // A bad entry is refused as a whole, naming the field; what was there stays.
    vpc(
        &env,
        "vpc1",
        json!({"staticRoutes": [{"cidr": "0.0.0.0/0", "nextHopIP": "10.1.0.254"}, {"cidr": "2.2.2.0/24", "nextHopIP": "x"}],
            "policyRoutes": []}),
    )
    .await;
    let v = vpc_until(&env, "vpc1", "the bad route to be reported", |v| {
        vpc_condition(v, "Validated").is_some_and(|c| c.status == kube_ovn_api::crd::ConditionStatus::False)
    })
    .await;
    let message = vpc_condition(&v, "Validated").unwrap().message.clone().unwrap();
    assert!(message.contains("spec.staticRoutes[1].nextHopIP"), "{message}");
    let policies = env.ovn.nbctl(&["lr-policy-list", "vpc1"]).unwrap();
    assert!(policies.contains("1.1.1.1"), "nothing half-applied: {policies}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_vpc_keeps_its_own_rows_beside_the_users() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.pod("ns1", "a", "node1", &[]).await;
    env.routed("ns1", "a").await;
    let routes = nb_until(
        &env,
        &["lr-route-list", "ovn-cluster"],
        "the route to the join gateway",
        |o| o.contains("0.0.0.0/0") && o.contains("100.64.0.1"),
    )
    .await;
    assert!(routes.contains("dst-ip"), "{routes}");
    vpc(
        &env,
        "ovn-cluster",
        json!({"policyRoutes": [{"priority": 1000, "match": "ip4.dst == 1.1.1.1", "action": "drop"}]}),
    )
    .await;
    nb_until(
        &env,
        &["lr-policy-list", "ovn-cluster"],
        "the user's policy",
        |o| o.contains("1.1.1.1"),
    )
    .await;
    vpc(&env, "ovn-cluster", json!({"policyRoutes": []})).await;
    let policies = nb_until(
        &env,
        &["lr-policy-list", "ovn-cluster"],
        "the user's policy to go",
        |o| !o.contains("1.1.1.1"),
    )
    .await;
    // Only the user's row went: the subnets' and node's policies are not the VPC's.
    for kept in ["31000", "30000", "29000"] {
        assert!(policies.contains(kept), "{kept}: {policies}");
    }
}

/// A VPC spec binding namespace `ns`, peered to `remote` over `connect`, with a route to
/// `remote_cidr` through the remote end `remote_connect`.
fn peered(
    ns: &str,
    remote: &str,
    connect: &str,
    remote_cidr: &str,
    remote_connect: &str,
) -> serde_json::Value {
    json!({
        "namespaces": [ns],
        "vpcPeerings": [{"remoteVpc": remote, "localConnectIP": connect}],
        "staticRoutes": [{"cidr": remote_cidr, "nextHopIP": remote_connect, "policy": "policyDst"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peering_connects_two_vpcs_and_a_drop_policy_cuts_it() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    // Routes shorter than the subnets, so a route of the subnet itself could not shadow them.
    let spec1 = peered("ns-a", "vpc2", "169.254.0.1/30", "10.2.0.0/16", "169.254.0.2");
    let spec2 = peered("ns-b", "vpc1", "169.254.0.2/30", "10.1.0.0/16", "169.254.0.1");
    vpc(&env, "vpc1", spec1.clone()).await;
    vpc(&env, "vpc2", spec2).await;
    subnet(
        &env,
        "s1",
        json!({"vpc": "vpc1", "cidrBlock": "10.1.0.0/24", "namespaces": ["ns-a"]}),
    )
    .await;
    subnet(
        &env,
        "s2",
        json!({"vpc": "vpc2", "cidrBlock": "10.2.0.0/24", "namespaces": ["ns-b"]}),
    )
    .await;
    env.pod("ns-a", "a", "node1", &[]).await;
    env.pod("ns-b", "b", "node1", &[]).await;
    let a = env.routed("ns-a", "a").await;
    let b = env.routed("ns-b", "b").await;
    let v = vpc_until(&env, "vpc1", "its peering in the status", |v| {
        v.status.as_ref().and_then(|s| s.vpc_peerings.clone()) == Some(vec!["vpc2".into()])
    })
    .await;
    assert!(v.status.unwrap().subnets.unwrap().contains(&"s1".to_owned()));
    let peer = env
        .ovn
        .nbctl(&["get", "Logical_Router_Port", "vpc1-vpc2", "peer"])
        .unwrap();
    assert_eq!(peer.trim().trim_matches('"'), "vpc2-vpc1");
    let options = env
        .ovn
        .nbctl(&["get", "Logical_Router", "vpc1", "options"])
        .unwrap();
    assert!(
        !options.contains("always_learn_from_arp_request"),
        "a peered VPC learns: {options}"
    );
    let flow = icmp_routed(&env, &a, "vpc1-s1", &b);
    let trace = env.ovn.trace("s1", &flow).unwrap();
    assert!(trace.delivers_to(&port(&b)), "vpc1 → vpc2: {}", trace.text);
    let back = env
        .ovn
        .trace("s2", &icmp_routed(&env, &b, "vpc2-s2", &a))
        .unwrap();
    assert!(back.delivers_to(&port(&a)), "vpc2 → vpc1: {}", back.text);

    // A drop policy on vpc1 for vpc2's subnet cuts the path.
    let mut with_drop = spec1.clone();
    with_drop["policyRoutes"] =
        json!([{"priority": 1000, "match": "ip4.dst == 10.2.0.0/24", "action": "drop"}]);
    vpc(&env, "vpc1", with_drop).await;
    nb_until(&env, &["lr-policy-list", "vpc1"], "the drop policy", |o| {
        o.contains("drop")
    })
    .await;
    let trace = env.ovn.trace("s1", &flow).unwrap();
    assert!(!trace.delivers_to(&port(&b)), "dropped: {}", trace.text);

    // Without the peering, its port goes.
    let mut unpeered = spec1;
    unpeered["vpcPeerings"] = json!([]);
    vpc(&env, "vpc1", unpeered).await;
    nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Logical_Router_Port"],
        "the peering port to go",
        |o| !o.lines().any(|l| l.trim() == "vpc1-vpc2"),
    )
    .await;
    vpc_until(&env, "vpc1", "no peering in the status", |v| {
        v.status.as_ref().and_then(|s| s.vpc_peerings.clone()) == Some(vec![])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vpc_with_subnets_is_deleted_only_after_them() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    vpc(&env, "vpc1", json!({})).await;
    subnet(&env, "s1", json!({"vpc": "vpc1", "cidrBlock": "10.1.0.0/24"})).await;
    nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Logical_Switch"],
        "subnet s1",
        |o| o.contains("s1"),
    )
    .await;
    delete_vpc(&env, "vpc1").await;
    let v = vpc_until(&env, "vpc1", "the deletion to be refused", |v| {
        vpc_condition(v, "Ready").is_some_and(|c| c.reason.as_deref() == Some("DeleteVpcBlocked"))
    })
    .await;
    assert!(v.meta().deletion_timestamp.is_some());
    let message = vpc_condition(&v, "Ready").unwrap().message.clone().unwrap();
    assert!(message.contains("s1"), "{message}");
    assert!(
        env.ovn.nbctl(&["lr-list"]).unwrap().contains("vpc1"),
        "router kept"
    );
    delete_subnet(&env, "s1").await;
    let api: Api<Vpc> = Api::all(env.kube.clone());
    wait_until_async("vpc1 to be gone", WAIT, || {
        let api = api.clone();
        async move { Ok(api.get_opt("vpc1").await?.is_none()) }
    })
    .await
    .unwrap();
    nb_until(&env, &["lr-list"], "the router to go", |o| !o.contains("vpc1")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subnet_may_bind_only_namespaces_its_vpc_lists() {
    let env = Env::start().await;
    vpc(&env, "vpc1", json!({"namespaces": ["nsv"]})).await;
    subnet(
        &env,
        "s1",
        json!({"vpc": "vpc1", "cidrBlock": "10.1.0.0/24", "namespaces": ["nsv", "other"]}),
    )
    .await;
    let s = netkit::subnet_until(&env, "s1", "refused", |s| {
        netkit::subnet_condition(s, "Validated")
            .is_some_and(|c| c.status == kube_ovn_api::crd::ConditionStatus::False)
    })
    .await;
    let message = netkit::subnet_condition(&s, "Validated")
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert!(
        message.contains("spec.namespaces") && message.contains("other"),
        "{message}"
    );
    let switches = env
        .ovn
        .nbctl(&["--bare", "--columns=name", "list", "Logical_Switch"])
        .unwrap();
    assert!(!switches.lines().any(|l| l.trim() == "s1"), "{switches}");
}
