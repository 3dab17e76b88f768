//! BFD tied to the BGP session in the real binary: with `--enable-bfd`, a ToR whose BFD stops
//! answering (BIRD SIGSTOPped) takes the BGP session down at BFD speed (300 ms detection), long
//! before the 30 s hold timer would; when BFD answers again the session comes back. Needs root
//! and bird2; fails, never skips.

mod common;

use anyhow::{Context, Result};
use common::k8s::{Cluster, speaker};
use common::peers::{Bird, PeerSpec};
use common::{ContinueOnDrop, Lab, NODE_V4, TOR_V4};
use kube_ovn_testkit::wait_until;

const WAIT: std::time::Duration = std::time::Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bfd_down_brings_the_session_down_and_up_again() -> Result<()> {
    let lab = Lab::direct()?;
    let mut spec = PeerSpec::new(TOR_V4, NODE_V4);
    spec.bfd = true;
    let bird = Bird::start(&lab.tor, &spec)?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let bfd = [
        "--enable-bfd",
        "--bfd-min-tx=100",
        "--bfd-min-rx=100",
        "--bfd-detection-multiplier=3",
    ];
    let speaker = speaker(&cluster, &lab, dir.path(), &bfd)?;
    bird.wait_established().with_context(|| speaker.log_tail(20))?;
    cluster.subnet("s1", "10.16.0.0/16", "cluster").await?;
    wait_until("the subnet at the ToR", WAIT, || bird.has("10.16.0.0/16"))?;
    let up = |metric: &str| format!("kube_ovn_speaker_{metric}{{peer=\"{TOR_V4}\"}} 1");
    wait_until("BFD up in the speaker's metrics", WAIT, || {
        Ok(speaker.metrics()?.contains(&up("bfd_peer_up")))
    })
    .with_context(|| speaker.log_tail(20))?;

    {
        // The ToR freezes: BFD stops first. The BGP hold timer (30 s) is still far off when
        // this wait ends, so the session going down here is BFD's doing.
        let _resume = ContinueOnDrop(bird.pid());
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(bird.pid()),
            nix::sys::signal::Signal::SIGSTOP,
        )?;
        wait_until(
            "BFD to bring the BGP session down",
            std::time::Duration::from_secs(10),
            || {
                let metrics = speaker.metrics()?;
                Ok(!metrics.contains(&up("bgp_peer_up"))
                    && speaker
                        .daemon
                        .log()
                        .contains("BFD down: bringing the BGP session down"))
            },
        )
        .with_context(|| speaker.log_tail(20))?;
    }
    wait_until("BFD and the session back after SIGCONT", WAIT, || {
        Ok(bird.established()? && speaker.metrics()?.contains(&up("bgp_peer_up")))
    })
    .with_context(|| speaker.log_tail(20))?;
    wait_until("the subnet at the ToR again", WAIT, || bird.has("10.16.0.0/16"))?;
    Ok(())
}
