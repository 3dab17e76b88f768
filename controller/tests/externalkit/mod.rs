//! Helpers for the external gateway tests: the external network (ProviderNetwork, Vlan, underlay
//! Subnet with its localnet port), gateway nodes, lrp OvnEips, Gateway_Chassis rows, and
//! Kube-OVN's chassis order computed independently of the controller.

#![allow(dead_code)] // each test binary uses a different subset

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube_ovn_api::crd::OvnEip;
use kube_ovn_testkit::netns::{self, veth_pair};
use kube_ovn_testkit::{Netns, OvsNode, wait_until_async};
use serde_json::json;

use super::common::{Env, WAIT};
use super::underlaykit::{provider_network, subnet, vlan};

/// The external network `name` (ProviderNetwork, Vlan id 0, underlay Subnet of `cidr` with
/// gateway `.1` and `.1..​.99` excluded), ready.
pub async fn external_network(env: &Env, name: &str, prefix: &str) {
    provider_network(env, name, &[name]).await;
    vlan(env, name, 0, name).await;
    subnet(
        env,
        name,
        json!({"cidrBlock": format!("{prefix}.0/24"), "gateway": format!("{prefix}.1"),
            "excludeIps": [format!("{prefix}.1..{prefix}.99")], "vlan": name}),
    )
    .await;
    env.subnet_ready(name).await;
}

/// Merges `labels` and `annotations` into node `name`'s metadata (`null` removes).
pub async fn mark_node(env: &Env, name: &str, labels: serde_json::Value, annotations: serde_json::Value) {
    Api::<Node>::all(env.kube.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels, "annotations": annotations}})),
        )
        .await
        .unwrap();
}

/// `gateway_chassis` rows of router port `lrp` as `(chassis_name, priority)`, highest first.
pub fn gateway_chassis(env: &Env, lrp: &str) -> Vec<(String, i64)> {
    let out = env
        .ovn
        .nbctl(&["lrp-get-gateway-chassis", lrp])
        .unwrap_or_default();
    // Lines `<lrp>-<chassis>   <priority>`, by priority.
    out.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?;
            let prio = f.next()?.parse().ok()?;
            Some((name.strip_prefix(&format!("{lrp}-"))?.to_owned(), prio))
        })
        .collect()
}

/// Waits until router port `lrp`'s gateway chassis are `want` (order and priorities).
pub async fn gateway_chassis_until(env: &Env, lrp: &str, want: &[(String, i64)]) {
    let got = wait_until_async(
        &format!("the gateway chassis of {lrp} to be {want:?}"),
        WAIT,
        || async { Ok(gateway_chassis(env, lrp) == want) },
    )
    .await;
    assert!(got.is_ok(), "{got:?}: {:?}", gateway_chassis(env, lrp));
}

/// Kube-OVN's order of `chassis` for VPC `vpc` (hex SHA-256 of `<vpc><chassis>`, ascending) with
/// priorities `100 - i`.
pub fn kube_ovn_order(vpc: &str, chassis: &[&str]) -> Vec<(String, i64)> {
    let hex = |s: String| -> String {
        ring::digest::digest(&ring::digest::SHA256, s.as_bytes())
            .as_ref()
            .iter()
            .fold(String::new(), |mut out, b| {
                use std::fmt::Write as _;
                let _ = write!(out, "{b:02x}");
                out
            })
    };
    let mut keyed: Vec<(String, &str)> = chassis.iter().map(|c| (hex(format!("{vpc}{c}")), *c)).collect();
    keyed.sort();
    keyed
        .into_iter()
        .zip(0i64..)
        .map(|((_, c), i)| (c.to_owned(), 100 - i))
        .collect()
}

/// Waits until OvnEip `name` satisfies `ok` (`None`: it does not exist), and returns it.
pub async fn eip_until(
    env: &Env,
    name: &str,
    what: &str,
    ok: impl Fn(Option<&OvnEip>) -> bool,
) -> Option<OvnEip> {
    let api: Api<OvnEip> = Api::all(env.kube.clone());
    let ok = &ok;
    let waited = wait_until_async(&format!("OvnEip {name}: {what}"), WAIT, || {
        let api = api.clone();
        async move { Ok(ok(api.get_opt(name).await?.as_ref())) }
    })
    .await;
    let now = api.get_opt(name).await.unwrap();
    if let Err(e) = waited {
        panic!("{e}; the OvnEip is now {now:#?}");
    }
    now
}

/// The `status.activateGateway` of an OvnEip.
pub fn active_gateway(eip: Option<&OvnEip>) -> Option<String> {
    eip?.status.as_ref()?.activate_gateway.clone()
}

/// Two chassis running ovn-controller on the userspace datapath, joined by an underlay (the
/// gateway chassis decide between them over BFD on their tunnels), and the external network: in
/// each chassis a netdev bridge `br-ext` (mapping `external:br-ext`, the localnet port's network)
/// whose port `eext` is a veth to a Linux bridge `br0` in the `outside` namespace, which holds
/// the external gateway 10.200.0.1 and learns where each MAC is.
pub fn two_chassis(env: &Env, outside: &Netns) -> Vec<OvsNode> {
    let a = OvsNode::start("xgw-a").unwrap();
    let b = OvsNode::start("xgw-b").unwrap();
    let ips = [
        std::net::Ipv4Addr::new(172, 30, 0, 1),
        std::net::Ipv4Addr::new(172, 30, 0, 2),
    ];
    OvsNode::connect_underlay(&a, ips[0], &b, ips[1], 24).unwrap();
    outside.ip(&["link", "add", "br0", "type", "bridge"]).unwrap();
    outside
        .ip(&["addr", "add", "10.200.0.1/24", "dev", "br0"])
        .unwrap();
    outside.ip(&["link", "set", "br0", "up"]).unwrap();
    let mut nodes = vec![a, b];
    for (i, (n, ip)) in nodes.iter_mut().zip(ips).enumerate() {
        let port = format!("xo{i}");
        veth_pair(n.name(), "eext", outside.name(), &port, 1500).unwrap();
        // Checksums filled in by the kernel, not left to an offload the netdev datapath lacks.
        netns::exec(outside.name(), "ethtool", &["-K", &port, "tx", "off"]).unwrap();
        netns::exec(n.name(), "ethtool", &["-K", "eext", "tx", "off"]).unwrap();
        outside
            .ip(&["link", "set", &port, "master", "br0", "up"])
            .unwrap();
        n.vsctl(&[
            "--may-exist",
            "add-br",
            "br-ext",
            "--",
            "set",
            "Bridge",
            "br-ext",
            "datapath_type=netdev",
            "--",
            "--may-exist",
            "add-port",
            "br-ext",
            "eext",
        ])
        .unwrap();
        n.netns().ip(&["link", "set", "eext", "up"]).unwrap();
        n.configure_chassis(&env.ovn.sb_remote(), ip).unwrap();
        n.vsctl(&[
            "set",
            "Open_vSwitch",
            ".",
            "external_ids:ovn-bridge-mappings=external:br-ext",
        ])
        .unwrap();
        n.start_ovn_controller().unwrap();
    }
    nodes
}

/// The port of `br0` in `outside` behind which the bridge has learnt `mac` (empty: unknown).
pub fn learnt_port(outside: &Netns, mac: &str) -> String {
    netns::exec(outside.name(), "bridge", &["fdb", "show", "br", "br0"])
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(mac) && !l.contains("permanent"))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap_or_default()
        .to_owned()
}

/// The chassis that claimed `cr-<lrp>` in the southbound database (empty: nobody).
pub fn sb_holder(env: &Env, lrp: &str) -> String {
    let uuid = env
        .ovn
        .sbctl(&[
            "--bare",
            "--columns=chassis",
            "find",
            "Port_Binding",
            &format!("logical_port=cr-{lrp}"),
        ])
        .unwrap_or_default();
    let uuid = uuid.trim();
    if uuid.is_empty() {
        return String::new();
    }
    env.ovn
        .sbctl(&["--bare", "--columns=name", "list", "Chassis", uuid])
        .unwrap_or_default()
        .trim()
        .to_owned()
}
