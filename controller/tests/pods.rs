//! Pods end to end on real OVN: the annotation handshake the CNI daemon waits for, static
//! addresses and MACs, refused annotations (Warning events, nothing allocated), port security,
//! host-network pods, release on deletion, and Kube-OVN's subnet choice order.

mod common;
mod netkit;
mod podkit;

use common::{Env, ann};
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::WatchEvent;
use kube::api::WatchParams;
use netkit::{delete_pod, subnet_ready, subnet_until};
use podkit::{
    annotate, assert_nothing_allocated, create_pod, in_port_group, ip_cr, ip_until, lsp_addresses, lsp_get,
    ovn_annotations, pods, until, warning,
};
use serde_json::json;

async fn subnet(env: &Env, name: &str, spec: serde_json::Value) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

fn using(s: &kube_ovn_api::crd::Subnet) -> Option<u128> {
    s.status.as_ref()?.v4_using_ips.map(|c| c.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_gives_allocated_before_routed_and_the_port_first() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    // The node's port groups exist first, so the controller may route the pod in its first pass
    // (the order of the two annotation writes is then what this test sees).
    for pg in ["node.node1", "ovn.default.node1"] {
        netkit::nb_until(
            &env,
            &[
                "--bare",
                "--columns=name",
                "find",
                "Port_Group",
                &format!("name=\"{pg}\""),
            ],
            &format!("port group {pg}"),
            |o| o.trim() == pg,
        )
        .await;
    }
    let created = env.pod("ns1", "a", "node1", &[]).await;
    // Every update of the pod from its creation on, in order.
    let params = WatchParams::default().fields("metadata.name=a").timeout(60);
    let mut updates = pods(&env, "ns1")
        .watch(&params, &created.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    let (mut allocated_at, mut routed_at) = (None, None);
    while routed_at.is_none() {
        let event = tokio::time::timeout(common::WAIT, updates.try_next())
            .await
            .unwrap_or_else(|_| panic!("pod ns1/a was never routed; updates seen: {seen:#?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the watch ended before pod ns1/a was routed: {seen:#?}"));
        let pod = match event {
            WatchEvent::Added(p) | WatchEvent::Modified(p) => p,
            WatchEvent::Bookmark(_) => continue,
            other => panic!("unexpected watch event {other:?}"),
        };
        let (allocated, routed) = (ann(&pod, "allocated") == "true", ann(&pod, "routed") == "true");
        seen.push((pod.resource_version(), allocated, routed));
        assert!(
            !routed || allocated,
            "routed without allocated at {:?}: {:?}",
            pod.resource_version(),
            pod.annotations()
        );
        if allocated && allocated_at.is_none() {
            allocated_at = Some(seen.len());
            // The port is written before the annotations that name it.
            let want = format!("{} {}", ann(&pod, "mac_address"), ann(&pod, "ip_address"));
            assert_eq!(
                lsp_addresses(&env, "a.ns1").as_deref(),
                Some(want.as_str()),
                "port a.ns1 when allocated=true appeared"
            );
            for key in ["ip_address", "mac_address", "cidr", "gateway", "logical_switch"] {
                assert!(!ann(&pod, key).is_empty(), "{key} arrives with allocated=true");
            }
        }
        if routed {
            routed_at = Some(seen.len());
            // routed=true only once the port is in its node's port groups.
            assert!(in_port_group(&env, "node.node1", "a.ns1"), "a.ns1 in node.node1");
            assert!(
                in_port_group(&env, "ovn.default.node1", "a.ns1"),
                "a.ns1 in ovn.default.node1"
            );
        }
    }
    assert!(allocated_at <= routed_at, "{seen:?}");
    let a = pods(&env, "ns1").get("a").await.unwrap();
    assert_eq!(ann(&a, "logical_switch"), "ovn-default");
    assert_eq!(ann(&a, "cidr"), "10.16.0.0/16");
    assert_eq!(ann(&a, "gateway"), "10.16.0.1");
    assert_eq!(ann(&a, "ip_address"), "10.16.0.2", "the lowest free address");
    let mac = ann(&a, "mac_address");
    assert!(
        mac.len() == 17 && mac == mac.to_lowercase() && mac.matches(':').count() == 5,
        "{mac}"
    );
    let ip = ip_cr(&env, "a.ns1").await.expect("IP CR a.ns1");
    assert_eq!(ip.spec.v4_ip_address.as_deref(), Some("10.16.0.2"));
    assert_eq!(ip.spec.mac_address.as_deref(), Some(mac));
    assert_eq!(ip.spec.subnet.as_deref(), Some("ovn-default"));
    assert_eq!(ip.spec.pod_name.as_deref(), Some("a"));
    assert_eq!(ip.spec.namespace.as_deref(), Some("ns1"));
    assert_eq!(ip.spec.node_name.as_deref(), Some("node1"));
    assert_eq!(
        ip.labels()
            .get("ovn.kubernetes.io/ip_reserved")
            .map(String::as_str),
        Some("false")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_addresses_are_honoured_and_a_conflict_waits_for_the_holder_to_go() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    let (ip, mac) = ("10.16.0.50", "0a:00:00:00:00:50");
    env.pod(
        "nss",
        "a",
        "node1",
        &[
            ("ovn.kubernetes.io/ip_address", ip),
            ("ovn.kubernetes.io/mac_address", mac),
        ],
    )
    .await;
    let a = env.routed("nss", "a").await;
    assert_eq!((ann(&a, "ip_address"), ann(&a, "mac_address")), (ip, mac));
    assert_eq!(lsp_addresses(&env, "a.nss").unwrap(), format!("{mac} {ip}"));

    // The same address, and (for another pod) the same MAC: refused, nothing allocated.
    env.pod("nss", "b", "node1", &[("ovn.kubernetes.io/ip_address", ip)])
        .await;
    env.pod("nss", "c", "node1", &[("ovn.kubernetes.io/mac_address", mac)])
        .await;
    let ev = warning(
        &env,
        "nss",
        "Pod",
        "b",
        "AcquireAddressFailed",
        &["ovn.kubernetes.io/ip_address", ip, "a.nss"],
    )
    .await;
    assert_eq!(ev.regarding.unwrap().namespace.as_deref(), Some("nss"));
    warning(
        &env,
        "nss",
        "Pod",
        "c",
        "AcquireAddressFailed",
        &["ovn.kubernetes.io/mac_address", mac],
    )
    .await;
    assert_nothing_allocated(&env, "nss", "b").await;
    assert_nothing_allocated(&env, "nss", "c").await;

    // Once the holder is gone, the waiting pods get what they asked for: the controller retries
    // a refused request, as Kube-OVN's does. (Kube-OVN's admission webhook would have refused pod
    // b at creation already; we have no webhook, so the controller is where it is refused.)
    delete_pod(&env, "nss", "a").await;
    let b = env.routed("nss", "b").await;
    let c = env.routed("nss", "c").await;
    assert_eq!(ann(&b, "ip_address"), ip);
    assert_eq!(ann(&c, "mac_address"), mac);
    assert_ne!(ann(&b, "mac_address"), mac);
    assert_eq!(lsp_addresses(&env, "a.nss"), None);
    assert!(lsp_addresses(&env, "b.nss").unwrap().ends_with(&format!(" {ip}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_annotations_are_refused_with_a_warning_until_fixed() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    let ip_key = "ovn.kubernetes.io/ip_address";
    let mac_key = "ovn.kubernetes.io/mac_address";
    let pool_key = "ovn.kubernetes.io/ip_pool";
    // (pod, bad annotation, event reason, words its note names, the fix, the address it yields)
    let cases = [
        (
            "bad-ip",
            (ip_key, "10.16.0.300"),
            "ValidatePodNetworkFailed",
            vec![ip_key, "10.16.0.300"],
            json!({ip_key: "10.16.0.60"}),
            "10.16.0.60",
        ),
        (
            "bad-mac",
            (mac_key, "0a:00:zz:00:00:01"),
            "ValidatePodNetworkFailed",
            vec![mac_key, "0a:00:zz:00:00:01"],
            json!({mac_key: "0a:00:00:00:00:61", ip_key: "10.16.0.61"}),
            "10.16.0.61",
        ),
        (
            "outside",
            (ip_key, "192.168.50.5"),
            "AcquireAddressFailed",
            vec![ip_key, "192.168.50.5", "out of range"],
            json!({ip_key: "10.16.0.62"}),
            "10.16.0.62",
        ),
        (
            "bad-pool",
            (pool_key, "10.16.0.70,not-an-ip"),
            "ValidatePodNetworkFailed",
            vec![pool_key, "not-an-ip"],
            json!({pool_key: "10.16.0.70,10.16.0.71"}),
            "10.16.0.70",
        ),
    ];
    for (name, bad, _, _, _, _) in &cases {
        env.pod("nsm", name, "node1", &[*bad]).await;
    }
    for (name, _, reason, words, _, _) in &cases {
        warning(&env, "nsm", "Pod", name, reason, words).await;
        assert_nothing_allocated(&env, "nsm", name).await;
    }
    for (name, _, _, _, fix, _) in &cases {
        annotate(&env, "nsm", name, fix.clone()).await;
    }
    for (name, _, _, _, fix, want) in &cases {
        let pod = env.routed("nsm", name).await;
        assert_eq!(ann(&pod, "ip_address"), *want, "{name} after {fix}");
        let port = lsp_addresses(&env, &format!("{name}.nsm")).unwrap();
        assert!(port.ends_with(&format!(" {want}")), "{port}");
    }
    let fixed_mac = pods(&env, "nsm").get("bad-mac").await.unwrap();
    assert_eq!(ann(&fixed_mac, "mac_address"), "0a:00:00:00:00:61");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_security_sets_the_ports_port_security() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.pod(
        "nsp",
        "locked",
        "node1",
        &[("ovn.kubernetes.io/port_security", "true")],
    )
    .await;
    env.pod("nsp", "open", "node1", &[]).await;
    let locked = env.routed("nsp", "locked").await;
    env.routed("nsp", "open").await;
    let want = format!(
        "[\"{} {}\"]",
        ann(&locked, "mac_address"),
        ann(&locked, "ip_address")
    );
    assert_eq!(lsp_get(&env, "locked.nsp", "port_security"), want);
    assert_eq!(lsp_get(&env, "locked.nsp", "addresses"), want);
    assert_eq!(lsp_get(&env, "open.nsp", "port_security"), "[]");
    // Turned on and off later: the column follows.
    annotate(
        &env,
        "nsp",
        "open",
        json!({"ovn.kubernetes.io/port_security": "true"}),
    )
    .await;
    let open = pods(&env, "nsp").get("open").await.unwrap();
    let want = format!("[\"{} {}\"]", ann(&open, "mac_address"), ann(&open, "ip_address"));
    netkit::nb_until(
        &env,
        &["get", "Logical_Switch_Port", "open.nsp", "port_security"],
        "open.nsp: port security on",
        |o| o.trim() == want,
    )
    .await;
    annotate(
        &env,
        "nsp",
        "locked",
        json!({"ovn.kubernetes.io/port_security": null}),
    )
    .await;
    netkit::nb_until(
        &env,
        &["get", "Logical_Switch_Port", "locked.nsp", "port_security"],
        "locked.nsp: port security off",
        |o| o.trim() == "[]",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_network_pods_are_ignored() {
    let env = Env::start().await;
    let metrics = env.metrics_addr.expect("the controller serves metrics").port();
    env.node("node1", "172.18.0.2").await;
    let pod_reconciles = |text: &str| netkit::reconciles(text, "Pod");
    // No other pod exists: every Pod reconcile from now on is of the host-network pod.
    let before = pod_reconciles(&netkit::metrics(metrics).await.unwrap());
    create_pod(
        &env,
        "nsh",
        json!({"metadata": {"name": "h", "namespace": "nsh"},
            "spec": {"nodeName": "node1", "hostNetwork": true, "containers": [{"name": "c", "image": "x"}]}}),
    )
    .await;
    until(
        "the controller to have looked at the host-network pod",
        || async move {
            let now = pod_reconciles(&netkit::metrics(metrics).await?);
            Ok((now > before).then_some(()))
        },
    )
    .await;
    let h = pods(&env, "nsh").get("h").await.unwrap();
    assert_eq!(ovn_annotations(&h), Vec::<String>::new());
    assert_eq!(lsp_addresses(&env, "h.nsh"), None);
    assert!(ip_cr(&env, "h.nsh").await.is_none());
    assert!(podkit::events(&env, "nsh", "h").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_releases_its_port_ip_cr_and_address() {
    let mut env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    subnet(
        &env,
        "rel",
        json!({"cidrBlock": "10.81.0.0/24", "namespaces": ["nsr"]}),
    )
    .await;
    subnet_until(&env, "rel", "ready, nothing in use", |s| {
        subnet_ready(s) && using(s) == Some(0)
    })
    .await;
    env.pod("nsr", "x", "node1", &[]).await;
    let x = env.routed("nsr", "x").await;
    assert_eq!(ann(&x, "ip_address"), "10.81.0.2");
    subnet_until(&env, "rel", "one address in use", |s| using(s) == Some(1)).await;
    assert!(lsp_addresses(&env, "x.nsr").is_some());
    assert!(ip_cr(&env, "x.nsr").await.is_some());
    assert!(in_port_group(&env, "node.node1", "x.nsr"));
    let x_uuid = lsp_get(&env, "x.nsr", "_uuid");
    let members = || {
        let out = env
            .ovn
            .nbctl(&[
                "--bare",
                "--columns=ports",
                "find",
                "Port_Group",
                "name=\"node.node1\"",
            ])
            .unwrap();
        let mut m: Vec<String> = out.split_whitespace().map(str::to_owned).collect();
        m.sort();
        m
    };
    let mut without_x = members();
    without_x.retain(|m| *m != x_uuid);

    delete_pod(&env, "nsr", "x").await;
    until("port x.nsr to be deleted", || async {
        Ok(lsp_addresses(&env, "x.nsr").is_none().then_some(()))
    })
    .await;
    ip_until(&env, "x.nsr", "deleted", |ip| ip.is_none()).await;
    let s = subnet_until(&env, "rel", "nothing in use again", |s| using(s) == Some(0)).await;
    let st = s.status.unwrap();
    assert_eq!(st.v4_available_ips.map(|c| c.0), Some(253));
    assert_eq!(members(), without_x, "x.nsr left node.node1, nothing else did");

    // A pod deleted while the controller is down is released when it is back.
    env.pod("nsr", "y", "node1", &[]).await;
    env.routed("nsr", "y").await;
    subnet_until(&env, "rel", "y in use", |s| using(s) == Some(1)).await;
    env.kill_controller().await;
    delete_pod(&env, "nsr", "y").await;
    env.start_controller();
    until("port y.nsr to be collected", || async {
        Ok(lsp_addresses(&env, "y.nsr").is_none().then_some(()))
    })
    .await;
    ip_until(&env, "y.nsr", "collected", |ip| ip.is_none()).await;
    subnet_until(&env, "rel", "nothing in use after the restart", |s| {
        using(s) == Some(0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_annotation_beats_the_namespace_binding_beats_the_default() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    subnet(
        &env,
        "bound",
        json!({"cidrBlock": "10.82.0.0/24", "namespaces": ["nsb"]}),
    )
    .await;
    subnet(&env, "pinned", json!({"cidrBlock": "10.83.0.0/24"})).await;
    for s in ["bound", "pinned"] {
        subnet_until(&env, s, "ready", subnet_ready).await;
    }
    // A named IP pool also picks its subnet, over the namespace's.
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "IPPool", "metadata": {"name": "pinned-pool"},
        "spec": {"subnet": "pinned", "ips": ["10.83.0.200..10.83.0.201"]}}),
    )
    .await;
    env.pod(
        "nsb",
        "p4",
        "node1",
        &[("ovn.kubernetes.io/ip_pool", "pinned-pool")],
    )
    .await;
    env.pod(
        "nsb",
        "p1",
        "node1",
        &[("ovn.kubernetes.io/logical_switch", "pinned")],
    )
    .await;
    env.pod("nsb", "p2", "node1", &[]).await;
    env.pod("other", "p3", "node1", &[]).await;
    for (ns, pod, subnet, prefix) in [
        ("nsb", "p1", "pinned", "10.83.0."),
        ("nsb", "p2", "bound", "10.82.0."),
        ("other", "p3", "ovn-default", "10.16."),
        ("nsb", "p4", "pinned", "10.83.0.200"),
    ] {
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
        let ip = ip_cr(&env, &key).await.unwrap();
        assert_eq!(ip.spec.subnet.as_deref(), Some(subnet));
    }
    // The namespace annotation the controller writes names the bound subnet.
    let ns = until("namespace nsb to be annotated", || async {
        let ns = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(env.kube.clone())
            .get("nsb")
            .await?;
        Ok(ns.annotations().get("ovn.kubernetes.io/logical_switch").cloned())
    })
    .await;
    assert_eq!(ns, "bound");
}
