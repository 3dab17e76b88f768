//! The node daemon's live QoS with a rate the controller refuses, through the real shim,
//! daemon, controller, OVS and ovn-controller (see `common`). Needs root and the OVS/OVN
//! packages (scripts/install-deps.sh); fails, never skips, without them.

mod common;

use anyhow::Result;
use common::{Cluster, WAIT};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube_ovn_testkit::{wait_until, wait_until_async};
use serde_json::json;

/// `egress_rate: "2.5"` on a running pod: the controller accepts only whole Mbit/s, and the
/// daemon, which parsed floats, used to apply 2500 kbit/s live while every controller
/// reconcile of the pod failed. Now both read the rates the same way: the port keeps its rates
/// and the pod gets a Warning event from the daemon naming the annotation; a whole value then
/// applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fractional_rate_is_refused_with_an_event_and_the_port_keeps_its_rates() -> Result<()> {
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    let pod = cluster
        .pod("default", "q", 0, &[("ovn.kubernetes.io/egress_rate", "5")])
        .await?;
    let nic = format!("{}_h", &pod.sandbox.container_id[..12]);
    assert_eq!(node.iface_column(&nic, "ingress_policing_rate")?, "5000");

    let pods: Api<Pod> = Api::namespaced(cluster.kube.clone(), "default");
    let patch = json!({"metadata": {"annotations": {"ovn.kubernetes.io/egress_rate": "2.5"}}});
    pods.patch("q", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let events = Api::<Event>::namespaced(cluster.kube.clone(), "default");
    wait_until_async("a QoSAnnotationInvalid event on the pod", WAIT, || async {
        Ok(events.list(&ListParams::default()).await?.items.iter().any(|e| {
            e.reason.as_deref() == Some("QoSAnnotationInvalid")
                && e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("q")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("ovn.kubernetes.io/egress_rate") && n.contains("2.5"))
        }))
    })
    .await?;
    assert_eq!(
        node.iface_column(&nic, "ingress_policing_rate")?,
        "5000",
        "the refused rate was applied"
    );

    let patch = json!({"metadata": {"annotations": {"ovn.kubernetes.io/egress_rate": "3"}}});
    pods.patch("q", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_until("egress_rate 3 applied", WAIT, || {
        Ok(node.iface_column(&nic, "ingress_policing_rate")? == "3000")
    })?;
    Ok(())
}
