//! From a label change in the API to the changed attribute in the ToR's table: a Subnet moves
//! from one BgpAdvertisement's `subnetSelector` to another's, and the ToR (BIRD) sees its CIDR
//! carry the other advertisement's community. The `kube-ovn-speaker` binary (release) against a
//! real kube-apiserver and a BIRD ToR in network namespaces.
//!
//! `cargo bench -p kube-ovn-speaker --bench advertisement_latency -- [CHANGES]` (default 100).
//! Root. Timing starts before the label patch (so it includes the API write and the watch event)
//! and ends at the first poll of BIRD's control socket (every 1 ms) that shows the new community.
//! Every poll also checks that the prefix is still there: a withdraw between the two versions
//! (rather than BGP's implicit replace) fails the run.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::birdctl::BirdCtl;
use common::k8s::{Cluster, speaker};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_V4, TOR_V4};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube_ovn_testkit::wait_until;
use serde_json::json;

const PREFIX: &str = "10.16.0.0/16";

/// Waits until BIRD shows `PREFIX` with `community` (BIRD prints `(65000,2)`); the prefix
/// missing at any poll is an error.
fn wait_community(ctl: &mut BirdCtl, community: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let reply = ctl.ask(&format!("show route {PREFIX} all"))?;
        if !reply.lines().any(|l| l.contains(PREFIX)) {
            bail!("{PREFIX} was withdrawn between two attribute versions:\n{reply}");
        }
        if reply.contains(community) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    bail!("{PREFIX} never carried {community}")
}

async fn advertisement(cluster: &Cluster, name: &str, tier: &str, community: &str) -> Result<()> {
    let gvk = kube::api::GroupVersionKind::gvk("bgp.kube-ovn-rs.io", "v1alpha1", "BgpAdvertisement");
    let (ar, _) = kube::discovery::pinned_kind(&cluster.kube, &gvk).await?;
    let api: Api<DynamicObject> = Api::all_with(cluster.kube.clone(), &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpAdvertisement",
        "metadata": {"name": name},
        "spec": {"advertise": ["SubnetCIDRs"],
                 "subnetSelector": {"matchLabels": {"tier": tier}},
                 "communities": [community]}
    }))?;
    api.create(&PostParams::default(), &obj).await?;
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let changes: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or(Ok(100), |a| a.parse())
        .context("CHANGES")?;
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let speaker = speaker(&cluster, &lab, dir.path(), &[])?;
    bird.wait_established().with_context(|| speaker.log_tail(20))?;
    advertisement(&cluster, "tier-a", "a", "65000:1").await?;
    advertisement(&cluster, "tier-b", "b", "65000:2").await?;
    // No `bgp` annotation: only the advertisements select the subnet.
    let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", "Subnet");
    let (ar, _) = kube::discovery::pinned_kind(&cluster.kube, &gvk).await?;
    let subnets: Api<DynamicObject> = Api::all_with(cluster.kube.clone(), &ar);
    let subnet: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": "s1", "labels": {"tier": "a"}}, "spec": {"cidrBlock": PREFIX}
    }))?;
    subnets.create(&PostParams::default(), &subnet).await?;
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    subnets
        .patch_status("s1", &PatchParams::default(), &Patch::Merge(&ready))
        .await?;
    let label = |tier: &str| json!({"metadata": {"labels": {"tier": tier}}});
    wait_until("the subnet's CIDR at the ToR", Duration::from_secs(30), || {
        bird.has(PREFIX)
    })
    .with_context(|| speaker.log_tail(30))?;
    let mut ctl = BirdCtl::connect(&bird.dir.path().join("bird.ctl"))?;
    tokio::task::block_in_place(|| wait_community(&mut ctl, "(65000,1)"))?;
    let mut samples = Vec::with_capacity(changes);
    for i in 0..changes {
        let (tier, community) = if i % 2 == 0 {
            ("b", "(65000,2)")
        } else {
            ("a", "(65000,1)")
        };
        let started = Instant::now();
        subnets
            .patch("s1", &PatchParams::default(), &Patch::Merge(label(tier)))
            .await?;
        tokio::task::block_in_place(|| wait_community(&mut ctl, community))?;
        samples.push(started.elapsed());
    }
    println!("label change in the API to the community at the ToR, {changes} changes:");
    common::print_latency("subnet relabelled (tier a <-> b)", &mut samples);
    drop(speaker);
    Ok(())
}
