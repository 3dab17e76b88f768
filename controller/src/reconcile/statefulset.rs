//! StatefulSet pods keep their address: when one is deleted while its StatefulSet still wants it
//! (the StatefulSet exists, is not being deleted, is the same object, and the ordinal is below
//! `spec.ordinals.start + spec.replicas`), its IP CR and IPAM entry stay, and the successor of
//! the same name gets the same address. Otherwise the address is released — also later, when the
//! StatefulSet is scaled down or deleted after the pod was gone (the deletion watch and the
//! collector ask again), which Kube-OVN only notices in its periodic collection.
//!
//! The StatefulSet is read from the API server at the moment of the decision, as Kube-OVN does:
//! a scale-down is written before the pods go, and a cache could still show the old replicas.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;

use crate::error::{Doing, Result};

/// A pod's owning StatefulSet, as Kube-OVN recognises one: an `apps/*` owner reference of kind
/// StatefulSet whose name prefixes the pod's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub uid: Option<String>,
}

pub fn owner(pod: &Pod) -> Option<Owner> {
    let name = pod.name_any();
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == "StatefulSet" && o.api_version.starts_with("apps/") && name.starts_with(&o.name))
        .map(|o| Owner {
            name: o.name.clone(),
            uid: Some(o.uid.clone()),
        })
}

/// The owner a StatefulSet pod's IP CR implies when the pod is gone: `<sts>-<ordinal>`.
pub fn owner_from_pod_name(pod: &str) -> Option<Owner> {
    let (sts, _) = pod.rsplit_once('-')?;
    ordinal(pod)?;
    Some(Owner {
        name: sts.to_owned(),
        uid: None,
    })
}

/// The ordinal at the end of a StatefulSet pod's name.
pub fn ordinal(pod: &str) -> Option<i64> {
    pod.rsplit_once('-')?.1.parse().ok()
}

/// Whether a StatefulSet (as read now) still wants the pod `pod` of `owner`.
pub fn wants(sts: Option<&StatefulSet>, owner: &Owner, pod: &str) -> bool {
    let Some(sts) = sts else {
        return false;
    };
    if sts.metadata.deletion_timestamp.is_some() {
        return false;
    }
    // Deleted and created again under the same name: a new StatefulSet, new addresses.
    if let Some(uid) = &owner.uid
        && sts.metadata.uid.as_ref() != Some(uid)
    {
        return false;
    }
    let Some(n) = ordinal(pod) else {
        return false;
    };
    let spec = sts.spec.as_ref();
    let start = spec
        .and_then(|s| s.ordinals.as_ref())
        .and_then(|o| o.start)
        .map_or(0, i64::from);
    let replicas = spec.and_then(|s| s.replicas).map_or(1, i64::from);
    n >= start && n < start + replicas
}

/// Reads the StatefulSet and decides whether the address of `pod` (in `namespace`) is kept.
pub async fn keeps_address(kube: &kube::Client, namespace: &str, pod: &str, owner: &Owner) -> Result<bool> {
    let api: Api<StatefulSet> = Api::namespaced(kube.clone(), namespace);
    let sts = api
        .get_opt(&owner.name)
        .await
        .doing(format_args!("read StatefulSet {namespace}/{}", owner.name))?;
    let keep = wants(sts.as_ref(), owner, pod);
    tracing::debug!(%namespace, %pod, statefulset = %owner.name, keep, "StatefulSet pod address");
    Ok(keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sts(replicas: i32, start: Option<i32>, uid: &str) -> StatefulSet {
        let mut spec = json!({"replicas": replicas, "selector": {}, "template": {}, "serviceName": "s"});
        if let Some(s) = start {
            spec["ordinals"] = json!({"start": s});
        }
        serde_json::from_value(json!({"metadata": {"name": "web", "uid": uid}, "spec": spec})).unwrap()
    }

    #[test]
    fn ordinals_replicas_and_identity() {
        let owner = Owner {
            name: "web".into(),
            uid: Some("u1".into()),
        };
        assert!(wants(Some(&sts(2, None, "u1")), &owner, "web-1"));
        assert!(
            !wants(Some(&sts(2, None, "u1")), &owner, "web-2"),
            "scaled below the ordinal"
        );
        assert!(!wants(None, &owner, "web-0"), "deleted");
        assert!(
            !wants(Some(&sts(2, None, "u2")), &owner, "web-0"),
            "a new StatefulSet"
        );
        assert!(wants(Some(&sts(3, Some(10), "u1")), &owner, "web-12"));
        assert!(!wants(Some(&sts(3, Some(10), "u1")), &owner, "web-13"));
        assert!(!wants(Some(&sts(3, Some(10), "u1")), &owner, "web-0"));
        let by_name = owner_from_pod_name("my-web-3").unwrap();
        assert_eq!(by_name.name, "my-web");
        assert!(wants(Some(&sts(4, None, "any")), &by_name, "my-web-3"));
        assert!(owner_from_pod_name("web").is_none());
        assert!(owner_from_pod_name("web-x").is_none());
    }
}
