//! Writing IP CRs: the cluster-visible record of every allocation (`kubectl get ips`), named
//! like the switch port (`<pod>.<ns>`, `node-<node>`), which the pod and node reconcilers write
//! and the collector deletes. Reservations (user-created IP CRs) are the IP reconciler's,
//! [`super::cr`].

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::{is_true, keys};
use kube_ovn_api::crd::Ip;
use serde_json::json;

use crate::context::Context;
use crate::error::{Doing, Result};
use crate::ipam::Allocation;

/// The field manager the controller's writes of IP CRs name.
pub const FIELD_MANAGER: &str = "kube-ovn-controller";

/// One allocation as an IP CR.
pub struct IpRecord<'a> {
    pub name: &'a str,
    pub pod: &'a str,
    pub namespace: &'a str,
    pub subnet: &'a str,
    pub node: &'a str,
    pub alloc: &'a Allocation,
    /// `StatefulSet`, `VirtualMachine` or empty.
    pub pod_type: &'a str,
}

pub fn addresses(alloc: &Allocation) -> (String, String, String) {
    let v4 = alloc.v4.map(|a| a.to_string()).unwrap_or_default();
    let v6 = alloc.v6.map(|a| a.to_string()).unwrap_or_default();
    let both = [v4.as_str(), v6.as_str()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    (both, v4, v6)
}

impl IpRecord<'_> {
    fn spec(&self) -> serde_json::Value {
        let (ip_address, v4, v6) = addresses(self.alloc);
        json!({
            "podName": self.pod,
            "namespace": self.namespace,
            "subnet": self.subnet,
            "nodeName": self.node,
            "ipAddress": ip_address,
            "v4IpAddress": v4,
            "v6IpAddress": v6,
            "macAddress": self.alloc.mac.to_string(),
            "podType": self.pod_type,
            "attachIps": [],
            "attachMacs": [],
            "attachSubnets": [],
        })
    }

    fn labels(&self, reserved: bool) -> serde_json::Value {
        json!({
            keys::SUBNET_LABEL: self.subnet,
            keys::NODE_NAME_LABEL: self.node,
            self.subnet: "",
            keys::IP_RESERVED_LABEL: if reserved { "true" } else { "false" },
        })
    }
}

/// Whether the IP CR is one the controller wrote for a pod or node (label `ip_reserved=false`),
/// as opposed to a user's reservation.
pub fn is_controller_record(ip: &Ip) -> bool {
    ip.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::IP_RESERVED_LABEL))
        .is_some_and(|v| v == "false")
}

/// Whether the IP reconciler has anything to do with this IP CR: a reservation to make or keep,
/// or a deletion to finish through our finalizer. The controller's own records need nothing.
pub fn wants_reconcile(ip: &Ip) -> bool {
    if ip.metadata.deletion_timestamp.is_some() {
        ip.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == kube_ovn_api::crd::FINALIZER)
    } else {
        !is_controller_record(ip)
    }
}

/// Whether a user reserved this IP CR's address (label `ip_reserved=true`).
pub fn is_reserved(ip: &Ip) -> bool {
    is_true(ip.metadata.labels.as_ref(), keys::IP_RESERVED_LABEL)
}

/// Creates or updates the IP CR, skipping the write when the cached one already says the same.
/// A reservation stays one (its label is kept). A new record is created (a plain POST, cheaper
/// for the API server than an apply); a changed one is merge-patched, dropping the label of the
/// subnet it named before (Kube-OVN labels a record with its subnet's name).
pub async fn upsert_ip(ctx: &Context, record: &IpRecord<'_>) -> Result<()> {
    let spec = record.spec();
    let existing = ctx.stores.ips.get(&ObjectRef::new(record.name));
    let labels = record.labels(existing.as_deref().is_some_and(is_reserved));
    let api: Api<Ip> = Api::all(ctx.kube.clone());
    let mut label_patch = labels.as_object().cloned().unwrap_or_default();
    if let Some(existing) = &existing {
        let have = serde_json::to_value(&existing.spec).unwrap_or_default();
        let same_spec = without_empty(&spec) == without_empty(&have);
        let have_labels = existing.metadata.labels.clone().unwrap_or_default();
        let same_labels = label_patch
            .iter()
            .all(|(k, v)| have_labels.get(k).map(String::as_str) == v.as_str());
        if same_spec && same_labels {
            return Ok(());
        }
        if let Some(old) = existing.spec.subnet.as_deref()
            && old != record.subnet
            && have_labels.contains_key(old)
        {
            label_patch.insert(old.to_owned(), serde_json::Value::Null);
        }
    } else {
        let ip: Ip = serde_json::from_value(json!({
            "apiVersion": "kubeovn.io/v1",
            "kind": "IP",
            "metadata": {"name": record.name, "labels": labels},
            "spec": spec,
        }))
        .map_err(|e| crate::error::Error::Invalid(format!("IP {}: {e}", record.name)))?;
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match api.create(&params, &ip).await {
            Ok(_) => return Ok(()),
            // Written meanwhile (the cache lags): updated below.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).doing(format_args!("create IP {}", record.name)),
        }
    }
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch(
        record.name,
        &params,
        &Patch::Merge(json!({"metadata": {"labels": label_patch}, "spec": spec})),
    )
    .await
    .doing(format_args!("update IP {}", record.name))?;
    Ok(())
}

/// An object's members without empty strings and lists: an absent field reads the same.
fn without_empty(v: &serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| {
                    !(v.as_str() == Some("") || v.as_array().is_some_and(Vec::is_empty) || v.is_null())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes an IP CR; gone already is fine.
pub async fn delete_ip(ctx: &Context, name: &str) -> Result<()> {
    let api: Api<Ip> = Api::all(ctx.kube.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).doing(format_args!("delete IP {name}")),
    }
}
