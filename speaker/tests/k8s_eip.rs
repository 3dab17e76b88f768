//! A VPC NAT gateway's EIP with the `kube-ovn-speaker` binary, a real kube-apiserver and a BIRD ToR,
//! every object written as Kube-OVN writes it: the gateway's StatefulSet pod
//! `vpc-nat-gw-<gw>-0` in kube-system (labels `app=vpc-nat-gw-<gw>`,
//! `ovn.kubernetes.io/vpc-nat-gw=true`, annotation `ovn.kubernetes.io/vpc_nat_gw=<gw>`) and the
//! IptablesEIP with its labels, spec and status. The EIP is announced by the speaker of the node
//! where the gateway pod runs, withdrawn when the pod moves away or stops running, and
//! announced again when it comes back. Needs root (namespaces) and bird2; fails, never skips.

mod common;

use anyhow::{Context, Result};
use common::k8s::{Cluster, speaker, wait_route};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_V4, TOR_V4};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_ovn_api::crd::IptablesEIP;
use serde_json::json;

const EIP: &str = "203.0.113.5/32";

fn gateway_pod(node: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "vpc-nat-gw-gw1-0", "namespace": "kube-system",
            "labels": {"app": "vpc-nat-gw-gw1", "ovn.kubernetes.io/vpc-nat-gw": "true",
                "statefulset.kubernetes.io/pod-name": "vpc-nat-gw-gw1-0"},
            "annotations": {"ovn.kubernetes.io/vpc_nat_gw": "gw1",
                "k8s.v1.cni.cncf.io/networks": "kube-system/ovn-vpc-external-network",
                "ovn.kubernetes.io/logical_switch": "vpc1-subnet1",
                "ovn.kubernetes.io/ip_address": "10.0.1.254"}},
        "spec": {"nodeName": node, "containers": [{"name": "vpc-nat-gw", "image": "kubeovn/vpc-nat-gateway"}]}
    }))?)
}

/// Creates the gateway pod on `node` and marks it Running, as the kubelet would (the API
/// server sets a new pod's phase to Pending whatever the request says).
async fn start_gateway(pods: &Api<Pod>, node: &str) -> Result<()> {
    pods.create(&PostParams::default(), &gateway_pod(node)?).await?;
    set_phase(pods, "Running").await
}

async fn set_phase(pods: &Api<Pod>, phase: &str) -> Result<()> {
    let status = json!({"status": {"phase": phase}});
    pods.patch_status(
        "vpc-nat-gw-gw1-0",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await?;
    Ok(())
}

fn wait_eip(bird: &Bird, speaker: &common::k8s::Speaker, present: bool) -> Result<()> {
    wait_route(bird, speaker, EIP, present)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eip_is_announced_from_the_node_of_its_nat_gateway_pod() -> Result<()> {
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut speaker = speaker(&cluster, &lab, dir.path(), &[])?;
    bird.wait_established().with_context(|| speaker.log_tail(20))?;

    let eips: Api<IptablesEIP> = Api::all(cluster.kube.clone());
    let eip: IptablesEIP = serde_json::from_value(json!({
        "apiVersion": "kubeovn.io/v1", "kind": "IptablesEIP",
        "metadata": {"name": "eip1", "annotations": {"ovn.kubernetes.io/bgp": "true"},
            "finalizers": ["kubeovn.io/kube-ovn-controller"],
            "labels": {"ovn.kubernetes.io/subnet": "ovn-vpc-external-network",
                "ovn.kubernetes.io/eip_v4_ip": "203.0.113.5",
                "ovn.kubernetes.io/vpc-nat-gw-name": "gw1"}},
        "spec": {"natGwDp": "gw1", "v4ip": "203.0.113.5", "macAddress": "00:00:00:5e:00:01",
            "externalSubnet": "ovn-vpc-external-network"}
    }))?;
    eips.create(&PostParams::default(), &eip).await?;
    let status = json!({"status": {"ready": true, "ip": "203.0.113.5", "nat": "fip"}});
    eips.patch_status("eip1", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    let pods: Api<Pod> = Api::namespaced(cluster.kube.clone(), "kube-system");
    start_gateway(&pods, "n1").await?;

    // The gateway runs on this node (n1): its EIP goes out with the node as next hop.
    wait_eip(&bird, &speaker, true)?;
    let route = bird.route_all(EIP)?;
    assert!(route.contains(&format!("BGP.next_hop: {NODE_V4}")), "{route}");

    // The pod is rescheduled to n2: this speaker withdraws it.
    cluster.delete_pod("kube-system", "vpc-nat-gw-gw1-0").await?;
    start_gateway(&pods, "n2").await?;
    wait_eip(&bird, &speaker, false)?;

    // Back on n1, then no longer running there.
    cluster.delete_pod("kube-system", "vpc-nat-gw-gw1-0").await?;
    start_gateway(&pods, "n1").await?;
    wait_eip(&bird, &speaker, true)?;
    set_phase(&pods, "Failed").await?;
    wait_eip(&bird, &speaker, false)?;
    speaker.daemon.check_alive()?;
    Ok(())
}
