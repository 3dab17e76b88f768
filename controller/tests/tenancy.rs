//! Tenancy for pods (controller/src/reconcile/tenancy.rs): a pod gets an address only in a subnet
//! and from an IP pool that admit its namespace, whatever its own annotations ask for; a refusal
//! is a Warning event naming the annotation and allocates nothing; the refused pod converges once
//! the platform binds its namespace. And a `routes` annotation the CNI could not install is
//! refused before allocation. On real OVN and a real kube-apiserver.

mod common;
mod netkit;
mod podkit;

use common::{Env, ann};
use netkit::subnet_until;
use podkit::{assert_nothing_allocated, ip_cr, lsp_addresses, warning};
use serde_json::json;

const LS: &str = "ovn.kubernetes.io/logical_switch";
const REFUSED: &str = "ValidatePodNetworkFailed";

async fn apply(env: &Env, kind: &str, name: &str, spec: serde_json::Value) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

/// Waits, well within the minute a refused pod's retry takes, for the pod to be routed: the
/// platform's change itself must re-reconcile it.
async fn converges(env: &Env, ns: &str, pod: &str) {
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(env.kube.clone(), ns);
    kube_ovn_testkit::wait_until_async(
        &format!("pod {ns}/{pod} to be routed once its namespace is bound"),
        std::time::Duration::from_secs(20),
        || {
            let api = api.clone();
            async move {
                let p = api.get(pod).await?;
                Ok(kube::ResourceExt::annotations(&p)
                    .get("ovn.kubernetes.io/routed")
                    .is_some_and(|v| v == "true"))
            }
        },
    )
    .await
    .unwrap();
}

/// The pod is routed in `subnet`, with its port on that switch and its IP CR naming it.
async fn placed(env: &Env, ns: &str, pod: &str, subnet: &str, prefix: &str) {
    let p = env.routed(ns, pod).await;
    assert_eq!(ann(&p, "logical_switch"), subnet, "{ns}/{pod}");
    assert!(
        ann(&p, "ip_address").starts_with(prefix),
        "{ns}/{pod}: {}",
        ann(&p, "ip_address")
    );
    let key = format!("{pod}.{ns}");
    let ports = env.ovn.nbctl(&["lsp-list", subnet]).unwrap();
    assert!(ports.contains(&format!("({key})")), "{key} on {subnet}: {ports}");
    let ip = ip_cr(env, &key).await.unwrap();
    assert_eq!(ip.spec.subnet.as_deref(), Some(subnet));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_joins_a_custom_vpc_only_once_the_vpc_binds_its_namespace() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    apply(&env, "Vpc", "vpc1", json!({"namespaces": ["tenant-1"]})).await;
    apply(
        &env,
        "Subnet",
        "vpc1-net",
        json!({"vpc": "vpc1", "cidrBlock": "192.168.10.0/24"}),
    )
    .await;
    subnet_until(&env, "vpc1-net", "ready", netkit::subnet_ready).await;

    // The lab's attack: a pod of another namespace names the tenant's subnet, on its primary
    // network or on an attachment network's key.
    env.pod("attacker", "x", "node1", &[(LS, "vpc1-net")]).await;
    let attach = "net1.attacker.ovn.kubernetes.io/logical_switch";
    env.pod("attacker", "y", "node1", &[(attach, "vpc1-net")]).await;
    // The tenant's own pod on the same subnet.
    env.pod("tenant-1", "a", "node1", &[(LS, "vpc1-net")]).await;

    let why = "subnet vpc1-net does not admit namespace attacker (its VPC vpc1 binds [tenant-1])";
    let key = format!("metadata.annotations[\"{LS}\"]");
    warning(
        &env,
        "attacker",
        "Pod",
        "x",
        REFUSED,
        &["pod attacker/x", &key, why],
    )
    .await;
    let key = format!("metadata.annotations[\"{attach}\"]");
    warning(
        &env,
        "attacker",
        "Pod",
        "y",
        REFUSED,
        &["pod attacker/y", &key, why],
    )
    .await;
    placed(&env, "tenant-1", "a", "vpc1-net", "192.168.10.").await;
    for pod in ["x", "y"] {
        assert_nothing_allocated(&env, "attacker", pod).await;
    }

    // The platform binds the namespace: the refused pod converges without being touched.
    apply(
        &env,
        "Vpc",
        "vpc1",
        json!({"namespaces": ["tenant-1", "attacker"]}),
    )
    .await;
    converges(&env, "attacker", "x").await;
    placed(&env, "attacker", "x", "vpc1-net", "192.168.10.").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subnet_binding_and_an_ip_pool_of_another_namespace_refuse_the_pod() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    apply(
        &env,
        "Subnet",
        "team-net",
        json!({"cidrBlock": "10.91.0.0/24", "namespaces": ["team"]}),
    )
    .await;
    apply(&env, "Subnet", "open", json!({"cidrBlock": "10.92.0.0/24"})).await;
    for s in ["team-net", "open"] {
        subnet_until(&env, s, "ready", netkit::subnet_ready).await;
    }
    apply(
        &env,
        "IPPool",
        "team-pool",
        json!({"subnet": "open", "ips": ["10.92.0.100..10.92.0.101"], "namespaces": ["team"]}),
    )
    .await;

    env.pod("attacker", "x", "node1", &[(LS, "team-net")]).await;
    // The pool lies in a subnet the attacker may use; the pool itself is the team's.
    let pool = "ovn.kubernetes.io/ip_pool";
    env.pod("attacker", "p", "node1", &[(pool, "team-pool")]).await;
    env.pod("team", "t", "node1", &[(pool, "team-pool")]).await;

    let key = format!("metadata.annotations[\"{LS}\"]");
    let why = "subnet team-net does not admit namespace attacker (it binds [team])";
    warning(&env, "attacker", "Pod", "x", REFUSED, &[&key, why]).await;
    let key = format!("metadata.annotations[\"{pool}\"]");
    let why = "IP pool team-pool does not admit namespace attacker (it binds [team])";
    warning(&env, "attacker", "Pod", "p", REFUSED, &[&key, why]).await;
    placed(&env, "team", "t", "open", "10.92.0.10").await;
    for pod in ["x", "p"] {
        assert_nothing_allocated(&env, "attacker", pod).await;
    }

    // The platform binds the namespace to the subnet: the refused pod converges.
    apply(
        &env,
        "Subnet",
        "team-net",
        json!({"cidrBlock": "10.91.0.0/24", "namespaces": ["team", "attacker"]}),
    )
    .await;
    converges(&env, "attacker", "x").await;
    placed(&env, "attacker", "x", "team-net", "10.91.0.").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routes_annotation_the_cni_cannot_install_allocates_nothing() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    let routes = "ovn.kubernetes.io/routes";
    env.pod("ns1", "bad-json", "node1", &[(routes, "[{\"dst\": 10}]")])
        .await;
    // ovn-default is IPv4 only: an IPv6 route could never be installed.
    env.pod(
        "ns1",
        "v6",
        "node1",
        &[(routes, r#"[{"dst":"fd00:1::/64","gw":"fd00::1"}]"#)],
    )
    .await;
    env.pod(
        "ns1",
        "good",
        "node1",
        &[(routes, r#"[{"dst":"192.168.0.0/16","gw":"10.16.0.1"}]"#)],
    )
    .await;

    warning(&env, "ns1", "Pod", "bad-json", REFUSED, &[routes, "invalid JSON"]).await;
    let key = format!("metadata.annotations[\"{routes}\"]");
    warning(
        &env,
        "ns1",
        "Pod",
        "v6",
        REFUSED,
        &[&key, "fd00:1::/64", "is ipv6", "has only ipv4"],
    )
    .await;
    placed(&env, "ns1", "good", "ovn-default", "10.16.").await;
    for pod in ["bad-json", "v6"] {
        assert_nothing_allocated(&env, "ns1", pod).await;
        assert_eq!(lsp_addresses(&env, &format!("{pod}.ns1")), None);
    }
}
