//! The fixture of the OVN NAT tests: the external network, a VPC with two pods and its external
//! port, and readers of the objects, events and northbound rows they check.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, DeleteParams};
use kube_ovn_api::crd::OvnEip;
use kube_ovn_api::crd::condition::{ConditionStatus, find_condition};
use kube_ovn_testkit::wait_until_async;
use serde_json::json;

use super::common::{Env, WAIT};
use super::underlaykit::{provider_network, subnet, vlan};

pub const OUTSIDE_MAC: &str = "02:00:00:c8:00:01";
pub const OUTSIDE_IP: &str = "10.200.0.1";

pub async fn apply(env: &Env, kind: &str, name: &str, spec: serde_json::Value) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

/// A cluster-scoped object these helpers read (the OVN NAT kinds).
pub trait Crd:
    Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + serde::Serialize
{
}

impl<K> Crd for K where
    K: Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize
{
}

/// Waits until the cluster-scoped object `name` satisfies `ok` (absent counts as `None`), and
/// returns it.
pub async fn until<K: Crd>(env: &Env, name: &str, what: &str, ok: impl Fn(Option<&K>) -> bool) -> Option<K> {
    let api: Api<K> = Api::all(env.kube.clone());
    let ok = &ok;
    let waited = wait_until_async(&format!("{} {name}: {what}", K::kind(&())), WAIT, || {
        let api = api.clone();
        async move { Ok(ok(api.get_opt(name).await?.as_ref())) }
    })
    .await;
    let now = api.get_opt(name).await.unwrap();
    if let Err(e) = waited {
        panic!("{e}; it is now {now:#?}");
    }
    now
}

/// Applies each `(kind, name, spec)`, in order.
pub async fn apply_all(env: &Env, objects: &[(&str, &str, serde_json::Value)]) {
    for (kind, name, spec) in objects {
        apply(env, kind, name, spec.clone()).await;
    }
}

/// `status.<field>` of an object, as JSON (`null` when absent).
pub fn status_field<K: serde::Serialize>(o: &K, field: &str) -> serde_json::Value {
    serde_json::to_value(o).unwrap_or_default()["status"][field].clone()
}

/// Waits until the cluster-scoped object `name` has `status.ready` true, and returns it.
pub async fn ready<K: Crd>(env: &Env, name: &str) -> K {
    until::<K>(env, name, "ready", |o| {
        o.is_some_and(|o| status_field(o, "ready") == json!(true))
    })
    .await
    .unwrap()
}

pub async fn eip_ready(env: &Env, name: &str) -> OvnEip {
    ready::<OvnEip>(env, name).await
}

/// Waits until OvnEip `name`'s `status.nat` (its users' kinds) is `nat`, and returns it.
pub async fn eip_used(env: &Env, name: &str, nat: &str) -> OvnEip {
    until::<OvnEip>(env, name, &format!("used by {nat}"), |e| {
        e.and_then(|e| e.status.as_ref()).and_then(|s| s.nat.as_deref()) == Some(nat)
    })
    .await
    .unwrap()
}

/// Waits until the object `name`'s condition `type_` satisfies `ok` (status, reason), `what`
/// saying what that means, and returns the object.
pub async fn until_condition<K: Crd>(
    env: &Env,
    name: &str,
    what: &str,
    type_: &str,
    ok: impl Fn(ConditionStatus, &str) -> bool,
) -> K {
    until::<K>(env, name, &format!("{what} (condition {type_})"), |o| {
        let conditions = o.and_then(|o| serde_json::from_value(status_field(o, "conditions")).ok());
        reason(conditions.as_ref(), type_).is_some_and(|(s, r)| ok(s, &r))
    })
    .await
    .unwrap()
}

/// A label's value.
pub fn label<'a>(o: &'a impl Resource, key: &str) -> Option<&'a str> {
    o.meta().labels.as_ref()?.get(key).map(String::as_str)
}

/// An annotation's value.
pub fn annotation<'a>(o: &'a impl Resource, key: &str) -> Option<&'a str> {
    o.meta().annotations.as_ref()?.get(key).map(String::as_str)
}

/// `columns` of the NAT rows whose `external_ip` is `ip` (`ovn-nbctl --bare find`).
pub fn nat_columns(env: &Env, columns: &str, ip: &str) -> String {
    env.ovn
        .nbctl(&[
            "--bare",
            &format!("--columns={columns}"),
            "find",
            "NAT",
            &format!("external_ip={ip}"),
        ])
        .unwrap()
}

pub fn eip_v4(e: &OvnEip) -> String {
    e.status
        .as_ref()
        .and_then(|s| s.v4_ip.clone())
        .unwrap_or_default()
}

/// The `Validated` condition's reason of a rule's status conditions.
pub fn reason(
    conditions: Option<&Vec<kube_ovn_api::crd::Condition>>,
    type_: &str,
) -> Option<(ConditionStatus, String)> {
    conditions
        .and_then(|c| find_condition(c, type_))
        .map(|c| (c.status, c.reason.clone().unwrap_or_default()))
}

/// The Warning events' notes about objects of `kind` named `name` (cluster-scoped objects'
/// events are in `default`), with their reasons.
pub async fn warnings(env: &Env, kind: &str, name: &str) -> Vec<(String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.kube.clone(), "default");
    events
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Waits for a Warning about `kind name` with `reason` whose note names `field`.
pub async fn warned(env: &Env, kind: &str, name: &str, reason: &str, field: &str) -> String {
    let found = wait_until_async(
        &format!("a {reason} Warning about {kind} {name}"),
        WAIT,
        || async { Ok(warnings(env, kind, name).await.iter().any(|(r, _)| r == reason)) },
    )
    .await;
    let seen = warnings(env, kind, name).await;
    assert!(found.is_ok(), "{found:?}: {seen:?}");
    let note = seen.into_iter().find(|(r, _)| r == reason).unwrap().1;
    assert!(
        note.starts_with(&format!("{kind} {name}: spec.{field}: ")),
        "the note names the object and spec.{field}: {note}"
    );
    note
}

/// Our NAT rows and load balancers as ovn-nbctl lists them (the northbound state these tests
/// compare before and after a refusal).
pub fn nb_nat_state(env: &Env) -> String {
    let nat = env
        .ovn
        .nbctl(&[
            "--columns=type,external_ip,logical_ip,external_mac,logical_port,options,external_ids",
            "list",
            "NAT",
        ])
        .unwrap();
    let lbs = env
        .ovn
        .nbctl(&[
            "--columns=name,vips,protocol,options,external_ids",
            "list",
            "Load_Balancer",
        ])
        .unwrap();
    let router = env
        .ovn
        .nbctl(&["--columns=nat,load_balancer", "list", "Logical_Router", "vpc1"])
        .unwrap();
    let mut nat: Vec<&str> = nat.split("\n\n").collect();
    nat.sort_unstable();
    format!("{}\n--\n{lbs}\n--\n{router}", nat.join("\n\n"))
}

/// One NAT row's line of `ovn-nbctl lr-nat-list vpc1` for `external_ip` and `type`.
pub fn nat_line(env: &Env, type_: &str, external_ip: &str) -> Option<String> {
    env.ovn
        .nbctl(&["lr-nat-list", "vpc1"])
        .unwrap()
        .lines()
        .find(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.first() == Some(&type_) && w.get(1) == Some(&external_ip)
        })
        .map(str::to_owned)
}

/// A node, the external network, VPC `vpc1` (default route to the external gateway, as users
/// write it: Kube-OVN adds none) with subnet `s1` (10.1.0.0/24, namespace `nsv`), pods `a` and
/// `b`, and the VPC's external port `vpc1-external` (10.200.0.254/24) with its gateway chassis.
pub async fn world() -> (Env, Pod, Pod) {
    world_with(&[]).await
}

/// [`world`] with the controller started with `flags`.
pub async fn world_with(flags: &[&str]) -> (Env, Pod, Pod) {
    let env = Env::start_with(flags).await;
    env.node("node1", "172.18.0.2").await;
    provider_network(&env, "external", &["vlan0"]).await;
    vlan(&env, "vlan0", 0, "external").await;
    subnet(
        &env,
        "external",
        json!({"cidrBlock": "10.200.0.0/24", "gateway": OUTSIDE_IP, "vlan": "vlan0"}),
    )
    .await;
    apply(
        &env,
        "Vpc",
        "vpc1",
        json!({"namespaces": ["nsv"],
            "staticRoutes": [{"cidr": "0.0.0.0/0", "nextHopIP": OUTSIDE_IP, "policy": "policyDst"}]}),
    )
    .await;
    subnet(
        &env,
        "s1",
        json!({"vpc": "vpc1", "cidrBlock": "10.1.0.0/24", "namespaces": ["nsv"]}),
    )
    .await;
    env.subnet_ready("external").await;
    env.subnet_ready("s1").await;
    env.pod("nsv", "a", "node1", &[]).await;
    env.pod("nsv", "b", "node1", &[]).await;
    let a = env.routed("nsv", "a").await;
    let b = env.routed("nsv", "b").await;
    env.ovn
        .nbctl(&[
            "lrp-add",
            "vpc1",
            "vpc1-external",
            "0a:00:00:c8:00:fe",
            "10.200.0.254/24",
            "--",
            "lsp-add",
            "external",
            "external-vpc1",
            "--",
            "lsp-set-type",
            "external-vpc1",
            "router",
            "--",
            "lsp-set-addresses",
            "external-vpc1",
            "router",
            "--",
            "lsp-set-options",
            "external-vpc1",
            "router-port=vpc1-external",
            "--",
            "lrp-set-gateway-chassis",
            "vpc1-external",
            "chassis1",
            "100",
        ])
        .unwrap();
    // The ToR on the external network, as a port whose address northd knows: the router
    // resolves it without ARP (ovn-trace answers no ARP request).
    env.ovn
        .nbctl(&[
            "lsp-add",
            "external",
            "tor",
            "--",
            "lsp-set-addresses",
            "tor",
            &format!("{OUTSIDE_MAC} {OUTSIDE_IP}"),
        ])
        .unwrap();
    (env, a, b)
}

/// A packet from the external network (the ToR at 10.200.0.1) to `dst_mac`/`dst_ip`.
pub fn from_outside(dst_mac: &str, dst_ip: &str, l4: &str) -> String {
    format!(
        "inport==\"localnet.external\" && eth.src=={OUTSIDE_MAC} && eth.dst=={dst_mac} && ip4.src=={OUTSIDE_IP} && ip4.dst=={dst_ip} && ip.ttl==64 && {l4}"
    )
}

pub async fn delete(env: &Env, kind: &str, name: &str) {
    let plural = BTreeMap::from([
        ("OvnEip", "ovn-eips"),
        ("OvnFip", "ovn-fips"),
        ("OvnSnatRule", "ovn-snat-rules"),
        ("OvnDnatRule", "ovn-dnat-rules"),
    ]);
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", kind),
        plural[kind],
    );
    let api: Api<kube::api::DynamicObject> = Api::all_with(env.kube.clone(), &ar);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("delete {kind} {name}: {e}"),
    }
}
