//! Helpers for the pod tests: pods, IP CRs, Events and switch ports, read until they say what a
//! test waits for. Every wait is bounded and names what it waits for.

#![allow(dead_code)] // each test binary uses a different subset

use std::future::Future;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_ovn_api::crd::Ip;
use kube_ovn_testkit::wait_until_async;
use serde_json::json;

use super::common::{Env, WAIT};

/// Runs `probe` until it returns `Some`, and returns that; panics naming `what` on timeout.
pub async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let found = Mutex::new(None);
    let found_ref = &found;
    let waited = wait_until_async(what, WAIT, || {
        let fut = probe();
        async move {
            Ok(match fut.await? {
                Some(v) => {
                    *found_ref.lock().unwrap() = Some(v);
                    true
                }
                None => false,
            })
        }
    })
    .await;
    if let Err(e) = waited {
        panic!("{e}");
    }
    found.into_inner().unwrap().unwrap()
}

pub fn pods(env: &Env, ns: &str) -> Api<Pod> {
    Api::namespaced(env.kube.clone(), ns)
}

/// Creates a pod from a whole object (host network, owner references, …).
pub async fn create_pod(env: &Env, ns: &str, pod: serde_json::Value) -> Pod {
    env.namespace(ns).await;
    let pod: Pod = serde_json::from_value(pod).unwrap();
    pods(env, ns).create(&PostParams::default(), &pod).await.unwrap()
}

/// Waits until the pod satisfies `ok`; on timeout the panic shows its annotations.
pub async fn pod_until(env: &Env, ns: &str, name: &str, what: &str, ok: impl Fn(&Pod) -> bool) -> Pod {
    let api = pods(env, ns);
    let ok = &ok;
    let waited = wait_until_async(&format!("pod {ns}/{name}: {what}"), WAIT, || {
        let api = api.clone();
        async move { Ok(api.get_opt(name).await?.is_some_and(|p| ok(&p))) }
    })
    .await;
    let now = api.get_opt(name).await.unwrap();
    if let Err(e) = waited {
        panic!(
            "{e}; its annotations are now {:#?}",
            now.map(|p| p.annotations().clone())
        );
    }
    now.unwrap()
}

/// Merges `annotations` into the pod's (a `null` value removes a key).
pub async fn annotate(env: &Env, ns: &str, name: &str, annotations: serde_json::Value) {
    pods(env, ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .unwrap();
}

/// Every annotation of Kube-OVN's primary network (`ovn.kubernetes.io/*`) on the pod.
pub fn ovn_annotations(pod: &Pod) -> Vec<String> {
    pod.annotations()
        .keys()
        .filter(|k| k.starts_with("ovn.kubernetes.io/"))
        .cloned()
        .collect()
}

/// The `addresses` of switch port `name`, or `None` when no such port exists.
pub fn lsp_addresses(env: &Env, name: &str) -> Option<String> {
    let out = env
        .ovn
        .nbctl(&[
            "--bare",
            "--columns=addresses",
            "find",
            "Logical_Switch_Port",
            &format!("name=\"{name}\""),
        ])
        .unwrap();
    let out = out.trim();
    (!out.is_empty()).then(|| out.to_owned())
}

/// A column of an existing switch port, as `ovn-nbctl get` prints it.
pub fn lsp_get(env: &Env, name: &str, column: &str) -> String {
    env.ovn
        .nbctl(&["get", "Logical_Switch_Port", name, column])
        .unwrap()
        .trim()
        .to_owned()
}

/// Whether port group `pg` holds switch port `port`.
pub fn in_port_group(env: &Env, pg: &str, port: &str) -> bool {
    let uuid = env
        .ovn
        .nbctl(&["get", "Logical_Switch_Port", port, "_uuid"])
        .unwrap();
    let members = env
        .ovn
        .nbctl(&[
            "--bare",
            "--columns=ports",
            "find",
            "Port_Group",
            &format!("name=\"{pg}\""),
        ])
        .unwrap();
    members.split_whitespace().any(|m| m == uuid.trim())
}

pub async fn ip_cr(env: &Env, name: &str) -> Option<Ip> {
    Api::<Ip>::all(env.kube.clone()).get_opt(name).await.unwrap()
}

/// Waits until IP CR `name` satisfies `ok` (`None`: it does not exist).
pub async fn ip_until(env: &Env, name: &str, what: &str, ok: impl Fn(Option<&Ip>) -> bool) -> Option<Ip> {
    let api: Api<Ip> = Api::all(env.kube.clone());
    let ok = &ok;
    let waited = wait_until_async(&format!("IP {name}: {what}"), WAIT, || {
        let api = api.clone();
        async move { Ok(ok(api.get_opt(name).await?.as_ref())) }
    })
    .await;
    let now = api.get_opt(name).await.unwrap();
    if let Err(e) = waited {
        panic!("{e}; the IP CR is now {now:#?}");
    }
    now
}

/// The Events (`events.k8s.io/v1`) in `ns` about the object named `name`.
pub async fn events(env: &Env, ns: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(env.kube.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

/// Waits for a Warning Event about `kind` `name` with `reason` whose note contains every one of
/// `words`, and returns it.
pub async fn warning(env: &Env, ns: &str, kind: &str, name: &str, reason: &str, words: &[&str]) -> Event {
    let what = format!("a Warning event {reason} about {kind} {name} naming {words:?}");
    let last = Mutex::new(Vec::new());
    let last_ref = &last;
    let found = wait_until_async(&what, WAIT, || async move {
        let evs = events(env, ns, name).await;
        let hit = evs.iter().any(|e| {
            let r = e.regarding.as_ref();
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some(reason)
                && r.and_then(|r| r.kind.as_deref()) == Some(kind)
                && words
                    .iter()
                    .all(|w| e.note.as_deref().unwrap_or_default().contains(w))
        });
        *last_ref.lock().unwrap() = evs;
        Ok(hit)
    })
    .await;
    let evs = last.into_inner().unwrap();
    if let Err(e) = found {
        let seen: Vec<_> = evs.iter().map(|e| (&e.type_, &e.reason, &e.note)).collect();
        panic!("{e}; events about {name}: {seen:#?}");
    }
    evs.into_iter()
        .find(|e| e.reason.as_deref() == Some(reason))
        .unwrap()
}

/// Asserts that nothing was allocated for pod `ns/name`: no switch port, no IP CR, no
/// `allocated` annotation.
pub async fn assert_nothing_allocated(env: &Env, ns: &str, name: &str) {
    let key = format!("{name}.{ns}");
    assert_eq!(lsp_addresses(env, &key), None, "no port for {key}");
    assert!(ip_cr(env, &key).await.is_none(), "no IP CR for {key}");
    let pod = pods(env, ns).get(name).await.unwrap();
    assert_eq!(
        pod.annotations().get("ovn.kubernetes.io/allocated"),
        None,
        "{key} is not allocated: {:?}",
        pod.annotations()
    );
}
