//! What an operator watches, on the lab installed from `deploy/` (issue 28):
//! - kube-ovn-pinger's metrics, scraped as Prometheus does (`GET <pod IP>:8080/metrics` over the
//!   pod network, here from the pinger's own node's network namespace, which reaches pod IPs
//!   through `ovn0`): Kube-OVN's series with sane values, and the pingers reaching each other;
//! - one node's ovs-vswitchd stopped (the window of `operations.rs`): the other node's pinger
//!   counts lost pings to the stopped node's pinger with its next round, and none once it runs
//!   again;
//! - traffic mirroring onto `mirror0` (`mirror.rs`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kube_ovn_testkit::wait_until;

use super::{Lab, WAIT, jsonpath};

#[path = "mirror.rs"]
mod mirror;
pub use mirror::mirror_in_the_lab;

/// The pinger's `--interval` when its DaemonSet does not set one (pinger/src/config.rs, as
/// Kube-OVN's default).
const DEFAULT_INTERVAL_SECS: u64 = 5;
/// The pinger's `--port` (deploy/base/pinger.yaml's `metrics` port).
const METRICS_PORT: u16 = 8080;
/// How often the metrics are read while waiting for a round.
const POLL: Duration = Duration::from_millis(200);
/// How long the pinger waits for a pod's echo replies (pinger/src/round.rs, Kube-OVN's).
const POD_PING_TIMEOUT: Duration = Duration::from_secs(1);

/// One sample of the text exposition: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    pub(super) name: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) value: f64,
    pub(super) line: String,
}

/// The samples of a `/metrics` answer (comments and unparsable lines skipped).
pub(super) fn parse_metrics(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_sample).collect()
}

fn parse_sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, labels, rest) = if let Some(open) = line.find('{') {
        let close = line.rfind('}')?;
        (
            &line[..open],
            parse_labels(&line[open + 1..close])?,
            &line[close + 1..],
        )
    } else {
        let (name, rest) = line.split_once(' ')?;
        (name, BTreeMap::new(), rest)
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
        line: line.to_owned(),
    })
}

/// `a="x",b="y"` (values may hold `\"`, `\\` and `,`).
fn parse_labels(text: &str) -> Option<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    let mut rest = text.trim_start_matches(',');
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => value.push(chars.next()?.1),
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.trim().to_owned(), value);
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some(labels)
}

/// The first sample named `name` with (at least) these labels.
pub(super) fn find<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
    samples.iter().find(|s| {
        s.name == name
            && labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
    })
}

/// `--interval` from the DaemonSet's args (`--interval=N` or `--interval N`); `None` when unset.
fn interval_from_args(args: &[&str]) -> Result<Option<u64>> {
    let mut found = None;
    for (i, arg) in args.iter().enumerate() {
        let value = if let Some(v) = arg.strip_prefix("--interval=") {
            v
        } else if *arg == "--interval" {
            args.get(i + 1).context("--interval without a value")?
        } else {
            continue;
        };
        found = Some(value.parse().with_context(|| format!("--interval {value:?}"))?);
    }
    Ok(found)
}

/// A kube-ovn-pinger pod.
#[derive(Debug, Clone)]
pub struct Pinger {
    pub pod: String,
    pub node: String,
    pub ip: String,
    /// From one round's pod pings to the next round's, as measured (`--interval` plus the
    /// round's own duration: the pinger sleeps `--interval` between the end of a round and the
    /// start of the next).
    pub period: Duration,
}

/// The pingers and their DaemonSet's `--interval`.
pub struct Pingers {
    pub interval: Duration,
    pub pods: Vec<Pinger>,
}

/// The pinger's `/metrics`, read from `from_node`'s network namespace over the pod network.
fn scrape(lab: &Lab, from_node: &str, pinger: &Pinger) -> Result<Vec<Sample>> {
    let netns = node_netns(lab, from_node);
    let addr = SocketAddr::new(pinger.ip.parse()?, METRICS_PORT);
    let answer = kube_ovn_dataplane::Netns::open(&netns)?
        .run(|| kube_ovn_lab::netexec::http_get(addr, "/metrics", Duration::from_secs(3)))?
        .with_context(|| format!("{}'s metrics from {from_node}", pinger.pod))?;
    ensure!(
        answer.status == 200,
        "{}'s metrics: HTTP {}: {}",
        pinger.pod,
        answer.status,
        answer.body
    );
    Ok(parse_metrics(&answer.body))
}

fn node_netns(lab: &Lab, node: &str) -> PathBuf {
    lab.netns_path(node)
}

/// `pinger_pod_ping_count_total` and `pinger_pod_ping_lost_total` from `src`'s pinger to the
/// pinger pod `target`.
fn pod_ping(samples: &[Sample], src: &Pinger, target: &Pinger) -> Option<(f64, f64)> {
    let labels = [
        ("src_node_name", src.node.as_str()),
        ("target_pod_ip", target.ip.as_str()),
    ];
    Some((
        find(samples, "pinger_pod_ping_count_total", &labels)?.value,
        find(samples, "pinger_pod_ping_lost_total", &labels)?.value,
    ))
}

fn other<'a>(pods: &'a [Pinger], node: &str) -> Result<&'a Pinger> {
    pods.iter()
        .find(|p| p.node != node)
        .with_context(|| format!("no pinger on a node other than {node}"))
}

/// Issue 28: "pinger metrics are scraped in a test". Each pinger's metrics from its node:
/// OVS and ovn-controller up, the API server healthy and timed, the other node's pinger pod
/// and the other node pinged, with latencies; then two rounds in which the other pinger
/// answered (it measures each pinger's round period on the way, for the stop's bound).
pub fn pingers_are_scraped(lab: &Lab) -> Result<Pingers> {
    let args = jsonpath(
        lab,
        &["get", "daemonset", "-n", "kube-system", "kube-ovn-pinger"],
        "{.spec.template.spec.containers[?(@.name==\"pinger\")].args[*]}",
    )?;
    let args: Vec<&str> = args.split_whitespace().collect();
    let interval = Duration::from_secs(interval_from_args(&args)?.unwrap_or(DEFAULT_INTERVAL_SECS));
    let listed = jsonpath(
        lab,
        &["get", "pods", "-n", "kube-system", "-l", "app=kube-ovn-pinger"],
        "{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP}{\"\\n\"}{end}",
    )?;
    let mut pods: Vec<Pinger> = listed
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| Pinger {
                pod: f[0].to_owned(),
                node: f[1].to_owned(),
                ip: f[2].to_owned(),
                period: Duration::ZERO,
            })
        })
        .collect();
    ensure!(
        pods.len() == 2 && pods[0].node != pods[1].node,
        "want one pinger with an address on each of 2 nodes:\n{listed}"
    );

    for pinger in &pods {
        let peer = other(&pods, &pinger.node)?;
        let node = pinger.node.as_str();
        let to_peer = [("src_node_name", node), ("target_pod_ip", peer.ip.as_str())];
        let to_peer_node = [("src_node_name", node), ("target_node_name", peer.node.as_str())];
        // The first rounds may still be running when the lab is up: until a pod ping to the
        // peer is counted, the series of a whole round are not all there.
        let last = std::cell::RefCell::new(Vec::new());
        wait_until(
            &format!("{}'s metrics to count pings to {}", pinger.pod, peer.pod),
            WAIT,
            || {
                let samples = scrape(lab, node, pinger)?;
                let ready = pod_ping(&samples, pinger, peer).is_some_and(|(count, _)| count >= 3.0);
                *last.borrow_mut() = samples;
                Ok(ready)
            },
        )?;
        let samples = last.into_inner();
        let mut shown = Vec::new();
        let mut expect = |name: &str, labels: &[(&str, &str)], ok: &dyn Fn(f64) -> bool, want: &str| {
            let sample = find(&samples, name, labels);
            if let Some(s) = sample {
                shown.push(s.line.clone());
            }
            match sample {
                Some(s) if ok(s.value) => Ok(()),
                Some(s) => Err(anyhow::anyhow!("{}: {} (want {want})", pinger.pod, s.line)),
                None => Err(anyhow::anyhow!("{}: no {name} {labels:?}", pinger.pod)),
            }
        };
        let by_node = [("nodeName", node)];
        let one = |v: f64| (v - 1.0).abs() < f64::EPSILON;
        expect("pinger_ovs_up", &by_node, &one, "1")?;
        expect("pinger_ovn_controller_up", &by_node, &one, "1")?;
        expect("pinger_apiserver_healthy", &by_node, &one, "1")?;
        // Its node's OVS interfaces agree with the Southbound's port bindings of its chassis.
        expect("pinger_inconsistent_port_binding", &by_node, &|v| v == 0.0, "0")?;
        expect(
            "pinger_apiserver_latency_ms_count",
            &by_node,
            &|v| v >= 1.0,
            ">= 1",
        )?;
        expect("pinger_apiserver_latency_ms_sum", &by_node, &|v| v > 0.0, "> 0")?;
        expect("pinger_pod_ping_count_total", &to_peer, &|v| v >= 3.0, ">= 3")?;
        expect("pinger_pod_ping_lost_total", &to_peer, &|v| v >= 0.0, "a count")?;
        expect(
            "pinger_pod_ping_latency_ms_count",
            &to_peer,
            &|v| v >= 1.0,
            ">= 1",
        )?;
        // The mean of the runs' mean round trips: more than nothing, less than the 1 s timeout.
        let runs = find(&samples, "pinger_pod_ping_latency_ms_count", &to_peer).map_or(1.0, |s| s.value);
        expect(
            "pinger_pod_ping_latency_ms_sum",
            &to_peer,
            &|v| v > 0.0 && v / runs < 1000.0,
            "a mean in (0, 1000) ms",
        )?;
        expect(
            "pinger_node_ping_count_total",
            &to_peer_node,
            &|v| v >= 3.0,
            ">= 3",
        )?;
        expect(
            "pinger_node_ping_latency_ms_count",
            &to_peer_node,
            &|v| v >= 1.0,
            ">= 1",
        )?;
        println!(
            "{} on {node}, scraped from {node}:\n  {}",
            pinger.pod,
            shown.join("\n  ")
        );
    }

    // Two more rounds of each pinger: no ping to the other pinger lost, and the time between
    // the rounds' pings (the period the stop's bound is made of).
    let peers: Vec<Pinger> = pods
        .iter()
        .map(|p| other(&pods, &p.node).cloned())
        .collect::<Result<_>>()?;
    let read = |p: &Pinger, peer: &Pinger| -> Result<(f64, f64)> {
        pod_ping(&scrape(lab, &p.node, p)?, p, peer).context("the pod ping series went away")
    };
    let mut seen: Vec<Vec<(Instant, f64, f64)>> = Vec::new();
    for (p, peer) in pods.iter().zip(&peers) {
        let (count, lost) = read(p, peer)?;
        seen.push(vec![(Instant::now(), count, lost)]);
    }
    let rounds_timeout = WAIT;
    wait_until("two more rounds of each pinger", rounds_timeout, || {
        for ((p, peer), rounds) in pods.iter().zip(&peers).zip(seen.iter_mut()) {
            let (count, lost) = read(p, peer)?;
            if rounds.last().is_some_and(|r| count > r.1) && rounds.len() < 3 {
                rounds.push((Instant::now(), count, lost));
            }
        }
        if seen.iter().all(|r| r.len() == 3) {
            Ok(true)
        } else {
            std::thread::sleep(POLL);
            Ok(false)
        }
    })?;
    for ((p, peer), rounds) in pods.iter_mut().zip(&peers).zip(&seen) {
        let (first, last) = (rounds[0], rounds[2]);
        // Before anything is stopped the pingers reach each other: of two rounds' pings, some
        // answered. Not all of them: OVS's userspace datapath on two shared cores, busy with
        // this test's kubectl execs and traces, has lost a round's three pings (1 s timeout) now
        // and then; such losses are printed. What the stop below must cause is counted from the
        // losses at its start.
        let (sent, lost) = (last.1 - first.1, last.2 - first.2);
        ensure!(
            lost < sent,
            "{} lost all {sent} pings to {} over two rounds before any daemon was stopped",
            p.pod,
            peer.pod
        );
        if lost > 0.0 {
            println!(
                "{}: {lost} of {sent} pings to {} lost over two rounds before any daemon was stopped (reported)",
                p.pod, peer.pod
            );
        }
        p.period = rounds[2].0 - rounds[1].0;
        // The pinger sleeps --interval between rounds: a shorter period means the interval
        // read from the DaemonSet is not the one it runs with.
        ensure!(
            p.period + POLL * 2 >= interval,
            "{}: a round every {:?}, less than --interval {interval:?}",
            p.pod,
            p.period
        );
        println!(
            "{}: {} pings to {} counted, {} lost in all; a round every {:.1} s (--interval {} s)",
            p.pod,
            last.1,
            peer.pod,
            last.2,
            p.period.as_secs_f64(),
            interval.as_secs()
        );
    }
    Ok(Pingers { interval, pods })
}

/// The pings from the other node's pinger to the pinger pod on the node whose ovs-vswitchd is
/// stopped: counted before, while stopped, and after.
pub struct LossWatch {
    watcher: Pinger,
    target: Pinger,
    lost_before: f64,
    interval: Duration,
    bound: Duration,
}

impl LossWatch {
    /// Before ovs-vswitchd on `stopped_node` is stopped: the watcher's counts so far.
    pub fn new(lab: &Lab, pingers: &Pingers, stopped_node: &str) -> Result<Self> {
        let watcher = other(&pingers.pods, stopped_node)?.clone();
        let target = other(&pingers.pods, &watcher.node)?.clone();
        let (_, lost_before) = pod_ping(&scrape(lab, &watcher.node, &watcher)?, &watcher, &target)
            .context("the pod ping series went away")?;
        // The bound: the pinger sleeps --interval from the end of a round to the start of the
        // next (pinger/src/main.rs), so its pod pings come once a period = interval + round
        // duration (measured above). The first pings sent after the stop are lost: at most
        // one period after it, counted when their 1 s timeout ends; plus 2 s for the probes
        // that precede the pings in a round (OVS, the API server: milliseconds here) and this
        // poll: within the two intervals when a round takes less than interval − 3 s,
        // as the lab's do (well under a second: the lab overlay resolves no name, as the lab
        // runs no cluster DNS; a round waiting 5 s for `kubernetes.default` would not be).
        let bound = watcher.period + POD_PING_TIMEOUT + Duration::from_secs(2);
        ensure!(
            bound <= 2 * pingers.interval,
            "{}: a round every {:?}: a stop could not show within two intervals ({:?})",
            watcher.pod,
            watcher.period,
            2 * pingers.interval
        );
        Ok(Self {
            watcher,
            target,
            lost_before,
            interval: pingers.interval,
            bound,
        })
    }

    /// While ovs-vswitchd is stopped (since `stopped`): the watcher's lost pings to the target
    /// grow within the bound; how long that took. The stopped node's own pinger is not read:
    /// its pod address is reached only through that node's OVS (over the tunnel from the
    /// other node, or through `ovn0` from its own node), which is what is stopped.
    pub fn seen(&self, lab: &Lab, stopped: Instant) -> Result<Duration> {
        let last = std::cell::RefCell::new(String::new());
        wait_until(
            &format!(
                "{}'s pinger_pod_ping_lost_total to {} to grow (bound: one round period + 3 s)",
                self.watcher.pod, self.target.pod
            ),
            self.bound.saturating_sub(stopped.elapsed()),
            || {
                let samples = scrape(lab, &self.watcher.node, &self.watcher)?;
                let lost = find(
                    &samples,
                    "pinger_pod_ping_lost_total",
                    &[
                        ("src_node_name", self.watcher.node.as_str()),
                        ("target_pod_ip", self.target.ip.as_str()),
                    ],
                );
                *last.borrow_mut() = lost.map(|s| s.line.clone()).unwrap_or_default();
                let grew = lost.is_some_and(|s| s.value > self.lost_before);
                if !grew {
                    std::thread::sleep(POLL);
                }
                Ok(grew)
            },
        )
        .with_context(|| format!("last: {}", last.borrow()))?;
        let took = stopped.elapsed();
        println!(
            "{}'s ovs-vswitchd stopped: {} on {} after {:.1} s (two intervals: {} s; bound {:.1} s)",
            self.target.node,
            last.borrow(),
            self.watcher.pod,
            took.as_secs_f64(),
            2 * self.interval.as_secs(),
            self.bound.as_secs_f64()
        );
        Ok(took)
    }

    /// Once ovs-vswitchd runs again: a round of the watcher with no ping lost.
    pub fn losses_stop(&self, lab: &Lab) -> Result<()> {
        let read = || -> Result<(f64, f64)> {
            pod_ping(
                &scrape(lab, &self.watcher.node, &self.watcher)?,
                &self.watcher,
                &self.target,
            )
            .context("the pod ping series went away")
        };
        let mut since = read()?;
        let resumed = Instant::now();
        wait_until(
            &format!(
                "a round of {} with no ping to {} lost",
                self.watcher.pod, self.target.pod
            ),
            WAIT,
            || {
                let now = read()?;
                if now.0 > since.0 {
                    if (now.1 - since.1).abs() < f64::EPSILON {
                        return Ok(true);
                    }
                    // A round whose pings were sent while it was stopped.
                    since = now;
                }
                std::thread::sleep(POLL);
                Ok(false)
            },
        )?;
        println!(
            "ovs-vswitchd running again: {} pings to {} lost in all while stopped; a round with none lost {:.1} s after",
            since.1 - self.lost_before,
            self.target.pod,
            resumed.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

#[test]
fn metrics_text_and_interval_args_are_read() {
    let text = "# HELP pinger_ovs_up If the ovs on the node is up\n\
        # TYPE pinger_ovs_up gauge\n\
        pinger_ovs_up{nodeName=\"node1\"} 1\n\
        pinger_pod_ping_lost_total{src_node_name=\"node1\",target_pod_ip=\"10.16.0.5\",odd=\"a\\\"b,c\"} 3\n\
        pinger_apiserver_latency_ms_sum 12.5\n\
        # EOF\n";
    let samples = parse_metrics(text);
    assert_eq!(samples.len(), 3, "{samples:#?}");
    assert_eq!(
        find(&samples, "pinger_ovs_up", &[("nodeName", "node1")]).map(|s| s.value),
        Some(1.0)
    );
    assert!(find(&samples, "pinger_ovs_up", &[("nodeName", "node2")]).is_none());
    let lost = find(
        &samples,
        "pinger_pod_ping_lost_total",
        &[("target_pod_ip", "10.16.0.5")],
    )
    .unwrap();
    assert!((lost.value - 3.0).abs() < f64::EPSILON);
    assert_eq!(lost.labels["odd"], "a\"b,c");
    assert_eq!(
        find(&samples, "pinger_apiserver_latency_ms_sum", &[]).map(|s| s.value),
        Some(12.5)
    );

    assert_eq!(interval_from_args(&["--enable-metrics=true"]).unwrap(), None);
    assert_eq!(interval_from_args(&["--interval=7"]).unwrap(), Some(7));
    assert_eq!(interval_from_args(&["--interval", "9", "--x"]).unwrap(), Some(9));
    assert!(interval_from_args(&["--interval=soon"]).is_err());
    assert!(interval_from_args(&["--interval"]).is_err());
}
