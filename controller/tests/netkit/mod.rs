//! Helpers for the VPC and subnet tests: reading CRs and northbound rows until they say what a
//! test waits for, node readiness, and flows for ovn-trace.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_ovn_api::crd::condition::{Condition, find_condition};
use kube_ovn_api::crd::{Subnet, Vpc};
use kube_ovn_testkit::wait_until_async;
use serde_json::json;

use super::common::{Env, WAIT, ann};

/// Waits until the subnet satisfies `ok`, and returns it.
pub async fn subnet_until(env: &Env, name: &str, what: &str, ok: impl Fn(&Subnet) -> bool) -> Subnet {
    let api: Api<Subnet> = Api::all(env.kube.clone());
    let ok = &ok;
    let waited = wait_until_async(&format!("subnet {name}: {what}"), WAIT, || {
        let api = api.clone();
        async move { Ok(api.get_opt(name).await?.is_some_and(|s| ok(&s))) }
    })
    .await;
    let now = api.get_opt(name).await.unwrap();
    if let Err(e) = waited {
        panic!("{e}; the subnet is now {:#?}", now.map(|s| (s.spec, s.status)));
    }
    now.unwrap()
}

/// Waits until the VPC satisfies `ok`, and returns it.
pub async fn vpc_until(env: &Env, name: &str, what: &str, ok: impl Fn(&Vpc) -> bool) -> Vpc {
    let api: Api<Vpc> = Api::all(env.kube.clone());
    let ok = &ok;
    let waited = wait_until_async(&format!("vpc {name}: {what}"), WAIT, || {
        let api = api.clone();
        async move { Ok(api.get_opt(name).await?.is_some_and(|v| ok(&v))) }
    })
    .await;
    let now = api.get_opt(name).await.unwrap();
    if let Err(e) = waited {
        panic!("{e}; the vpc is now {:#?}", now.map(|v| (v.spec, v.status)));
    }
    now.unwrap()
}

/// A subnet's condition of `type_`.
pub fn subnet_condition<'a>(s: &'a Subnet, type_: &str) -> Option<&'a Condition> {
    find_condition(s.status.as_ref()?.conditions.as_deref()?, type_)
}

/// A VPC's condition of `type_`.
pub fn vpc_condition<'a>(v: &'a Vpc, type_: &str) -> Option<&'a Condition> {
    find_condition(v.status.as_ref()?.conditions.as_deref()?, type_)
}

/// Whether the subnet's `Ready` condition is true.
pub fn subnet_ready(s: &Subnet) -> bool {
    subnet_condition(s, "Ready").is_some_and(|c| c.status == kube_ovn_api::crd::ConditionStatus::True)
}

/// Runs `ovn-nbctl args` until its output satisfies `ok`, and returns that output.
pub async fn nb_until(env: &Env, args: &[&str], what: &str, ok: impl Fn(&str) -> bool) -> String {
    let ovn = &env.ovn;
    let ok = &ok;
    let last = std::sync::Mutex::new(String::new());
    let last_ref = &last;
    let waited = wait_until_async(what, WAIT, || async move {
        let out = ovn.nbctl(args)?;
        let good = ok(&out);
        *last_ref.lock().unwrap() = out;
        Ok(good)
    })
    .await;
    let out = last.into_inner().unwrap();
    if let Err(e) = waited {
        panic!("{e}; last `ovn-nbctl {}`:\n{out}", args.join(" "));
    }
    out
}

/// A column of a named row, unquoted.
pub fn nb_get(env: &Env, table: &str, record: &str, column: &str) -> String {
    env.ovn
        .nbctl(&["get", table, record, column])
        .unwrap()
        .trim()
        .trim_matches('"')
        .to_owned()
}

/// The MAC of a router port (a pod's next hop out of its subnet: `<router>-<subnet>`).
pub fn lrp_mac(env: &Env, port: &str) -> String {
    nb_get(env, "Logical_Router_Port", port, "mac")
}

/// A node's join address, from its switch port `node-<node>`.
pub fn join_ip(env: &Env, node: &str) -> String {
    let addresses = nb_get(env, "Logical_Switch_Port", &format!("node-{node}"), "addresses");
    addresses
        .trim_matches(|c| c == '[' || c == ']' || c == '"')
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned()
}

/// Sets a node's `Ready` condition (`True`, `False`, `Unknown`).
pub async fn set_node_ready(env: &Env, node: &str, status: &str) {
    let api: Api<Node> = Api::all(env.kube.clone());
    api.patch_status(
        node,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": status}]}})),
    )
    .await
    .unwrap();
}

/// Creates a namespace with labels.
pub async fn labelled_namespace(env: &Env, name: &str, labels: &[(&str, &str)]) {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(env.kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Deletes the pod for good. A pod bound to a node is deleted gracefully (a deletionTimestamp)
/// until its kubelet confirms with grace period 0; there is no kubelet here, so the test confirms
/// at once.
pub async fn delete_pod(env: &Env, ns: &str, name: &str) {
    Api::<Pod>::namespaced(env.kube.clone(), ns)
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
}

pub async fn delete_subnet(env: &Env, name: &str) {
    Api::<Subnet>::all(env.kube.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

pub async fn delete_vpc(env: &Env, name: &str) {
    Api::<Vpc>::all(env.kube.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// An ICMP echo from `src` to any address `dst` (outside its subnet: through its gateway, whose
/// MAC is `gw_mac`).
pub fn icmp_to(src: &Pod, gw_mac: &str, dst: &str) -> String {
    let port = format!("{}.{}", src.name_any(), src.namespace().unwrap());
    format!(
        "inport==\"{port}\" && eth.src=={} && eth.dst=={gw_mac} && ip4.src=={} && ip4.dst=={dst} && ip.ttl==64 && icmp4.type==8",
        ann(src, "mac_address"),
        ann(src, "ip_address")
    )
}

/// The flow from `src` to pod `dst` in another subnet, through the router port `gw_port`.
pub fn icmp_routed(env: &Env, src: &Pod, gw_port: &str, dst: &Pod) -> String {
    icmp_to(src, &lrp_mac(env, gw_port), ann(dst, "ip_address"))
}

/// `<pod>.<ns>`, the pod's switch port.
pub fn port(pod: &Pod) -> String {
    format!("{}.{}", pod.name_any(), pod.namespace().unwrap())
}

/// `GET path` on a controller's endpoint: status code and body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    use anyhow::Context as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    let code = out.split_whitespace().nth(1).context("no status line")?.parse()?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// The controller's `/metrics` text.
pub async fn metrics(port: u16) -> anyhow::Result<String> {
    Ok(http_get(([127, 0, 0, 1], port).into(), "/metrics").await?.1)
}

/// The sum of the samples of `name` whose labels contain every one of `labels`.
/// Reconciles of `kind` the controller has counted, from its `/metrics` text.
pub fn reconciles(text: &str, kind: &str) -> f64 {
    metric(
        text,
        "kube_ovn_controller_reconcile_total",
        &[&format!("kind=\"{kind}\"")],
    )
}

pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
