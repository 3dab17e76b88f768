//! Declarative peers: a `BgpPeer` selecting this node by label becomes a session with its own
//! communities, reports its state in `status.nodes.<node>`, shows in the metrics, and goes away
//! when the node's labels stop matching; a status the API server could not take (it was away)
//! is written once it is back, though nothing changes meanwhile. The real binary, a real
//! kube-apiserver and a BIRD ToR in network namespaces. Needs root and bird2; fails, never skips.

mod common;

use anyhow::{Context, Result};
use common::k8s::{ApiProxy, Cluster, speaker_via, speaker_without_peers};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_V4, TOR_AS, TOR_V4};
use k8s_openapi::api::core::v1::Node;
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

    // A spec that turns invalid stops the session and says why; fixed, the session returns.
    let bad = json!({"spec": {"peerAddress": "198.51.100.300"}});
    peers
        .patch("tor-a", &PatchParams::default(), &Patch::Merge(&bad))
        .await?;
    wait_until("BIRD to lose the session of the invalid spec", WAIT, || {
        Ok(!bird.established()?)
    })
    .with_context(|| speaker.log_tail(20))?;
    wait_until("status.nodes.n1 Invalid, naming the field", WAIT, || {
        let object = futures_lite_block(peers.get_status("tor-a"))?;
        let entry = serde_json::to_value(object.status)?["nodes"]["n1"].clone();
        Ok(entry["state"] == "Invalid"
            && entry["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("spec.peerAddress")))
    })?;
    let good = json!({"spec": {"peerAddress": TOR_V4.to_string()}});
    peers
        .patch("tor-a", &PatchParams::default(), &Patch::Merge(&good))
        .await?;
    bird.wait_established().with_context(|| speaker.log_tail(30))?;
    wait_until("status.nodes.n1 Established again", WAIT, || {
        let object = futures_lite_block(peers.get_status("tor-a"))?;
        let status = serde_json::to_value(object.status)?;
        Ok(status["nodes"]["n1"]["state"] == "Established")
    })?;

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

/// The value of the series `series` (name and labels, as printed) in the metrics text.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_the_api_server_missed_is_written_when_it_is_back() -> Result<()> {
    let lab = Lab::direct()?;
    // No KEEPALIVE for hours (hold time 65535 s): once the session is back, nothing about it
    // changes, so only a retry of its own can get the status written.
    let bird = Bird::start(
        &lab.tor,
        &PeerSpec {
            hold_time: 65535,
            ..PeerSpec::new(TOR_V4, NODE_V4)
        },
    )?;
    let cluster = Cluster::start().await?;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"rack": "r1"}}}))?;
    Api::<Node>::all(cluster.kube.clone())
        .create(&PostParams::default(), &node)
        .await?;
    let proxy = ApiProxy::start(cluster.addr).await?;
    let dir = tempfile::tempdir()?;
    let speaker = speaker_via(
        &cluster.kubeconfig_for(proxy.addr)?,
        &lab,
        dir.path(),
        &["--holdtime=65535s"],
    )?;
    let peers: Api<BgpPeer> = Api::all(cluster.kube.clone());
    let peer: BgpPeer = serde_json::from_value(json!({
        "apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpPeer", "metadata": {"name": "tor-a"},
        "spec": {"peerAddress": TOR_V4.to_string(), "peerASN": TOR_AS,
                 "nodeSelector": {"matchLabels": {"rack": "r1"}}}}))?;
    peers.create(&PostParams::default(), &peer).await?;
    let node_status = || -> Result<serde_json::Value> {
        let object = futures_lite_block(peers.get_status("tor-a"))?;
        Ok(serde_json::to_value(object.status)?["nodes"]["n1"].clone())
    };
    wait_until("status.nodes.n1 Established", WAIT, || {
        Ok(node_status()?["state"] == "Established")
    })
    .with_context(|| speaker.log_tail(30))?;
    assert_eq!(node_status()?["lastError"], serde_json::Value::Null);
    let updates = format!("kube_ovn_speaker_bgp_peer_received_messages{{peer=\"{TOR_V4}\",type=\"update\"}}");
    // BIRD's End-of-RIBs (one per family) close the first session's start.
    let mut first_session = 0.0;
    wait_until("BIRD's End-of-RIB", WAIT, || {
        first_session = metric(&speaker.metrics()?, &updates).unwrap_or_default();
        Ok(first_session >= 1.0)
    })?;

    // The API server goes away; meanwhile BIRD drops the session and takes it back.
    proxy.down();
    bird.birdc(&["disable", "node"])?;
    let peer_series = |name: &str| format!("kube_ovn_speaker_{name}{{peer=\"{TOR_V4}\"}}");
    wait_until("the speaker to count the flap", WAIT, || {
        Ok(metric(&speaker.metrics()?, &peer_series("bgp_peer_flap_count")) == Some(1.0))
    })?;
    bird.birdc(&["enable", "node"])?;
    // Back up, BIRD's End-of-RIBs of the new session received and nothing left to write:
    // from here on the session's status does not change.
    wait_until("the session back and settled", WAIT, || {
        let m = speaker.metrics()?;
        Ok(metric(&m, &peer_series("bgp_peer_up")) == Some(1.0)
            && metric(&m, &peer_series("bgp_peer_out_queue")) == Some(0.0)
            && metric(&m, &updates) == Some(2.0 * first_session))
    })
    .with_context(|| speaker.metrics().unwrap_or_default())?;
    assert!(
        node_status()?["lastError"].is_null(),
        "nothing could be written while the API server was away"
    );
    // Two more failed writes (each a warning in the speaker's log: the proxy passes TLS through
    // and cannot see them): at least one was made after the last change, with the state that
    // is final. A speaker that only writes on a change makes none after that.
    let failed_writes = || {
        speaker
            .daemon
            .log()
            .matches("status not written; will retry")
            .count()
    };
    let failed = failed_writes();
    wait_until("the speaker to try the status again", WAIT, || {
        Ok(failed_writes() >= failed + 2)
    })
    .with_context(|| speaker.log_tail(20))?;

    proxy.up();
    let mut reported = serde_json::Value::Null;
    wait_until("the missed status written after the outage", WAIT, || {
        reported = node_status()?;
        Ok(reported["state"] == "Established"
            && reported["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("NOTIFICATION received")))
    })
    .with_context(|| format!("last status: {reported}\n{}", speaker.log_tail(30)))?;
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
