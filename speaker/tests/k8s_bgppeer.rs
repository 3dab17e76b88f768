//! Declarative peers: a `BgpPeer` selecting this node by label becomes a session with its own
//! communities, reports its state in `status.nodes.<node>`, shows in the metrics, and goes away
//! when the node's labels stop matching. The real binary, the API emulator and a BIRD ToR in
//! network namespaces. Needs root and bird2; fails, never skips.

mod common;

use anyhow::{Context, Result};
use common::k8s::{Cluster, speaker_without_peers};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_V4, TOR_AS, TOR_V4};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_ovn_speaker::crd::BgpPeer;
use kube_ovn_testkit::wait_until;
use serde_json::json;

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bgp_peer_object_selects_the_node_and_reports_back() -> Result<()> {
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    Api::<CustomResourceDefinition>::all(cluster.kube.clone())
        .create(&PostParams::default(), &kube_ovn_speaker::crd::crd())
        .await?;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"rack": "r1"}}}))?;
    let nodes: Api<Node> = Api::all(cluster.kube.clone());
    nodes.create(&PostParams::default(), &node).await?;
    let dir = tempfile::tempdir()?;
    let speaker = speaker_without_peers(&cluster, &lab, dir.path(), &[])?;
    cluster.subnet("s1", "10.16.0.0/16", "cluster").await?;

    let peers: Api<BgpPeer> = Api::all(cluster.kube.clone());
    let peer: BgpPeer = serde_json::from_value(json!({
        "apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpPeer", "metadata": {"name": "tor-a"},
        "spec": {"peerAddress": TOR_V4.to_string(), "peerASN": TOR_AS,
                 "nodeSelector": {"matchLabels": {"rack": "r1"}},
                 "communities": ["65001:100", "no-export"], "largeCommunities": ["65001:1:2"]}}))?;
    peers.create(&PostParams::default(), &peer).await?;
    bird.wait_established().with_context(|| speaker.log_tail(30))?;
    wait_until("the subnet at the ToR", WAIT, || bird.has("10.16.0.0/16"))
        .with_context(|| speaker.log_tail(20))?;
    let route = bird.route_all("10.16.0.0/16")?;
    assert!(
        route.contains("(65001,100)") && route.contains("(65535,65281)"),
        "communities: {route}"
    );
    assert!(route.contains("(65001, 1, 2)"), "large community: {route}");

    // The object says how the session is on this node.
    let mut reported = String::new();
    wait_until("status.nodes.n1 Established with one prefix", WAIT, || {
        let object = futures_lite_block(peers.get_status("tor-a"))?;
        let status = serde_json::to_value(object.status)?;
        reported = status.to_string();
        Ok(status["nodes"]["n1"]["state"] == "Established" && status["nodes"]["n1"]["prefixesSent"] == 1)
    })
    .with_context(|| format!("last status: {reported}"))?;
    let metrics = speaker.metrics()?;
    assert!(
        metrics.contains(&format!("kube_ovn_speaker_bgp_peer_up{{peer=\"{TOR_V4}\"}} 1")),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "kube_ovn_speaker_bgp_peer_prefixes_announced{{peer=\"{TOR_V4}\"}} 1"
        )),
        "{metrics}"
    );

    // The node leaves the rack: the peer is de-configured (Cease) and its status entry goes.
    let relabel = json!({"metadata": {"labels": {"rack": "r2"}}});
    nodes
        .patch("n1", &PatchParams::default(), &Patch::Merge(&relabel))
        .await?;
    wait_until("BIRD to lose the session", WAIT, || Ok(!bird.established()?))
        .with_context(|| speaker.log_tail(20))?;
    wait_until("status.nodes.n1 removed", WAIT, || {
        let object = futures_lite_block(peers.get_status("tor-a"))?;
        Ok(object.status.is_none_or(|s| !s.nodes.contains_key("n1")))
    })?;
    let metrics = speaker.metrics()?;
    assert!(
        !metrics.contains(&format!("peer=\"{TOR_V4}\"")),
        "a removed peer's series go: {metrics}"
    );
    let mut speaker = speaker;
    speaker.daemon.check_alive()?;
    Ok(())
}

/// Runs a kube future to completion from the (blocking) wait loop.
fn futures_lite_block<T>(f: impl Future<Output = Result<T, kube::Error>>) -> Result<T> {
    Ok(tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(f)
    })?)
}
