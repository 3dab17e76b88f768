//! The `kube-ovn-speaker` binary against a real kube-apiserver and a BIRD ToR: what the
//! `ovn.kubernetes.io/bgp` annotation announces (Kube-OVN's `cluster`/`local` semantics for pods
//! and subnets, Services), changes taking effect without a restart, and the next hop following
//! the node's source address. Needs root (namespaces) and bird2; fails, never skips.

mod common;

use anyhow::{Context, Result};
use common::k8s::{Cluster, speaker, wait_route};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_AS, NODE_V4, TOR_V4};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_ovn_testkit::wait_until;
use serde_json::{Value, json};

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bgp_annotation_decides_what_the_tor_learns() -> Result<()> {
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut speaker = speaker(&cluster, &lab, dir.path(), &["--announce-cluster-ip"])?;
    bird.wait_established().with_context(|| speaker.log_tail(20))?;

    // cluster: the subnet's CIDR and every pod, whichever node it runs on.
    cluster.subnet("s1", "10.16.0.0/16", "cluster").await?;
    cluster.pod("here", "n1", "10.16.0.5", &[]).await?;
    cluster.pod("there", "n2", "10.16.0.6", &[]).await?;
    for prefix in ["10.16.0.0/16", "10.16.0.5/32", "10.16.0.6/32"] {
        wait_route(&bird, &speaker, prefix, true)?;
    }
    let route = bird.route_all("10.16.0.5/32")?;
    assert!(route.contains(&format!("BGP.next_hop: {NODE_V4}")), "{route}");
    assert!(route.contains(&format!("BGP.as_path: {NODE_AS}")), "{route}");

    // Switching the subnet to local takes effect without a restart: no CIDR, only this node's pod.
    cluster.subnet("s1", "10.16.0.0/16", "local").await?;
    wait_route(&bird, &speaker, "10.16.0.0/16", false)?;
    wait_route(&bird, &speaker, "10.16.0.6/32", false)?;
    assert!(bird.has("10.16.0.5/32")?, "the local pod stays");
    // A pod's own annotation wins over its subnet's.
    cluster
        .pod("mine", "n2", "10.16.0.7", &[("ovn.kubernetes.io/bgp", "cluster")])
        .await?;
    wait_route(&bird, &speaker, "10.16.0.7/32", true)?;
    // A deleted pod is withdrawn.
    cluster.delete_pod("default", "here").await?;
    wait_route(&bird, &speaker, "10.16.0.5/32", false)?;

    // Services: the literal "true", ClusterIPs with --announce-cluster-ip, LoadBalancer IPs
    // (the API server takes status.loadBalancer only on a Service of type LoadBalancer).
    let services: Api<Service> = Api::namespaced(cluster.kube.clone(), "default");
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "web", "annotations": {"ovn.kubernetes.io/bgp": "true"}},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
            "ports": [{"port": 80}]}}),
    )?;
    services.create(&PostParams::default(), &svc).await?;
    wait_route(&bird, &speaker, "10.96.0.10/32", true)?;
    let lb = json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.80"}]}}});
    services
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&lb))
        .await?;
    wait_route(&bird, &speaker, "192.0.2.80/32", true)?;
    let unannotate = json!({"metadata": {"annotations": {"ovn.kubernetes.io/bgp": Value::Null}}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&unannotate))
        .await?;
    wait_route(&bird, &speaker, "10.96.0.10/32", false)?;
    wait_route(&bird, &speaker, "192.0.2.80/32", false)?;

    // The next hop follows the kernel's source toward the ToR: a new preferred source address
    // replaces the announced next hop while the session stays up.
    lab.node.ip(&["addr", "add", "198.51.100.3/24", "dev", "eth0"])?;
    lab.node.ip(&[
        "route",
        "replace",
        &format!("{TOR_V4}/32"),
        "dev",
        "eth0",
        "src",
        "198.51.100.3",
    ])?;
    wait_until("the ToR to see next hop 198.51.100.3", WAIT, || {
        Ok(bird
            .route_all("10.16.0.7/32")?
            .contains("BGP.next_hop: 198.51.100.3"))
    })
    .with_context(|| speaker.log_tail(20))?;
    assert!(bird.established()?, "the session stayed up");
    speaker.daemon.check_alive()?;
    Ok(())
}
