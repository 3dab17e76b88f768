//! ProviderNetworks: the controller keeps their status (`readyNodes`, `notReadyNodes`, `ready`,
//! one `Ready` condition per node) from what the daemons report — the node label
//! `<pn>.provider-network.kubernetes.io/ready` and the `err_mesg` annotation of the node's
//! kube-ovn-cni pod ([`status`]). Runs on a change of the network, of a node's labels, of a
//! kube-ovn-cni pod's annotations, and every 30 s as Kube-OVN's resync does. `status.vlans` is the
//! Vlan reconciler's ([`super::vlan`]). No finalizer (Kube-OVN has none): the daemons give the
//! NIC back on their own once the object is gone.
//!
//! An unusable spec is a Warning event `InvalidProviderNetwork` naming the field, a `Validated`
//! False condition without a node, and a log line; no node status is computed from it.

pub mod status;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::keys::provider_network_error_annotation;
use kube_ovn_api::crd::{ProviderNetwork, ProviderNetworkStatus};
use serde_json::json;

use crate::context::Context;
use crate::error::{Error, Result};
use status::{CniPod, NodeView, REASON_INVALID, invalid_status, plan_status, validate};

pub const KIND: &str = "ProviderNetwork";

/// Kube-OVN resyncs every provider network's status this often (`controller.go`).
pub const RESYNC: Duration = Duration::from_secs(30);

/// The label of the daemon's pods (`deploy/base/cni.yaml`, Kube-OVN's).
pub const CNI_POD_APP: &str = "kube-ovn-cni";

/// Whether `pod` is a kube-ovn-cni pod of the controller's namespace, where the daemons run.
pub fn is_cni_pod(pod: &Pod, namespace: &str) -> bool {
    pod.namespace().as_deref() == Some(namespace)
        && pod.labels().get("app").map(String::as_str) == Some(CNI_POD_APP)
}

pub async fn reconcile(pn: Arc<ProviderNetwork>, ctx: Arc<Context>) -> Result<Action> {
    let name = pn.name_any();
    if pn.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    if let Err(message) = validate(&pn) {
        tracing::warn!(reason = REASON_INVALID, %message, "provider network refused");
        // Once per new message (not every retry): the condition remembers what was said.
        if let Some(s) = invalid_status(&pn, &message, &now) {
            warn(&ctx, &pn, &message).await;
            write_status(&ctx, &name, &s).await?;
        }
        return Err(Error::Invalid(message));
    }
    let nodes = ctx.stores.nodes.state();
    let empty = BTreeMap::new();
    let views: Vec<NodeView<'_>> = nodes
        .iter()
        .filter(|n| n.meta().deletion_timestamp.is_none())
        .map(|n| NodeView {
            name: n.metadata.name.as_deref().unwrap_or_default(),
            labels: n.metadata.labels.as_ref().unwrap_or(&empty),
        })
        .collect();
    let pods = ctx.stores.pods.state();
    let key = provider_network_error_annotation(&name);
    // Kube-OVN keys the pods by node; of two on one node (a rollout) the last listed wins.
    let cni: BTreeMap<&str, CniPod<'_>> = pods
        .iter()
        .filter(|p| is_cni_pod(p, &ctx.config.lease_namespace))
        .filter_map(|p| {
            let node = p.spec.as_ref()?.node_name.as_deref()?;
            let msg = p.metadata.annotations.as_ref().and_then(|a| a.get(&key));
            Some((node, CniPod::Found(msg.map(String::as_str))))
        })
        .collect();
    if let Some(s) = plan_status(&pn, &views, &cni, &now) {
        write_status(&ctx, &name, &s).await?;
    }
    Ok(Action::requeue(RESYNC))
}

/// A merge patch of the fields this reconciler owns (not `vlans`: the Vlan reconciler's). Empty
/// lists are removed, as Kube-OVN's `omitempty` leaves them out.
async fn write_status(ctx: &Context, name: &str, s: &ProviderNetworkStatus) -> Result<()> {
    let patch = json!({
        "readyNodes": s.ready_nodes,
        "notReadyNodes": s.not_ready_nodes,
        "ready": s.ready,
        "conditions": s.conditions,
    });
    crate::reconcile::merge_status::<ProviderNetwork>(&ctx.kube, name, &patch).await
}

async fn warn(ctx: &Context, pn: &ProviderNetwork, message: &str) {
    let event = Event {
        type_: EventType::Warning,
        reason: REASON_INVALID.into(),
        note: Some(message.to_owned()),
        action: "Validate".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &pn.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}
