//! U2O interconnection without load balancing, and `u2oFeatures.overlayOnlyRouting`, on real OVN
//! and a real API server (Kube-OVN's `addPolicyRouteForU2ONoLoadBalancer`,
//! `addPolicyRouteForU2OInterconn`, `deleteStaleU2ORoutePolicies`): the rows each writes, that
//! switching them off leaves none behind, and what ovn-trace says the packets do.
//!
//! As in `underlay.rs`, the Vlan and ProviderNetwork status the subnet reconciler reads is written
//! by the test.

mod common;
mod netkit;
mod underlaykit;

use common::{Env, ann};
use kube::api::{Api, Patch, PatchParams};
use kube_ovn_api::crd::Subnet;
use kube_ovn_testkit::wait_until_async;
use netkit::{delete_pod, delete_subnet, icmp_to, join_ip, lrp_mac, nb_until, port, subnet_until};
use serde_json::json;
use underlaykit::{GW_MAC, policies_until, provider_network, subnet, subnet_policies, vlan};

/// The U2O port groups of a subnet (`external_ids:u2o=true`, `ls=<subnet>`), one line each:
/// `name lr=.. node=..`.
fn u2o_groups(env: &Env, subnet: &str) -> Vec<String> {
    let out = env
        .ovn
        .nbctl(&[
            "--format=csv",
            "--data=bare",
            "--no-headings",
            "--columns=name,external_ids",
            "find",
            "Port_Group",
            "external_ids:u2o=true",
            &format!("external_ids:ls={subnet}"),
        ])
        .unwrap();
    let mut rows: Vec<String> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (name, ids) = l.split_once(',').unwrap();
            let id = |k: &str| {
                ids.split(' ')
                    .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                    .unwrap_or("-")
                    .to_owned()
            };
            format!(
                "{name} lr={} node={} vendor={}",
                id("lr"),
                id("node"),
                id("vendor")
            )
        })
        .collect();
    rows.sort();
    rows
}

/// The subnet's no-LB policies' `external_ids` keys that Kube-OVN sets (`node`, `svcCidr`,
/// `isU2ONoLBRoutePolicy`), one line per policy: `match node svcCidr`.
fn no_lb_ids(env: &Env, subnet: &str) -> Vec<String> {
    let out = env
        .ovn
        .nbctl(&[
            "--format=csv",
            "--data=bare",
            "--no-headings",
            "--columns=match,external_ids",
            "find",
            "Logical_Router_Policy",
            &format!("external_ids:subnet={subnet}"),
            "external_ids:isU2ONoLBRoutePolicy=true",
        ])
        .unwrap();
    let mut rows: Vec<String> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (m, ids) = l.rsplit_once(',').unwrap();
            let id = |k: &str| {
                ids.split(' ')
                    .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                    .unwrap_or("-")
                    .trim_matches('"')
                    .to_owned()
            };
            format!("{} {} {}", m.trim_matches('"'), id("node"), id("svcCidr"))
        })
        .collect();
    rows.sort();
    rows
}

/// Waits until the VPC has no overlay CIDR set.
async fn no_overlay_sets(env: &Env, vpc: &str) {
    let of_vpc = format!("external_ids:vpc={vpc}");
    let args = [
        "--bare",
        "--columns=name",
        "find",
        "Address_Set",
        "external_ids:isU2OOverlayCIDRs=true",
        of_vpc.as_str(),
    ];
    nb_until(env, &args, "no overlay CIDR set of the VPC", |o| {
        o.trim().is_empty()
    })
    .await;
}

async fn set_spec(env: &Env, name: &str, patch: serde_json::Value) {
    Api::<Subnet>::all(env.kube.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": patch})),
        )
        .await
        .unwrap();
}

const THREE: [&str; 3] = [
    "29000 ip4.src == 172.17.0.0/24 reroute 172.17.0.254 true",
    "29400 ip4.dst == 172.17.0.0/24 allow  true",
    "31000 ip4.dst == $ul.u2o_exclude_ip.ip4 && ip4.src == 172.17.0.0/24 reroute 172.17.0.254 true",
];

/// Kube-OVN's "U2O interconnection" with `enableLb: false`: per node a port group `<subnet>.<node>`
/// of the subnet's pods there, and a 29400 reroute of their Service-CIDR traffic to the node's
/// join address; an underlay pod's packet to a ClusterIP goes to its node's join port (with load
/// balancing on, it went to the physical gateway). A deleted node, load balancing back on, U2O
/// off, and the subnet's deletion each leave no such row; with `--enable-lb=false` an unset `enableLb` is
/// written `false` (the node daemon reads it for its `ovn0` route).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u2o_without_load_balancing_sends_service_traffic_to_the_pods_node() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.node("node2", "172.18.0.3").await;
    provider_network(&env, "pn1", &["v100"]).await;
    vlan(&env, "v100", 100, "pn1").await;
    subnet(
        &env,
        "ul",
        json!({"cidrBlock": "172.17.0.0/24", "gateway": "172.17.0.254", "vlan": "v100",
            "namespaces": ["nsu"], "u2oInterconnection": true, "enableLb": false}),
    )
    .await;
    let s = subnet_until(&env, "ul", "a U2O address", |s| {
        s.status
            .as_ref()
            .and_then(|s| s.u2o_interconnection_ip.as_deref())
            .is_some_and(|i| !i.is_empty())
    })
    .await;
    let u2o_mac = s.status.unwrap().u2o_interconnection_mac.unwrap();
    let (j1, j2) = (join_ip(&env, "node1"), join_ip(&env, "node2"));
    let mut want: Vec<String> = THREE.iter().map(|s| (*s).to_owned()).collect();
    want.push(format!(
        "29400 ip4.src == $ul.node1_ip4 && ip4.dst == 10.96.0.0/12 reroute {j1} true"
    ));
    want.push(format!(
        "29400 ip4.src == $ul.node2_ip4 && ip4.dst == 10.96.0.0/12 reroute {j2} true"
    ));
    want.sort();
    policies_until(&env, "ovn-cluster", "ul", "the U2O and the no-LB policies", &want).await;
    assert_eq!(
        no_lb_ids(&env, "ul"),
        [
            "ip4.src == $ul.node1_ip4 && ip4.dst == 10.96.0.0/12 node1 10.96.0.0/12",
            "ip4.src == $ul.node2_ip4 && ip4.dst == 10.96.0.0/12 node2 10.96.0.0/12",
        ]
    );
    assert_eq!(
        u2o_groups(&env, "ul"),
        [
            "ul.node1 lr=ovn-cluster node=node1 vendor=kube-ovn",
            "ul.node2 lr=ovn-cluster node=node2 vendor=kube-ovn",
        ]
    );

    // The pod is in its node's group, and its packet to a ClusterIP goes to that node.
    env.pod("nsu", "u1", "node1", &[]).await;
    let u1 = env.routed("nsu", "u1").await;
    let to_service = icmp_to(&u1, &u2o_mac, "10.96.0.10");
    wait_until_async("the ClusterIP rerouted to node1", common::WAIT, || async {
        Ok(env.ovn.trace("ul", &to_service)?.delivers_to("node-node1"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {}", env.ovn.trace("ul", &to_service).unwrap().text));
    let members = env
        .ovn
        .nbctl(&["get", "Port_Group", "ul.node1", "ports"])
        .unwrap();
    let lsp = env
        .ovn
        .nbctl(&["get", "Logical_Switch_Port", &port(&u1), "_uuid"])
        .unwrap();
    assert!(members.contains(lsp.trim()), "{members} holds {lsp}");

    // A node that goes takes its group and reroute with it.
    Api::<k8s_openapi::api::core::v1::Node>::all(env.kube.clone())
        .delete("node2", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let one: Vec<String> = want.iter().filter(|p| !p.contains("node2")).cloned().collect();
    policies_until(&env, "ovn-cluster", "ul", "node2's reroute gone", &one).await;
    assert_eq!(
        u2o_groups(&env, "ul"),
        ["ul.node1 lr=ovn-cluster node=node1 vendor=kube-ovn"]
    );

    // Load balancing on: the no-LB rows go; the ClusterIP packet is the physical gateway's.
    set_spec(&env, "ul", json!({"enableLb": true})).await;
    let three: Vec<String> = THREE.iter().map(|s| (*s).to_owned()).collect();
    policies_until(&env, "ovn-cluster", "ul", "only the three U2O policies", &three).await;
    assert!(u2o_groups(&env, "ul").is_empty());
    let t = env.ovn.trace("ul", &to_service).unwrap();
    assert!(
        !t.delivers_to("node-node1") && t.delivers_to("localnet.ul"),
        "{}",
        t.text
    );

    // Off again, then U2O off: nothing of U2O stays.
    set_spec(&env, "ul", json!({"enableLb": false})).await;
    policies_until(&env, "ovn-cluster", "ul", "the no-LB policies back", &one).await;
    set_spec(&env, "ul", json!({"u2oInterconnection": false})).await;
    policies_until::<&str>(&env, "ovn-cluster", "ul", "no U2O policy", &[]).await;
    assert!(u2o_groups(&env, "ul").is_empty());

    // On again, then the subnet deleted: no policy, group or set of it.
    set_spec(&env, "ul", json!({"u2oInterconnection": true})).await;
    policies_until(
        &env,
        "ovn-cluster",
        "ul",
        "the no-LB policies back with U2O",
        &one,
    )
    .await;
    delete_pod(&env, "nsu", "u1").await;
    delete_subnet(&env, "ul").await;
    nb_until(
        &env,
        &[
            "--bare",
            "--columns=name",
            "find",
            "Port_Group",
            "external_ids:ls=ul",
        ],
        "the U2O groups deleted with the subnet",
        |o| o.trim().is_empty(),
    )
    .await;
    assert!(subnet_policies(&env, "ovn-cluster", "ul").is_empty());
    assert!(no_lb_ids(&env, "ul").is_empty());
}

/// With `--enable-lb=false` Kube-OVN's `formatSubnet` fills an unset `enableLb` with the flag: we
/// write `false` (the node daemon, which has no such flag, reads it), and the subnet's U2O
/// Service traffic goes to the nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_enable_lb_off_a_u2o_subnet_says_so_and_reroutes_service_traffic() {
    let env = Env::start_with(&["--enable-lb=false", "--service-cluster-ip-range=10.96.0.0/16"]).await;
    env.node("node1", "172.18.0.2").await;
    provider_network(&env, "pn1", &["v100"]).await;
    vlan(&env, "v100", 100, "pn1").await;
    subnet(
        &env,
        "ul",
        json!({"cidrBlock": "172.17.0.0/24", "gateway": "172.17.0.254", "vlan": "v100",
            "u2oInterconnection": true}),
    )
    .await;
    let s = subnet_until(&env, "ul", "enableLb written", |s| s.spec.enable_lb.is_some()).await;
    assert_eq!(s.spec.enable_lb, Some(false));
    let j1 = join_ip(&env, "node1");
    let mut want: Vec<String> = THREE.iter().map(|s| (*s).to_owned()).collect();
    want.push(format!(
        "29400 ip4.src == $ul.node1_ip4 && ip4.dst == 10.96.0.0/16 reroute {j1} true"
    ));
    want.sort();
    policies_until(
        &env,
        "ovn-cluster",
        "ul",
        "the no-LB policy for --service-cluster-ip-range",
        &want,
    )
    .await;
    // Kube-OVN: the flag off wins over the subnet's `enableLb: true`.
    set_spec(&env, "ul", json!({"enableLb": true})).await;
    subnet_until(&env, "ul", "enableLb true", |s| s.spec.enable_lb == Some(true)).await;
    policies_until(&env, "ovn-cluster", "ul", "the no-LB policy kept", &want).await;
    let joined = Api::<Subnet>::all(env.kube.clone()).get("join").await.unwrap();
    assert_eq!(
        joined.spec.enable_lb, None,
        "the join subnet's enableLb stays unset"
    );
}

/// Kube-OVN's "should support U2O overlay only routing": the `<vpc>.u2o_overlay_cidrs.ip4` set of
/// the VPC's overlay CIDRs (following a new overlay subnet), 29400 allow from it to the subnet,
/// 31000 policy2, 30060 the subnet to itself, 30050 the rest to the physical gateway — the
/// overlay-only ones marked `isU2OOverlayOnlyRoutePolicy`. ovn-trace: underlay → overlay through
/// the router, underlay → outside to the physical gateway, overlay → underlay delivered. The same
/// in a custom VPC, with its common allow. Off: the default U2O policies, and the sets gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlay_only_routing_routes_only_overlay_cidrs_and_leaves_nothing_when_off() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    provider_network(&env, "pn1", &["v100"]).await;
    vlan(&env, "v100", 100, "pn1").await;
    let spec = |overlay_only: bool| {
        json!({"cidrBlock": "172.17.0.0/24", "gateway": "172.17.0.254", "vlan": "v100",
            "namespaces": ["nsu"], "u2oInterconnection": true,
            "u2oFeatures": {"overlayOnlyRouting": overlay_only}})
    };
    subnet(&env, "ul", spec(true)).await;
    let want: Vec<String> = [
        "29400 ip4.src == $ovn.cluster.u2o_overlay_cidrs.ip4 && ip4.dst == 172.17.0.0/24 allow  true",
        "30050 ip4.src == 172.17.0.0/24 reroute 172.17.0.254 true",
        "30060 ip4.src == 172.17.0.0/24 && ip4.dst == 172.17.0.0/24 allow  true",
        "31000 ip4.dst == $ul.u2o_exclude_ip.ip4 && ip4.src == 172.17.0.0/24 reroute 172.17.0.254 true",
    ]
    .map(str::to_owned)
    .to_vec();
    policies_until(&env, "ovn-cluster", "ul", "the overlay-only policies", &want).await;
    let marked = env
        .ovn
        .nbctl(&[
            "--bare",
            "--columns=priority",
            "find",
            "Logical_Router_Policy",
            "external_ids:subnet=ul",
            "external_ids:isU2OOverlayOnlyRoutePolicy=true",
        ])
        .unwrap();
    let mut marked: Vec<&str> = marked.split_whitespace().collect();
    marked.sort_unstable();
    assert_eq!(marked, ["29400", "30060", "31000"]);
    nb_until(
        &env,
        &[
            "get",
            "Address_Set",
            "ovn.cluster.u2o_overlay_cidrs.ip4",
            "addresses",
        ],
        "the default VPC's overlay CIDRs",
        |o| o.contains("10.16.0.0/16") && o.contains("100.64.0.0/16") && !o.contains("172.17."),
    )
    .await;
    let ids = env
        .ovn
        .nbctl(&[
            "get",
            "Address_Set",
            "ovn.cluster.u2o_overlay_cidrs.ip6",
            "external_ids",
        ])
        .unwrap();
    assert!(
        ids.contains("isU2OOverlayCIDRs=\"true\"") && ids.contains("vpc=ovn-cluster"),
        "{ids}"
    );
    // A new overlay subnet joins the set.
    subnet(&env, "ov2", json!({"cidrBlock": "10.17.0.0/16"})).await;
    nb_until(
        &env,
        &[
            "get",
            "Address_Set",
            "ovn.cluster.u2o_overlay_cidrs.ip4",
            "addresses",
        ],
        "a new overlay subnet's CIDR",
        |o| o.contains("10.17.0.0/16"),
    )
    .await;

    let s = Api::<Subnet>::all(env.kube.clone()).get("ul").await.unwrap();
    let u2o_mac = s.status.unwrap().u2o_interconnection_mac.unwrap();
    env.pod("nsu", "u1", "node1", &[]).await;
    env.pod("nso", "o1", "node1", &[]).await;
    let (u1, o1) = (env.routed("nsu", "u1").await, env.routed("nso", "o1").await);
    let t = env
        .ovn
        .trace("ul", &icmp_to(&u1, &u2o_mac, ann(&o1, "ip_address")))
        .unwrap();
    assert!(
        t.delivers_to(&port(&o1)) && t.text.contains("ip.ttl--"),
        "underlay → overlay: {}",
        t.text
    );
    // The router asks for the physical gateway's MAC (ovn-trace prints its address in hex)
    // out of its U2O port, towards the localnet port.
    let t = env.ovn.trace("ul", &icmp_to(&u1, &u2o_mac, "8.8.8.8")).unwrap();
    assert!(
        t.text.contains("arp.tpa = 0xac1100fe") && t.delivers_to("localnet.ul"),
        "underlay → outside: {}",
        t.text
    );
    let back = icmp_to(
        &o1,
        &lrp_mac(&env, "ovn-cluster-ovn-default"),
        ann(&u1, "ip_address"),
    );
    let t = env.ovn.trace("ovn-default", &back).unwrap();
    assert!(t.delivers_to(&port(&u1)), "overlay → underlay: {}", t.text);
    // The pod still reaches the physical gateway's network directly.
    let t = env.ovn.trace("ul", &icmp_to(&u1, GW_MAC, "8.8.8.8")).unwrap();
    assert!(t.delivers_to("localnet.ul"), "{}", t.text);

    // In a custom VPC: its own set (`-` → `.`), policy2 and its exclude set too, besides the
    // common allow.
    env.apply_yaml(json!({"apiVersion": "kubeovn.io/v1", "kind": "Vpc",
        "metadata": {"name": "vpc-1"}, "spec": {}}))
        .await;
    netkit::vpc_until(&env, "vpc-1", "a router", |v| {
        v.status.as_ref().and_then(|s| s.router.as_deref()) == Some("vpc-1")
    })
    .await;
    subnet(&env, "co", json!({"cidrBlock": "10.20.0.0/24", "vpc": "vpc-1"})).await;
    subnet(
        &env,
        "cul",
        json!({"cidrBlock": "172.19.0.0/24", "vlan": "v100", "vpc": "vpc-1",
            "u2oInterconnection": true, "u2oFeatures": {"overlayOnlyRouting": true}}),
    )
    .await;
    let custom: Vec<String> = [
        "29400 ip4.src == $vpc.1.u2o_overlay_cidrs.ip4 && ip4.dst == 172.19.0.0/24 allow  true",
        "30050 ip4.src == 172.19.0.0/24 reroute 172.19.0.1 true",
        "30060 ip4.src == 172.19.0.0/24 && ip4.dst == 172.19.0.0/24 allow  true",
        "31000 ip4.dst == $cul.u2o_exclude_ip.ip4 && ip4.src == 172.19.0.0/24 reroute 172.19.0.1 true",
        "31000 ip4.dst == 172.19.0.0/24 allow  false",
    ]
    .map(str::to_owned)
    .to_vec();
    policies_until(
        &env,
        "vpc-1",
        "cul",
        "the custom VPC's overlay-only policies",
        &custom,
    )
    .await;
    nb_until(
        &env,
        &["get", "Address_Set", "vpc.1.u2o_overlay_cidrs.ip4", "addresses"],
        "the custom VPC's overlay CIDR",
        |o| o.trim() == "[\"10.20.0.0/24\"]",
    )
    .await;
    nb_until(
        &env,
        &["get", "Address_Set", "cul.u2o_exclude_ip.ip4", "addresses"],
        "the nodes excluded in the custom VPC",
        |o| o.contains("172.18.0.2"),
    )
    .await;

    // Off: Kube-OVN's default U2O policies replace them (deleteStaleU2ORoutePolicies), the VPC's
    // sets go; the custom VPC's go with its subnet.
    subnet(&env, "ul", spec(false)).await;
    let three: Vec<String> = THREE.iter().map(|s| (*s).to_owned()).collect();
    policies_until(&env, "ovn-cluster", "ul", "the default U2O policies", &three).await;
    no_overlay_sets(&env, "ovn-cluster").await;
    // On again (Kube-OVN's e2e toggles it back): the overlay-only policies and the set return.
    subnet(&env, "ul", spec(true)).await;
    policies_until(
        &env,
        "ovn-cluster",
        "ul",
        "the overlay-only policies again",
        &want,
    )
    .await;
    nb_until(
        &env,
        &[
            "get",
            "Address_Set",
            "ovn.cluster.u2o_overlay_cidrs.ip4",
            "addresses",
        ],
        "the set again",
        |o| o.contains("10.17.0.0/16"),
    )
    .await;
    delete_subnet(&env, "cul").await;
    no_overlay_sets(&env, "vpc-1").await;
    assert!(subnet_policies(&env, "vpc-1", "cul").is_empty());
}
