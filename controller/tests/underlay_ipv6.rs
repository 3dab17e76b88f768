//! Underlay subnets and U2O interconnection with IPv6, on real OVN and a real API server: the
//! dual-stack and IPv6-only cases of `underlay.rs` (Kube-OVN runs its underlay e2e on IPv4, IPv6
//! and dual-stack clusters). Per family, Kube-OVN's `addPolicyRouteForU2OInterconn` writes the
//! same three policies with `ip4`/`ip6` and the family's gateway, and the exclude set
//! `<subnet>.u2o_exclude_ip.ip6` holds the nodes' IPv6 InternalIPs.

mod common;
mod netkit;
mod underlaykit;

use std::net::IpAddr;

use common::{Env, ann};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube_ovn_api::crd::{ConditionStatus, Ip};
use netkit::{lrp_mac, nb_until, port, subnet_until};
use serde_json::json;
use underlaykit::{
    column, exists, localnet, policies_until, provider_network, subnet, subnet_policies, vlan,
};

/// A node with an IPv4 and an IPv6 InternalIP, once the controller has allocated it.
async fn dual_node(env: &Env, name: &str, v4: &str, v6: &str) {
    env.node_with_ips(name, &[v4, v6]).await;
}

/// The pod's address of one family, from its `ip_address` annotation.
fn pod_ip(pod: &Pod, v6: bool) -> IpAddr {
    ann(pod, "ip_address")
        .split(',')
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .find(|a| a.is_ipv6() == v6)
        .unwrap_or_else(|| panic!("no {} address on {}", if v6 { "IPv6" } else { "IPv4" }, port(pod)))
}

/// An ICMPv6 echo from `src` to `dst`, sent to the router MAC `gw_mac`, as ovn-trace takes it.
fn icmp6_to(src: &Pod, gw_mac: &str, dst: &str) -> String {
    format!(
        "inport==\"{}\" && eth.src=={} && eth.dst=={gw_mac} && ip6.src=={} && ip6.dst=={dst} && ip.ttl==64 && icmp6.type==128 && icmp6.code==0",
        port(src),
        ann(src, "mac_address"),
        pod_ip(src, true)
    )
}

/// The subnet's `status.u2oInterconnectionIP`, once set.
async fn u2o_status(env: &Env, name: &str) -> (Vec<IpAddr>, String) {
    let s = subnet_until(env, name, "a U2O address", |s| {
        s.status
            .as_ref()
            .and_then(|s| s.u2o_interconnection_ip.as_deref())
            .is_some_and(|i| !i.is_empty())
    })
    .await;
    let st = s.status.unwrap();
    let ips = st
        .u2o_interconnection_ip
        .unwrap()
        .split(',')
        .map(|a| a.parse().unwrap())
        .collect();
    (ips, st.u2o_interconnection_mac.unwrap_or_default())
}

/// A dual-stack U2O subnet in the default VPC: the localnet port carries both networks, the
/// router port both U2O addresses ("v4,v6" in status, both in the IP CR), Kube-OVN's three
/// policies per family with the family's physical gateway, the exclude sets with the nodes'
/// InternalIPs of each family (following the nodes); ovn-trace takes an ICMPv6 echo from an
/// underlay pod to a dual-stack overlay pod through the router and back, and sends the
/// underlay's other IPv6 traffic to the physical gateway. An IPv6-only underlay subnet gets the
/// `ip6` half alone. U2O off removes the IPv6 rows too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u2o_on_a_dual_stack_underlay_writes_each_familys_policies_and_routes_ipv6_through_the_router() {
    let env = Env::start_with(&[
        "--default-cidr=10.16.0.0/16,fd00:10:16::/112",
        "--node-switch-cidr=100.64.0.0/16,fd00:100:64::/112",
    ])
    .await;
    dual_node(&env, "node1", "172.18.0.2", "fd00:18::2").await;
    provider_network(&env, "pn1", &["v100"]).await;
    vlan(&env, "v100", 100, "pn1").await;
    let spec = |u2o: bool| {
        json!({"cidrBlock": "172.17.0.0/24,fd00:17::/64", "gateway": "172.17.0.254,fd00:17::fe",
            "vlan": "v100", "namespaces": ["nsu"], "u2oInterconnection": u2o})
    };
    subnet(&env, "ul", spec(true)).await;
    env.subnet_ready("ul").await;
    let ids = column(&localnet(&env, "ul"), "external_ids").to_owned();
    for want in ["ipv4_network=\"172.17.0.0/24\"", "ipv6_network=\"fd00:17::/64\""] {
        assert!(ids.contains(want), "{want} in {ids}");
    }

    // status.u2oInterconnectionIP is "v4,v6", both in the subnet, neither its gateway.
    let (u2o, u2o_mac) = u2o_status(&env, "ul").await;
    assert_eq!(u2o.len(), 2, "{u2o:?}");
    let (u4, u6) = (u2o[0], u2o[1]);
    assert!(u4.is_ipv4() && u6.is_ipv6(), "v4 first: {u2o:?}");
    assert!(u4.to_string().starts_with("172.17.0.") && u4.to_string() != "172.17.0.254");
    assert!(u6.to_string().starts_with("fd00:17::") && u6.to_string() != "fd00:17::fe");
    nb_until(
        &env,
        &["get", "Logical_Router_Port", "ovn-cluster-ul", "networks"],
        "the router port on both U2O addresses",
        |o| o.contains(&format!("{u4}/24")) && o.contains(&format!("{u6}/64")),
    )
    .await;
    assert_eq!(lrp_mac(&env, "ovn-cluster-ul"), u2o_mac);
    let ip = Api::<Ip>::all(env.kube.clone())
        .get("u2o-interconnection.ovn-cluster.ul")
        .await
        .unwrap();
    assert_eq!(ip.spec.v4_ip_address, Some(u4.to_string()));
    assert_eq!(ip.spec.v6_ip_address, Some(u6.to_string()));

    let want = [
        "29000 ip4.src == 172.17.0.0/24 reroute 172.17.0.254 true",
        "29000 ip6.src == fd00:17::/64 reroute fd00:17::fe true",
        "29400 ip4.dst == 172.17.0.0/24 allow  true",
        "29400 ip6.dst == fd00:17::/64 allow  true",
        "31000 ip4.dst == $ul.u2o_exclude_ip.ip4 && ip4.src == 172.17.0.0/24 reroute 172.17.0.254 true",
        "31000 ip6.dst == $ul.u2o_exclude_ip.ip6 && ip6.src == fd00:17::/64 reroute fd00:17::fe true",
    ];
    policies_until(
        &env,
        "ovn-cluster",
        "ul",
        "the three U2O policies of each family",
        &want,
    )
    .await;
    nb_until(
        &env,
        &["get", "Address_Set", "ul.u2o_exclude_ip.ip6", "addresses"],
        "the node's IPv6 address excluded",
        |o| o.trim() == "[\"fd00:18::2\"]",
    )
    .await;
    nb_until(
        &env,
        &["get", "Address_Set", "ul.u2o_exclude_ip.ip4", "addresses"],
        "the node's IPv4 address excluded",
        |o| o.trim() == "[\"172.18.0.2\"]",
    )
    .await;

    // IPv6 underlay ↔ overlay through the router.
    env.pod("nsu", "u1", "node1", &[]).await;
    env.pod("nso", "o1", "node1", &[]).await;
    let (u1, o1) = (env.routed("nsu", "u1").await, env.routed("nso", "o1").await);
    assert_eq!(ann(&u1, "gateway"), "172.17.0.254,fd00:17::fe");
    assert_eq!(ann(&u1, "logical_router"), "ovn-cluster");
    let o1_v6 = pod_ip(&o1, true).to_string();
    let t = env.ovn.trace("ul", &icmp6_to(&u1, &u2o_mac, &o1_v6)).unwrap();
    assert!(
        t.delivers_to(&port(&o1)) && t.text.contains("ip.ttl--"),
        "underlay → overlay over IPv6: {}",
        t.text
    );
    let back = icmp6_to(
        &o1,
        &lrp_mac(&env, "ovn-cluster-ovn-default"),
        &pod_ip(&u1, true).to_string(),
    );
    let t = env.ovn.trace("ovn-default", &back).unwrap();
    assert!(
        t.delivers_to(&port(&u1)),
        "overlay → underlay over IPv6: {}",
        t.text
    );
    // Anything else the underlay pod sends to the router leaves for the physical gateway (policy3):
    // the router solicits fd00:17::fe's MAC out of its U2O port, towards the localnet port
    // (ovn-trace prints the target in hex).
    let gw6: std::net::Ipv6Addr = "fd00:17::fe".parse().unwrap();
    let t = env
        .ovn
        .trace("ul", &icmp6_to(&u1, &u2o_mac, "2001:db8::1"))
        .unwrap();
    assert!(
        t.text.contains("nd_ns")
            && t.text.contains(&format!("nd.target = {:#034x}", u128::from(gw6)))
            && t.delivers_to("localnet.ul"),
        "underlay → outside over IPv6: {}",
        t.text
    );

    // The exclude set follows the nodes' IPv6 InternalIPs.
    dual_node(&env, "node2", "172.18.0.3", "fd00:18::3").await;
    nb_until(
        &env,
        &["get", "Address_Set", "ul.u2o_exclude_ip.ip6", "addresses"],
        "node2's IPv6 address excluded too",
        |o| o.contains("fd00:18::2") && o.contains("fd00:18::3"),
    )
    .await;

    // A static U2O address per family is honoured; an IPv6 one outside the CIDR or in upper
    // case is refused naming the field (Kube-OVN's messages), and nothing changes.
    let static_spec = |ip: &str| {
        let mut s = spec(true);
        s["u2oInterconnectionIP"] = json!(ip);
        s
    };
    for (bad, words) in [
        (
            "172.17.0.100,fd00:99::5",
            vec![
                "spec.u2oInterconnectionIP",
                "is not in subnet ul cidr 172.17.0.0/24,fd00:17::/64",
            ],
        ),
        (
            "172.17.0.100,FD00:17::100",
            vec![
                "spec.u2oInterconnectionIP",
                "v6 ip address can not contain upper case",
            ],
        ),
    ] {
        subnet(&env, "ul", static_spec(bad)).await;
        let s = subnet_until(&env, "ul", "refused", |s| {
            netkit::subnet_condition(s, "Validated").is_some_and(|c| {
                c.status == ConditionStatus::False
                    && words
                        .iter()
                        .all(|w| c.message.as_deref().unwrap_or_default().contains(w))
            })
        })
        .await;
        assert_eq!(
            s.status.unwrap().u2o_interconnection_ip,
            Some(format!("{u4},{u6}")),
            "nothing changed"
        );
    }
    subnet(&env, "ul", static_spec("172.17.0.100,fd00:17::100")).await;
    subnet_until(&env, "ul", "the static U2O addresses", |s| {
        s.status
            .as_ref()
            .and_then(|s| s.u2o_interconnection_ip.as_deref())
            == Some("172.17.0.100,fd00:17::100")
    })
    .await;
    nb_until(
        &env,
        &["get", "Logical_Router_Port", "ovn-cluster-ul", "networks"],
        "the router port on the static addresses",
        |o| o.contains("172.17.0.100/24") && o.contains("fd00:17::100/64"),
    )
    .await;

    // An IPv6-only underlay subnet: only the ip6 half.
    provider_network(&env, "pn1", &["v100", "v200"]).await;
    vlan(&env, "v200", 200, "pn1").await;
    subnet(
        &env,
        "ul6",
        json!({"cidrBlock": "fd00:19::/64", "gateway": "fd00:19::1", "vlan": "v200",
            "namespaces": ["nsv"], "u2oInterconnection": true}),
    )
    .await;
    let (u2o6, _) = u2o_status(&env, "ul6").await;
    assert!(
        u2o6.len() == 1 && u2o6[0].is_ipv6() && u2o6[0].to_string() != "fd00:19::1",
        "{u2o6:?}"
    );
    let row = localnet(&env, "ul6");
    assert_eq!(column(&row, "tag"), "200", "{row}");
    assert!(!column(&row, "external_ids").contains("ipv4_network"), "{row}");
    let want6 = [
        "29000 ip6.src == fd00:19::/64 reroute fd00:19::1 true".to_owned(),
        "29400 ip6.dst == fd00:19::/64 allow  true".to_owned(),
        "31000 ip6.dst == $ul6.u2o_exclude_ip.ip6 && ip6.src == fd00:19::/64 reroute fd00:19::1 true"
            .to_owned(),
    ];
    policies_until(&env, "ovn-cluster", "ul6", "the IPv6 U2O policies", &want6).await;
    nb_until(
        &env,
        &["get", "Address_Set", "ul6.u2o_exclude_ip.ip6", "addresses"],
        "both nodes' IPv6 addresses excluded",
        |o| o.contains("fd00:18::2") && o.contains("fd00:18::3"),
    )
    .await;
    assert!(!exists(&env, "Address_Set", "ul6.u2o_exclude_ip.ip4"));
    nb_until(
        &env,
        &["get", "Logical_Router_Port", "ovn-cluster-ul6", "networks"],
        "the IPv6-only router port",
        |o| o.trim() == format!("[\"{}/64\"]", u2o6[0]),
    )
    .await;

    // U2O off: the IPv6 rows go with the IPv4 ones.
    subnet(&env, "ul", spec(false)).await;
    nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Address_Set"],
        "the exclude sets gone",
        |o| !o.lines().any(|l| l.trim().starts_with("ul.u2o_exclude_ip")),
    )
    .await;
    assert!(subnet_policies(&env, "ovn-cluster", "ul").is_empty());
    assert!(!exists(&env, "Logical_Router_Port", "ovn-cluster-ul"));
}

/// U2O on a dual-stack underlay subnet of a custom VPC: policy3 and the common allow per family,
/// and a source route per family to that family's physical gateway (Kube-OVN's
/// `addCustomVPCStaticRouteForSubnet`); no exclude sets (policy2 is the default VPC's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u2o_on_a_dual_stack_underlay_in_a_custom_vpc_routes_each_family_to_its_gateway() {
    let env = Env::start().await;
    dual_node(&env, "node1", "172.18.0.2", "fd00:18::2").await;
    provider_network(&env, "pn3", &["v300"]).await;
    vlan(&env, "v300", 300, "pn3").await;
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": "vpc1"},
        "spec": {}}),
    )
    .await;
    netkit::vpc_until(&env, "vpc1", "a router", |v| {
        v.status.as_ref().and_then(|s| s.router.as_deref()) == Some("vpc1")
    })
    .await;
    subnet(
        &env,
        "cul",
        json!({"cidrBlock": "172.19.0.0/24,fd00:19::/64", "vlan": "v300", "vpc": "vpc1",
            "u2oInterconnection": true}),
    )
    .await;
    let (u2o, _) = u2o_status(&env, "cul").await;
    assert!(u2o.len() == 2 && u2o[0].is_ipv4() && u2o[1].is_ipv6(), "{u2o:?}");
    nb_until(
        &env,
        &["get", "Logical_Router_Port", "vpc1-cul", "networks"],
        "the router port on both U2O addresses",
        |o| o.contains(&format!("{}/24", u2o[0])) && o.contains(&format!("{}/64", u2o[1])),
    )
    .await;
    // The gateways Kube-OVN defaults to: the first address of each CIDR.
    let want = [
        "29000 ip4.src == 172.19.0.0/24 reroute 172.19.0.1 true",
        "29000 ip6.src == fd00:19::/64 reroute fd00:19::1 true",
        "31000 ip4.dst == 172.19.0.0/24 allow  false",
        "31000 ip6.dst == fd00:19::/64 allow  false",
    ];
    policies_until(
        &env,
        "vpc1",
        "cul",
        "policy3 and the common allow of each family",
        &want,
    )
    .await;
    nb_until(
        &env,
        &["lr-route-list", "vpc1"],
        "a source route per family",
        |o| {
            o.lines()
                .any(|l| l.contains("172.19.0.0/24") && l.contains("172.19.0.1") && l.contains("src-ip"))
                && o.lines()
                    .any(|l| l.contains("fd00:19::/64") && l.contains("fd00:19::1") && l.contains("src-ip"))
        },
    )
    .await;
    assert!(!exists(&env, "Address_Set", "cul.u2o_exclude_ip.ip6"));
}
