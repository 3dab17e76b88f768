//! `externalTrafficPolicy: Local` against a real ToR: two `kube-ovn-speaker` binaries (nodes `na`
//! and `nb`), a real kube-apiserver and BIRD with a session to each. A `Local` LoadBalancer
//! Service annotated `bgp: "true"` is learned only from the speaker of the node with its ready
//! endpoint (its EndpointSlice's `nodeName`), follows the endpoint to the other node, and is
//! withdrawn everywhere when the endpoint is not ready; a `Cluster` Service beside it is learned
//! from both all along. Needs root and bird2; fails, never skips.

mod common;

use anyhow::Result;
use common::gateways::TwoGateways;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const LOCAL_IP: &str = "203.0.113.30";
const CLUSTER_IP: &str = "203.0.113.31";

/// A LoadBalancer Service in `default` announced by annotation, with `policy` and ingress `ip`.
async fn service(lab: &TwoGateways, name: &str, policy: &str, ip: &str) -> Result<()> {
    let api: Api<Service> = Api::namespaced(lab.cluster.kube.clone(), "default");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default",
        "annotations": {"ovn.kubernetes.io/bgp": "true"}},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": policy, "ports": [{"port": 80}]}}))?;
    api.create(&PostParams::default(), &svc).await?;
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// The EndpointSlice of `service` with one endpoint on `node`, ready or not.
fn slice(service: &str, node: &str, ready: bool) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-x"), "namespace": "default",
            "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4", "ports": [{"port": 80}],
        "endpoints": [{"addresses": ["10.16.0.5"], "nodeName": node, "conditions": {"ready": ready}}]})
}

async fn put_slice(lab: &TwoGateways, value: Value) -> Result<()> {
    let api: Api<EndpointSlice> = Api::namespaced(lab.cluster.kube.clone(), "default");
    let name = value["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    api.patch(&name, &PatchParams::apply("test").force(), &Patch::Apply(&value))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_service_is_announced_only_from_its_endpoints_node_and_follows_it() -> Result<()> {
    let lab = TwoGateways::start().await?;
    service(&lab, "local", "Local", LOCAL_IP).await?;
    service(&lab, "spread", "Cluster", CLUSTER_IP).await?;
    put_slice(&lab, slice("local", "na", true)).await?;
    // `spread`'s endpoint is on na too: Cluster ignores where it is.
    put_slice(&lab, slice("spread", "na", true)).await?;
    let local = format!("{LOCAL_IP}/32");
    let cluster = format!("{CLUSTER_IP}/32");
    tokio::task::block_in_place(|| -> Result<()> {
        lab.wait_learned(&local, &["node_a"])?;
        lab.wait_learned(&cluster, &["node_a", "node_b"])
    })?;

    // The endpoint moves to nb: so does the route.
    put_slice(&lab, slice("local", "nb", true)).await?;
    tokio::task::block_in_place(|| lab.wait_learned(&local, &["node_b"]))?;

    // Not ready: nobody announces it; the Cluster Service stays on both.
    put_slice(&lab, slice("local", "nb", false)).await?;
    tokio::task::block_in_place(|| -> Result<()> {
        lab.wait_learned(&local, &[])?;
        anyhow::ensure!(
            lab.learned_from(&cluster).len() == 2,
            "the Cluster Service: {:?}",
            lab.learned_from(&cluster)
        );
        Ok(())
    })?;

    // Back to Cluster: both announce it again, endpoint or not.
    Api::<Service>::namespaced(lab.cluster.kube.clone(), "default")
        .patch(
            "local",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"externalTrafficPolicy": "Cluster"}})),
        )
        .await?;
    tokio::task::block_in_place(|| lab.wait_learned(&local, &["node_a", "node_b"]))?;
    Ok(())
}
