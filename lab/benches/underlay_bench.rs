//! Issue 25's figures: an underlay pod (Kube-OVN's underlay, `examples/lab/40-underlay.yaml`
//! applied after `up` in the guide's order:
//! VLAN 100, its gateway the ToR, no NAT) to the outside host, against an overlay pod of the
//! default VPC on the same node whose packets the node NATs (`natOutgoing`, through `ovn0`), in
//! the same lab run, both on the userspace datapath: TCP throughput (one connection, pod →
//! outside host) and ping RTT median. The ratio is what is reported.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p kube-ovn-lab --bench underlay_bench -- [rounds] [seconds] [install]
//! #   default 5 rounds of 3 s each way, `manifests` (real kubelets; see docs/benchmarks.md)
//! ```
//!
//! The sender and the sink are this program itself (`send` and `sink` below), run in the pod's
//! and the outside host's network namespaces with `kube-ovn-lab exec` and `kube-ovn-lab
//! outside`: no iperf is needed on the machine. The two pods are measured alternately, round by
//! round, so both see the same load of the machine.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

mod support;
use kube_ovn_testkit::wait_until;
use support::Lab;

/// The outside host's address (`Topology::outside_ip`) and a port nothing else uses there.
const SINK: &str = "198.51.100.10:5201";
const PINGS: usize = 50;

/// Accepts connections for `lifetime` seconds (then exits: killing `kube-ovn-lab outside` need
/// not reach it); for each, reads to the end and answers the byte count.
fn sink(addr: &str, lifetime: f64) -> Result<()> {
    let listener = TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
    listener.set_nonblocking(true)?;
    let end = Instant::now() + Duration::from_secs_f64(lifetime);
    while Instant::now() < end {
        let mut conn = match listener.accept() {
            Ok((conn, _)) => conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        conn.set_nonblocking(false)?;
        let mut buf = vec![0u8; 1 << 16];
        let mut total: u64 = 0;
        loop {
            match conn.read(&mut buf)? {
                0 => break,
                n => total += n as u64,
            }
        }
        conn.write_all(total.to_string().as_bytes())?;
    }
    Ok(())
}

/// Sends for `seconds`, closes its side, waits for the sink's count; prints bits per second
/// (counted by the sink, over the time until its answer came back).
fn send(to: &str, seconds: f64) -> Result<()> {
    let to: SocketAddr = to.parse()?;
    let mut conn = TcpStream::connect_timeout(&to, Duration::from_secs(5))
        .with_context(|| format!("connecting to {to}"))?;
    let buf = vec![0x5au8; 1 << 16];
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        conn.write_all(&buf)?;
    }
    conn.shutdown(std::net::Shutdown::Write)?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer)?;
    let took = start.elapsed().as_secs_f64();
    let bytes: u64 = answer.trim().parse().context("the sink's byte count")?;
    #[allow(clippy::cast_precision_loss, reason = "a figure, far below 2^52 bytes")]
    let bits = bytes as f64 * 8.0;
    println!("{}", bits / took);
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Each echo's `time=` of `ping`'s output, in ms.
fn rtts(ping: &str) -> Vec<f64> {
    ping.lines()
        .filter_map(|l| l.split("time=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// `(namespace/name, node)` of the pods `kubectl get pods -A -o wide` lists in `namespace`.
fn pods_in(lab: &Lab, namespace: &str) -> Result<Vec<(String, String)>> {
    let out = lab.ok(&[
        "kubectl",
        "get",
        "pods",
        "-n",
        namespace,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{\"\\n\"}{end}",
    ])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let (name, node) = l.split_once(' ')?;
            Some((format!("{namespace}/{name}"), node.to_owned()))
        })
        .collect())
}

/// `examples/lab/40-underlay.yaml` (which `up` holds back) in Kube-OVN's guide's order: the
/// ProviderNetwork until every node is ready, then the rest until both pods run.
fn apply_the_underlay(lab: &Lab) -> Result<()> {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/40-underlay.yaml");
    let text = std::fs::read_to_string(&file)?;
    let provider = text
        .split("\n---\n")
        .find(|d| d.contains("kind: ProviderNetwork"))
        .context("a ProviderNetwork in 40-underlay.yaml")?;
    let first = lab.dir.path().join("provider-network.yaml");
    std::fs::write(&first, provider)?;
    // Bounded waits, testkit's (the lab's tests use the same).
    let until = |what: &str, done: &dyn Fn() -> Result<bool>| wait_until(what, Duration::from_mins(2), done);
    lab.ok(&["kubectl", "apply", "-f", &first.to_string_lossy()])?;
    until("net1 ready on both nodes", &|| {
        let ready = lab.ok(&[
            "kubectl",
            "get",
            "provider-network",
            "net1",
            "-o",
            "jsonpath={.status.readyNodes}",
        ])?;
        Ok(ready.contains("node1") && ready.contains("node2"))
    })?;
    lab.ok(&["kubectl", "apply", "-f", &file.to_string_lossy()])?;
    until("the underlay pods to run", &|| {
        let phases = lab.ok(&[
            "kubectl",
            "get",
            "pods",
            "-n",
            "underlay",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ])?;
        Ok(phases.split_whitespace().filter(|p| *p == "Running").count() == 2)
    })
}

struct Figures {
    bits: Vec<f64>,
    rtt: Vec<f64>,
}

fn round(lab: &Lab, exe: &str, pod: &str, seconds: f64, figures: &mut Figures) -> Result<()> {
    let secs = seconds.to_string();
    let out = lab.ok(&["exec", pod, "--", exe, "send", SINK, &secs])?;
    figures.bits.push(
        out.trim()
            .parse()
            .with_context(|| format!("{pod}'s sender printed {out:?}"))?,
    );
    let count = PINGS.to_string();
    let ip = SINK.split(':').next().expect("an address");
    let out = lab.ok(&[
        "exec", pod, "--", "ping", "-c", &count, "-i", "0.02", "-W", "1", ip,
    ])?;
    let rtts = rtts(&out);
    ensure!(
        rtts.len() == PINGS,
        "{pod}: {} of {PINGS} echoes answered:\n{out}",
        rtts.len()
    );
    figures.rtt.push(median(rtts));
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    match args.first().map(String::as_str) {
        Some("sink") => {
            let lifetime = args.get(2).context("sink ADDR SECONDS")?.parse()?;
            return sink(args.get(1).context("sink ADDR SECONDS")?, lifetime);
        }
        Some("send") => {
            let seconds = args.get(2).context("send ADDR SECONDS")?.parse()?;
            return send(args.get(1).context("send ADDR SECONDS")?, seconds);
        }
        _ => {}
    }
    let rounds: usize = args.first().map_or(Ok(5), |a| a.parse())?;
    let seconds: f64 = args.get(1).map_or(Ok(3.0), |a| a.parse())?;
    let install = args.get(2).map_or("manifests", String::as_str);
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();

    let lab = Lab::new("ub")?;
    let out = lab.up(&["--install", install])?;
    ensure!(
        out.contains("checks as expected") && !out.contains("FAIL"),
        "the matrix is not green:\n{out}"
    );
    apply_the_underlay(&lab)?;
    let (underlay, node) = pods_in(&lab, "underlay")?
        .into_iter()
        .next()
        .context("no underlay pod")?;
    // An overlay pod of ovn-default (natOutgoing) on the same node: the same node, NATed by it.
    let Some((overlay, _)) = pods_in(&lab, "demo")?.into_iter().find(|(_, n)| *n == node) else {
        bail!("no demo pod on {node}, beside {underlay}");
    };
    let lifetime = (f64::from(u32::try_from(rounds)?) * (seconds + 10.0) + 60.0).to_string();
    let mut server: Child = lab
        .command(&["outside", "--", &exe, "sink", "0.0.0.0:5201", &lifetime])
        .stdout(Stdio::null())
        .spawn()?;
    let result = (|| -> Result<(Figures, Figures)> {
        let mut u = Figures {
            bits: vec![],
            rtt: vec![],
        };
        let mut o = Figures {
            bits: vec![],
            rtt: vec![],
        };
        // The sink needs a moment to listen: the first connection is retried.
        let deadline = Instant::now() + Duration::from_secs(10);
        while lab
            .command(&["exec", &underlay, "--", &exe, "send", SINK, "0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| !s.success())?
        {
            ensure!(
                Instant::now() < deadline,
                "the sink on the outside host never answered"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        for i in 0..rounds {
            round(&lab, &exe, &underlay, seconds, &mut u)?;
            round(&lab, &exe, &overlay, seconds, &mut o)?;
            eprintln!(
                "round {i}: underlay {:.0} Mbit/s {:.3} ms, overlay {:.0} Mbit/s {:.3} ms",
                u.bits[i] / 1e6,
                u.rtt[i],
                o.bits[i] / 1e6,
                o.rtt[i]
            );
        }
        Ok((u, o))
    })();
    let _ = server.kill();
    let _ = server.wait();
    let (u, o) = result?;
    lab.down()?;
    let (ub, ob) = (median(u.bits) / 1e6, median(o.bits) / 1e6);
    let (ur, or) = (median(u.rtt), median(o.rtt));
    println!(
        "pods on {node}: underlay {underlay}, overlay {overlay} (NAT); {rounds} rounds of {seconds} s and {PINGS} pings each"
    );
    println!("| what | underlay pod | overlay pod (NAT) | underlay / overlay |");
    println!("|---|---|---|---|");
    println!(
        "| TCP throughput to the outside host, median | {ub:.0} Mbit/s | {ob:.0} Mbit/s | {:.2} |",
        ub / ob
    );
    println!(
        "| ping RTT to the outside host, median of medians | {ur:.3} ms | {or:.3} ms | {:.2} |",
        ur / or
    );
    Ok(())
}
