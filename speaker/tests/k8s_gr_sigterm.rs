//! Graceful restart through a clean stop (RFC 4724 §4.2): SIGTERM, as in every DaemonSet
//! rolling update and node drain, must leave the ToR holding our routes marked stale, exactly
//! as a crash does, and the next start must set the R bit and clear the stale marks with its
//! End-of-RIB. Without graceful restart configured, SIGTERM still sends Cease / Administrative
//! Shutdown (RFC 4486 6/2) and the ToR withdraws at once. Against BIRD 2 and FRR's bgpd, with
//! the real `kube-ovn-speaker` binary; and traffic from a host behind the ToR to a pod address
//! on the node is not interrupted by the restart. Needs root, bird2 and frr; fails, never skips.

mod common;

use anyhow::{Context, Result, ensure};
use common::k8s::{Cluster, Speaker, speaker};
use common::peers::{Bird, Frr, PeerSpec};
use common::{Lab, NODE_V4, TOR_V4};
use kube_ovn_testkit::Netns;
use kube_ovn_testkit::wait_until;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);
const GR: [&str; 2] = ["--graceful-restart", "--graceful-restart-time=120s"];

/// A subnet with two announced pods, `stays` (10.16.0.5) and `goes` (10.16.0.6).
async fn two_pods(cluster: &Cluster) -> Result<()> {
    cluster.subnet("s1", "10.16.0.0/16", "cluster").await?;
    cluster.pod("stays", "n1", "10.16.0.5", &[]).await?;
    cluster.pod("goes", "n1", "10.16.0.6", &[]).await
}

async fn delete_pod(cluster: &Cluster, name: &str) -> Result<()> {
    cluster.delete_pod("default", name).await
}

/// SIGTERM, and the speaker exits by itself, successfully.
fn terminate(speaker: &mut Speaker) -> Result<()> {
    let status = speaker.daemon.terminate(WAIT)?;
    ensure!(
        status.success(),
        "the speaker exited with {status}: {}",
        speaker.log_tail(20)
    );
    Ok(())
}

/// BIRD's view of one of our routes: (present, marked stale). BIRD 2.0 does not flag a stale
/// route in `show route`; it marks every route of the session stale when it detects our restart
/// ("Neighbor graceful restart detected", kept in `show protocols all` as "Neighbor graceful
/// restart active") and flushes those not refreshed at our End-of-RIB ("... done").
fn bird_route(bird: &Bird, prefix: &str) -> Result<(bool, bool)> {
    let present = bird.has(prefix)?;
    let protocol = bird.birdc(&["show", "protocols", "all", "node"])?;
    Ok((
        present,
        present && protocol.contains("Neighbor graceful restart active"),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_graceful_restart_leaves_the_routes_stale_at_bird_until_end_of_rib() -> Result<()> {
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut first = speaker(&cluster, &lab, dir.path(), &GR)?;
    two_pods(&cluster).await?;
    for prefix in ["10.16.0.5/32", "10.16.0.6/32"] {
        wait_until(&format!("{prefix} at the ToR"), WAIT, || bird.has(prefix))
            .with_context(|| first.log_tail(20))?;
    }

    terminate(&mut first)?;
    wait_until("BIRD to see the session gone", WAIT, || Ok(!bird.established()?))?;
    let protocol = bird.birdc(&["show", "protocols", "all", "node"])?;
    ensure!(
        !protocol.contains("Administrative shutdown"),
        "no Cease on a stop for restart: {protocol}"
    );
    for prefix in ["10.16.0.5/32", "10.16.0.6/32"] {
        ensure!(
            bird_route(&bird, prefix)? == (true, true),
            "BIRD keeps {prefix}, marked stale, while we restart: {}\n{}",
            bird.route_all(prefix)?,
            bird.log_tail()
        );
    }
    delete_pod(&cluster, "goes").await?;

    let second = speaker(&cluster, &lab, dir.path(), &GR)?;
    bird.wait_established().with_context(|| second.log_tail(20))?;
    wait_until("the restarted speaker to set the R bit", WAIT, || {
        Ok(second.daemon.log().contains("restarted within"))
    })?;
    wait_until(
        "the stale route of the deleted pod flushed at End-of-RIB",
        WAIT,
        || Ok(!bird.has("10.16.0.6/32")?),
    )
    .with_context(|| second.log_tail(20))?;
    wait_until("the live pod's route refreshed, no longer stale", WAIT, || {
        Ok(bird_route(&bird, "10.16.0.5/32")? == (true, false))
    })
    .with_context(|| {
        bird.birdc(&["show", "protocols", "all", "node"])
            .unwrap_or_default()
    })?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_without_graceful_restart_sends_cease_and_bird_withdraws() -> Result<()> {
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut first = speaker(&cluster, &lab, dir.path(), &[])?;
    two_pods(&cluster).await?;
    wait_until("10.16.0.5/32 at the ToR", WAIT, || bird.has("10.16.0.5/32"))
        .with_context(|| first.log_tail(20))?;

    terminate(&mut first)?;
    wait_until("BIRD to withdraw our routes", WAIT, || {
        Ok(!bird.has("10.16.0.5/32")? && !bird.has("10.16.0.6/32")?)
    })?;
    let protocol = bird.birdc(&["show", "protocols", "all", "node"])?;
    ensure!(
        protocol.contains("Administrative shutdown"),
        "Cease / Administrative Shutdown told BIRD why: {protocol}"
    );
    let second = speaker(&cluster, &lab, dir.path(), &[])?;
    bird.wait_established().with_context(|| second.log_tail(20))?;
    wait_until("10.16.0.5/32 back at the ToR", WAIT, || bird.has("10.16.0.5/32"))?;
    ensure!(
        !second.daemon.log().contains("restarted within"),
        "no graceful restart, no R bit"
    );
    Ok(())
}

/// FRR's view of one of our routes: (present, marked stale).
fn frr_route(frr: &Frr, prefix: &str) -> Result<(bool, bool)> {
    let json: serde_json::Value =
        serde_json::from_str(&frr.vtysh(&format!("show bgp ipv4 unicast {prefix} json"))?)?;
    let paths = json["paths"].as_array().cloned().unwrap_or_default();
    let stale = paths.iter().any(|p| p["stale"].as_bool() == Some(true));
    Ok((!paths.is_empty(), stale))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_graceful_restart_leaves_the_routes_stale_at_frr_until_end_of_rib() -> Result<()> {
    let lab = Lab::direct()?;
    let frr = Frr::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut first = speaker(&cluster, &lab, dir.path(), &GR)?;
    two_pods(&cluster).await?;
    for prefix in ["10.16.0.5/32", "10.16.0.6/32"] {
        wait_until(&format!("{prefix} at bgpd"), WAIT, || {
            Ok(frr_route(&frr, prefix)? == (true, false))
        })
        .with_context(|| first.log_tail(20))?;
    }

    terminate(&mut first)?;
    wait_until("bgpd to see the session gone", WAIT, || {
        Ok(frr.summary("ipv4")?.0 != "Established")
    })?;
    let shown = frr.vtysh("show bgp ipv4 unicast")?;
    for prefix in ["10.16.0.5/32", "10.16.0.6/32"] {
        ensure!(
            frr_route(&frr, prefix)? == (true, true),
            "bgpd keeps {prefix}, marked stale, while we restart: {shown}\n{}",
            frr.log_tail()
        );
    }
    delete_pod(&cluster, "goes").await?;

    let second = speaker(&cluster, &lab, dir.path(), &GR)?;
    wait_until("bgpd to see the session back", WAIT, || {
        Ok(frr.summary("ipv4")?.0 == "Established")
    })
    .with_context(|| second.log_tail(20))?;
    wait_until("the live pod's route refreshed, no longer stale", WAIT, || {
        Ok(frr_route(&frr, "10.16.0.5/32")? == (true, false) && !frr_route(&frr, "10.16.0.6/32")?.0)
    })
    .with_context(|| frr.vtysh("show bgp ipv4 unicast").unwrap_or_default())?;
    ensure!(
        second.daemon.log().contains("restarted within"),
        "the R bit after a stop for restart"
    );
    Ok(())
}

/// A host outside the cluster behind the ToR (203.0.113.2, the ToR 203.0.113.1 forwarding), and
/// the pod address 10.16.0.5 answering on the node, which routes the outside back via the ToR.
fn outside_host(lab: &Lab) -> Result<Netns> {
    let outside = Netns::create("bgpo")?;
    lab.tor.ip(&[
        "link",
        "add",
        "eth2",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        outside.name(),
    ])?;
    lab.tor.ip(&["link", "set", "eth2", "up"])?;
    lab.tor.ip(&["addr", "add", "203.0.113.1/24", "dev", "eth2"])?;
    lab.tor.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
    outside.ip(&["link", "set", "eth0", "up"])?;
    outside.ip(&["addr", "add", "203.0.113.2/24", "dev", "eth0"])?;
    outside.ip(&["route", "add", "default", "via", "203.0.113.1"])?;
    lab.node.ip(&["link", "set", "lo", "up"])?;
    lab.node.ip(&["addr", "add", "10.16.0.5/32", "dev", "lo"])?;
    lab.node
        .ip(&["route", "add", "203.0.113.0/24", "via", "198.51.100.1"])?;
    Ok(outside)
}

/// Pings `target` from `ns` one after another until stopped; counts the unanswered ones.
struct Pinger {
    lost: Arc<AtomicU32>,
    sent: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pinger {
    fn start(ns: &Netns, target: Ipv4Addr) -> Pinger {
        let (lost, sent, stop) = (Arc::default(), Arc::default(), Arc::<AtomicBool>::default());
        let path = ns.path();
        let thread = {
            let (lost, sent, stop): (Arc<AtomicU32>, Arc<AtomicU32>, Arc<AtomicBool>) =
                (Arc::clone(&lost), Arc::clone(&sent), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    sent.fetch_add(1, Ordering::Relaxed);
                    if !kube_ovn_testkit::ping_from(&path, target) {
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        Pinger {
            lost,
            sent,
            stop,
            thread: Some(thread),
        }
    }

    /// (sent, lost) once the current ping is done.
    fn finish(mut self) -> (u32, u32) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        (
            self.sent.load(Ordering::Relaxed),
            self.lost.load(Ordering::Relaxed),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_from_outside_keeps_flowing_through_the_tor_while_the_speaker_restarts() -> Result<()> {
    let lab = Lab::direct()?;
    let outside = outside_host(&lab)?;
    let spec = PeerSpec {
        kernel_export: true,
        ..PeerSpec::new(TOR_V4, NODE_V4)
    };
    let bird = Bird::start(&lab.tor, &spec)?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut first = speaker(&cluster, &lab, dir.path(), &GR)?;
    two_pods(&cluster).await?;
    wait_until("10.16.0.5/32 at the ToR", WAIT, || bird.has("10.16.0.5/32"))
        .with_context(|| first.log_tail(20))?;
    outside.wait_ping(Ipv4Addr::new(10, 16, 0, 5), WAIT)?;

    let pinger = Pinger::start(&outside, Ipv4Addr::new(10, 16, 0, 5));
    terminate(&mut first)?;
    wait_until("BIRD to see the session gone", WAIT, || Ok(!bird.established()?))?;
    // A few round trips with the speaker gone: only the ToR's stale route carries them.
    let down_since = pinger.sent.load(Ordering::Relaxed);
    wait_until("three pings while the speaker is down", WAIT, || {
        Ok(pinger.sent.load(Ordering::Relaxed) >= down_since + 3)
    })?;
    ensure!(!bird.established()?, "the speaker was down during those pings");
    let second = speaker(&cluster, &lab, dir.path(), &GR)?;
    bird.wait_established().with_context(|| second.log_tail(20))?;
    wait_until("BIRD to end the restart at our End-of-RIB", WAIT, || {
        Ok(bird_route(&bird, "10.16.0.5/32")? == (true, false))
    })?;
    let (sent, lost) = pinger.finish();
    ensure!(
        lost == 0,
        "{lost} of {sent} pings from outside were lost while the speaker restarted"
    );
    Ok(())
}
