//! `kubectl ko` on the lab installed from `deploy/`, as an operator runs it: the real
//! `kubectl-ko` binary (built beside `kube-ovn-lab`) with the lab's kubectl and administrator
//! kubeconfig, in the control plane's network namespace (where the API server is reachable).
//! - `trace`: a pod-to-pod TCP SYN is delivered to the destination pod's port; with a
//!   NetworkPolicy denying ingress, the same trace names the ACL and the policy;
//! - `diagnose IPPorts`: each node's pinger reaches an open port, and fails on a closed one;
//! - `diagnose all`: green; red, naming the node and ovs-vswitchd, while one node's ovs-vswitchd
//!   is stopped (SIGSTOP: alive but not answering, as a hung daemon); green again once it runs.
//!   The pingers' metrics show the same stop (observe.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kube_ovn_testkit::wait_until;

use super::{Lab, WAIT, jsonpath};

const NS: &str = "ko-trace";

/// How long one node's ovs-vswitchd stays stopped at most. deploy/base/ovs-ovn.yaml's liveness
/// probe (every 10 s, 6 s timeout, 3 failures) has the kubelet kill a daemon that does not
/// answer for about 26 s; the test resumes it before that, whatever is still running, so the
/// kubelet never restarts OVS on the test's account.
const MAX_STOP: Duration = Duration::from_secs(20);

fn ko_binary() -> Result<PathBuf> {
    let bin = Path::new(Lab::bin())
        .parent()
        .context("the binary's directory")?
        .join("kubectl-ko");
    ensure!(
        bin.is_file(),
        "{} is missing (run the tests with `cargo test --workspace`, or `cargo build --workspace --bins` first)",
        bin.display()
    );
    Ok(bin)
}

/// `kubectl ko <args>` against the lab.
pub(super) fn ko(lab: &Lab, args: &[&str]) -> Result<Output> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.netns("cp")])
        .arg(ko_binary()?)
        .args(args)
        .env(
            "KUBECONFIG",
            lab.dir.path().join(&lab.name).join("admin.kubeconfig"),
        )
        .env("KUBECTL", kube_ovn_lab::kubernetes::bin_dir().join("kubectl"));
    cmd.output()
        .with_context(|| format!("running kubectl ko {}", args.join(" ")))
}

pub(super) fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn apply(lab: &Lab, name: &str, yaml: &str) -> Result<()> {
    let file = lab.dir.path().join(format!("{name}.yaml"));
    std::fs::write(&file, yaml)?;
    lab.apply(&file)?;
    Ok(())
}

const PODS: &str = r"
apiVersion: v1
kind: Namespace
metadata:
  name: ko-trace
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: ko-trace, labels: {app: client}}
spec:
  containers:
    - {name: netexec, image: kube-ovn-lab/netexec, imagePullPolicy: IfNotPresent}
---
apiVersion: v1
kind: Pod
metadata: {name: server, namespace: ko-trace, labels: {app: server}}
spec:
  containers:
    - name: netexec
      image: kube-ovn-lab/netexec
      imagePullPolicy: IfNotPresent
      ports: [{containerPort: 8080, protocol: TCP}]
";

const DENY: &str = r"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-ingress, namespace: ko-trace}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
";

/// The "Done when" of issue 28 for `trace` and `diagnose`, and (observe.rs) for the pinger's
/// metrics and mirroring.
pub fn kubectl_ko_works(lab: &Lab) -> Result<()> {
    // The pingers' metrics are read, a round or two of theirs, while the traces and the first
    // diagnose run.
    let pingers = std::thread::scope(|s| {
        let pingers = s.spawn(|| super::observe::pingers_are_scraped(lab));
        let done = trace_works(lab).and_then(|()| diagnose_is_green(lab));
        let pingers = pingers
            .join()
            .map_err(|_| anyhow::anyhow!("the pinger scrape panicked"))?;
        done.and(pingers)
    })?;
    diagnose_works(lab, &pingers)
}

/// `kubectl ko trace` pod to pod, then denied by a NetworkPolicy.
fn trace_works(lab: &Lab) -> Result<()> {
    apply(lab, "ko-trace-pods", PODS)?;
    for pod in ["client", "server"] {
        lab.ok(&[
            "kubectl",
            "-n",
            NS,
            "wait",
            "--for=condition=Ready",
            &format!("pod/{pod}"),
            "--timeout=120s",
        ])?;
    }
    let server_ip = jsonpath(lab, &["get", "pod", "-n", NS, "server"], "{.status.podIP}")?;
    let trace_args = ["trace", "ko-trace/client", server_ip.as_str(), "tcp", "8080"];

    // Pod to pod: delivered to the server's port; OVS on the client's node forwards it.
    let out = ko(lab, &trace_args)?;
    let t = text(&out);
    ensure!(out.status.success(), "kubectl ko trace failed:\n{t}");
    ensure!(
        t.contains("OVN delivers the packet to server.ko-trace")
            && t.contains("OVS on ")
            && t.contains("ofproto/trace"),
        "the trace does not show the packet delivered:\n{t}"
    );
    println!("kubectl ko trace, pod to pod:\n{t}");

    // diagnose IPPorts as Kube-OVN spells it: every node's pinger reaches the server's port; a
    // port nothing listens on fails, naming each node.
    let open = format!("tcp-{server_ip}-8080");
    let out = ko(lab, &["diagnose", "IPPorts", &open])?;
    let t = text(&out);
    ensure!(
        out.status.success()
            && ["node1", "node2"]
                .iter()
                .all(|n| t.contains(&format!("PASS  IPPorts from node {n}"))),
        "kubectl ko diagnose IPPorts {open} is not green on both nodes:\n{t}"
    );
    let closed = format!("tcp-{server_ip}-8081");
    let out = ko(lab, &["diagnose", "IPPorts", &closed])?;
    let t = text(&out);
    ensure!(
        !out.status.success()
            && ["node1", "node2"]
                .iter()
                .all(|n| t.contains(&format!("FAIL  IPPorts from node {n}")))
            && t.contains(&format!("{server_ip}:8081")),
        "kubectl ko diagnose IPPorts {closed} does not fail on both nodes naming the target:\n{t}"
    );
    println!("kubectl ko diagnose IPPorts {closed}:\n{t}");

    // A NetworkPolicy denies the server's ingress: the trace names its ACL and the policy (once
    // the controller has written them).
    apply(lab, "ko-trace-deny", DENY)?;
    let last = std::cell::RefCell::new(String::new());
    wait_until("kubectl ko trace to name the NetworkPolicy's ACL", WAIT, || {
        let out = ko(lab, &trace_args)?;
        *last.borrow_mut() = text(&out);
        Ok(out.status.success()
            && last
                .borrow()
                .contains("OVN drops the packet: ACL on port group deny.ingress.ko.trace")
            && last.borrow().contains("of NetworkPolicy ko-trace/deny-ingress"))
    })
    .with_context(|| last.borrow().clone())?;
    println!("kubectl ko trace, denied:\n{}", last.borrow());
    lab.ok(&["kubectl", "delete", "namespace", NS, "--wait=false"])?;
    Ok(())
}

/// `kubectl ko diagnose all`: green.
fn diagnose_is_green(lab: &Lab) -> Result<()> {
    let out = ko(lab, &["diagnose", "all"])?;
    let t = text(&out);
    ensure!(
        out.status.success() && t.contains("diagnose: OK") && !t.contains("FAIL"),
        "kubectl ko diagnose all is not green:\n{t}"
    );
    println!("kubectl ko diagnose all:\n{t}");
    Ok(())
}

/// `kubectl ko diagnose all`: red while one node's ovs-vswitchd is stopped (as the other
/// node's pinger shows), green again.
fn diagnose_works(lab: &Lab, pingers: &super::observe::Pingers) -> Result<()> {
    // One node's ovs-vswitchd stopped (not the node of bgp/fixed, whose ovs-vswitchd the caller
    // kills later and counts the restart of): red, saying which node and daemon.
    let fixed_node = jsonpath(lab, &["get", "pod", "-n", "bgp", "fixed"], "{.spec.nodeName}")?;
    let node = if fixed_node == "node1" { "node2" } else { "node1" };
    let pidfile = lab.node_root(node, "run/openvswitch/ovs-vswitchd.pid");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .with_context(|| format!("{}", pidfile.display()))?
        .trim()
        .parse()?;
    let pid = nix::unistd::Pid::from_raw(pid);
    // The other node's pinger's pings to this node's pinger, counted before the stop.
    let losses = super::observe::LossWatch::new(lab, pingers, node)?;
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP)?;
    let stopped = Instant::now();
    // In the same window, side by side: diagnose, and the other node's pinger counting lost
    // pings; the window lasts MAX_STOP at most.
    let (red, seen, resumed) = std::thread::scope(|s| {
        let seen = s.spawn(|| losses.seen(lab, stopped));
        let red = s.spawn(|| ko(lab, &["diagnose", "all"]));
        // Resumed once both are done or at MAX_STOP, and before anything is asserted, so a
        // failure leaves the node running.
        while !(seen.is_finished() && red.is_finished()) && stopped.elapsed() < MAX_STOP {
            std::thread::sleep(Duration::from_millis(50));
        }
        let resumed = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
        (red.join(), seen.join(), resumed)
    });
    let stop = stopped.elapsed();
    resumed.with_context(|| {
        format!("resuming {node}'s ovs-vswitchd (pid {pid}) after {stop:.1?}: it went while stopped")
    })?;
    println!(
        "{node}'s ovs-vswitchd was stopped for {:.1} s",
        stop.as_secs_f64()
    );
    seen.map_err(|_| anyhow::anyhow!("the pinger watch panicked"))??;
    let red = red.map_err(|_| anyhow::anyhow!("kubectl ko diagnose all panicked"))??;
    ensure!(
        stop < MAX_STOP,
        "kubectl ko diagnose all (or the pinger watch) took {MAX_STOP:?} or more with {node}'s ovs-vswitchd stopped, so it was resumed before they were done"
    );
    let t = text(&red);
    ensure!(
        !red.status.success()
            && t.contains(&format!("FAIL  node {node}: ovs-vswitchd does not answer"))
            && t.contains("problem(s):"),
        "kubectl ko diagnose all is not red about {node}'s ovs-vswitchd:\n{t}"
    );
    println!("kubectl ko diagnose all, {node}'s ovs-vswitchd stopped:\n{t}");

    // Running again: green again. Meanwhile the other node's pinger is awaited until a round
    // of it loses nothing (the round in flight during the stop may wait out its 30 s node
    // ping timeout), and mirroring is checked on the node that kept running rather than wait
    // idle (observe.rs).
    let running = if node == "node1" { "node2" } else { "node1" };
    std::thread::scope(|s| {
        let recovered = s.spawn(|| losses.losses_stop(lab));
        let mirrored = s.spawn(|| super::observe::mirror_in_the_lab(lab, running));
        let last = std::cell::RefCell::new(String::new());
        let green = wait_until("kubectl ko diagnose all to be green again", WAIT, || {
            let out = ko(lab, &["diagnose", "all"])?;
            *last.borrow_mut() = text(&out);
            Ok(out.status.success())
        })
        .with_context(|| last.borrow().clone());
        let joined = |r: std::thread::Result<Result<()>>, what: &str| {
            r.map_err(|_| anyhow::anyhow!("{what} panicked"))?
        };
        let recovered = joined(recovered.join(), "the pinger watch");
        let mirrored = joined(mirrored.join(), "the mirror check");
        green.and(recovered).and(mirrored)
    })
}
