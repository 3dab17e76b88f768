//! Subnet features on real OVN: private subnets and ACLs, gateway types and failover (a node's
//! `Ready` and `NetworkUnavailable` conditions), namespace selectors, CIDR overlap, the status
//! counters and `natOutgoingPolicyRules` IDs.

mod common;
mod netkit;
mod podkit;

use common::{Env, ann};
use kube::ResourceExt;
use kube::api::Api;
use kube_ovn_api::crd::ConditionStatus;
use netkit::{
    delete_pod, icmp_routed, icmp_to, join_ip, labelled_namespace, lrp_mac, nb_until, port, set_node_ready,
    subnet_condition, subnet_ready, subnet_until,
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

fn policy_line<'a>(policies: &'a str, r#match: &str) -> Option<&'a str> {
    policies.lines().find(|l| l.contains(r#match))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_centralized_gateway_fails_over_when_its_node_goes_not_ready() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.node("node2", "172.18.0.3").await;
    let (join1, join2) = (join_ip(&env, "node1"), join_ip(&env, "node2"));
    subnet(
        &env,
        "cgw",
        json!({"cidrBlock": "10.30.0.0/16", "gatewayType": "centralized", "gatewayNode": "node1, node2:172.18.0.33",
            "namespaces": ["nsc"], "natOutgoing": true}),
    )
    .await;
    let s = subnet_until(&env, "cgw", "node1 active", |s| {
        s.status.as_ref().and_then(|s| s.activate_gateway.as_deref()) == Some("node1")
    })
    .await;
    assert_eq!(
        s.spec.nat_outgoing,
        Some(true),
        "natOutgoing kept for the node daemon"
    );
    let m = "ip4.src == 10.30.0.0/16";
    let policies = nb_until(
        &env,
        &["lr-policy-list", "ovn-cluster"],
        "the gateway policy",
        |o| policy_line(o, m).is_some_and(|l| l.contains(&join1)),
    )
    .await;
    assert!(policy_line(&policies, m).unwrap().contains("29000"), "{policies}");
    assert!(!policies.contains("$cgw."), "no distributed rows: {policies}");
    let pgs = env
        .ovn
        .nbctl(&["--bare", "--columns=name", "list", "Port_Group"])
        .unwrap();
    assert!(!pgs.contains("cgw."), "{pgs}");
    env.pod("nsc", "c", "node2", &[]).await;
    let c = env.routed("nsc", "c").await;
    let out = icmp_to(&c, &lrp_mac(&env, "ovn-cluster-cgw"), "8.8.8.8");
    let t = env.ovn.trace("cgw", &out).unwrap();
    assert!(
        t.delivers_to("node-node1"),
        "leaves through the active gateway: {}",
        t.text
    );

    set_node_ready(&env, "node1", "False").await;
    subnet_until(&env, "cgw", "failover to node2", |s| {
        s.status.as_ref().and_then(|s| s.activate_gateway.as_deref()) == Some("node2")
    })
    .await;
    nb_until(
        &env,
        &["lr-policy-list", "ovn-cluster"],
        "the policy to follow",
        |o| policy_line(o, m).is_some_and(|l| l.contains(&join2) && !l.contains(&join1)),
    )
    .await;
    let t = env.ovn.trace("cgw", &out).unwrap();
    assert!(t.delivers_to("node-node2"), "{}", t.text);
    // node1 recovering does not move the gateway back: a failover is the only move.
    set_node_ready(&env, "node1", "True").await;
    set_node_ready(&env, "node2", "Unknown").await;
    subnet_until(&env, "cgw", "back to node1 once node2 is unknown", |s| {
        s.status.as_ref().and_then(|s| s.activate_gateway.as_deref()) == Some("node1")
    })
    .await;
    // No gateway at all: the last policy stays and the status says why.
    set_node_ready(&env, "node1", "False").await;
    let s = subnet_until(&env, "cgw", "no gateway", |s| {
        subnet_condition(s, "Ready").is_some_and(|c| c.reason.as_deref() == Some("NoActiveGatewayFound"))
    })
    .await;
    assert_eq!(s.status.unwrap().activate_gateway.as_deref(), Some(""));
    let policies = env.ovn.nbctl(&["lr-policy-list", "ovn-cluster"]).unwrap();
    assert!(
        policy_line(&policies, m).is_some_and(|l| l.contains(&join1)),
        "{policies}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ecmp_gateway_lists_every_ready_gateway() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.node("node2", "172.18.0.3").await;
    let (join1, join2) = (join_ip(&env, "node1"), join_ip(&env, "node2"));
    subnet(
        &env,
        "ecmp",
        json!({"cidrBlock": "10.31.0.0/16", "gatewayType": "centralized", "gatewayNode": "node1,node2",
            "enableEcmp": true}),
    )
    .await;
    let m = "ip4.src == 10.31.0.0/16";
    let policies = nb_until(&env, &["lr-policy-list", "ovn-cluster"], "both next hops", |o| {
        policy_line(o, m).is_some_and(|l| l.contains(&join1) && l.contains(&join2))
    })
    .await;
    assert!(policy_line(&policies, m).unwrap().contains("29000"), "{policies}");
    let ids = env
        .ovn
        .nbctl(&[
            "--bare",
            "--columns=external_ids",
            "find",
            "Logical_Router_Policy",
            &format!("match=\"{m}\""),
        ])
        .unwrap();
    assert!(
        ids.contains(&format!("node1={join1}")) && ids.contains("subnet=ecmp"),
        "{ids}"
    );
    let active = |want: &'static str| {
        move |s: &kube_ovn_api::crd::Subnet| {
            s.status.as_ref().and_then(|s| s.activate_gateway.as_deref()) == Some(want)
        }
    };
    subnet_until(
        &env,
        "ecmp",
        "every gateway in activateGateway",
        active("node1,node2"),
    )
    .await;
    set_node_ready(&env, "node2", "False").await;
    nb_until(
        &env,
        &["lr-policy-list", "ovn-cluster"],
        "node2 to leave the set",
        |o| policy_line(o, m).is_some_and(|l| l.contains(&join1) && !l.contains(&join2)),
    )
    .await;
    subnet_until(&env, "ecmp", "node2 out of activateGateway", active("node1")).await;
    // node2 Ready again, node1 Ready but its join gateway unreachable (the node daemon's ovn0
    // check): node1 carries no gateway traffic.
    set_node_ready(&env, "node2", "True").await;
    set_node_conditions(
        &env,
        "node1",
        json!([{"type": "Ready", "status": "True"},
            {"type": "NetworkUnavailable", "status": "True", "reason": "JoinSubnetGatewayUnreachable"}]),
    )
    .await;
    nb_until(
        &env,
        &["lr-policy-list", "ovn-cluster"],
        "node1 to leave the set for its network",
        |o| policy_line(o, m).is_some_and(|l| l.contains(&join2) && !l.contains(&join1)),
    )
    .await;
    subnet_until(&env, "ecmp", "node1 out of activateGateway", active("node2")).await;
    set_node_conditions(
        &env,
        "node1",
        json!([{"type": "Ready", "status": "True"},
            {"type": "NetworkUnavailable", "status": "False", "reason": "JoinSubnetGatewayReachable"}]),
    )
    .await;
    subnet_until(&env, "ecmp", "node1 back", active("node1,node2")).await;
}

/// Replaces a node's conditions.
async fn set_node_conditions(env: &Env, node: &str, conditions: serde_json::Value) {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.kube.clone());
    api.patch_status(
        node,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"status": {"conditions": conditions}})),
    )
    .await
    .unwrap();
}

fn nat_rule_ids(s: &kube_ovn_api::crd::Subnet) -> Option<Vec<String>> {
    let rules = s.status.as_ref()?.nat_outgoing_policy_rules.as_ref()?;
    rules.iter().map(|r| r.rule_id.clone()).collect()
}

/// The rule IDs are Kube-OVN's (computed outside this code:
/// `printf '%s' 'natp0{"match":{"srcIPs":"10.50.1.0/24","dstIPs":"203.0.113.0/24"},"action":"forward"}' | sha256sum`
/// → 83a78da3f07f…, `printf '%s' 'natp1{"match":{"dstIPs":"198.51.100.0/24"},"action":"nat"}' | sha256sum`
/// → 653d71581653…); a bad rule is a condition and a Warning event naming the field, and the
/// status keeps the rules the nodes apply; `natOutgoing: false` empties the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nat_policy_rules_get_kube_ovns_ids_and_a_bad_one_changes_nothing() {
    let env = Env::start().await;
    let spec = |dst: &str, nat: bool| {
        json!({"cidrBlock": "10.50.0.0/16", "natOutgoing": nat, "natOutgoingPolicyRules": [
            {"match": {"srcIPs": "10.50.1.0/24", "dstIPs": "203.0.113.0/24"}, "action": "forward"},
            {"match": {"dstIPs": dst}, "action": "nat"}]})
    };
    subnet(&env, "natp", spec("198.51.100.0/24", true)).await;
    let s = subnet_until(&env, "natp", "rule IDs", |s| nat_rule_ids(s).is_some()).await;
    assert_eq!(nat_rule_ids(&s).unwrap(), ["83a78da3f07f", "653d71581653"]);
    let written = serde_json::to_value(&s.status.as_ref().unwrap().nat_outgoing_policy_rules).unwrap();
    assert_eq!(
        written,
        json!([
            {"ruleID": "83a78da3f07f", "action": "forward",
                "match": {"srcIPs": "10.50.1.0/24", "dstIPs": "203.0.113.0/24"}},
            {"ruleID": "653d71581653", "action": "nat", "match": {"dstIPs": "198.51.100.0/24"}},
        ])
    );

    subnet(&env, "natp", spec("198.51.100.300", true)).await;
    let s = subnet_until(&env, "natp", "refused", |s| {
        subnet_condition(s, "Validated").is_some_and(|c| c.status == ConditionStatus::False)
    })
    .await;
    let msg = subnet_condition(&s, "Validated")
        .unwrap()
        .message
        .clone()
        .unwrap();
    let field = "spec.natOutgoingPolicyRules[1].match.dstIPs";
    assert!(msg.contains("natp") && msg.contains(field), "{msg}");
    assert_eq!(
        nat_rule_ids(&s).unwrap(),
        ["83a78da3f07f", "653d71581653"],
        "the rules in force stay"
    );
    podkit::warning(
        &env,
        "default",
        "Subnet",
        "natp",
        "ValidateLogicalSwitchFailed",
        &["natp", field, "198.51.100.300"],
    )
    .await;

    subnet(&env, "natp", spec("198.51.100.0/24", false)).await;
    let s = subnet_until(&env, "natp", "ready with no rules", |s| {
        subnet_ready(s) && nat_rule_ids(s).is_some_and(|ids| ids.is_empty())
    })
    .await;
    assert_eq!(
        serde_json::to_value(&s.status.unwrap().nat_outgoing_policy_rules).unwrap(),
        json!([])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_the_gateway_type_cleans_up_the_other_mode() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    let join1 = join_ip(&env, "node1");
    let distributed = json!({"cidrBlock": "10.32.0.0/16", "namespaces": ["nsd"]});
    subnet(&env, "dsub", distributed.clone()).await;
    env.pod("nsd", "p", "node1", &[]).await;
    let p = env.routed("nsd", "p").await;
    let group = "$dsub.node1_ip4";
    let policies = nb_until(
        &env,
        &["lr-policy-list", "ovn-cluster"],
        "the distributed policy",
        |o| o.contains(group),
    )
    .await;
    assert!(
        policy_line(&policies, group).unwrap().contains(&join1),
        "{policies}"
    );
    let out = icmp_to(&p, &lrp_mac(&env, "ovn-cluster-dsub"), "8.8.8.8");
    assert!(env.ovn.trace("dsub", &out).unwrap().delivers_to("node-node1"));

    let mut central = distributed.clone();
    central["gatewayType"] = json!("centralized");
    central["gatewayNode"] = json!("node1");
    subnet(&env, "dsub", central).await;
    let policies = nb_until(
        &env,
        &["lr-policy-list", "ovn-cluster"],
        "the centralized policy alone",
        |o| o.contains("ip4.src == 10.32.0.0/16") && !o.contains(group),
    )
    .await;
    assert!(policies.contains(&join1));
    nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Port_Group"],
        "the node groups to go",
        |o| !o.contains("dsub.node1"),
    )
    .await;
    subnet_until(&env, "dsub", "node1 active", |s| {
        s.status.as_ref().and_then(|s| s.activate_gateway.as_deref()) == Some("node1")
    })
    .await;

    subnet(&env, "dsub", distributed).await;
    nb_until(
        &env,
        &["lr-policy-list", "ovn-cluster"],
        "the distributed policy alone",
        |o| o.contains(group) && !o.contains("ip4.src == 10.32.0.0/16"),
    )
    .await;
    // The pod is back in its node's group, so its traffic still has a way out.
    let members = nb_until(
        &env,
        &[
            "--bare",
            "--columns=ports",
            "find",
            "Port_Group",
            "name=dsub.node1",
        ],
        "the pod's port in its group",
        |o| !o.trim().is_empty(),
    )
    .await;
    let uuid = env
        .ovn
        .nbctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "Logical_Switch_Port",
            &format!("name={}", port(&p)),
        ])
        .unwrap();
    assert!(members.contains(uuid.trim()), "{members} / {uuid}");
    assert!(env.ovn.trace("dsub", &out).unwrap().delivers_to("node-node1"));
    subnet_until(&env, "dsub", "no active gateway", |s| {
        s.status.as_ref().and_then(|s| s.activate_gateway.as_deref()) == Some("")
    })
    .await;
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
