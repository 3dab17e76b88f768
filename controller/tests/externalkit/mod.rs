//! Helpers for the external gateway tests: the external network (ProviderNetwork, Vlan, underlay
//! Subnet with its localnet port), gateway nodes, lrp OvnEips, Gateway_Chassis rows, and
//! Kube-OVN's chassis order computed independently of the controller.

#![allow(dead_code)] // each test binary uses a different subset

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube_ovn_api::crd::OvnEip;
use kube_ovn_testkit::wait_until_async;
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
