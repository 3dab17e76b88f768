//! The speaker with the identity and the RBAC that `deploy/base/rbac.yaml` gives it: a real
//! kube-apiserver authorizes with RBAC, the binary authenticates as the ServiceAccount
//! `kube-system/kube-ovn-speaker` (a TokenRequest token) and does its work: a BgpPeer selecting
//! its node with an MD5 password from a Secret in kube-system, a session to BIRD, a subnet, a
//! pod (with its IP record) and a Service announced, OvnEips watched, an external IP refused
//! with a Warning event, the BgpPeer's status written. Any call its roles do not grant is a 403 in the API
//! server's audit log, and the test fails naming it. Needs root and bird2; fails, never skips.

mod common;

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use common::k8s::{Cluster, speaker_via};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_V4, TOR_AS, TOR_V4};
use k8s_openapi::api::core::v1::{Node, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::PostParams;
use kube_ovn_lab::kubernetes::audit::AuditedRequest;
use kube_ovn_speaker::crd::BgpPeer;
use kube_ovn_testkit::wait_until;
use serde_json::json;

const USER: &str = "system:serviceaccount:kube-system:kube-ovn-speaker";
const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The speaker's requests the API server refused, from its audit log.
fn speaker_denials(cluster: &Cluster) -> Vec<AuditedRequest> {
    cluster
        .server
        .denials()
        .into_iter()
        .filter(|r| r.user == USER)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_speaker_needs_no_permission_its_roles_lack() -> Result<()> {
    let lab = Lab::direct()?;
    let mut spec = PeerSpec::new(TOR_V4, NODE_V4);
    spec.password = Some("s3cret".into());
    let bird = Bird::start(&lab.tor, &spec)?;
    let cluster = Cluster::start().await?;
    let admin = cluster.kube.clone();
    let identity = cluster.speaker_identity().await?;

    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"rack": "r1"}}}))?;
    Api::<Node>::all(admin.clone())
        .create(&PostParams::default(), &node)
        .await?;
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "tor-md5", "namespace": "kube-system"},
        "data": {"password": "czNjcmV0"}}),
    )?; // base64 of s3cret
    Api::<Secret>::namespaced(admin.clone(), "kube-system")
        .create(&PostParams::default(), &secret)
        .await?;
    let peer: BgpPeer = serde_json::from_value(json!({
        "apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpPeer", "metadata": {"name": "tor-a"},
        "spec": {"peerAddress": TOR_V4.to_string(), "peerASN": TOR_AS,
                 "nodeSelector": {"matchLabels": {"rack": "r1"}},
                 "passwordSecretRef": {"name": "tor-md5", "namespace": "kube-system"}}}))?;
    let peers: Api<BgpPeer> = Api::all(admin.clone());
    peers.create(&PostParams::default(), &peer).await?;
    cluster.subnet("s1", "10.16.0.0/16", "cluster").await?;
    cluster.pod("p1", "n1", "10.16.0.5", &[]).await?;
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default",
            "annotations": {"ovn.kubernetes.io/bgp": "true"}},
        "spec": {"clusterIP": "10.96.0.20", "externalIPs": ["203.0.113.7", "192.0.2.99"], "ports": [{"port": 80}]}}))?;
    Api::<Service>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &svc)
        .await?;

    let dir = tempfile::tempdir()?;
    // 192.0.2.99 lies outside the allowed CIDRs: refused, with a Warning event.
    let speaker = speaker_via(
        &identity,
        &lab,
        dir.path(),
        &["--service-external-ip-cidrs=203.0.113.0/24"],
    )?;
    let work = async {
        bird.wait_established().with_context(|| speaker.log_tail(80))?;
        for prefix in ["10.16.0.0/16", "10.16.0.5/32", "203.0.113.7/32"] {
            wait_until(&format!("{prefix} at the ToR"), WAIT, || bird.has(prefix))
                .with_context(|| speaker.log_tail(20))?;
        }
        kube_ovn_testkit::wait_until_async("the refusal's event", WAIT, || {
            let events: Api<Event> = Api::namespaced(admin.clone(), "default");
            async move {
                let list = events.list(&kube::api::ListParams::default()).await?;
                Ok(list
                    .items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("BgpExternalIPNotAllowed")))
            }
        })
        .await?;
        kube_ovn_testkit::wait_until_async("the BgpPeer's status for n1", WAIT, || {
            let peers = peers.clone();
            async move {
                let p = peers.get("tor-a").await?;
                Ok(p.status
                    .and_then(|s| s.nodes.get("n1").and_then(|n| n.state.clone()))
                    .is_some_and(|s| s == "Established"))
            }
        })
        .await?;
        anyhow::Ok(())
    };
    let first_denial = async {
        loop {
            if let Some(d) = speaker_denials(&cluster).first() {
                return d.to_string();
            }
            // The audit log is a file: read it again after a while.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        r = work => r?,
        denied = first_denial => panic!("kube-ovn-speaker was refused: {denied}\n{}", speaker.log_tail(20)),
    }

    // A watch is audited when it ends (its ResponseComplete stage): stop the speaker, as a
    // rolling update would, and its watches close.
    let mut speaker = speaker;
    speaker.daemon.terminate(WAIT)?;
    let expected: BTreeSet<(String, String)> = [
        ("get", "/secrets"),
        ("patch", "bgp.kube-ovn-rs.io/bgppeers/status"),
        ("watch", "/pods"),
        ("watch", "/services"),
        ("watch", "/nodes"),
        ("watch", "kubeovn.io/subnets"),
        ("watch", "kubeovn.io/iptables-eips"),
        ("watch", "kubeovn.io/ips"),
        ("watch", "kubeovn.io/ovn-eips"),
        ("create", "events.k8s.io/events"),
        ("watch", "bgp.kube-ovn-rs.io/bgppeers"),
    ]
    .into_iter()
    .map(|(verb, resource)| (verb.to_owned(), resource.to_owned()))
    .collect();
    let mut made = BTreeSet::new();
    wait_until("the speaker's calls in the audit log", WAIT, || {
        made = cluster
            .server
            .audited()
            .into_iter()
            .filter(|r| r.user == USER)
            .map(|r| (r.verb, r.resource))
            .collect();
        Ok(made.is_superset(&expected))
    })
    .with_context(|| {
        format!(
            "missing {:?} among {made:?}",
            expected.difference(&made).collect::<Vec<_>>()
        )
    })?;
    let denials = speaker_denials(&cluster);
    assert!(
        denials.is_empty(),
        "a refusal while the work was done or stopped: {}",
        denials
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    );
    Ok(())
}
