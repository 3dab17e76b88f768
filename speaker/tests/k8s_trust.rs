//! The `kube-ovn-speaker` binary against a real kube-apiserver and a BIRD ToR, with tenants
//! writing what tenants can write: the ToR learns a pod's address only when the controller's
//! IP record gives it to that pod (a forged `ovn.kubernetes.io/ip_address` is not learned), a
//! multicast address is dropped alone (a later honest pod is still learned), a Service's
//! `externalIPs` only inside `--service-external-ip-cidrs`, and each refusal is one Warning
//! event naming the object and the field. Needs root (namespaces) and bird2; fails, never skips.

mod common;

use anyhow::{Context, Result};
use common::k8s::{Cluster, speaker, wait_route};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_V4, TOR_V4};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);
const BGP: (&str, &str) = ("ovn.kubernetes.io/bgp", "true");
const IP_ADDRESS_FIELD: &str = r#"metadata.annotations["ovn.kubernetes.io/ip_address"]"#;

/// The Warning events in `default` about `name`, as (reason, note).
async fn warnings(kube: &kube::Client, name: &str) -> Result<Vec<(String, String)>> {
    let events: Api<Event> = Api::namespaced(kube.clone(), "default");
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect())
}

/// Waits until `name` has exactly one Warning event of `reason`, and it names `field`.
async fn wait_warning(kube: &kube::Client, name: &str, reason: &str, field: &str) -> Result<()> {
    kube_ovn_testkit::wait_until_async(&format!("a {reason} event on {name}"), WAIT, || async {
        Ok(warnings(kube, name)
            .await?
            .iter()
            .any(|(r, note)| r == reason && note.contains(field)))
    })
    .await?;
    let all = warnings(kube, name).await?;
    assert_eq!(all.len(), 1, "one event for {name}: {all:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tor_learns_only_what_the_controller_and_the_operator_allowed() -> Result<()> {
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut speaker = speaker(
        &cluster,
        &lab,
        dir.path(),
        &["--service-external-ip-cidrs=203.0.113.0/24"],
    )?;
    bird.wait_established().with_context(|| speaker.log_tail(20))?;
    cluster.subnet("s1", "10.16.0.0/16", "local").await?;

    // What a tenant can write alone: the annotations, `allocated` included, but no IP record.
    cluster.annotated_pod("forged", "n1", "8.8.8.8", &[BGP]).await?;
    cluster.annotated_pod("mcast", "n1", "239.1.1.1", &[BGP]).await?;
    // Then a pod the controller allocated: learned although the two above came first.
    cluster.pod("honest", "n1", "10.16.0.5", &[BGP]).await?;
    wait_route(&bird, &speaker, "10.16.0.5/32", true)?;
    // The pass that announced the honest pod had both earlier pods in its cache.
    assert!(!bird.has("8.8.8.8/32")?, "a forged address was learned");
    assert!(!bird.has("239.1.1.1/32")?, "a multicast address was learned");

    // externalIPs: inside the operator's CIDRs learned, outside not.
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "web", "annotations": {"ovn.kubernetes.io/bgp": "true"}},
        "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "ports": [{"port": 80}],
            "externalIPs": ["192.0.2.77", "203.0.113.7"]}}),
    )?;
    Api::<Service>::namespaced(cluster.kube.clone(), "default")
        .create(&PostParams::default(), &svc)
        .await?;
    wait_route(&bird, &speaker, "203.0.113.7/32", true)?;
    assert!(
        !bird.has("192.0.2.77/32")?,
        "an external IP outside the CIDRs was learned"
    );

    // A later honest pod still goes out (the route set was not refused whole), and the new
    // passes it causes publish no second event for the same refusals.
    cluster.pod("later", "n1", "10.16.0.6", &[BGP]).await?;
    wait_route(&bird, &speaker, "10.16.0.6/32", true)?;
    let kube = &cluster.kube;
    wait_warning(kube, "forged", "BgpAddressNotAllocated", IP_ADDRESS_FIELD).await?;
    wait_warning(kube, "mcast", "BgpPrefixNotUnicast", IP_ADDRESS_FIELD).await?;
    wait_warning(kube, "web", "BgpExternalIPNotAllowed", "spec.externalIPs[0]").await?;
    assert!(warnings(kube, "honest").await?.is_empty());
    let note = &warnings(kube, "forged").await?[0].1;
    assert!(
        note.contains("8.8.8.8") && note.contains("speaker on n1"),
        "{note}"
    );
    speaker.daemon.check_alive()?;
    Ok(())
}
