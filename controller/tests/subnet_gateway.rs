//! Default-VPC subnets' gateways and egress on real OVN: a centralized gateway's failover (a
//! node's `Ready` and `NetworkUnavailable` conditions), ECMP, switching the gateway type, and
//! `natOutgoingPolicyRules` IDs.

mod common;
mod netkit;
mod podkit;

use common::Env;
use kube::api::Api;
use kube_ovn_api::crd::ConditionStatus;
use netkit::{
    icmp_to, join_ip, lrp_mac, nb_until, port, set_node_ready, subnet_condition, subnet_ready, subnet_until,
};
use serde_json::json;

async fn subnet(env: &Env, name: &str, spec: serde_json::Value) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name}, "spec": spec}),
    )
    .await;
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
