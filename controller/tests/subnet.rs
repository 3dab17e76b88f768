//! Subnet features on real OVN: private subnets and ACLs, namespace selectors, CIDR overlap, the
//! status counters, and that reconciling again writes nothing. Gateways and egress:
//! `subnet_gateway.rs`.

mod common;
mod netkit;

use common::{Env, ann};
use kube::ResourceExt;
use kube::api::Api;
use kube_ovn_api::crd::ConditionStatus;
use netkit::{
    delete_pod, icmp_routed, join_ip, labelled_namespace, lrp_mac, nb_until, port, subnet_condition,
    subnet_ready, subnet_until,
};
use serde_json::json;

async fn subnet(env: &Env, name: &str, spec: serde_json::Value) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

/// A first packet: the ACLs of a private subnet are stateful, and ovn-trace otherwise assumes an
/// established connection.
const NEW: &[&str] = &["--ct=new", "--ct=new", "--ct=new"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_subnet_admits_only_itself_its_allow_list_and_nodes() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    let private = json!({"cidrBlock": "10.20.0.0/16", "private": true, "allowSubnets": ["10.21.0.0/16"],
        "namespaces": ["nsp"]});
    subnet(&env, "priv", private.clone()).await;
    subnet(
        &env,
        "allowed",
        json!({"cidrBlock": "10.21.0.0/16", "namespaces": ["nsa"]}),
    )
    .await;
    for (ns, pod) in [("nsp", "p1"), ("nsp", "p2"), ("nsa", "a"), ("ns1", "d")] {
        env.pod(ns, pod, "node1", &[]).await;
    }
    let p1 = env.routed("nsp", "p1").await;
    let p2 = env.routed("nsp", "p2").await;
    let a = env.routed("nsa", "a").await;
    let d = env.routed("ns1", "d").await;
    assert_eq!(ann(&p1, "logical_switch"), "priv");
    let acls = nb_until(&env, &["acl-list", "priv"], "the private subnet's ACLs", |o| {
        o.contains("3000")
    })
    .await;
    for rule in [
        "to-lport  1000 (ip) drop log(name=priv,severity=warning)",
        "to-lport  1001 (ip4.src == 10.20.0.0/16 && ip4.dst == 10.20.0.0/16) allow-related",
        "to-lport  1001 ((ip4.src == 10.20.0.0/16 && ip4.dst == 10.21.0.0/16) || (ip4.src == 10.21.0.0/16 && ip4.dst == 10.20.0.0/16)) allow-related",
        "to-lport  3000 (ip4.src == 100.64.0.0/16) allow-related",
    ] {
        assert!(acls.contains(rule), "{rule} missing from:\n{acls}");
    }
    let from_default = icmp_routed(&env, &d, "ovn-cluster-ovn-default", &p1);
    let t = env.ovn.trace_with("ovn-default", &from_default, NEW).unwrap();
    assert!(!t.delivers_to(&port(&p1)), "outside the allow list: {}", t.text);
    let t = env
        .ovn
        .trace_with("allowed", &icmp_routed(&env, &a, "ovn-cluster-allowed", &p1), NEW)
        .unwrap();
    assert!(t.delivers_to(&port(&p1)), "allowed subnet: {}", t.text);
    let same = common::icmp(&p2, ann(&p1, "mac_address"), ann(&p1, "ip_address"));
    let t = env.ovn.trace_with("priv", &same, NEW).unwrap();
    assert!(t.delivers_to(&port(&p1)), "own subnet: {}", t.text);
    // Nodes (kubelet probes) get in: from the node's port on the join switch.
    let node_mac = netkit::nb_get(&env, "Logical_Switch_Port", "node-node1", "addresses")
        .trim_matches(|c| c == '[' || c == ']' || c == '"')
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let from_node = format!(
        "inport==\"node-node1\" && eth.src=={node_mac} && eth.dst=={} && ip4.src=={} && ip4.dst=={} && ip.ttl==64 && icmp4.type==8",
        lrp_mac(&env, "ovn-cluster-join"),
        join_ip(&env, "node1"),
        ann(&p1, "ip_address")
    );
    let t = env.ovn.trace_with("join", &from_node, NEW).unwrap();
    assert!(t.delivers_to(&port(&p1)), "from a node: {}", t.text);
    // The private subnet's pods cannot open connections out either, except to the allow list.
    let t = env
        .ovn
        .trace_with("priv", &icmp_routed(&env, &p1, "ovn-cluster-priv", &d), NEW)
        .unwrap();
    assert!(!t.delivers_to(&port(&d)), "{}", t.text);

    // No longer private: the ACLs go and the default subnet gets through.
    let mut open = private;
    open["private"] = json!(false);
    subnet(&env, "priv", open).await;
    nb_until(&env, &["acl-list", "priv"], "the ACLs to go", |o| {
        o.trim().is_empty()
    })
    .await;
    let t = env.ovn.trace_with("ovn-default", &from_default, NEW).unwrap();
    assert!(t.delivers_to(&port(&p1)), "{}", t.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_acls_follow_the_spec() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    subnet(
        &env,
        "net1",
        json!({"cidrBlock": "10.20.0.0/16", "namespaces": ["ns-u"], "acls": [
            {"direction": "to-lport", "priority": 1010, "match": "ip4.src == 10.16.0.0/16", "action": "drop"}]}),
    )
    .await;
    env.pod("ns-u", "u", "node1", &[]).await;
    env.pod("ns1", "d", "node1", &[]).await;
    let u = env.routed("ns-u", "u").await;
    let d = env.routed("ns1", "d").await;
    let acls = nb_until(&env, &["acl-list", "net1"], "the user's ACL", |o| {
        o.contains("1010")
    })
    .await;
    assert!(acls.contains("(ip4.src == 10.16.0.0/16) drop"), "{acls}");
    let ids = env
        .ovn
        .nbctl(&["--bare", "--columns=external_ids", "find", "ACL", "priority=1010"])
        .unwrap();
    for key in ["parent=net1", "subnet=net1", "vendor=kube-ovn"] {
        assert!(ids.contains(key), "{key}: {ids}");
    }
    let flow = icmp_routed(&env, &d, "ovn-cluster-ovn-default", &u);
    assert!(
        !env.ovn
            .trace("ovn-default", &flow)
            .unwrap()
            .delivers_to(&port(&u))
    );
    subnet(
        &env,
        "net1",
        json!({"cidrBlock": "10.20.0.0/16", "namespaces": ["ns-u"], "acls": []}),
    )
    .await;
    nb_until(&env, &["acl-list", "net1"], "the ACL to go", |o| {
        o.trim().is_empty()
    })
    .await;
    assert!(
        env.ovn
            .trace("ovn-default", &flow)
            .unwrap()
            .delivers_to(&port(&u))
    );
    // A bad ACL is refused, naming the field.
    subnet(
        &env,
        "net1",
        json!({"cidrBlock": "10.20.0.0/16", "namespaces": ["ns-u"], "acls": [
            {"direction": "sideways", "priority": 1, "match": "ip", "action": "drop"}]}),
    )
    .await;
    let s = subnet_until(&env, "net1", "the bad ACL to be reported", |s| {
        subnet_condition(s, "Validated").is_some_and(|c| c.status == ConditionStatus::False)
    })
    .await;
    let msg = subnet_condition(&s, "Validated")
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert!(msg.contains("spec.acls[0].direction"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlapping_cidr_is_refused_with_a_condition() {
    let env = Env::start().await;
    subnet(&env, "first", json!({"cidrBlock": "10.40.0.0/16"})).await;
    subnet_until(&env, "first", "ready", subnet_ready).await;
    subnet(&env, "second", json!({"cidrBlock": "10.40.1.0/24"})).await;
    let s = subnet_until(&env, "second", "refused", |s| {
        subnet_condition(s, "Validated").is_some_and(|c| c.status == ConditionStatus::False)
    })
    .await;
    let v = subnet_condition(&s, "Validated").unwrap();
    assert_eq!(v.reason.as_deref(), Some("ValidateLogicalSwitchFailed"));
    let msg = v.message.clone().unwrap();
    assert!(msg.contains("first") && msg.contains("spec.cidrBlock"), "{msg}");
    assert_eq!(
        subnet_condition(&s, "Ready").map(|c| c.status),
        Some(ConditionStatus::False)
    );
    let switches = env
        .ovn
        .nbctl(&["--bare", "--columns=name", "list", "Logical_Switch"])
        .unwrap();
    assert!(!switches.lines().any(|l| l.trim() == "second"), "{switches}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_selectors_bind_labelled_namespaces() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    subnet(
        &env,
        "blue",
        json!({"cidrBlock": "10.50.0.0/16", "namespaceSelectors": [{"matchLabels": {"team": "blue"}}]}),
    )
    .await;
    subnet_until(&env, "blue", "ready", subnet_ready).await;
    labelled_namespace(&env, "team-blue", &[("team", "blue")]).await;
    labelled_namespace(&env, "team-red", &[("team", "red")]).await;
    env.pod("team-blue", "b", "node1", &[]).await;
    env.pod("team-red", "r", "node1", &[]).await;
    let b = env.routed("team-blue", "b").await;
    let r = env.routed("team-red", "r").await;
    assert_eq!(ann(&b, "logical_switch"), "blue");
    assert!(
        ann(&b, "ip_address").starts_with("10.50."),
        "{}",
        ann(&b, "ip_address")
    );
    assert_eq!(ann(&r, "logical_switch"), "ovn-default");
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.kube.clone());
    kube_ovn_testkit::wait_until_async("the namespace annotation", common::WAIT, || {
        let api = api.clone();
        async move {
            let ns = api.get("team-blue").await?;
            Ok(ns
                .annotations()
                .get("ovn.kubernetes.io/logical_switch")
                .map(String::as_str)
                == Some("blue"))
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_addresses_as_pods_come_and_go() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    subnet(
        &env,
        "cnt",
        json!({"cidrBlock": "10.60.0.0/24", "namespaces": ["nsn"]}),
    )
    .await;
    let s = subnet_until(&env, "cnt", "ready with counters", |s| {
        subnet_ready(s) && s.status.as_ref().is_some_and(|st| st.v4_available_ips.is_some())
    })
    .await;
    let st = s.status.clone().unwrap();
    // A /24 has 254 hosts; the gateway is excluded.
    assert_eq!(st.v4_available_ips.map(|c| c.0), Some(253));
    assert_eq!(st.v4_using_ips.map(|c| c.0), Some(0));
    assert!(st.v6_available_ips.is_none());
    assert_eq!(
        subnet_condition(&s, "Ready")
            .and_then(|c| c.reason.clone())
            .as_deref(),
        Some("ResetLogicalSwitchAclSuccess")
    );
    env.pod("nsn", "x", "node1", &[]).await;
    env.pod("nsn", "y", "node1", &[]).await;
    env.routed("nsn", "x").await;
    env.routed("nsn", "y").await;
    let s = subnet_until(&env, "cnt", "two in use", |s| {
        s.status.as_ref().and_then(|st| st.v4_using_ips).map(|c| c.0) == Some(2)
    })
    .await;
    let st = s.status.unwrap();
    assert_eq!(st.v4_available_ips.map(|c| c.0), Some(251));
    assert_eq!(st.v4_using_ip_range.as_deref(), Some("10.60.0.2-10.60.0.3"));
    delete_pod(&env, "nsn", "x").await;
    let s = subnet_until(&env, "cnt", "one in use", |s| {
        s.status.as_ref().and_then(|st| st.v4_using_ips).map(|c| c.0) == Some(1)
    })
    .await;
    assert_eq!(s.status.unwrap().v4_available_ips.map(|c| c.0), Some(252));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciling_again_writes_nothing() {
    let env = Env::start().await;
    let port = env.metrics_addr.expect("the controller serves metrics").port();
    env.node("node1", "172.18.0.2").await;
    env.node("node2", "172.18.0.3").await;
    let vpc = |name: &str, spec: serde_json::Value| json!({"apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": name}, "spec": spec});
    env.apply_yaml(vpc(
        "vpc1",
        json!({"namespaces": ["nsv"],
        "vpcPeerings": [{"remoteVpc": "vpc2", "localConnectIP": "169.254.0.1/30"}],
        "staticRoutes": [{"cidr": "10.2.0.0/16", "nextHopIP": "169.254.0.2"}],
        "policyRoutes": [{"priority": 1000, "match": "ip4.dst == 1.1.1.1", "action": "drop"}]}),
    ))
    .await;
    env.apply_yaml(vpc(
        "vpc2",
        json!({"vpcPeerings": [{"remoteVpc": "vpc1", "localConnectIP": "169.254.0.2/30"}]}),
    ))
    .await;
    subnet(
        &env,
        "s1",
        json!({"vpc": "vpc1", "cidrBlock": "10.1.0.0/24", "namespaces": ["nsv"]}),
    )
    .await;
    subnet(
        &env,
        "priv",
        json!({"cidrBlock": "10.20.0.0/16", "private": true, "allowSubnets": ["10.21.0.0/16"], "namespaces": ["nsp"],
            "acls": [{"direction": "to-lport", "priority": 1010, "match": "ip4.src == 1.1.1.1", "action": "drop"}]}),
    )
    .await;
    subnet(
        &env,
        "cgw",
        json!({"cidrBlock": "10.30.0.0/16", "gatewayType": "centralized", "gatewayNode": "node1,node2", "enableEcmp": true}),
    )
    .await;
    for (ns, pod) in [("nsv", "a"), ("nsp", "p"), ("ns1", "d")] {
        env.pod(ns, pod, "node1", &[]).await;
        env.routed(ns, pod).await;
    }
    for name in ["s1", "priv", "cgw"] {
        subnet_until(&env, name, "ready", subnet_ready).await;
    }
    netkit::vpc_until(&env, "vpc1", "ready", |v| {
        netkit::vpc_condition(v, "Ready").is_some_and(|c| c.status == ConditionStatus::True)
    })
    .await;
    nb_until(&env, &["lr-policy-list", "ovn-cluster"], "the ECMP policy", |o| {
        o.contains("ip4.src == 10.30.0.0/16")
    })
    .await;

    // Every northbound transaction, whatever its label: plans of concurrent reconciles go out
    // merged (labelled `batch`), so counting only `subnet` and `vpc` would miss most re-writes.
    let txns = |text: &str| {
        netkit::metric(
            text,
            "kube_ovn_controller_ovsdb_transaction_duration_seconds_count",
            &[],
        )
    };
    let reconciles = netkit::reconciles;
    let before = netkit::metrics(port).await.unwrap();
    // Touch every subnet and VPC (a node's labels re-reconcile all subnets; the VPCs by hand).
    // Not its readiness: the test's nodes have no conditions, which counts as ready already, so
    // `Ready=True` would change nothing and the test would wait for the periodic requeue.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.kube.clone());
    nodes
        .patch(
            "node2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    let vpcs: Api<kube_ovn_api::crd::Vpc> = Api::all(env.kube.clone());
    for name in ["vpc1", "vpc2", "ovn-cluster"] {
        let touch = json!({"metadata": {"annotations": {"touched": "yes"}}});
        vpcs.patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(touch),
        )
        .await
        .unwrap();
    }
    let (b_subnets, b_vpcs) = (reconciles(&before, "Subnet"), reconciles(&before, "Vpc"));
    kube_ovn_testkit::wait_until_async(
        "every subnet and VPC to be reconciled again",
        common::WAIT,
        || async move {
            let now = netkit::metrics(port).await?;
            Ok(reconciles(&now, "Subnet") >= b_subnets + 5.0 && reconciles(&now, "Vpc") >= b_vpcs + 3.0)
        },
    )
    .await
    .unwrap();
    let after = netkit::metrics(port).await.unwrap();
    #[expect(clippy::float_cmp, reason = "counters are whole numbers, exact in an f64")]
    let unchanged = txns(&before) == txns(&after);
    assert!(
        unchanged,
        "northbound writes on a re-run: {:?} then {:?}",
        txns(&before),
        txns(&after)
    );
}
