//! Where a pod's address comes from besides the subnet's free addresses: IP pools (bound to a
//! namespace, or listed in the pod's `ip_pool` annotation), a StatefulSet pod's former address,
//! and an IP CR a user created to reserve one. On real OVN and a real kube-apiserver.

mod common;
mod netkit;
mod podkit;

use common::{Env, ann};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_ovn_api::crd::condition::find_condition;
use kube_ovn_api::crd::{ConditionStatus, IPPool, Ip};
use kube_ovn_testkit::wait_until_async;
use netkit::{delete_pod, subnet_ready, subnet_until};
use podkit::{create_pod, ip_cr, ip_until, lsp_addresses, until, warning};
use serde_json::json;

async fn apply(env: &Env, kind: &str, name: &str, spec: serde_json::Value) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

fn using(s: &kube_ovn_api::crd::Subnet) -> Option<u128> {
    s.status.as_ref()?.v4_using_ips.map(|c| c.0)
}

/// Waits until the pool satisfies `ok`; on timeout the panic shows its status.
async fn pool_until(env: &Env, name: &str, what: &str, ok: impl Fn(&IPPool) -> bool) -> IPPool {
    let api: Api<IPPool> = Api::all(env.kube.clone());
    let ok = &ok;
    let waited = wait_until_async(&format!("IP pool {name}: {what}"), common::WAIT, || {
        let api = api.clone();
        async move { Ok(api.get_opt(name).await?.is_some_and(|p| ok(&p))) }
    })
    .await;
    let now = api.get_opt(name).await.unwrap();
    if let Err(e) = waited {
        panic!("{e}; the pool is now {:#?}", now.map(|p| p.status));
    }
    now.unwrap()
}

fn pool_condition(p: &IPPool, type_: &str) -> Option<(ConditionStatus, String, String)> {
    let c = find_condition(p.status.as_ref()?.conditions.as_deref()?, type_)?;
    Some((
        c.status,
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

fn port_of(pod: &str, ns: &str) -> String {
    format!("{pod}.{ns}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_pool_hands_out_its_addresses_and_pools_may_not_overlap() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    apply(
        &env,
        "Subnet",
        "pool-net",
        json!({"cidrBlock": "10.84.0.0/24", "namespaces": ["nsp", "nsq"]}),
    )
    .await;
    subnet_until(&env, "pool-net", "ready", subnet_ready).await;
    apply(
        &env,
        "IPPool",
        "pool-a",
        json!({"subnet": "pool-net", "ips": ["10.84.0.100..10.84.0.102"], "namespaces": ["nsp"],
            "enableAddressSet": true}),
    )
    .await;
    pool_until(&env, "pool-a", "ready", |p| {
        pool_condition(p, "Ready").is_some_and(|c| c.0 == ConditionStatus::True)
    })
    .await;
    // The pool's address set: ranges as CIDRs, single addresses bare.
    let set = netkit::nb_until(
        &env,
        &[
            "--bare",
            "--columns=addresses,external_ids",
            "find",
            "Address_Set",
            "name=\"pool.a\"",
        ],
        "address set pool.a",
        |o| !o.trim().is_empty(),
    )
    .await;
    for want in ["10.84.0.100/31", "10.84.0.102", "ippool=pool-a"] {
        assert!(set.split_whitespace().any(|w| w == want), "{want} in {set}");
    }

    // A pod of the bound namespace takes the pool's first address; one of another namespace
    // bound to the same subnet takes the subnet's.
    env.pod("nsp", "a", "node1", &[]).await;
    env.pod("nsp", "b", "node1", &[]).await;
    env.pod("nsq", "c", "node1", &[]).await;
    let mut pool_ips = Vec::new();
    for pod in ["a", "b"] {
        let p = env.routed("nsp", pod).await;
        assert_eq!(ann(&p, "logical_switch"), "pool-net");
        pool_ips.push(ann(&p, "ip_address").to_owned());
    }
    // a and b are placed concurrently: either may hold either address.
    let a_ip = pool_ips[0].clone();
    pool_ips.sort();
    assert_eq!(pool_ips, ["10.84.0.100", "10.84.0.101"]);
    let outside = env.routed("nsq", "c").await;
    assert_eq!(ann(&outside, "ip_address"), "10.84.0.2", "outside the pool");
    pool_until(&env, "pool-a", "two in use", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.v4_using_ips.as_ref())
            .is_some_and(|n| n.0 == 2)
    })
    .await;

    // The pool is all the namespace gets: once it is used up, a pod waits (a Warning, nothing
    // allocated) rather than taking another address of the subnet, until one is released.
    env.pod("nsp", "d", "node1", &[]).await;
    assert_eq!(ann(&env.routed("nsp", "d").await, "ip_address"), "10.84.0.102");
    env.pod("nsp", "e", "node1", &[]).await;
    warning(&env, "nsp", "Pod", "e", "AcquireAddressFailed", &["pool-a"]).await;
    podkit::assert_nothing_allocated(&env, "nsp", "e").await;
    delete_pod(&env, "nsp", "a").await;
    let waited = env.routed("nsp", "e").await;
    assert_eq!(ann(&waited, "ip_address"), a_ip, "the address a released");

    // A pool overlapping pool-a is refused with a condition naming both; pool-a is untouched.
    apply(
        &env,
        "IPPool",
        "pool-b",
        json!({"subnet": "pool-net", "ips": ["10.84.0.102..10.84.0.110"]}),
    )
    .await;
    let overlapping = pool_until(&env, "pool-b", "refused", |p| {
        pool_condition(p, "Ready").is_some_and(|c| c.0 == ConditionStatus::False)
    })
    .await;
    let (_, reason, message) = pool_condition(&overlapping, "Error").unwrap();
    assert_eq!(reason, "UpdateIPAMFailed");
    assert!(
        message.contains("pool-b") && message.contains("pool-a"),
        "{message}"
    );
    let first = pool_until(&env, "pool-a", "still ready", |_| true).await;
    assert_eq!(pool_condition(&first, "Ready").unwrap().0, ConditionStatus::True);
    // Garbage in spec.ips is refused with a condition naming the field.
    apply(
        &env,
        "IPPool",
        "pool-d",
        json!({"subnet": "pool-net", "ips": ["10.84.0.300"]}),
    )
    .await;
    let garbage = pool_until(&env, "pool-d", "refused", |p| {
        pool_condition(p, "Ready").is_some_and(|c| c.0 == ConditionStatus::False)
    })
    .await;
    let (_, _, message) = pool_condition(&garbage, "Error").unwrap();
    assert!(
        message.contains("pool-d") && message.contains("spec.ips") && message.contains("10.84.0.300"),
        "{message}"
    );
    // The namespace names the pools bound to it (Kube-OVN's namespace `ip_pool` annotation).
    let ns_pool = |ns: &'static str| {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.kube.clone());
        async move {
            api.get(ns)
                .await
                .unwrap()
                .annotations()
                .get("ovn.kubernetes.io/ip_pool")
                .cloned()
        }
    };
    until("namespace nsp to name pool-a", || async {
        Ok((ns_pool("nsp").await.as_deref() == Some("pool-a")).then_some(()))
    })
    .await;
    assert_eq!(ns_pool("nsq").await, None);
    // A non-overlapping pool is fine.
    apply(
        &env,
        "IPPool",
        "pool-c",
        json!({"subnet": "pool-net", "ips": ["10.84.0.120/30"]}),
    )
    .await;
    pool_until(&env, "pool-c", "ready", |p| {
        pool_condition(p, "Ready").is_some_and(|c| c.0 == ConditionStatus::True)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ip_pool_annotation_list_picks_the_first_free_entry() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    let list = [("ovn.kubernetes.io/ip_pool", "10.16.0.90,10.16.0.91")];
    env.pod("nsl", "a", "node1", &list).await;
    let a = env.routed("nsl", "a").await;
    env.pod("nsl", "b", "node1", &list).await;
    let b = env.routed("nsl", "b").await;
    assert_eq!(ann(&a, "ip_address"), "10.16.0.90");
    assert_eq!(ann(&b, "ip_address"), "10.16.0.91");
    // The list is used up: a third pod is refused and gets nothing.
    env.pod("nsl", "c", "node1", &list).await;
    warning(
        &env,
        "nsl",
        "Pod",
        "c",
        "AcquireAddressFailed",
        &["ovn.kubernetes.io/ip_pool"],
    )
    .await;
    podkit::assert_nothing_allocated(&env, "nsl", "c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_pod_keeps_its_address_until_scaled_down() {
    let mut env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    apply(
        &env,
        "Subnet",
        "sts-net",
        json!({"cidrBlock": "10.85.0.0/24", "namespaces": ["nss"]}),
    )
    .await;
    subnet_until(&env, "sts-net", "ready", subnet_ready).await;
    env.namespace("nss").await;
    let stss: Api<StatefulSet> = Api::namespaced(env.kube.clone(), "nss");
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "nss"},
        "spec": {"replicas": 2, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}
    }))
    .unwrap();
    let sts = stss.create(&PostParams::default(), &sts).await.unwrap();
    let uid = sts.uid().unwrap();
    let web0 = || {
        json!({"metadata": {"name": "web-0", "namespace": "nss", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": uid,
                "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x"}]}})
    };
    create_pod(&env, "nss", web0()).await;
    let first = env.routed("nss", "web-0").await;
    let (ip, mac) = (ann(&first, "ip_address"), ann(&first, "mac_address"));
    let key = port_of("web-0", "nss");
    let rec = ip_cr(&env, &key).await.unwrap();
    assert_eq!(rec.spec.pod_type.as_deref(), Some("StatefulSet"));

    // Deleted while the StatefulSet still wants it: the port goes, the address stays.
    delete_pod(&env, "nss", "web-0").await;
    until("port web-0.nss to be deleted", || async {
        Ok(lsp_addresses(&env, &key).is_none().then_some(()))
    })
    .await;
    let kept = ip_cr(&env, &key).await.expect("the IP CR stays");
    assert_eq!(kept.spec.v4_ip_address.as_deref(), Some(ip));
    subnet_until(&env, "sts-net", "still one in use", |s| using(s) == Some(1)).await;
    // A controller restart in between forgets nothing: IPAM is rebuilt from the IP CR.
    env.kill_controller().await;
    env.start_controller();
    // Meanwhile nobody else gets it.
    env.pod("nss", "other", "node1", &[]).await;
    let other = env.routed("nss", "other").await;
    assert_ne!(ann(&other, "ip_address"), ip);

    create_pod(&env, "nss", web0()).await;
    let again = env.routed("nss", "web-0").await;
    assert_eq!((ann(&again, "ip_address"), ann(&again, "mac_address")), (ip, mac));
    assert_eq!(lsp_addresses(&env, &key).unwrap(), format!("{mac} {ip}"));

    // An `ip_pool` list gives a StatefulSet pod the entry of its ordinal.
    let db = stss
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "db", "namespace": "nss"},
                "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    create_pod(
        &env,
        "nss",
        json!({"metadata": {"name": "db-1", "namespace": "nss",
            "annotations": {"ovn.kubernetes.io/ip_pool": "10.85.0.50,10.85.0.51"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": db.uid().unwrap(),
                "controller": true}]},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x"}]}}),
    )
    .await;
    assert_eq!(ann(&env.routed("nss", "db-1").await, "ip_address"), "10.85.0.51");

    // Scaled below its ordinal, then deleted: the address is released.
    stss.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 0}})),
    )
    .await
    .unwrap();
    delete_pod(&env, "nss", "web-0").await;
    ip_until(&env, &key, "deleted", |ip| ip.is_none()).await;
    until("port web-0.nss to be deleted", || async {
        Ok(lsp_addresses(&env, &key).is_none().then_some(()))
    })
    .await;
    subnet_until(&env, "sts-net", "only `other` and db-1 in use", |s| {
        using(s) == Some(2)
    })
    .await;
    // The address is free: a pod may ask for it statically.
    env.pod("nss", "taker", "node1", &[("ovn.kubernetes.io/ip_address", ip)])
        .await;
    let taker = env.routed("nss", "taker").await;
    assert_eq!(ann(&taker, "ip_address"), ip);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_ip_cr_is_honoured_and_outlives_its_pod() {
    let mut env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    apply(
        &env,
        "Subnet",
        "res-net",
        json!({"cidrBlock": "10.86.0.0/24", "namespaces": ["nsr"]}),
    )
    .await;
    subnet_until(&env, "res-net", "ready", subnet_ready).await;
    let key = port_of("db", "nsr");
    let ips: Api<Ip> = Api::all(env.kube.clone());
    let reservation: Ip = serde_json::from_value(json!({
        "apiVersion": "kubeovn.io/v1", "kind": "IP", "metadata": {"name": key},
        "spec": {"subnet": "res-net", "podName": "db", "namespace": "nsr", "v4IpAddress": "10.86.0.50"}
    }))
    .unwrap();
    ips.create(&PostParams::default(), &reservation).await.unwrap();
    let reserved = ip_until(&env, &key, "reserved", |ip| {
        ip.is_some_and(|ip| {
            ip.labels()
                .get("ovn.kubernetes.io/ip_reserved")
                .map(String::as_str)
                == Some("true")
                && ip.spec.mac_address.as_deref().is_some_and(|m| !m.is_empty())
                && ip
                    .finalizers()
                    .iter()
                    .any(|f| f == "kubeovn.io/kube-ovn-controller")
        })
    })
    .await
    .unwrap();
    let mac = reserved.spec.mac_address.clone().unwrap();
    subnet_until(&env, "res-net", "the reservation in use", |s| using(s) == Some(1)).await;
    // A controller restart keeps the reservation (IPAM is rebuilt from IP CRs).
    env.kill_controller().await;
    env.start_controller();

    // Another pod does not get it; the pod it is reserved for does, with its MAC.
    env.pod(
        "nsr",
        "other",
        "node1",
        &[("ovn.kubernetes.io/ip_address", "10.86.0.50")],
    )
    .await;
    warning(
        &env,
        "nsr",
        "Pod",
        "other",
        "AcquireAddressFailed",
        &["10.86.0.50", &key],
    )
    .await;
    env.pod("nsr", "db", "node1", &[]).await;
    let db = env.routed("nsr", "db").await;
    assert_eq!(ann(&db, "ip_address"), "10.86.0.50");
    assert_eq!(ann(&db, "mac_address"), mac);

    // The reservation outlives the pod, and the next pod of that name gets it again.
    delete_pod(&env, "nsr", "db").await;
    until("port db.nsr to be deleted", || async {
        Ok(lsp_addresses(&env, &key).is_none().then_some(()))
    })
    .await;
    let still = ip_cr(&env, &key).await.expect("the reservation stays");
    assert_eq!(still.spec.v4_ip_address.as_deref(), Some("10.86.0.50"));
    env.pod("nsr", "db", "node1", &[]).await;
    let db = env.routed("nsr", "db").await;
    assert_eq!(ann(&db, "ip_address"), "10.86.0.50");
    delete_pod(&env, "nsr", "db").await;

    // Deleting the IP CR releases the address (through the finalizer).
    ips.delete(&key, &DeleteParams::default()).await.unwrap();
    ip_until(&env, &key, "deleted", |ip| ip.is_none()).await;
    let other = env.routed("nsr", "other").await;
    assert_eq!(ann(&other, "ip_address"), "10.86.0.50");
}
