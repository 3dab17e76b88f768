//! The speaker's crash drill (issue 16): the `kube-ovn-speaker` binary, with graceful restart,
//! is SIGKILLed ten times at random moments while pods come and go, and pods keep changing
//! while it is down. BIRD is the ToR. While the speaker is down BIRD withdraws nothing (graceful
//! restart keeps the routes, so traffic keeps its way meanwhile); after each restart (R bit) and
//! End-of-RIB, BIRD holds exactly the subnet's CIDR and the live pods' /32s — no route of a pod
//! deleted while the speaker was away or just before it died, none missing.
//!
//! A fresh seed each run, printed; `CRASH_SEED=<s>` replays one. Needs root and bird2; fails,
//! never skips.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::k8s::{Cluster, Speaker, speaker};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_V4, TOR_V4};
use kube_ovn_testkit::drill::{Rng, seed};
use kube_ovn_testkit::wait_until;

const WAIT: Duration = Duration::from_secs(30);
const KILLS: usize = 10;
const CIDR: &str = "10.16.0.0/16";
const GR: [&str; 2] = ["--graceful-restart", "--graceful-restart-time=120s"];

/// The prefixes BIRD has from the speaker's session (stale ones included).
fn tor_routes(bird: &Bird) -> Result<BTreeSet<String>> {
    let out = bird.birdc(&["show", "route", "table", "master4", "protocol", "node"])?;
    Ok(out
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// The pods of the drill, by name, with their addresses.
struct Pods<'a> {
    cluster: &'a Cluster,
    live: BTreeMap<String, String>,
    next: usize,
}

impl Pods<'_> {
    /// What the ToR should hold: the subnet and every live pod.
    fn expected(&self) -> BTreeSet<String> {
        let mut want: BTreeSet<String> = self.live.values().map(|ip| format!("{ip}/32")).collect();
        want.insert(CIDR.to_owned());
        want
    }

    /// `ops` random creations and deletions; the deleted pods' prefixes.
    async fn churn(&mut self, rng: &mut Rng, ops: usize) -> Result<BTreeSet<String>> {
        let mut deleted = BTreeSet::new();
        for _ in 0..ops {
            if self.live.is_empty() || rng.below(10) < 6 {
                let i = self.next;
                self.next += 1;
                let name = format!("p{i}");
                let ip = format!("10.16.{}.{}", i / 250, i % 250 + 2);
                self.cluster.pod(&name, "n1", &ip, &[]).await?;
                self.live.insert(name, ip);
            } else {
                let name = self
                    .live
                    .keys()
                    .nth(rng.below(self.live.len()))
                    .cloned()
                    .context("a live pod")?;
                self.cluster.delete_pod("default", &name).await?;
                let ip = self.live.remove(&name).context("live")?;
                deleted.insert(format!("{ip}/32"));
            }
        }
        Ok(deleted)
    }
}

/// Waits until the ToR holds exactly the expected prefixes.
fn wait_exact(bird: &Bird, speaker: &Speaker, want: &BTreeSet<String>, when: &str) -> Result<()> {
    let mut last = BTreeSet::new();
    wait_until(
        &format!("the ToR to hold exactly the live pods {when}"),
        WAIT,
        || {
            last = tor_routes(bird)?;
            Ok(&last == want)
        },
    )
    .with_context(|| {
        format!(
            "extra {:?}, missing {:?}\nspeaker log:\n{}",
            last.difference(want).collect::<Vec<_>>(),
            want.difference(&last).collect::<Vec<_>>(),
            speaker.log_tail(20)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speaker_killed_during_pod_churn_leaves_the_tor_with_exactly_the_live_pods() -> Result<()> {
    let seed = seed();
    eprintln!("speaker crash drill: seed {seed} (replay with CRASH_SEED={seed})");
    let mut rng = Rng(seed);
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut current = speaker(&cluster, &lab, dir.path(), &GR)?;
    cluster.subnet("s1", CIDR, "cluster").await?;
    let mut pods = Pods {
        cluster: &cluster,
        live: BTreeMap::new(),
        next: 0,
    };
    pods.churn(&mut rng, 20).await?;
    wait_exact(&bird, &current, &pods.expected(), "at first")?;

    for kill in 1..=KILLS {
        let settled = tor_routes(&bird)?;
        // Pods change; the speaker dies at a random moment while it catches up.
        let ops = 1 + rng.below(15);
        let deleted_before = pods.churn(&mut rng, ops).await?;
        tokio::time::sleep(Duration::from_millis(rng.below(300) as u64)).await;
        current.daemon.kill();
        wait_until("BIRD to see the session gone", WAIT, || Ok(!bird.established()?))?;
        let kept = tor_routes(&bird)?;
        // Graceful restart: BIRD keeps what it had; only what the speaker withdrew before it
        // died may be gone.
        let lost: Vec<&String> = settled
            .difference(&kept)
            .filter(|p| !deleted_before.contains(*p))
            .collect();
        ensure!(
            lost.is_empty(),
            "kill {kill}: BIRD dropped {lost:?} when the speaker died"
        );
        // Pods change while no speaker runs; BIRD still withdraws nothing.
        let ops = rng.below(10);
        pods.churn(&mut rng, ops).await?;
        let down = tor_routes(&bird)?;
        ensure!(
            down == kept,
            "kill {kill}: BIRD's routes changed while the speaker was down: {kept:?} -> {down:?}"
        );
        ensure!(
            !bird.established()?,
            "kill {kill}: the session came back by itself"
        );

        current = speaker(&cluster, &lab, dir.path(), &GR)?;
        bird.wait_established().with_context(|| current.log_tail(20))?;
        wait_until("the restarted speaker to know it restarted", WAIT, || {
            Ok(current.daemon.log().contains("restarted within"))
        })
        .with_context(|| current.log_tail(20))?;
        wait_exact(
            &bird,
            &current,
            &pods.expected(),
            &format!("after restart {kill}"),
        )?;
        eprintln!(
            "seed {seed}: kill {kill}: {} live pods, BIRD kept {} routes while down, exact again",
            pods.live.len(),
            kept.len()
        );
    }
    // The exact route set can come before the End-of-RIB when no route was stale; BIRD then
    // leaves its restart state when the End-of-RIB arrives, which is what is awaited here.
    let mut protocol = String::new();
    wait_until("BIRD to finish the graceful restart (End-of-RIB)", WAIT, || {
        protocol = bird.birdc(&["show", "protocols", "all", "node"])?;
        Ok(!protocol.contains("Restarting"))
    })
    .with_context(|| protocol.clone())?;
    Ok(())
}
