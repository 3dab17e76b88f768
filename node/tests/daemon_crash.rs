//! The node daemon's crash drill (issue 16): `kube-ovn-daemon` is SIGKILLed while 100 CNI ADDs
//! are in flight (100 shim processes at once, a third of the pods with QoS), started again, and
//! killed again while DELs are in flight (the node's database paused so that they are). The test is the runtime and does what containerd
//! does: an ADD that failed is followed by a DEL of that sandbox, retried until it succeeds, and
//! the pod gets a fresh sandbox and a new ADD; a DEL that failed is retried. Once every pod was
//! attached, each has exactly one OVS port and one QoS row where it asked for one; at the end no
//! pod veth, OVS port, QoS or Queue row is left, and no interface in any sandbox, abandoned ones
//! included.
//!
//! A fresh seed each run (when to kill), printed; `CRASH_SEED=<s>` replays one. Needs root and
//! the OVS/OVN packages; fails, never skips.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, bail, ensure};
use common::Cluster;
use common::runtime::{Runtime, Sandbox};
use kube_ovn_testkit::drill::{Rng, seed};
use kube_ovn_testkit::{Netns, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

const PODS: usize = 100;
const NS: &str = "drill";
/// A runtime retries a failed DEL; with the daemon back, one retry is enough, a few allowed.
const RETRIES: usize = 5;

fn with_qos(i: usize) -> bool {
    i.is_multiple_of(3)
}

/// Runs `op` for every item at once (one shim process each), and SIGKILLs the daemon once
/// `kill_after` of them have finished. Returns each outcome, and how many had finished when
/// the kill landed.
async fn all_at_once_with_a_kill<T, R>(
    cluster: &mut Cluster,
    items: Vec<T>,
    kill_after: usize,
    op: impl Fn(&Runtime, &T) -> Result<R> + Send + Sync + Copy + 'static,
) -> Result<(Vec<Result<R>>, usize)>
where
    T: Send + 'static,
    R: Send + 'static,
{
    let finished = Arc::new(AtomicUsize::new(0));
    let runtime = cluster.nodes[0].runtime.clone();
    let tasks: Vec<_> = items
        .into_iter()
        .map(|item| {
            let runtime = runtime.clone();
            let finished = finished.clone();
            tokio::task::spawn_blocking(move || {
                let r = op(&runtime, &item);
                finished.fetch_add(1, Ordering::SeqCst);
                r
            })
        })
        .collect();
    let total = tasks.len();
    wait_until(
        &format!("{kill_after} of {total} to finish"),
        common::WAIT,
        || Ok(finished.load(Ordering::SeqCst) >= kill_after),
    )?;
    let node = &mut cluster.nodes[0];
    // Read before the kill: the requests it cuts finish (failed) at once.
    let at_kill = finished.load(Ordering::SeqCst);
    node.daemon.kill();
    node.restart_daemon()?;
    let mut out = Vec::with_capacity(total);
    for t in tasks {
        out.push(t.await?);
    }
    Ok((out, at_kill))
}

/// Resumes a SIGSTOPped process when dropped (also when the test fails meanwhile).
struct Resume(Pid);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

/// Connections the daemon holds on its socket: the server side of an accepted (or queued)
/// connection is listed in `/proc/net/unix` under the listener's path, connected (state 03).
fn connections_to(socket: &std::path::Path) -> Result<usize> {
    let path = socket.to_string_lossy();
    let table = std::fs::read_to_string("/proc/net/unix")?;
    Ok(table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 8 && f[5] == "03" && f[7] == path
        })
        .count())
}

/// DEL until it succeeds, as a runtime retries it.
fn del_until_done(runtime: &Runtime, sandbox: &Sandbox, prev: Option<&Value>) -> Result<()> {
    let mut last = None;
    for _ in 0..RETRIES {
        match runtime.del(sandbox, prev) {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.context("no attempt")?)
        .with_context(|| format!("DEL of {} never succeeded", sandbox.container_id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines, reason = "one drill, phase after phase")]
async fn a_daemon_killed_during_100_adds_and_100_dels_leaves_nothing_behind() -> Result<()> {
    let seed = seed();
    eprintln!("daemon crash drill: seed {seed} (replay with CRASH_SEED={seed})");
    let mut rng = Rng(seed);
    let mut cluster = Cluster::start(
        1,
        &["--wait-address-timeout=60s", "--wait-ovn-installed-timeout=60s"],
    )
    .await?;
    let qos: [(&str, &str); 2] = [
        ("ovn.kubernetes.io/egress_rate", "10"),
        ("ovn.kubernetes.io/ingress_rate", "20"),
    ];
    let mut netns: Vec<Netns> = Vec::new();
    let mut first = Vec::new();
    for i in 0..PODS {
        let name = format!("p{i:03}");
        cluster
            .create_pod(NS, &name, 0, if with_qos(i) { &qos } else { &[] })
            .await?;
        let (ns, sandbox) = Cluster::sandbox(NS, &name)?;
        netns.push(ns);
        first.push((i, sandbox));
    }

    // 1. A hundred ADDs; the daemon dies after some have finished.
    let kill_after = 5 + rng.below(60);
    let (outcomes, at_kill) =
        all_at_once_with_a_kill(&mut cluster, first.clone(), kill_after, |rt, (_, sb)| {
            Ok(rt.add(sb)?)
        })
        .await?;
    ensure!(
        at_kill < PODS,
        "every ADD had finished before the kill ({at_kill})"
    );
    let runtime = cluster.nodes[0].runtime.clone();
    let mut attached: Vec<(Sandbox, Value)> = Vec::new();
    let mut retried = 0;
    for ((i, sandbox), outcome) in first.into_iter().zip(outcomes) {
        let mut outcome = outcome;
        let mut sandbox = sandbox;
        let mut attempts = 0;
        loop {
            match outcome {
                Ok(result) => {
                    attached.push((sandbox, result));
                    break;
                }
                Err(e) if attempts < RETRIES => {
                    // The runtime tears the failed sandbox down and tries a new one.
                    attempts += 1;
                    retried += 1;
                    tracing::info!(pod = i, error = %e, "ADD failed; DEL, then a new sandbox");
                    let rt = runtime.clone();
                    let old = sandbox.clone();
                    tokio::task::spawn_blocking(move || del_until_done(&rt, &old, None)).await??;
                    let (ns, fresh) = Cluster::sandbox(NS, &format!("p{i:03}"))?;
                    netns.push(ns);
                    sandbox = fresh;
                    let rt = runtime.clone();
                    let sb = sandbox.clone();
                    outcome = tokio::task::spawn_blocking(move || Ok(rt.add(&sb)?)).await?;
                }
                Err(e) => bail!("pod {i}: ADD still fails after {RETRIES} new sandboxes: {e:#}"),
            }
        }
    }
    eprintln!("seed {seed}: daemon killed with {at_kill} of {PODS} ADDs done; {retried} pods retried");
    ensure!(
        retried > 0,
        "the kill failed no ADD: it did not land while they were in flight"
    );
    let node = &cluster.nodes[0];
    let addresses: BTreeSet<&str> = attached
        .iter()
        .map(|(_, r)| r["ips"][0]["address"].as_str().unwrap_or_default())
        .collect();
    ensure!(
        addresses.len() == PODS,
        "every pod has its own address: {addresses:?}"
    );
    let ports = node.pod_ports()?;
    ensure!(
        ports.len() == PODS,
        "one OVS port per pod, nothing from the failed ADDs: {} ports",
        ports.len()
    );
    ensure!(
        node.pod_veths()?.len() == PODS,
        "one veth per pod: {:?}",
        node.pod_veths()?
    );
    let want_qos = (0..PODS).filter(|i| with_qos(*i)).count();
    ensure!(
        node.ovs_rows("QoS")? == want_qos,
        "QoS rows: {} for {want_qos} pods with QoS",
        node.ovs_rows("QoS")?
    );
    for iface in &ports {
        ensure!(
            node.iface_column(iface, "external_ids:ovn-installed")? == "true",
            "{iface} not ovn-installed"
        );
    }

    // 2. A hundred DELs; the daemon dies with some done and the others in flight. DELs are
    //    fast, so "in flight" is made certain rather than hoped for: after `done_first` DELs
    //    have finished, the node's ovsdb-server is paused (SIGSTOP) and the remaining DELs are
    //    all sent; once each is connected to the daemon (where its port removal waits for the
    //    database), the daemon is SIGKILLed and the database resumed. Every DEL in flight must
    //    fail, and be retried as a runtime retries it.
    let done_first = 5 + rng.below(60);
    let (first_dels, in_flight) = attached.split_at(done_first);
    for (sandbox, result) in first_dels {
        let rt = runtime.clone();
        let (sb, r) = (sandbox.clone(), result.clone());
        tokio::task::spawn_blocking(move || rt.del(&sb, Some(&r))).await??;
    }
    let ovsdb = Pid::from_raw(i32::try_from(
        cluster.nodes[0]
            .ovs
            .ovsdb_pid()
            .context("the node's ovsdb-server")?,
    )?);
    kill(ovsdb, Signal::SIGSTOP)?;
    let resumed = Resume(ovsdb);
    let tasks: Vec<_> = in_flight
        .iter()
        .map(|(sandbox, result)| {
            let rt = runtime.clone();
            let (sb, r) = (sandbox.clone(), result.clone());
            tokio::task::spawn_blocking(move || rt.del(&sb, Some(&r)))
        })
        .collect();
    let socket = cluster.nodes[0].socket.clone();
    wait_until(
        &format!("the {} DELs to be connected to the daemon", in_flight.len()),
        common::WAIT,
        || Ok(connections_to(&socket)? >= in_flight.len()),
    )?;
    cluster.nodes[0].daemon.kill();
    drop(resumed);
    cluster.nodes[0].restart_daemon()?;
    let mut failed_dels = 0;
    for ((sandbox, result), task) in in_flight.iter().zip(tasks) {
        if task.await?.is_err() {
            failed_dels += 1;
            let rt = runtime.clone();
            let (sb, r) = (sandbox.clone(), result.clone());
            tokio::task::spawn_blocking(move || del_until_done(&rt, &sb, Some(&r))).await??;
        }
    }
    eprintln!(
        "seed {seed}: daemon killed with {done_first} of {PODS} DELs done and {} in flight; {failed_dels} DELs retried",
        in_flight.len()
    );
    ensure!(
        failed_dels == in_flight.len(),
        "every DEL in flight when the daemon died must fail ({failed_dels} of {} did)",
        in_flight.len()
    );

    // 3. Nothing is left.
    let node = &cluster.nodes[0];
    ensure!(
        node.pod_ports()?.is_empty(),
        "OVS ports left: {:?}",
        node.pod_ports()?
    );
    ensure!(
        node.pod_veths()?.is_empty(),
        "veths left: {:?}",
        node.pod_veths()?
    );
    ensure!(
        node.ovs_rows("QoS")? == 0,
        "QoS rows left: {}",
        node.ovs_rows("QoS")?
    );
    ensure!(
        node.ovs_rows("Queue")? == 0,
        "Queue rows left: {}",
        node.ovs_rows("Queue")?
    );
    for ns in &netns {
        ensure!(
            ns.exec(&["ip", "link", "show", "eth0"]).is_err(),
            "eth0 left in {}",
            ns.name()
        );
    }
    cluster.nodes[0].daemon.check_alive()?;
    Ok(())
}
