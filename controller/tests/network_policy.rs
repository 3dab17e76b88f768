//! NetworkPolicy rows in a real NB as a policy lives: created, edited, refused (bad input is
//! refused by the real API server's validation, naming the field, and the rows stay), deleted (exactly its rows go). Traffic is
//! the truth table's job (`node/tests/network_policy.rs`).

mod common;

use common::{Env, WAIT, ann};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_ovn_testkit::{OvnCentral, wait_until_async};
use serde_json::{Value, json};

fn nb(ovn: &OvnCentral, args: &[&str]) -> String {
    ovn.nbctl(args).unwrap()
}

/// Rows of the tables a policy writes.
fn counts(ovn: &OvnCentral) -> Vec<usize> {
    ["Port_Group", "Address_Set", "ACL", "Meter"]
        .iter()
        .map(|t| {
            nb(ovn, &["--bare", "--columns=_uuid", "list", t])
                .lines()
                .filter(|l| !l.trim().is_empty())
                .count()
        })
        .collect()
}

/// Rows of any table a policy writes that carry a policy of namespace `web` in `np`.
fn policy_rows(ovn: &OvnCentral) -> usize {
    ["Port_Group", "Address_Set", "ACL", "Meter"]
        .iter()
        .map(|t| {
            nb(ovn, &["--bare", "--columns=external_ids", "list", t])
                .lines()
                .filter(|l| l.contains("np=web/"))
                .count()
        })
        .sum()
}

fn set_addresses(ovn: &OvnCentral, name: &str) -> String {
    nb(
        ovn,
        &[
            "--bare",
            "--columns=addresses",
            "find",
            "Address_Set",
            &format!("name={name}"),
        ],
    )
    .trim()
    .to_owned()
}

async fn eventually(ovn: &OvnCentral, what: &str, mut check: impl FnMut() -> bool) {
    if let Err(e) = wait_until_async(what, WAIT, || std::future::ready(Ok(check()))).await {
        let sets = nb(
            ovn,
            &["--bare", "--columns=name,addresses", "list", "Address_Set"],
        );
        let groups = nb(
            ovn,
            &["--bare", "--columns=name,external_ids", "list", "Port_Group"],
        );
        panic!("{e}\naddress sets:\n{sets}\nport groups:\n{groups}");
    }
}

fn spec_from(app: &str) -> Value {
    json!({"podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": app}}}]}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policys_rows_follow_its_edits_refuse_bad_input_and_go_with_it() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.namespace("web").await;
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), "web");
    for (name, app) in [("a", "web"), ("b", "client")] {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x"}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let (a, b) = (env.routed("web", "a").await, env.routed("web", "b").await);
    let (a_ip, b_ip) = (ann(&a, "ip_address").to_owned(), ann(&b, "ip_address").to_owned());
    // The node's ACLs (priority 3000) are there with or without policies.
    let node_acls = nb(
        &env.ovn,
        &["--bare", "--columns=match", "find", "ACL", "priority=3000"],
    );
    assert!(
        node_acls.contains("ip4.src == 172.18.0.2 && ip4.dst == $node.node1_ip4"),
        "node ACLs: {node_acls}"
    );
    let before = counts(&env.ovn);

    let api: Api<NetworkPolicy> = Api::namespaced(env.kube.clone(), "web");
    let np: NetworkPolicy =
        serde_json::from_value(json!({"metadata": {"name": "from-client"}, "spec": spec_from("client")}))
            .unwrap();
    api.create(&PostParams::default(), &np).await.unwrap();
    let ovn = &env.ovn;
    let set = "from.client.web.ingress.allow.IPv4.0";
    eventually(ovn, "the policy's address set holds b", || {
        set_addresses(ovn, set) == b_ip
    })
    .await;
    let ports = nb(
        ovn,
        &[
            "--bare",
            "--columns=ports",
            "find",
            "Port_Group",
            "name=from.client.web",
        ],
    );
    assert_eq!(ports.split_whitespace().count(), 1, "one selected pod: {ports}");
    let acls = nb(
        ovn,
        &[
            "--bare",
            "--columns=priority,match",
            "find",
            "ACL",
            "external_ids:np=web/from-client",
        ],
    );
    assert!(acls.contains("outport == @from.client.web && ip"), "{acls}");
    assert!(
        acls.contains(&format!("outport == @from.client.web && ip4.src == ${set}")),
        "{acls}"
    );

    // An edit: the peers change, the set follows.
    api.patch(
        "from-client",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec_from("web")})),
    )
    .await
    .unwrap();
    eventually(ovn, "the address set holds a instead", || {
        set_addresses(ovn, set) == a_ip
    })
    .await;

    // Bad input never reaches the controller: the API server's validation refuses it, naming
    // the field (the controller's own refusal, a Warning event naming the field, is for input a
    // server let through: unit-tested in network_policy_plan_tests). The rows stay.
    let bad = json!({"spec": {"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}});
    let refused = api
        .patch("from-client", &PatchParams::default(), &Patch::Merge(bad))
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s))
            if s.code == 422 && s.message.contains("spec.ingress[0].from[0].ipBlock.cidr")),
        "{refused:?}"
    );
    assert_eq!(set_addresses(ovn, set), a_ip, "a refused spec leaves the rows");

    // Deletion: exactly the policy's rows go (the node's group and ACLs stay).
    api.delete("from-client", &DeleteParams::default()).await.unwrap();
    eventually(ovn, "the rows as before the policy", || counts(ovn) == before).await;
    assert!(
        nb(
            ovn,
            &["--bare", "--columns=match", "find", "ACL", "priority=3000"]
        )
        .contains("$node.node1_ip4")
    );
}

/// A controller restarted with `--enable-np=false` removes the rows it wrote for policies, and
/// a policy deleted while no controller ran loses its rows at the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_rows_of_deleted_policies_and_with_np_disabled_are_removed_at_start() {
    let mut env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.namespace("web").await;
    let api: Api<NetworkPolicy> = Api::namespaced(env.kube.clone(), "web");
    for name in ["one", "two"] {
        let np: NetworkPolicy = serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}}),
        )
        .unwrap();
        api.create(&PostParams::default(), &np).await.unwrap();
    }
    let ovn = &env.ovn;
    let groups = |ovn: &OvnCentral| {
        nb(
            ovn,
            &[
                "--bare",
                "--columns=name",
                "find",
                "Port_Group",
                "external_ids:np!=\"\"",
            ],
        )
    };
    eventually(ovn, "both policies' port groups", || {
        let g = groups(ovn);
        g.contains("one.web") && g.contains("two.web")
    })
    .await;
    // Deleted while no controller runs: found at the next start.
    env.kill_controller().await;
    api.delete("one", &DeleteParams::default()).await.unwrap();
    env.start_controller();
    let ovn = &env.ovn;
    eventually(ovn, "the deleted policy's rows gone at start", || {
        let g = groups(ovn);
        !g.contains("one.web") && g.contains("two.web")
    })
    .await;
    // Policies off: the controller removes what it wrote for them.
    env.kill_controller().await;
    let c = env.spawn_controller(&["--enable-np=false"]);
    let ovn = &env.ovn;
    eventually(ovn, "no policy rows with --enable-np=false", || {
        policy_rows(ovn) == 0
    })
    .await;
    c.task.abort();
}

async fn labelled_pod(env: &Env, ns: &str, name: &str, app: &str, annotations: Value) {
    env.namespace(ns).await;
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app},
            "annotations": annotations},
        "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x"}]}}))
    .unwrap();
    Api::<Pod>::namespaced(env.kube.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

async fn create_policy(env: &Env, ns: &str, name: &str, spec: Value) {
    let np: NetworkPolicy =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    Api::<NetworkPolicy>::namespaced(env.kube.clone(), ns)
        .create(&PostParams::default(), &np)
        .await
        .unwrap();
}

/// `name`'s `columns` (bare), or "" when there is no such port group.
fn group(ovn: &OvnCentral, name: &str, column: &str) -> String {
    nb(
        ovn,
        &[
            "--bare",
            &format!("--columns={column}"),
            "find",
            "Port_Group",
            &format!("name=\"{name}\""),
        ],
    )
    .trim()
    .to_owned()
}

/// Issue 21: `allow` in `team-x` and `allow-team` in `x` have the same Kube-OVN port group name
/// `allow.team.x`. Each keeps its own group (the younger one a hashed name), with its own pods,
/// and deleting the younger leaves the older's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_of_colliding_names_keep_their_own_rows() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    labelled_pod(&env, "team-x", "victim", "victim", json!({})).await;
    labelled_pod(&env, "x", "attacker", "attacker", json!({})).await;
    env.routed("team-x", "victim").await;
    env.routed("x", "attacker").await;
    let deny_all = json!({"podSelector": {}, "policyTypes": ["Ingress"]});
    create_policy(&env, "team-x", "allow", deny_all).await;
    let ovn = &env.ovn;
    let port_of = |ovn: &OvnCentral, lsp: &str| {
        nb(
            ovn,
            &[
                "--bare",
                "--columns=_uuid",
                "find",
                "Logical_Switch_Port",
                &format!("name={lsp}"),
            ],
        )
        .trim()
        .to_owned()
    };
    let victim_port = port_of(ovn, "victim.team-x");
    eventually(ovn, "the victim's group with its pod", || {
        group(ovn, "allow.team.x", "ports") == victim_port
    })
    .await;
    // The attacker's policy: created later, or in the same second, where namespace/name decides
    // (team-x/allow before x/allow-team): the victim is the older either way.
    create_policy(
        &env,
        "x",
        "allow-team",
        json!({"podSelector": {}, "ingress": [{}]}),
    )
    .await;
    let young: NetworkPolicy = Api::namespaced(env.kube.clone(), "x")
        .get("allow-team")
        .await
        .unwrap();
    let hashed = kube_ovn_controller::reconcile::network_policy::names::hashed_name(&young);
    let attacker_port = port_of(ovn, "attacker.x");
    eventually(ovn, "the attacker's group under the hashed name", || {
        group(ovn, &hashed, "ports") == attacker_port
    })
    .await;
    assert_eq!(
        group(ovn, "allow.team.x", "ports"),
        victim_port,
        "the victim's pods stay"
    );
    assert!(
        group(ovn, "allow.team.x", "external_ids").contains("np=team-x/allow"),
        "{}",
        group(ovn, "allow.team.x", "external_ids")
    );
    let victim_acls = |ovn: &OvnCentral| {
        nb(
            ovn,
            &[
                "--bare",
                "--columns=match",
                "find",
                "ACL",
                "external_ids:np=\"team-x/allow\"",
            ],
        )
    };
    assert!(
        victim_acls(ovn).contains("outport == @allow.team.x && ip"),
        "{}",
        victim_acls(ovn)
    );

    // Deleting the attacker's policy removes its rows only.
    Api::<NetworkPolicy>::namespaced(env.kube.clone(), "x")
        .delete("allow-team", &DeleteParams::default())
        .await
        .unwrap();
    eventually(ovn, "the attacker's group gone", || {
        group(ovn, &hashed, "name").is_empty()
    })
    .await;
    assert_eq!(group(ovn, "allow.team.x", "ports"), victim_port);
    assert!(
        victim_acls(ovn).contains("outport == @allow.team.x && ip"),
        "{}",
        victim_acls(ovn)
    );
}

/// Issue 21: a pod whose `ip_address` annotation forges another pod's address at creation does
/// not get that address into an allow set: the sets hold what the controller allocated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_address_annotation_stays_out_of_address_sets() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    labelled_pod(&env, "web", "a", "web", json!({})).await;
    labelled_pod(&env, "web", "b", "client", json!({})).await;
    labelled_pod(&env, "web", "d", "db", json!({})).await;
    labelled_pod(&env, "web", "c", "other", json!({})).await;
    let (b, d) = (env.routed("web", "b").await, env.routed("web", "d").await);
    let c = env.routed("web", "c").await;
    let (b_ip, c_ip, d_ip) = (
        ann(&b, "ip_address").to_owned(),
        ann(&c, "ip_address").to_owned(),
        ann(&d, "ip_address").to_owned(),
    );
    // A pod claiming d's address (and to be allocated already) as it is created.
    labelled_pod(
        &env,
        "web",
        "forger",
        "pending",
        json!({"ovn.kubernetes.io/ip_address": d_ip, "ovn.kubernetes.io/allocated": "true"}),
    )
    .await;
    create_policy(&env, "web", "from-client", spec_from("client")).await;
    let ovn = &env.ovn;
    let set = "from.client.web.ingress.allow.IPv4.0";
    eventually(ovn, "the policy's address set holds b", || {
        set_addresses(ovn, set).contains(&b_ip)
    })
    .await;
    // The forger becomes a client, then c: once c's address is in the set, the plan that put
    // it there had the forger as a client too (one watch delivers both changes in order).
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), "web");
    for name in ["forger", "c"] {
        pods.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "client"}}})),
        )
        .await
        .unwrap();
    }
    eventually(ovn, "the address set holds c", || {
        set_addresses(ovn, set).contains(&c_ip)
    })
    .await;
    let have = set_addresses(ovn, set);
    assert!(
        !have.contains(&d_ip),
        "d's address {d_ip} in the allow set: {have}"
    );
}
