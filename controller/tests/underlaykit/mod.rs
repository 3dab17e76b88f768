//! Helpers for the underlay tests: the Vlan and ProviderNetwork objects the subnet reconciler
//! reads (their status written as the Vlan reconciler leaves it), and the localnet port's and
//! the U2O policies' northbound rows.

#![allow(dead_code)] // each test binary uses a different subset

use kube::api::{Api, Patch, PatchParams};
use kube_ovn_api::crd::ProviderNetwork;
use serde_json::json;

use super::common::Env;
use super::netkit::nb_get;

pub const GW_MAC: &str = "00:00:5e:00:01:64";

pub async fn subnet(env: &Env, name: &str, spec: serde_json::Value) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

/// A ProviderNetwork whose status lists `vlans`, as the Vlan reconciler leaves it.
pub async fn provider_network(env: &Env, name: &str, vlans: &[&str]) {
    env.apply_yaml(json!({"apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
        "metadata": {"name": name}, "spec": {"defaultInterface": "eth1"}}))
        .await;
    Api::<ProviderNetwork>::all(env.kube.clone())
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"vlans": vlans}})),
        )
        .await
        .unwrap();
}

pub async fn vlan(env: &Env, name: &str, id: u16, provider: &str) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": {"name": name},
        "spec": {"id": id, "provider": provider}}),
    )
    .await;
}

/// The localnet port's columns as `ovn-nbctl list` shows them.
pub fn localnet(env: &Env, subnet: &str) -> String {
    env.ovn
        .nbctl(&["list", "Logical_Switch_Port", &format!("localnet.{subnet}")])
        .unwrap_or_default()
}

pub fn column<'a>(row: &'a str, name: &str) -> &'a str {
    row.lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
        .and_then(|l| l.split_once(':'))
        .map_or("", |(_, v)| v.trim())
}

pub fn exists(env: &Env, table: &str, name: &str) -> bool {
    env.ovn
        .nbctl(&["--bare", "--columns=name", "find", table, &format!("name={name}")])
        .unwrap()
        .lines()
        .any(|l| l.trim() == name)
}

/// Waits (bounded) until `subnet`'s policies on `router` ([`subnet_policies`]) are exactly
/// `want`; fails naming `what` with the policies last seen.
pub async fn policies_until<T>(env: &Env, router: &str, subnet: &str, what: &str, want: &[T])
where
    String: PartialEq<T>,
{
    kube_ovn_testkit::wait_until_async(what, super::common::WAIT, || async {
        Ok(subnet_policies(env, router, subnet).as_slice() == want)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#?}", subnet_policies(env, router, subnet)));
}

/// The `ovn-cluster` policies of a subnet, one line each: `priority match action nexthops
/// isU2ORoutePolicy`.
pub fn subnet_policies(env: &Env, router: &str, subnet: &str) -> Vec<String> {
    let out = env
        .ovn
        .nbctl(&[
            "--format=csv",
            "--data=bare",
            "--no-headings",
            "--columns=priority,match,action,nexthops,external_ids",
            "find",
            "Logical_Router_Policy",
            &format!("external_ids:subnet={subnet}"),
        ])
        .unwrap();
    let on_router = nb_get(env, "Logical_Router", router, "policies");
    let uuids = env
        .ovn
        .nbctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "Logical_Router_Policy",
            &format!("external_ids:subnet={subnet}"),
        ])
        .unwrap();
    let mut rows: Vec<String> = out
        .lines()
        .zip(uuids.lines().filter(|l| !l.trim().is_empty()))
        .filter(|(_, u)| on_router.contains(u.trim()))
        .map(|(l, _)| {
            let f: Vec<&str> = l.splitn(5, ',').collect();
            let u2o = f[4].contains("isU2ORoutePolicy=true");
            format!("{} {} {} {} {u2o}", f[0], f[1].trim_matches('"'), f[2], f[3])
        })
        .collect();
    rows.sort();
    rows
}

pub fn warnings_absent(events: &[k8s_openapi::api::events::v1::Event], reason: &str) -> bool {
    !events.iter().any(|e| e.reason.as_deref() == Some(reason))
}
