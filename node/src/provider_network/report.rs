//! How a pass is reported, as Kube-OVN's daemon does: the Node's provider-network labels, the
//! daemon pod's `<pn>.provider-network.kubernetes.io/err_mesg`, a Warning event
//! `InitOVSBridgeFailed` on the ProviderNetwork, and the retry backoff.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node as K8sNode, Pod};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Resource, ResourceExt};
use kube_ovn_api::annotations::keys::provider_network_error_annotation;
use kube_ovn_api::crd::ProviderNetwork;
use tokio::time::Instant;

use super::plan::{self, Outcome};
use super::{BACKOFF, ProviderNetworks, State};

impl ProviderNetworks {
    /// Labels, err_mesg, Warning event and backoff for one pass's result.
    pub(super) async fn report(
        &self,
        state: &mut State,
        pn: &ProviderNetwork,
        node: &K8sNode,
        outcome: &Outcome,
        error: Option<String>,
        nic: Option<&str>,
    ) {
        let name = pn.name_any();
        self.patch_labels(node, &plan::labels(&name, outcome)).await;
        self.set_err_mesg(state, &name, error.as_deref()).await;
        let Some(error) = error else {
            state.backoff.remove(&name);
            state.reported.remove(&name);
            return;
        };
        tracing::warn!(error = %error, "provider network not ready on this node");
        let delay = state
            .backoff
            .get(&name)
            .map_or(BACKOFF.0, |(_, d)| (*d * 2).min(BACKOFF.1));
        state
            .backoff
            .insert(name.clone(), (Instant::now() + delay, delay));
        if state.reported.get(&name) == Some(&error) {
            return;
        }
        state.reported.insert(name.clone(), error.clone());
        // Kube-OVN's reason and text (pkg/daemon/controller.go initProviderNetwork).
        let note = format!(
            "Failed to initialize provider network: node={} interface={} error={error}",
            self.settings.node_name,
            nic.unwrap_or_default()
        );
        let reporter = Reporter {
            controller: "kube-ovn-cni".into(),
            instance: Some(self.settings.node_name.clone()),
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "InitOVSBridgeFailed".into(),
            note: Some(note),
            action: "InitProviderNetwork".into(),
            secondary: None,
        };
        let recorder = Recorder::new(self.kube.clone(), reporter);
        if let Err(e) = recorder.publish(&event, &pn.object_ref(&())).await {
            tracing::debug!(error = %e, "cannot publish event");
        }
    }

    /// Merge-patches this node's labels where they differ.
    pub(super) async fn patch_labels(&self, node: &K8sNode, labels: &BTreeMap<String, Option<String>>) {
        let current = node.labels();
        let changes: BTreeMap<&String, &Option<String>> = labels
            .iter()
            .filter(|(k, v)| current.get(*k) != v.as_ref())
            .collect();
        if changes.is_empty() {
            return;
        }
        let patch = serde_json::json!({ "metadata": { "labels": changes } });
        let api: Api<K8sNode> = Api::all(self.kube.clone());
        if let Err(e) = api
            .patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(error = %e, "cannot patch the provider network labels of this node");
        }
    }

    /// Sets or removes `<pn>.provider-network.kubernetes.io/err_mesg` on the daemon's own pod,
    /// when it differs from what this daemon last wrote (a merge patch: no read needed).
    pub(super) async fn set_err_mesg(&self, state: &mut State, pn: &str, error: Option<&str>) {
        let Some((namespace, name)) = &self.settings.pod else {
            return;
        };
        let wanted = error.map(str::to_owned);
        if state.err_mesg.get(pn) == Some(&wanted) {
            return;
        }
        let key = provider_network_error_annotation(pn);
        let api: Api<Pod> = Api::namespaced(self.kube.clone(), namespace);
        let patch = serde_json::json!({ "metadata": { "annotations": { key: error } } });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                state.err_mesg.insert(pn.to_owned(), wanted);
            }
            Err(e) => {
                tracing::warn!(error = %e, pod = %name, "cannot annotate this daemon's pod with the provider network error");
            }
        }
    }
}
