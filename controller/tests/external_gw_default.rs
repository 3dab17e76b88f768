//! The default VPC's external gateway (issue 26) on real OVN and a real kube-apiserver: the
//! `ovn-external-gw-config` ConfigMap (node labels, the router port with `nic-ip`/`nic-mac` or its
//! lrp OvnEip, the switch and localnet port made when no Subnet owns the switch, only the patch
//! ports when the underlay Subnet `external` does, Gateway_Chassis in Kube-OVN's order for this
//! path, the Vpc status; a changed node list, bad data refused naming the key, disable).

mod common;
mod externalkit;
mod netkit;
mod podkit;
mod underlaykit;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::ResourceExt;
use std::fmt::Write as _;

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube_ovn_testkit::wait_until_async;
use serde_json::json;

use common::{Env, WAIT};
use externalkit::{eip_until, external_network, gateway_chassis, gateway_chassis_until, mark_node};
use netkit::{nb_get, vpc_until};
use underlaykit::{column, exists, localnet};

const GW_LABEL: &str = "ovn.kubernetes.io/external-gw";
const CHASSIS: &str = "ovn.kubernetes.io/chassis";
const LRP: &str = "ovn-cluster-external";
const LSP: &str = "external-ovn-cluster";

/// Writes the ConfigMap's whole `data` (server-side apply, so keys left out go).
async fn config_map(env: &Env, data: serde_json::Value) {
    let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ovn-external-gw-config", "namespace": "kube-system"}, "data": data}))
    .unwrap();
    Api::<ConfigMap>::namespaced(env.kube.clone(), "kube-system")
        .patch(
            "ovn-external-gw-config",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap();
}

/// The nodes' `external-gw` labels, by node name (`-` when absent).
async fn labels(env: &Env) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Api::<Node>::all(env.kube.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|n| {
            (
                n.name_any(),
                n.labels().get(GW_LABEL).cloned().unwrap_or_else(|| "-".into()),
            )
        })
        .collect();
    out.sort();
    out
}

async fn labels_until(env: &Env, want: &[(&str, &str)]) {
    let want: Vec<(String, String)> = want.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect();
    let got = wait_until_async(&format!("node labels {want:?}"), WAIT, || async {
        Ok(labels(env).await == want)
    })
    .await;
    assert!(got.is_ok(), "{got:?}: {:?}", labels(env).await);
}

async fn enable_external_until(env: &Env, on: bool) {
    vpc_until(env, "ovn-cluster", &format!("status.enableExternal {on}"), |v| {
        v.status.as_ref().and_then(|s| s.enable_external) == Some(on)
    })
    .await;
}

async fn gone_until(env: &Env, table: &str, name: &str) {
    let got = wait_until_async(&format!("{table} {name} to go"), WAIT, || async {
        Ok(!exists(env, table, name))
    })
    .await;
    assert!(got.is_ok(), "{got:?}");
}

fn chassis(list: &[(&str, i64)]) -> Vec<(String, i64)> {
    list.iter().map(|(c, p)| ((*c).to_owned(), *p)).collect()
}

/// Everything of the default VPC's gateway as the northbound database holds it (to show that a
/// refused change wrote nothing).
fn snapshot(env: &Env) -> String {
    let mut out = String::new();
    for (table, name) in [
        ("Logical_Router_Port", LRP),
        ("Logical_Switch_Port", LSP),
        ("Logical_Switch_Port", "localnet.external"),
    ] {
        out += &env
            .ovn
            .nbctl(&["--if-exists", "list", table, name])
            .unwrap_or_default();
    }
    let _ = write!(out, "{:?}", gateway_chassis(env, LRP));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_map_connects_the_default_vpc_and_disconnects_it() {
    let env = Env::start_with(&["--external-gateway-vlanid=100"]).await;
    for (node, ip, ch, encap) in [
        ("node1", "172.18.0.2", "ch-node1", "127.0.0.11"),
        ("node2", "172.18.0.3", "ch-node2", "127.0.0.12"),
        ("node3", "172.18.0.4", "ch-node3", "127.0.0.13"),
    ] {
        env.node(node, ip).await;
        env.ovn.sbctl(&["chassis-add", ch, "geneve", encap]).unwrap();
        mark_node(&env, node, json!({}), json!({CHASSIS: ch})).await;
    }

    // No Subnet `external`: nic-ip/nic-mac, and the switch with its localnet port are ours.
    config_map(
        &env,
        json!({"enable-external-gw": "true", "type": "centralized", "external-gw-nodes": "node2,node1",
            "external-gw-addr": "10.200.0.1/24", "nic-ip": "10.200.0.254/24", "nic-mac": "16:52:f3:13:6a:25"}),
    )
    .await;
    labels_until(&env, &[("node1", "true"), ("node2", "true"), ("node3", "-")]).await;
    // Kube-OVN's order for this path: the labelled nodes, then the list (here all labelled: by
    // name), priorities 100 - i.
    gateway_chassis_until(&env, LRP, &chassis(&[("ch-node1", 100), ("ch-node2", 99)])).await;
    assert_eq!(
        nb_get(&env, "Logical_Router_Port", LRP, "networks"),
        "[\"10.200.0.254/24\"]"
    );
    assert_eq!(
        nb_get(&env, "Logical_Router_Port", LRP, "mac"),
        "16:52:f3:13:6a:25"
    );
    let lsp = env.ovn.nbctl(&["list", "Logical_Switch_Port", LSP]).unwrap();
    assert!(
        lsp.contains("router-port=ovn-cluster-external") && column(&lsp, "type") == "router",
        "{lsp}"
    );
    let ln = localnet(&env, "external");
    assert_eq!(column(&ln, "type"), "localnet", "{ln}");
    assert!(column(&ln, "options").contains("network_name=external"), "{ln}");
    assert_eq!(column(&ln, "tag"), "100", "--external-gateway-vlanid: {ln}");
    let on_switch = env.ovn.nbctl(&["lsp-list", "external"]).unwrap();
    assert!(on_switch.contains(&format!("({LSP})")), "{on_switch}");
    let on_router = env.ovn.nbctl(&["lrp-list", "ovn-cluster"]).unwrap();
    assert!(on_router.contains(&format!("({LRP})")), "{on_router}");
    enable_external_until(&env, true).await;
    assert!(
        eip_until(&env, LRP, "absent", |e| e.is_none()).await.is_none(),
        "nic-ip given: no lrp OvnEip"
    );

    // The list changes: node1 leaves (labelled false), node3 joins after the labelled node2.
    config_map(
        &env,
        json!({"enable-external-gw": "true", "external-gw-nodes": "node3,node2",
            "nic-ip": "10.200.0.254/24", "nic-mac": "16:52:f3:13:6a:25"}),
    )
    .await;
    labels_until(&env, &[("node1", "false"), ("node2", "true"), ("node3", "true")]).await;
    gateway_chassis_until(&env, LRP, &chassis(&[("ch-node2", 100), ("ch-node3", 99)])).await;

    // Bad data: a Warning on the ConfigMap naming the key; nothing changes.
    let before = snapshot(&env);
    for (key, value, words) in [
        ("type", "everywhere", vec!["type", "everywhere"]),
        (
            "external-gw-nodes",
            "node2,node9",
            vec!["external-gw-nodes", "node9"],
        ),
        ("nic-ip", "10.200.0.254", vec!["nic-ip"]),
    ] {
        let mut data = json!({"enable-external-gw": "true", "external-gw-nodes": "node3,node2",
            "nic-ip": "10.200.0.254/24", "nic-mac": "16:52:f3:13:6a:25"});
        data[key] = json!(value);
        config_map(&env, data).await;
        let mut words: Vec<&str> = words;
        words.push("ovn-external-gw-config");
        podkit::warning(
            &env,
            "kube-system",
            "ConfigMap",
            "ovn-external-gw-config",
            "InvalidExternalGwConfig",
            &words,
        )
        .await;
        assert_eq!(snapshot(&env), before, "{key} {value}: nothing written");
        assert_eq!(
            labels(&env).await,
            [("node1", "false"), ("node2", "true"), ("node3", "true")]
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .to_vec(),
            "{key} {value}: no label written"
        );
    }

    // Disabled: the nodes it listed are labelled false, the rows go (our switch too).
    config_map(&env, json!({"enable-external-gw": "false"})).await;
    labels_until(
        &env,
        &[("node1", "false"), ("node2", "false"), ("node3", "false")],
    )
    .await;
    gone_until(&env, "Logical_Router_Port", LRP).await;
    gone_until(&env, "Logical_Switch", "external").await;
    assert!(!exists(&env, "Logical_Switch_Port", LSP));
    assert!(!exists(&env, "Logical_Switch_Port", "localnet.external"));
    enable_external_until(&env, false).await;

    // The underlay Subnet `external` owns the switch: only the patch ports are ours, the address
    // is the lrp OvnEip's from the subnet's IPAM.
    external_network(&env, "external", "10.200.0").await;
    config_map(&env, json!({"external-gw-nodes": "node1"})).await;
    labels_until(&env, &[("node1", "true"), ("node2", "false"), ("node3", "false")]).await;
    gateway_chassis_until(&env, LRP, &chassis(&[("ch-node1", 100)])).await;
    let eip = eip_until(&env, LRP, "ready", |e| {
        e.and_then(|e| e.status.as_ref()).and_then(|s| s.ready) == Some(true)
    })
    .await
    .unwrap();
    assert_eq!(eip.spec.type_.as_deref(), Some("lrp"));
    assert_eq!(eip.status.unwrap().v4_ip.as_deref(), Some("10.200.0.100"));
    assert_eq!(
        nb_get(&env, "Logical_Router_Port", LRP, "networks"),
        "[\"10.200.0.100/24\"]"
    );
    let ln = localnet(&env, "external");
    assert!(
        !ln.contains("external-gw"),
        "the localnet port is the subnet's (untagged, Vlan id 0), not ours: {ln}"
    );
    assert_eq!(column(&ln, "tag"), "[]", "{ln}");
    enable_external_until(&env, true).await;

    // Deleting the ConfigMap disables: the patch ports go, the subnet's switch stays.
    Api::<ConfigMap>::namespaced(env.kube.clone(), "kube-system")
        .delete("ovn-external-gw-config", &DeleteParams::default())
        .await
        .unwrap();
    labels_until(
        &env,
        &[("node1", "false"), ("node2", "false"), ("node3", "false")],
    )
    .await;
    gone_until(&env, "Logical_Router_Port", LRP).await;
    assert!(!exists(&env, "Logical_Switch_Port", LSP));
    assert!(
        exists(&env, "Logical_Switch", "external"),
        "the subnet's switch stays"
    );
    assert!(exists(&env, "Logical_Switch_Port", "localnet.external"));
    eip_until(&env, LRP, "deleted", |e| e.is_none()).await;
    enable_external_until(&env, false).await;
}

/// The default VPC's NAT rows as `(type, external_ip, logical_ip)`, sorted.
fn nats(env: &Env) -> Vec<(String, String, String)> {
    let out = env
        .ovn
        .nbctl(&[
            "--bare",
            "--columns=type,external_ip,logical_ip",
            "find",
            "NAT",
            "external_ids:vendor=kube-ovn",
        ])
        .unwrap_or_default();
    let words: Vec<&str> = out.split_whitespace().collect();
    let mut rows: Vec<(String, String, String)> = words
        .chunks(3)
        .filter(|c| c.len() == 3)
        .map(|c| (c[0].to_owned(), c[1].to_owned(), c[2].to_owned()))
        .collect();
    rows.sort();
    rows
}

async fn nats_until(env: &Env, want: &[(&str, &str, &str)]) {
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| ((*a).into(), (*b).into(), (*c).into()))
        .collect();
    let got = wait_until_async(&format!("NAT rows {want:?}"), WAIT, || async {
        Ok(nats(env) == want)
    })
    .await;
    assert!(got.is_ok(), "{got:?}: {:?}", nats(env));
}

/// The 29250 policies on ovn-cluster as `(match, nexthop)`.
fn north_policies(env: &Env) -> Vec<String> {
    let out = env
        .ovn
        .nbctl(&["lr-policy-list", "ovn-cluster"])
        .unwrap_or_default();
    let mut rows: Vec<String> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("29250"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    rows.sort();
    rows
}

async fn north_policies_until(env: &Env, want: &[String]) {
    let got = wait_until_async(&format!("29250 policies {want:?}"), WAIT, || async {
        Ok(north_policies(env) == want)
    })
    .await;
    assert!(got.is_ok(), "{got:?}: {:?}", north_policies(env));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_eip_and_snat_annotations_and_hostile_tenants() {
    let mut env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.ovn
        .sbctl(&["chassis-add", "ch-node1", "geneve", "127.0.0.11"])
        .unwrap();
    mark_node(&env, "node1", json!({}), json!({CHASSIS: "ch-node1"})).await;
    external_network(&env, "external", "10.200.0").await;
    config_map(&env, json!({"external-gw-nodes": "node1"})).await;
    // The lrp OvnEip takes 10.200.0.100, the first address after the excluded ones.
    eip_until(&env, LRP, "ready", |e| {
        e.and_then(|e| e.status.as_ref()).and_then(|s| s.ready) == Some(true)
    })
    .await;

    // Pod a: an EIP and an SNAT address.
    env.pod(
        "t1",
        "a",
        "node1",
        &[
            ("ovn.kubernetes.io/eip", "10.200.0.150"),
            ("ovn.kubernetes.io/snat", "10.200.0.151"),
        ],
    )
    .await;
    let a = env.routed("t1", "a").await;
    let a_ip = common::ann(&a, "ip_address").to_owned();
    nats_until(
        &env,
        &[
            ("dnat_and_snat", "10.200.0.150", &a_ip),
            ("snat", "10.200.0.151", &a_ip),
        ],
    )
    .await;
    let policy = format!("29250 ip4.src == {a_ip} reroute 10.200.0.1");
    north_policies_until(&env, std::slice::from_ref(&policy)).await;
    let row = env
        .ovn
        .nbctl(&[
            "--bare",
            "--columns=logical_port,options",
            "find",
            "NAT",
            "type=dnat_and_snat",
        ])
        .unwrap();
    assert!(
        row.trim().is_empty(),
        "centralized: no logical_port, not stateless: {row}"
    );

    // ovn-trace: the pod's packet to the outside is rerouted to the external gateway (the
    // router asks for 10.200.0.1 through the localnet port); a packet from the outside to the
    // EIP is translated and delivered to the pod.
    let flow = netkit::icmp_to(
        &a,
        &netkit::lrp_mac(&env, "ovn-cluster-ovn-default"),
        "198.51.100.10",
    );
    let out = wait_until_async(
        "the trace to be rerouted to the external gateway",
        WAIT,
        || async {
            let t = env.ovn.trace("ovn-default", &flow)?;
            Ok(t.delivers_to("localnet.external") && t.text.contains("arp.tpa = 0xac80001"))
        },
    )
    .await;
    assert!(
        out.is_ok(),
        "{out:?}: {}",
        env.ovn.trace("ovn-default", &flow).unwrap().text
    );
    let inbound = format!(
        "inport==\"localnet.external\" && eth.src==00:00:5e:00:01:01 && eth.dst=={} && ip4.src==198.51.100.10 && ip4.dst==10.200.0.150 && ip.ttl==64 && icmp4.type==8",
        netkit::lrp_mac(&env, LRP)
    );
    let port_a = netkit::port(&a);
    let inb = wait_until_async("the trace to the EIP to reach the pod", WAIT, || async {
        Ok(env
            .ovn
            .trace_with("external", &inbound, &["--ct=new"])?
            .delivers_to(&port_a))
    })
    .await;
    assert!(
        inb.is_ok(),
        "{inb:?}: {}",
        env.ovn
            .trace_with("external", &inbound, &["--ct=new"])
            .unwrap()
            .text
    );

    // Hostile tenants: refused with a Warning naming the annotation; nothing written.
    let before = (nats(&env), north_policies(&env));
    for (name, ns, key, value, words) in [
        (
            "out",
            "t2",
            "ovn.kubernetes.io/eip",
            "10.9.9.9",
            "not in the external subnet",
        ),
        (
            "lrp",
            "t2",
            "ovn.kubernetes.io/snat",
            "10.200.0.100",
            "already in use",
        ),
        (
            "steal",
            "t2",
            "ovn.kubernetes.io/eip",
            "10.200.0.150",
            "already in use",
        ),
        ("gw", "t2", "ovn.kubernetes.io/snat", "10.200.0.1", "gateway"),
        ("excl", "t2", "ovn.kubernetes.io/eip", "10.200.0.50", "excluded"),
    ] {
        env.pod(ns, name, "node1", &[(key, value)]).await;
        podkit::warning(&env, ns, "Pod", name, "EipSnatRefused", &[key, value, words]).await;
        env.routed(ns, name).await;
        assert_eq!(
            (nats(&env), north_policies(&env)),
            before,
            "{name}: nothing written"
        );
    }
    // The external subnet bound to another namespace does not admit t2.
    underlaykit::subnet(
        &env,
        "external",
        json!({"cidrBlock": "10.200.0.0/24", "gateway": "10.200.0.1",
            "excludeIps": ["10.200.0.1..10.200.0.99"], "vlan": "external", "namespaces": ["ops"]}),
    )
    .await;
    netkit::subnet_until(&env, "external", "bound to ops", |s| {
        s.spec.namespaces.as_deref() == Some(&["ops".to_owned()][..])
    })
    .await;
    env.pod(
        "t2",
        "tenant",
        "node1",
        &[("ovn.kubernetes.io/eip", "10.200.0.160")],
    )
    .await;
    podkit::warning(
        &env,
        "t2",
        "Pod",
        "tenant",
        "EipSnatRefused",
        &["ovn.kubernetes.io/eip", "does not admit", "t2"],
    )
    .await;
    assert_eq!(
        (nats(&env), north_policies(&env)),
        before,
        "not admitted: nothing written"
    );
    netkit::delete_pod(&env, "t2", "tenant").await;
    underlaykit::subnet(
        &env,
        "external",
        json!({"cidrBlock": "10.200.0.0/24", "gateway": "10.200.0.1",
            "excludeIps": ["10.200.0.1..10.200.0.99"], "vlan": "external"}),
    )
    .await;
    netkit::subnet_until(&env, "external", "open again", |s| s.spec.namespaces.is_none()).await;

    // The annotations removed: their rows go, then the policy.
    podkit::annotate(&env, "t1", "a", json!({"ovn.kubernetes.io/eip": null})).await;
    nats_until(&env, &[("snat", "10.200.0.151", &a_ip)]).await;
    assert_eq!(north_policies(&env), std::slice::from_ref(&policy));
    podkit::annotate(&env, "t1", "a", json!({"ovn.kubernetes.io/snat": null})).await;
    nats_until(&env, &[]).await;
    north_policies_until(&env, &[]).await;

    // Back, then the pod deleted: the rows go and the address is free for another pod.
    podkit::annotate(&env, "t1", "a", json!({"ovn.kubernetes.io/eip": "10.200.0.150"})).await;
    nats_until(&env, &[("dnat_and_snat", "10.200.0.150", &a_ip)]).await;
    netkit::delete_pod(&env, "t1", "a").await;
    nats_until(&env, &[]).await;
    north_policies_until(&env, &[]).await;
    env.pod("t1", "b", "node1", &[("ovn.kubernetes.io/eip", "10.200.0.150")])
        .await;
    let b = env.routed("t1", "b").await;
    let b_ip = common::ann(&b, "ip_address").to_owned();
    nats_until(&env, &[("dnat_and_snat", "10.200.0.150", &b_ip)]).await;
    let before = (nats(&env), north_policies(&env));

    // A restart with nothing changed writes nothing: no northbound transaction, no label.
    env.kill_controller().await;
    env.requests.lock().unwrap().clear();
    env.start_controller();
    let port = env.metrics_addr.unwrap().port();
    wait_until_async(
        "the VPCs and pods reconciled after the restart",
        WAIT,
        || async move {
            let m = netkit::metrics(port).await?;
            Ok(netkit::reconciles(&m, "Vpc") >= 1.0 && netkit::reconciles(&m, "Pod") >= 6.0)
        },
    )
    .await
    .unwrap();
    let m = netkit::metrics(port).await.unwrap();
    let txns = netkit::metric(
        &m,
        "kube_ovn_controller_ovsdb_transaction_duration_seconds_count",
        &[],
    );
    let lines: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("kube_ovn_controller_ovsdb_transaction_duration_seconds_count"))
        .collect();
    assert!(txns == 0.0, "northbound writes after a restart: {lines:#?}");
    let writes = env.requests_where(|r| {
        !r.starts_with("GET")
            && (r.contains("/nodes") || r.contains("/ovn-eips") || r.contains("/vpcs/ovn-cluster"))
    });
    assert!(
        writes.is_empty(),
        "label, OvnEip or Vpc writes after a restart: {writes:#?}"
    );
    assert_eq!((nats(&env), north_policies(&env)), before);

    // The reservation survives the restart (the IPAM rebuild reads the NAT rows): a pod created
    // while the controller is down cannot take the address, whichever is reconciled first.
    env.kill_controller().await;
    env.pod(
        "t2",
        "thief",
        "node1",
        &[("ovn.kubernetes.io/eip", "10.200.0.150")],
    )
    .await;
    env.start_controller();
    podkit::warning(
        &env,
        "t2",
        "Pod",
        "thief",
        "EipSnatRefused",
        &["ovn.kubernetes.io/eip", "10.200.0.150", "already in use"],
    )
    .await;
    assert_eq!((nats(&env), north_policies(&env)), before);

    // The ConfigMap's type and gateway address follow to the pods' rows: distributed makes the
    // dnat_and_snat row the pod's own chassis's (logical_port, external_mac, stateless).
    config_map(
        &env,
        json!({"external-gw-nodes": "node1", "type": "distributed", "external-gw-addr": "10.200.0.254/24"}),
    )
    .await;
    north_policies_until(&env, &[format!("29250 ip4.src == {b_ip} reroute 10.200.0.254")]).await;
    let row = netkit::nb_until(
        &env,
        &[
            "--bare",
            "--columns=logical_port,external_mac,options",
            "find",
            "NAT",
            "type=dnat_and_snat",
        ],
        "the EIP row distributed",
        |r| r.contains("b.t1"),
    )
    .await;
    assert!(
        row.contains(common::ann(&b, "mac_address")) && row.contains("stateless=true"),
        "{row}"
    );
}
