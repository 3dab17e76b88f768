//! Graceful restart (RFC 4724) with the real process: the `kube-ovn-speaker` binary is killed
//! (SIGKILL, no NOTIFICATION), BIRD keeps its routes while it is gone, a pod is deleted
//! meanwhile, and the restarted speaker (R bit: it finds its state file fresh) re-sends the
//! table once its caches are synced; BIRD then flushes the stale route at End-of-RIB.
//! Needs root and bird2; fails, never skips.

mod common;

use anyhow::{Context, Result};
use common::k8s::{Cluster, speaker};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_V4, TOR_V4};
use kube_ovn_testkit::wait_until;

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_speaker_comes_back_without_the_tor_losing_routes() -> Result<()> {
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let gr = ["--graceful-restart", "--graceful-restart-time=120s"];
    let mut first = speaker(&cluster, &lab, dir.path(), &gr)?;
    cluster.subnet("s1", "10.16.0.0/16", "cluster").await?;
    cluster.pod("stays", "n1", "10.16.0.5", &[]).await?;
    cluster.pod("goes", "n1", "10.16.0.6", &[]).await?;
    for prefix in ["10.16.0.5/32", "10.16.0.6/32"] {
        wait_until(&format!("{prefix} at the ToR"), WAIT, || bird.has(prefix))
            .with_context(|| first.log_tail(20))?;
    }
    assert!(
        !first.daemon.log().contains("restarted within"),
        "a first start is not a restart"
    );

    first.daemon.kill();
    wait_until("BIRD to see the session gone", WAIT, || Ok(!bird.established()?))?;
    assert!(
        bird.has("10.16.0.5/32")? && bird.has("10.16.0.6/32")?,
        "BIRD keeps the routes as stale while we restart"
    );
    cluster.delete_pod("default", "goes").await?;

    let second = speaker(&cluster, &lab, dir.path(), &gr)?;
    bird.wait_established().with_context(|| second.log_tail(20))?;
    wait_until("the restarted speaker to say so", WAIT, || {
        Ok(second.daemon.log().contains("restarted within"))
    })?;
    wait_until(
        "the stale route of the deleted pod flushed after End-of-RIB",
        WAIT,
        || Ok(!bird.has("10.16.0.6/32")?),
    )
    .with_context(|| second.log_tail(20))?;
    assert!(
        bird.has("10.16.0.5/32")?,
        "the live pod's route stayed through the restart"
    );
    let protocol = bird.birdc(&["show", "protocols", "all", "node"])?;
    assert!(
        !protocol.contains("Restarting"),
        "BIRD finished the restart: {protocol}"
    );
    Ok(())
}
