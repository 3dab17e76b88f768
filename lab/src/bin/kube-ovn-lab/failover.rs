//! `kube-ovn-lab failover`: move a VPC's external gateway port off the node that holds it and
//! back, while the outside host sends a request to an EIP every 20 ms, and say how long the ToR
//! took to route the EIP through the new node and how long requests failed (issue 26's figures).
//!
//! The move is what an administrator does: remove the holder's `ovn.kubernetes.io/external-gw`
//! label (the controller drops its Gateway_Chassis row, OVN's next chassis claims the port, the
//! controller writes the lrp OvnEip's `status.activateGateway`, the speakers there announce), then
//! put it back (the node's higher priority takes the port back: OVN's gateway chassis preempt).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::Api;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::OvnEip;
use kube_ovn_lab::cluster::failover::{self, Probe};
use kube_ovn_lab::cluster::topology::Topology;

/// Between two probes, and how long one waits for its answer.
const PROBE_EVERY: Duration = Duration::from_millis(20);
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// How long requests are watched after the route moved: at least `TAIL` (a path that breaks
/// just after the move is seen), at most `SETTLE` for a run of failures to end.
const TAIL: Duration = Duration::from_secs(1);
const SETTLE: Duration = Duration::from_secs(10);

#[derive(clap::Args)]
pub struct FailoverArgs {
    /// The VPC whose gateway moves.
    #[arg(long, env = "KUBE_OVN_LAB_FAILOVER_VPC", default_value = "vpc1")]
    vpc: String,
    /// The external subnet its gateway port is on (the controller's `--external-gateway-switch`).
    #[arg(long, env = "KUBE_OVN_LAB_FAILOVER_SUBNET", default_value = "external")]
    external_subnet: String,
    /// The OvnEip (announced over BGP, used by the VPC) the outside host requests.
    #[arg(long, env = "KUBE_OVN_LAB_FAILOVER_EIP", default_value = "tenant-1-fip")]
    eip: String,
    /// The TCP port a netexec server answers on behind the EIP.
    #[arg(long, env = "KUBE_OVN_LAB_FAILOVER_PORT", default_value_t = 8080)]
    port: u16,
    /// How many times to move the port away and back.
    #[arg(long, env = "KUBE_OVN_LAB_FAILOVER_ROUNDS", default_value_t = 1)]
    rounds: u32,
    /// Move the port away once and leave it there (the holder's label stays removed): no move
    /// back onto a node whose datapath still has the FIP's connections (see `docs/external.md`
    /// on ovs-vswitchd 3.1's userspace conntrack).
    #[arg(long, env = "KUBE_OVN_LAB_FAILOVER_AWAY_ONLY", conflicts_with = "rounds")]
    away_only: bool,
    /// How long one move may take, in seconds.
    #[arg(long, env = "KUBE_OVN_LAB_FAILOVER_TIMEOUT", default_value_t = 60)]
    timeout: u64,
}

/// One measured move.
struct Move {
    from: String,
    to: String,
    status: Duration,
    route: Duration,
    outage: Duration,
}

pub fn run_verb(name: &str, run_dir: &Path, args: &FailoverArgs) -> anyhow::Result<std::process::ExitCode> {
    let t = super::verbs::topology_of(name, run_dir)?;
    // The API server is reached from the control plane's namespace, as `matrix` does; the
    // prober enters the outside host's on its own thread.
    let cp = kube_ovn_dataplane::Netns::open(Path::new("/run/netns").join(t.cp_netns()))?;
    let moves = cp.run(|| -> anyhow::Result<Vec<Move>> {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(async {
            let client = kube_ovn_support::kube_client(Some(&t.admin_kubeconfig())).await?;
            measure(&t, &client, args).await
        })
    })??;
    println!("{}", summary(&moves));
    Ok(std::process::ExitCode::SUCCESS)
}

async fn measure(t: &Topology, client: &kube::Client, args: &FailoverArgs) -> anyhow::Result<Vec<Move>> {
    let eips: Api<OvnEip> = Api::all(client.clone());
    let port_eip = format!("{}-{}", args.vpc, args.external_subnet);
    let timeout = Duration::from_secs(args.timeout);
    let target = eips
        .get(&args.eip)
        .await
        .with_context(|| format!("OvnEip {}", args.eip))?
        .status
        .and_then(|s| s.v4_ip)
        .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
        .with_context(|| format!("OvnEip {} has no status.v4Ip", args.eip))?;
    let mut moves = Vec::new();
    for round in 1..=args.rounds {
        let (holder, _) = settled(t, &eips, &port_eip, target, None, timeout).await?;
        let mut current = holder.clone();
        let steps = [
            (format!("{}-", keys::EXTERNAL_GW_LABEL), false),
            (format!("{}=true", keys::EXTERNAL_GW_LABEL), true),
        ];
        for (label, back) in steps.into_iter().take(if args.away_only { 1 } else { 2 }) {
            let prober = Prober::start(t, std::net::SocketAddr::new(target, args.port));
            let trigger = Instant::now();
            super::verbs::kubectl_output(t, &["label", "node", &holder, &label, "--overwrite"])?;
            // Away: any other node; back: the holder again (its priority is the highest).
            let (now, took) = if back {
                settled(t, &eips, &port_eip, target, Some(Want::Is(&holder)), timeout).await?
            } else {
                settled(t, &eips, &port_eip, target, Some(Want::Not(&holder)), timeout).await?
            };
            let probes = prober.finish(trigger)?;
            let outage = failover::outage(&probes, trigger).with_context(|| {
                format!(
                    "requests to {target}:{} still fail {SETTLE:?} after the route moved",
                    args.port
                )
            })?;
            let m = Move {
                from: std::mem::replace(&mut current, now.clone()),
                to: now,
                status: took.status,
                route: took.route,
                outage,
            };
            println!(
                "round {round}: {} → {}: gateway status in {:?}, ToR route in {:?}, requests failed for {:?}",
                m.from, m.to, m.status, m.route, m.outage
            );
            moves.push(m);
        }
    }
    Ok(moves)
}

/// Which holder a wait is for.
#[derive(Clone, Copy)]
enum Want<'a> {
    Is(&'a str),
    Not(&'a str),
}

/// When a move was seen, from the trigger.
struct Took {
    status: Duration,
    route: Duration,
}

/// Until the lrp EIP's `status.activateGateway` names a node (as `want` says) and the ToR routes
/// `target` through that node's fabric address; the node and when each was first seen.
async fn settled(
    t: &Topology,
    eips: &Api<OvnEip>,
    port_eip: &str,
    target: std::net::IpAddr,
    want: Option<Want<'_>>,
    timeout: Duration,
) -> anyhow::Result<(String, Took)> {
    let start = Instant::now();
    let mut status_at = None;
    let mut last = String::from("nothing yet");
    while start.elapsed() < timeout {
        let holder = eips
            .get_opt(port_eip)
            .await?
            .and_then(|e| e.status?.activate_gateway)
            .unwrap_or_default();
        let ok = |n: &str| match want {
            None => !n.is_empty(),
            Some(Want::Is(h)) => n == h,
            Some(Want::Not(h)) => !n.is_empty() && n != h,
        };
        if ok(&holder) {
            let status = *status_at.get_or_insert_with(|| start.elapsed());
            let via = tor_next_hop(t, target)?;
            if via.as_deref() == Some(holder.as_str()) {
                return Ok((
                    holder,
                    Took {
                        status,
                        route: start.elapsed(),
                    },
                ));
            }
            last = format!("{port_eip} held by {holder}, the ToR routes {target} via {via:?}");
        } else {
            last = format!("{port_eip} held by {holder:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bail!("timed out after {timeout:?} waiting for the gateway to move and the ToR to follow: {last}")
}

/// The node whose fabric address the ToR's kernel routes `target` through (a BGP /32), if any.
fn tor_next_hop(t: &Topology, target: std::net::IpAddr) -> anyhow::Result<Option<String>> {
    let route = kube_ovn_lab::cluster::net::ip(&t.tor_netns(), &["route", "get", &target.to_string()])?;
    let via = route
        .split_whitespace()
        .skip_while(|w| *w != "via")
        .nth(1)
        .and_then(|v| v.parse::<std::net::Ipv4Addr>().ok());
    Ok(via.and_then(|v| t.nodes.iter().find(|n| n.ip == v).map(|n| n.name.clone())))
}

/// The outside host's requests, on a thread of their own in its namespace.
struct Prober {
    stop: Arc<AtomicBool>,
    probes: Arc<Mutex<Vec<Probe>>>,
    thread: std::thread::JoinHandle<anyhow::Result<()>>,
}

impl Prober {
    fn start(t: &Topology, to: std::net::SocketAddr) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let probes = Arc::new(Mutex::new(Vec::new()));
        let ns = Path::new("/run/netns").join(t.outside_netns());
        let (flag, seen) = (stop.clone(), probes.clone());
        let thread = std::thread::spawn(move || -> anyhow::Result<()> {
            let netns = kube_ovn_dataplane::Netns::open(&ns)?;
            netns.run(move || {
                while !flag.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let answered = super::probe::get(to, "/hostname", PROBE_TIMEOUT).is_ok();
                    seen.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Probe { sent, answered });
                    std::thread::sleep(PROBE_EVERY.saturating_sub(sent.elapsed()));
                }
            })?;
            Ok(())
        });
        Self { stop, probes, thread }
    }

    /// Called once the route moved: keeps probing for [`TAIL`] more, and on while a run of
    /// failures after `trigger` has not ended (up to [`SETTLE`]); then stops. The probes.
    fn finish(self, trigger: Instant) -> anyhow::Result<Vec<Probe>> {
        let called = Instant::now();
        loop {
            let ended = failover::outage(
                &self.probes.lock().unwrap_or_else(PoisonError::into_inner),
                trigger,
            )
            .is_some();
            if (ended && called.elapsed() >= TAIL) || called.elapsed() >= SETTLE || self.thread.is_finished()
            {
                break;
            }
            std::thread::sleep(PROBE_EVERY);
        }
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the prober thread panicked"))??;
        Ok(std::mem::take(
            &mut *self.probes.lock().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

/// Medians and p99s over every move.
fn summary(moves: &[Move]) -> String {
    let of = |f: fn(&Move) -> Duration| moves.iter().map(f).collect::<Vec<_>>();
    let line = |what: &str, v: Vec<Duration>| {
        format!(
            "{what}: median {:?}, p99 {:?}",
            failover::percentile(&v, 50).unwrap_or_default(),
            failover::percentile(&v, 99).unwrap_or_default()
        )
    };
    format!(
        "{} moves; {}; {}; {}",
        moves.len(),
        line("gateway status", of(|m| m.status)),
        line("ToR route", of(|m| m.route)),
        line("requests failed", of(|m| m.outage))
    )
}
