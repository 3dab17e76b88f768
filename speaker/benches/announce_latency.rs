//! From a pod's address annotation appearing in the API to its /32 in the ToR's table, and
//! from the pod's deletion to the withdrawal: the `kube-ovn-speaker` binary (release) against
//! a real kube-apiserver and a BIRD ToR in network namespaces, one pod at a time.
//!
//! `cargo bench -p kube-ovn-speaker --bench announce_latency -- [PODS]` (default 200). Root.
//! Timing starts before the create request (so it includes the API write and the watch
//! event) and ends at the first poll of BIRD's control socket (every 1 ms) that shows the
//! route. Kube-OVN's speaker recomputes every 5 s, so its figure is up to 5 s by design.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::birdctl::BirdCtl;
use common::k8s::{Cluster, speaker};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_V4, TOR_V4};
use kube_ovn_testkit::wait_until;

fn wait_route(ctl: &mut BirdCtl, prefix: &str, present: bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let reply = ctl.ask(&format!("show route {prefix}"))?;
        if reply.lines().any(|l| l.contains(prefix)) == present {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    bail!(
        "{prefix} never became {}",
        if present { "present" } else { "absent" }
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let pods: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or(Ok(200), |a| a.parse())
        .context("PODS")?;
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let speaker = speaker(&cluster, &lab, dir.path(), &[])?;
    bird.wait_established().with_context(|| speaker.log_tail(20))?;
    cluster.subnet("s1", "10.16.0.0/16", "cluster").await?;
    wait_until("the subnet's CIDR at the ToR", Duration::from_secs(30), || {
        bird.has("10.16.0.0/16")
    })?;
    let mut ctl = BirdCtl::connect(&bird.dir.path().join("bird.ctl"))?;
    let mut announce = Vec::with_capacity(pods);
    let mut withdraw = Vec::with_capacity(pods);
    for i in 0..pods {
        let ip = format!("10.16.{}.{}", i / 250, i % 250 + 2);
        let prefix = format!("{ip}/32");
        let name = format!("p{i}");
        let started = Instant::now();
        cluster.pod(&name, "n1", &ip, &[]).await?;
        tokio::task::block_in_place(|| wait_route(&mut ctl, &prefix, true))?;
        announce.push(started.elapsed());
        let started = Instant::now();
        cluster.delete_pod("default", &name).await?;
        tokio::task::block_in_place(|| wait_route(&mut ctl, &prefix, false))?;
        withdraw.push(started.elapsed());
    }
    println!("annotation in the API to the ToR's table, {pods} pods, one at a time:");
    common::print_latency("announce (pod created)", &mut announce);
    common::print_latency("withdraw (pod deleted)", &mut withdraw);
    drop(speaker);
    Ok(())
}
