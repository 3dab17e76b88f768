//! ProviderNetworks and Vlans against a real kube-apiserver (and OVN central, which the
//! controller needs to start): the status the controller keeps on both, Vlan conflicts, and
//! what `--network-type=vlan` creates at start (Kube-OVN's `provider_network.go`, `vlan.go`,
//! `init.go`).

mod common;
mod podkit;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_ovn_api::crd::{ConditionStatus, ProviderNetwork, Subnet, Vlan};
use kube_ovn_testkit::wait_until_async;
use serde_json::json;

use common::{Env, WAIT};

/// Reads `name` until `ok` holds; panics with the last copy otherwise.
async fn until<K>(api: &Api<K>, name: &str, what: &str, ok: impl Fn(&K) -> bool) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let ok = &ok;
    let waited = wait_until_async(&format!("{name}: {what}"), WAIT, || {
        let api = api.clone();
        async move { Ok(api.get_opt(name).await?.as_ref().is_some_and(ok)) }
    })
    .await;
    let now = api.get_opt(name).await.unwrap();
    if let Err(e) = waited {
        panic!("{e}; it is now {now:#?}");
    }
    now.unwrap()
}

fn vlans_of(pn: &ProviderNetwork) -> Vec<String> {
    pn.status
        .as_ref()
        .and_then(|s| s.vlans.clone())
        .unwrap_or_default()
}

fn conflict(v: &Vlan) -> Option<bool> {
    v.status.as_ref().and_then(|s| s.conflict)
}

/// Creates a cluster-scoped object.
async fn create<K>(env: &Env, obj: serde_json::Value) -> K
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let obj: K = serde_json::from_value(obj).unwrap();
    Api::<K>::all(env.kube.clone())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap()
}

async fn provider_network(env: &Env, name: &str, spec: serde_json::Value) -> ProviderNetwork {
    create(
        env,
        json!({"apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
        "metadata": {"name": name}, "spec": spec}),
    )
    .await
}

async fn vlan(env: &Env, name: &str, id: u16, provider: &str) -> Vlan {
    create(
        env,
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Vlan",
        "metadata": {"name": name}, "spec": {"id": id, "provider": provider}}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vlan_conflict_subnets_and_provider_network_vlans() {
    let env = Env::start().await;
    let pns: Api<ProviderNetwork> = Api::all(env.kube.clone());
    let vlans: Api<Vlan> = Api::all(env.kube.clone());
    provider_network(&env, "pn1", json!({"defaultInterface": "eth1"})).await;
    vlan(&env, "older", 100, "pn1").await;
    until(&pns, "pn1", "lists vlan older", |p| vlans_of(p) == ["older"]).await;
    let older = until(&vlans, "older", "not in conflict", |v| conflict(v) == Some(false)).await;
    assert_eq!(older.finalizers(), ["kubeovn.io/kube-ovn-controller"]);

    // The same id on the same provider: the newer conflicts, whatever the names' order (and
    // within the same second of creationTimestamp: the accepted one keeps its place).
    vlan(&env, "a-newer", 100, "pn1").await;
    let newer = until(&vlans, "a-newer", "in conflict", |v| conflict(v) == Some(true)).await;
    let ready = newer.status.unwrap().conditions.unwrap();
    assert!(
        ready.iter().any(|c| c.type_ == "Ready"
            && c.status == ConditionStatus::False
            && c.reason.as_deref() == Some("VlanConflict")),
        "{ready:?}"
    );
    podkit::warning(
        &env,
        "default",
        "Vlan",
        "a-newer",
        "VlanConflict",
        &["provider pn1", "a-newer", "conflicts with vlan older", "id 100"],
    )
    .await;
    // The same id on another provider, and id 0 anywhere, conflict with nobody.
    provider_network(&env, "pn2", json!({"defaultInterface": "eth2"})).await;
    vlan(&env, "other", 100, "pn2").await;
    // Several at once on one network: each name is added under a resourceVersion
    // precondition, so none is lost to a concurrent writer.
    tokio::join!(
        vlan(&env, "untagged", 0, "pn1"),
        vlan(&env, "v201", 201, "pn1"),
        vlan(&env, "v202", 202, "pn1"),
        vlan(&env, "v203", 203, "pn1"),
    );
    until(&pns, "pn2", "lists vlan other", |p| vlans_of(p) == ["other"]).await;
    let pn1 = until(&pns, "pn1", "lists older, untagged and v201-v203", |p| {
        let mut v = vlans_of(p);
        v.sort();
        v == ["older", "untagged", "v201", "v202", "v203"]
    })
    .await;
    assert!(
        !vlans_of(&pn1).contains(&"a-newer".to_owned()),
        "a conflicting vlan is not ready"
    );
    assert_eq!(
        vlans.get("a-newer").await.unwrap().status.unwrap().conflict,
        Some(true)
    );

    // status.subnets follows the subnets naming the Vlan.
    for s in ["s2", "s1"] {
        let cidr = if s == "s1" {
            "10.201.0.0/24"
        } else {
            "10.202.0.0/24"
        };
        create::<Subnet>(
            &env,
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": s}, "spec": {"cidrBlock": cidr, "vlan": "older"}}),
        )
        .await;
    }
    let subnets = |v: &Vlan| {
        v.status
            .as_ref()
            .and_then(|s| s.subnets.clone())
            .unwrap_or_default()
    };
    until(&vlans, "older", "lists s1 and s2", |v| subnets(v) == ["s1", "s2"]).await;

    // An empty provider is the default one (--default-provider-name, "provider").
    vlan(&env, "defaulted", 7, "").await;
    until(&vlans, "defaulted", "on the default provider", |v| {
        v.spec.provider.as_deref() == Some("provider")
    })
    .await;

    // The older goes: the newer no longer conflicts and takes its place in pn1's list.
    vlans.delete("older", &DeleteParams::default()).await.unwrap();
    until(&vlans, "a-newer", "out of conflict", |v| {
        conflict(v) == Some(false)
    })
    .await;
    until(&pns, "pn1", "lists a-newer, not older", |p| {
        let v = vlans_of(p);
        v.contains(&"a-newer".to_owned()) && !v.contains(&"older".to_owned())
    })
    .await;
    wait_until_async("vlan older to be gone", WAIT, || {
        let vlans = vlans.clone();
        async move { Ok(vlans.get_opt("older").await?.is_none()) }
    })
    .await
    .unwrap();
}

async fn label_node(env: &Env, node: &str, labels: serde_json::Value) {
    Api::<Node>::all(env.kube.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap();
}

async fn cni_pod(env: &Env, node: &str, err: Option<&str>) -> Pod {
    let mut ann = BTreeMap::new();
    if let Some(e) = err {
        ann.insert("pn1.provider-network.kubernetes.io/err_mesg", e);
    }
    env.namespace("kube-system").await;
    let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("kube-ovn-cni-{node}"), "namespace": "kube-system",
                     "labels": {"app": "kube-ovn-cni"}, "annotations": ann},
        "spec": {"nodeName": node, "hostNetwork": true, "containers": [{"name": "c", "image": "x"}]}}))
    .unwrap();
    Api::<Pod>::namespaced(env.kube.clone(), "kube-system")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap()
}

/// `(node, status, reason, message)` of each per-node condition, sorted by node.
fn node_conditions(pn: &ProviderNetwork) -> Vec<(String, ConditionStatus, String, String)> {
    let mut out: Vec<_> = pn
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| c.condition.type_ == "Ready")
        .map(|c| {
            (
                c.node.clone().unwrap_or_default(),
                c.condition.status,
                c.condition.reason.clone().unwrap_or_default(),
                c.condition.message.clone().unwrap_or_default(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_network_status_from_node_labels_and_cni_pods() {
    let env = Env::start().await;
    let pns: Api<ProviderNetwork> = Api::all(env.kube.clone());
    for (n, ip) in [
        ("n1", "172.18.0.2"),
        ("n2", "172.18.0.3"),
        ("n3", "172.18.0.4"),
        ("n4", "172.18.0.5"),
    ] {
        env.node(n, ip).await;
    }
    label_node(
        &env,
        "n1",
        json!({"pn1.provider-network.kubernetes.io/ready": "true"}),
    )
    .await;
    cni_pod(&env, "n1", None).await;
    cni_pod(&env, "n2", Some("failed to add nic eth1 to OVS bridge br-pn1")).await;
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), "kube-system");
    provider_network(
        &env,
        "pn1",
        json!({"defaultInterface": "eth1", "excludeNodes": ["n4"]}),
    )
    .await;
    let pn = until(&pns, "pn1", "n1 ready, n2 and n3 not", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.ready_nodes == Some(vec!["n1".into()])
                && s.not_ready_nodes == Some(vec!["n2".into(), "n3".into()])
        })
    })
    .await;
    assert_eq!(pn.status.as_ref().unwrap().ready, Some(false));
    let f = ConditionStatus::False;
    let failed = "InitOVSBridgeFailed".to_owned();
    assert_eq!(
        node_conditions(&pn),
        [
            (
                "n1".into(),
                ConditionStatus::True,
                "InitOVSBridgeSucceeded".into(),
                String::new()
            ),
            (
                "n2".into(),
                f,
                failed.clone(),
                "failed to add nic eth1 to OVS bridge br-pn1".into()
            ),
            (
                "n3".into(),
                f,
                failed.clone(),
                "kube-ovn-cni pod on node n3 not found".into()
            ),
        ],
        "n4 is excluded: no condition"
    );

    // The daemon on n3 starts and reports an error; the one on n2 succeeds and labels its node.
    cni_pod(&env, "n3", Some("interface eth1 not found")).await;
    let has = |node: &str, msg: &str| {
        let (node, msg) = (node.to_owned(), msg.to_owned());
        move |p: &ProviderNetwork| node_conditions(p).iter().any(|c| c.0 == node && c.3 == msg)
    };
    until(
        &pns,
        "pn1",
        "n3's cni pod message",
        has("n3", "interface eth1 not found"),
    )
    .await;
    pods.patch(
        "kube-ovn-cni-n2",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"pn1.provider-network.kubernetes.io/err_mesg": null}}}),
        ),
    )
    .await
    .unwrap();
    until(
        &pns,
        "pn1",
        "n2 without a message: unknown error",
        has("n2", "unknown error"),
    )
    .await;
    label_node(
        &env,
        "n2",
        json!({"pn1.provider-network.kubernetes.io/ready": "true"}),
    )
    .await;
    label_node(
        &env,
        "n3",
        json!({"pn1.provider-network.kubernetes.io/ready": "true"}),
    )
    .await;
    let pn = until(&pns, "pn1", "ready on every node", |p| {
        p.status.as_ref().is_some_and(|s| s.ready == Some(true))
    })
    .await;
    let s = pn.status.unwrap();
    assert_eq!(s.ready_nodes, Some(vec!["n1".into(), "n2".into(), "n3".into()]));
    assert_eq!(s.not_ready_nodes, None);

    // Unusable specs: a Warning event and a condition naming the field, no node status.
    provider_network(&env, "pn-long-name1", json!({"defaultInterface": "eth1"})).await;
    podkit::warning(
        &env,
        "default",
        "ProviderNetwork",
        "pn-long-name1",
        "InvalidProviderNetwork",
        &[
            "provider network pn-long-name1",
            "metadata.name",
            "longer than 12",
        ],
    )
    .await;
    provider_network(
        &env,
        "pn3",
        json!({"defaultInterface": "eth1", "customInterfaces": [
            {"interface": "eth2", "nodes": ["n1"]}, {"interface": "eth3", "nodes": ["n1"]}]}),
    )
    .await;
    podkit::warning(
        &env,
        "default",
        "ProviderNetwork",
        "pn3",
        "InvalidProviderNetwork",
        &["spec.customInterfaces[1].nodes", "n1"],
    )
    .await;
    let pn3 = until(&pns, "pn3", "a Validated False condition", |p| {
        p.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| {
                c.node.is_none()
                    && c.condition.type_ == "Validated"
                    && c.condition.status == ConditionStatus::False
            })
    })
    .await;
    assert_eq!(
        pn3.status.unwrap().ready_nodes,
        None,
        "no node status from an unusable spec"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_type_vlan_creates_the_default_underlay() {
    let mut env = Env::start_idle(&[
        "--network-type=vlan",
        "--default-interface-name=eth1",
        "--default-vlan-id=100",
    ])
    .await;
    // Kube-OVN's node annotations, read once when the network is created.
    let nodes: Api<Node> = Api::all(env.kube.clone());
    for (name, ann) in [
        (
            "n1",
            json!({"provider.provider-network.kubernetes.io/exclude": "true"}),
        ),
        (
            "n2",
            json!({"provider.provider-network.kubernetes.io/interface": "eth9"}),
        ),
        ("n3", json!({})),
    ] {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": name, "annotations": ann}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    env.start_controller();
    let pns: Api<ProviderNetwork> = Api::all(env.kube.clone());
    let pn = until(&pns, "provider", "lists vlan ovn-vlan", |p| {
        vlans_of(p) == ["ovn-vlan"]
    })
    .await;
    assert_eq!(pn.spec.default_interface.as_deref(), Some("eth1"));
    assert_eq!(pn.spec.exclude_nodes, Some(vec!["n1".into()]));
    let custom = pn.spec.custom_interfaces.unwrap();
    assert_eq!(
        (custom[0].interface.as_deref(), custom[0].nodes.clone()),
        (Some("eth9"), Some(vec!["n2".into()]))
    );
    for n in ["n1", "n2"] {
        let ann = nodes.get(n).await.unwrap().annotations().clone();
        assert!(
            ann.keys()
                .all(|k| !k.starts_with("provider.provider-network.kubernetes.io/")),
            "{n}'s annotations are removed once taken: {ann:?}"
        );
    }
    let v = Api::<Vlan>::all(env.kube.clone()).get("ovn-vlan").await.unwrap();
    assert_eq!(
        (v.spec.id, v.spec.provider.as_deref()),
        (Some(100), Some("provider"))
    );
    let s = Api::<Subnet>::all(env.kube.clone())
        .get("ovn-default")
        .await
        .unwrap();
    assert_eq!(s.spec.vlan.as_deref(), Some("ovn-vlan"));
    assert_eq!(s.spec.logical_gateway, Some(false));
    assert_eq!(s.spec.u2o_interconnection, Some(false));
}

/// Kube-OVN refuses to start with both of the default subnet's gateways, before it touches
/// anything.
#[test]
fn both_default_gateways_refuse_the_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-ovn-controller"))
        .args([
            "--ovn-nb-addr=tcp:127.0.0.1:1",
            "--network-type=vlan",
            "--default-interface-name=eth1",
            "--default-logical-gateway=true",
            "--default-u2o-interconnection=true",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("logicalGateway and u2oInterconnection can't be opened at the same time"),
        "{stderr}"
    );
}

/// The underlay's calls are granted by `deploy/base/rbac.yaml`: the controller, as its
/// ServiceAccount, starts in vlan mode (the default network, its node annotations, the Vlan),
/// keeps a network's status, writes a conflict's event, and lets a Vlan go through its finalizer,
/// with no request refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_underlay_needs_no_permission_the_controllers_roles_lack() {
    const USER: &str = "system:serviceaccount:kube-system:kube-ovn-controller";
    let env = Env::start_idle(&["--network-type=vlan", "--default-interface-name=eth1"]).await;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base/rbac.yaml");
    kube_ovn_lab::manifests::create_all(&env.kube, &std::fs::read_to_string(path).unwrap())
        .await
        .unwrap();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1",
        "annotations": {"provider.provider-network.kubernetes.io/exclude": "true"}}}))
    .unwrap();
    Api::<Node>::all(env.kube.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let identity = env
        .server
        .service_account_client("kube-system", "kube-ovn-controller")
        .await
        .unwrap();
    let _controller = env.spawn_controller_on(identity, &[]);
    let pns: Api<ProviderNetwork> = Api::all(env.kube.clone());
    let vlans: Api<Vlan> = Api::all(env.kube.clone());
    until(&pns, "provider", "lists ovn-vlan and has a status", |p| {
        vlans_of(p) == ["ovn-vlan"] && p.status.as_ref().is_some_and(|s| s.ready.is_some())
    })
    .await;
    wait_until_async("n1's annotation to be taken", WAIT, || {
        let nodes = Api::<Node>::all(env.kube.clone());
        async move { Ok(nodes.get("n1").await?.annotations().is_empty()) }
    })
    .await
    .unwrap();
    vlan(&env, "dup", 1, "provider").await;
    podkit::warning(&env, "default", "Vlan", "dup", "VlanConflict", &["ovn-vlan"]).await;
    vlans.delete("dup", &DeleteParams::default()).await.unwrap();
    wait_until_async("vlan dup to be gone", WAIT, || {
        let vlans = vlans.clone();
        async move { Ok(vlans.get_opt("dup").await?.is_none()) }
    })
    .await
    .unwrap();
    let denials: Vec<String> = env
        .server
        .audited()
        .into_iter()
        .filter(|r| r.user == USER && r.is_denial())
        .map(|r| r.to_string())
        .collect();
    assert!(denials.is_empty(), "refused:\n{}", denials.join("\n"));
}
