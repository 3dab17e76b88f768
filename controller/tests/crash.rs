//! The crash drill (issues 4 and 16): the controller runs as its own process (the real binary,
//! reaching a real kube-apiserver through a kubeconfig and OVN over its NB remote) while 300
//! pods are created and deleted on a /25 (up to 90 live, so released addresses are handed out
//! again, and now and then a name comes back for a new pod), and it dies again and again; pods
//! come and go while it is down, and a new process is started each time. Two ways to die:
//!
//! - `random_kills`: SIGKILL by PID at random moments;
//! - `at_crash_points`: the process aborts itself at the moments that matter (the binary is built
//!   with the `crash-points` feature for tests; `KUBE_OVN_CRASH_AT=<point>:<n>` makes it abort the
//!   `n`th time it passes `<point>`): between a plan's submission to the batcher and its commit,
//!   after the commit before the reconciler hears of it, between a pod's port write and its
//!   annotations, and between a release's port removal and the rest of the release. Each seed
//!   goes through every point.
//!
//! No periodic collection runs (`--gc-interval=0`): what is cleaned up is cleaned up by the
//! deletion mechanism and the collection at start. Once the last process has converged: every
//! live pod is routed with an address of its own; the northbound ports, the port groups' pod
//! members, the IP CRs and IPAM (through the subnet status, and key by key through
//! `/debug/ipam`) hold exactly the live pods' (and the nodes' join addresses); and a fresh
//! process, started after the last one is killed, rebuilds exactly the same IPAM.
//!
//! The schedule is the seed's: which pods come and go, on which node, and when the controller
//! dies are drawn from it. After each batch of 20 changes the running controller works until it
//! has routed a number of the batch's new pods drawn from the seed (none to all: so it dies amid
//! its work as often as after it), or until it has died at its crash point — a wait on what the
//! API server shows, not a pause of some milliseconds, so a replay kills at the same point of the
//! controller's progress however loaded the machine is. Then, for random kills, it is killed
//! every fifth batch and at one batch in six otherwise, and stays down for one to three batches;
//! a process that died at a crash point comes back at once or after up to two batches.
//!
//! Each run draws fresh seeds (10 for random kills, 4 for crash points; `CRASH_SEEDS=<n>` for n
//! of each) and prints them, and every failure names its seed; `CRASH_SEED=<s>` replays one seed
//! in both drills.

mod common;
mod netkit;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use common::process::{Binary, Process};
use common::{Env, init_logging, range_addresses};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_ovn_api::crd::{Ip, Subnet};
use kube_ovn_api::names;
use kube_ovn_controller::crash_point;
use kube_ovn_testkit::drill::{Rng, seeds};
use kube_ovn_testkit::wait_until_async;
use netkit::http_get;
use serde_json::json;

const NS: &str = "crash";
const SUBNET: &str = "crash";
const CIDR: &str = "10.99.0.0/25";
const PODS: usize = 300;
const MAX_LIVE: usize = 90;
const NODES: [(&str, &str); 2] = [("n1", "172.18.0.2"), ("n2", "172.18.0.3")];
/// Only the mechanism cleans up: no periodic collection.
const FLAGS: [&str; 1] = ["--gc-interval=0"];
const CONVERGE_WITHIN: Duration = Duration::from_mins(2);
/// How long a running controller may take to route the pods a batch's schedule waits for.
const WORK_WITHIN: Duration = Duration::from_mins(1);
/// How often the API server is asked how far the controller got.
const POLL: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deaths {
    RandomKills,
    AtCrashPoints,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kills() {
    drill(Deaths::RandomKills, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_crash_points() {
    drill(Deaths::AtCrashPoints, 4).await;
}

/// Runs every seed (one after another, so the machine's load stays what one seed makes), then
/// fails naming each seed that failed.
async fn drill(deaths: Deaths, default_seeds: usize) {
    init_logging();
    let seeds = seeds(default_seeds);
    eprintln!(
        "crash drill {deaths:?}: seeds {seeds:?} (CRASH_SEED=<seed> replays one, CRASH_SEEDS=<n> runs n fresh ones)"
    );
    let started = Instant::now();
    let mut failed = Vec::new();
    for seed in seeds.iter().copied() {
        // A task of its own: a panic fails this seed, not the seeds after it.
        let outcome = tokio::spawn(run_seed(seed, deaths)).await;
        let error = match outcome {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => format!("{e:#}"),
            Err(e) => format!("panicked: {e}"),
        };
        eprintln!("crash drill {deaths:?}: seed {seed} FAILED (replay with CRASH_SEED={seed}): {error}");
        failed.push(seed);
    }
    eprintln!(
        "crash drill {deaths:?}: {} seeds in {:?}, failed: {failed:?}",
        seeds.len(),
        started.elapsed()
    );
    assert!(
        failed.is_empty(),
        "crash drill {deaths:?}: seeds {failed:?} failed (replay one with CRASH_SEED=<seed>; details above)"
    );
}

/// The controller process of the moment, and what it was armed with.
struct Running {
    process: Process,
    armed: Option<&'static str>,
}

struct Lifecycle {
    bin: Binary,
    rng: Rng,
    seed: u64,
    deaths: Deaths,
    current: Option<Running>,
    /// Down for this many more batches (0: running).
    down_for: usize,
    kills: usize,
    /// SIGKILLs of a process past its start-up, reconciling.
    kills_at_work: usize,
    /// Crash points the processes died at, in order.
    crashed_at: Vec<&'static str>,
}

impl Lifecycle {
    async fn start(&mut self) -> anyhow::Result<()> {
        let armed = match self.deaths {
            Deaths::RandomKills => None,
            // Every point in turn, each reached after a random number of passes.
            Deaths::AtCrashPoints => {
                let points = crash_point::POINTS;
                let offset = usize::try_from(self.seed % points.len() as u64)?;
                Some(points[(offset + self.crashed_at.len()) % points.len()])
            }
        };
        let spec = armed.map(|p| format!("{p}:{}", 1 + self.rng.below(25)));
        let envs: Vec<(&str, &str)> = spec.iter().map(|s| (crash_point::ENV, s.as_str())).collect();
        let process = self.bin.spawn_with_env("controller", &[], &envs).await;
        self.current = Some(Running { process, armed });
        Ok(())
    }

    /// After batch `batch`, which created `new` (those still live): the running controller
    /// works until it has routed a seeded number of them, or has died (at its crash point; the
    /// next [`Self::after_batch`] sees it). Nothing to wait for while none runs.
    async fn work(&mut self, pods: &Api<Pod>, new: &BTreeSet<String>, batch: usize) -> anyhow::Result<()> {
        let want = self.rng.below(new.len() + 1);
        let Some(running) = self.current.as_mut() else {
            return Ok(());
        };
        let deadline = Instant::now() + WORK_WITHIN;
        loop {
            if want == 0 || running.process.has_exited() {
                return Ok(());
            }
            let routed = pods
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|p| new.contains(&p.name_any()) && is_routed(p))
                .count();
            if routed >= want {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "seed {}: after batch {batch} the controller routed {routed} of the {want} new pods \
                 the schedule waits for, within {WORK_WITHIN:?}; its log ends:\n{}",
                self.seed,
                running.process.log_tail(40)
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// After a batch of pod changes: the controller may die, or come back.
    async fn after_batch(&mut self, batch: usize) -> anyhow::Result<()> {
        if self.down_for > 0 {
            self.down_for -= 1;
            if self.down_for == 0 {
                self.start().await?;
            }
            return Ok(());
        }
        let Some(running) = self.current.as_mut() else {
            bail!("no controller runs and none is due");
        };
        match self.deaths {
            Deaths::RandomKills => {
                if batch.is_multiple_of(5) || self.rng.below(6) == 0 {
                    let running = self.current.take().context("running")?;
                    if running.process.kill() {
                        self.kills_at_work += 1;
                    }
                    self.kills += 1;
                    self.down_for = 1 + self.rng.below(3);
                }
            }
            Deaths::AtCrashPoints => {
                if running.process.has_exited() {
                    let running = self.current.take().context("running")?;
                    let point = running.armed.context("an unarmed process exited")?;
                    running.process.crashed_at(point)?;
                    self.crashed_at.push(point);
                    // Sometimes back at once, sometimes after pods changed with nobody watching.
                    self.down_for = self.rng.below(3);
                    if self.down_for == 0 {
                        self.start().await?;
                    }
                }
            }
        }
        Ok(())
    }

    fn died_everywhere(&self) -> bool {
        crash_point::POINTS.iter().all(|p| self.crashed_at.contains(p))
    }

    fn enough_deaths(&self) -> bool {
        match self.deaths {
            Deaths::RandomKills => self.kills_at_work >= 3,
            Deaths::AtCrashPoints => self.died_everywhere(),
        }
    }

    /// The process that is to converge: unarmed, running.
    async fn settle(&mut self) -> anyhow::Result<Process> {
        match self.current.take() {
            Some(Running { process, armed: None }) => return Ok(process),
            Some(Running {
                process,
                armed: Some(point),
            }) => {
                // It may reach its point while being killed.
                if process.kill_armed(point)? {
                    self.crashed_at.push(point);
                } else {
                    self.kills += 1;
                }
            }
            None => {}
        }
        Ok(self.bin.spawn("controller", &[]).await)
    }
}

async fn run_seed(seed: u64, deaths: Deaths) -> anyhow::Result<()> {
    let started = Instant::now();
    let env = Env::start_idle(&FLAGS).await;
    let mut life = Lifecycle {
        bin: Binary::new(&env, &[]),
        rng: Rng(seed),
        seed,
        deaths,
        current: None,
        down_for: 0,
        kills: 0,
        kills_at_work: 0,
        crashed_at: Vec::new(),
    };
    // The first process is never armed: the cluster's base (nodes, subnet) comes up first.
    life.current = Some(Running {
        process: life.bin.spawn("controller", &[]).await,
        armed: None,
    });
    for (name, ip) in NODES {
        env.node(name, ip).await;
    }
    env.namespace(NS).await;
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": SUBNET},
        "spec": {"cidrBlock": CIDR, "namespaces": [NS]}}),
    )
    .await;
    env.subnet_ready(SUBNET).await;
    if deaths == Deaths::AtCrashPoints {
        let first = life.current.take().context("the first controller")?;
        first.process.kill();
        life.start().await?;
    }

    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), NS);
    let mut live: Vec<String> = Vec::new();
    let mut created = 0;
    let mut batch = 0;
    // The churn goes on (up to twice as many pods) until the deaths did their job: three kills
    // of a process past its start-up, or a death at every crash point.
    let more =
        |life: &Lifecycle, created: usize| created < PODS || (!life.enough_deaths() && created < 2 * PODS);
    while more(&life, created) {
        let mut new = BTreeSet::new();
        for _ in 0..20 {
            let may_create = more(&life, created);
            let rng = &mut life.rng;
            let create = may_create && (live.is_empty() || (live.len() < MAX_LIVE && rng.below(10) < 6));
            if create {
                // Now and then a name comes back: a new pod under a deleted one's name.
                let name = if created > 50 && rng.below(20) == 0 {
                    format!("p{}", rng.below(created))
                } else {
                    format!("p{created}")
                };
                if live.contains(&name) {
                    continue;
                }
                let node = NODES[rng.below(NODES.len())].0;
                let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name, "namespace": NS},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}))?;
                pods.create(&PostParams::default(), &pod).await?;
                new.insert(name.clone());
                live.push(name);
                created += 1;
            } else {
                let name = live.swap_remove(rng.below(live.len()));
                new.remove(&name);
                // Gone for good (grace 0), as the kubelet confirms a deletion.
                pods.delete(&name, &DeleteParams::default().grace_period(0))
                    .await?;
            }
        }
        batch += 1;
        // Let the controller work as far as the schedule says, then see what happens to it.
        life.work(&pods, &new, batch).await?;
        life.after_batch(batch).await?;
    }
    let mut controller = life.settle().await?;
    match deaths {
        Deaths::RandomKills => {
            ensure!(
                life.kills_at_work >= 3,
                "only {} of {} kills hit a controller past its start-up",
                life.kills_at_work,
                life.kills
            );
        }
        Deaths::AtCrashPoints => {
            ensure!(
                life.died_everywhere(),
                "the processes died at {:?}; every point should have been reached",
                life.crashed_at
            );
        }
    }
    eprintln!(
        "seed {seed} ({deaths:?}): {created} pods created, {} live, {} kills ({} at work), crashes at {:?}, {:?} so far",
        live.len(),
        life.kills,
        life.kills_at_work,
        life.crashed_at,
        started.elapsed()
    );
    let live: BTreeSet<String> = live.into_iter().collect();
    let what = format!(
        "the controller to converge on {} live pods (seed {seed})",
        live.len()
    );
    let converged = wait_until_async(&what, CONVERGE_WITHIN, || {
        check(&env, &live, controller.metrics_addr)
    })
    .await;
    if let Err(e) = converged {
        bail!("{e}\nthe controller's log ends:\n{}", controller.log_tail(40));
    }
    ensure!(
        controller.is_running(),
        "the controller exited:\n{}",
        controller.log_tail(40)
    );
    // A fresh process, after a crash of this one, rebuilds the same IPAM from the cluster.
    let before = ipam_of(controller.metrics_addr).await?;
    controller.kill();
    let fresh = life.bin.spawn("controller", &[]).await;
    wait_until_async(
        "the fresh controller to rebuild IPAM",
        CONVERGE_WITHIN,
        || async { Ok(ipam_of(fresh.metrics_addr).await.is_ok()) },
    )
    .await?;
    let after = ipam_of(fresh.metrics_addr).await?;
    ensure!(
        before == after,
        "a fresh controller rebuilt another IPAM:\n before {before}\n after  {after}"
    );
    eprintln!(
        "seed {seed} ({deaths:?}): converged, fresh IPAM agrees, {:?}",
        started.elapsed()
    );
    Ok(())
}

/// Whether the controller has finished the pod's handshake (`routed=true`).
fn is_routed(pod: &Pod) -> bool {
    pod.annotations()
        .get("ovn.kubernetes.io/routed")
        .is_some_and(|v| v == "true")
}

/// A controller's `/debug/ipam` (an error until its IPAM is rebuilt).
async fn ipam_of(addr: SocketAddr) -> anyhow::Result<serde_json::Value> {
    let (code, body) = http_get(addr, "/debug/ipam").await?;
    ensure!(code == 200, "/debug/ipam: {code} {body}");
    Ok(serde_json::from_str(&body)?)
}

/// `ovn-nbctl list` of two columns, as (first, second) pairs.
fn nb_pairs(env: &Env, table: &str, columns: &str) -> anyhow::Result<Vec<(String, String)>> {
    let listing = env.ovn.nbctl(&[
        "--data=bare",
        "--format=csv",
        "--no-headings",
        &format!("--columns={columns}"),
        "list",
        table,
    ])?;
    Ok(listing
        .lines()
        .map(|l| {
            let (a, b) = l.split_once(',').unwrap_or((l, ""));
            (a.to_owned(), b.trim_matches('"').to_owned())
        })
        .collect())
}

/// The end state, or what is still wrong with it.
#[allow(
    clippy::too_many_lines,
    reason = "one check after another, each with its message"
)]
async fn check(env: &Env, live: &BTreeSet<String>, metrics: SocketAddr) -> anyhow::Result<bool> {
    let lp = ListParams::default();
    // Every live pod is routed, with a unique address of the subnet.
    let pods = Api::<Pod>::namespaced(env.kube.clone(), NS)
        .list(&lp)
        .await?
        .items;
    let names: BTreeSet<String> = pods.iter().map(ResourceExt::name_any).collect();
    ensure!(&names == live, "the pods are not the test's: {names:?}");
    let mut by_addr: BTreeMap<Ipv4Addr, String> = BTreeMap::new();
    let mut want_ports: BTreeMap<String, String> = BTreeMap::new();
    let mut want_groups: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut want_ipam: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for (node, _) in NODES {
        let node_port = names::node_port_name(node);
        want_groups.insert(names::node_port_group(node), [node_port].into());
        want_groups.insert(names::subnet_node_port_group(SUBNET, node), BTreeSet::new());
    }
    for p in &pods {
        let a = p.annotations();
        let get = |k: &str| {
            a.get(&format!("ovn.kubernetes.io/{k}"))
                .cloned()
                .unwrap_or_default()
        };
        if get("routed") != "true" || get("allocated") != "true" {
            bail!("pod {} is not routed yet", p.name_any());
        }
        ensure!(
            get("logical_switch") == SUBNET,
            "pod {} in {}",
            p.name_any(),
            get("logical_switch")
        );
        let ip: Ipv4Addr = get("ip_address").parse().context("ip_address")?;
        if let Some(other) = by_addr.insert(ip, p.name_any()) {
            bail!("duplicate address {ip}: pods {other} and {}", p.name_any());
        }
        let key = format!("{}.{NS}", p.name_any());
        want_ports.insert(key.clone(), format!("{} {ip}", get("mac_address")));
        want_ipam.insert(
            key.clone(),
            json!({"ips": [ip.to_string()], "mac": get("mac_address"), "pool": ""}),
        );
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        for group in [
            names::node_port_group(&node),
            names::subnet_node_port_group(SUBNET, &node),
        ] {
            want_groups.entry(group).or_default().insert(key.clone());
        }
    }
    // The northbound ports are exactly the live pods', with their addresses.
    let ports = nb_pairs(env, "Logical_Switch_Port", "name,addresses")?;
    let have_ports: BTreeMap<String, String> = ports
        .iter()
        .filter(|(name, _)| name.ends_with(&format!(".{NS}")))
        .cloned()
        .collect();
    ensure!(
        have_ports == want_ports,
        "northbound ports differ from the pods:\n have {have_ports:?}\n want {want_ports:?}"
    );
    // The nodes' port groups hold exactly the node's port and its live pods' ports.
    let port_names: BTreeMap<String, String> = nb_pairs(env, "Logical_Switch_Port", "_uuid,name")?
        .into_iter()
        .collect();
    let mut have_groups: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (group, members) in nb_pairs(env, "Port_Group", "name,ports")? {
        if want_groups.contains_key(&group) {
            let members = members
                .split_whitespace()
                .map(|u| port_names.get(u).cloned().unwrap_or_else(|| format!("<{u}>")))
                .collect();
            have_groups.insert(group, members);
        }
    }
    ensure!(
        have_groups == want_groups,
        "port groups differ from the pods:\n have {have_groups:?}\n want {want_groups:?}"
    );
    // The IP CRs are the live pods' and the nodes', with the pods' addresses.
    let ips = Api::<Ip>::all(env.kube.clone()).list(&lp).await?.items;
    let mut pod_ips = BTreeMap::new();
    let mut node_ips = BTreeSet::new();
    for ip in &ips {
        if ip.name_any().starts_with("node-") && ip.spec.namespace.as_deref().unwrap_or_default().is_empty() {
            node_ips.insert(ip.name_any());
        } else {
            pod_ips.insert(ip.name_any(), ip.spec.v4_ip_address.clone().unwrap_or_default());
        }
    }
    let want_ips: BTreeMap<String, String> = by_addr
        .iter()
        .map(|(a, p)| (format!("{p}.{NS}"), a.to_string()))
        .collect();
    ensure!(
        pod_ips == want_ips,
        "IP CRs differ from the pods:\n have {pod_ips:?}\n want {want_ips:?}"
    );
    let want_nodes: BTreeSet<String> = NODES.iter().map(|(n, _)| names::node_port_name(n)).collect();
    ensure!(node_ips == want_nodes, "node IP CRs: {node_ips:?}");
    // IPAM holds exactly these addresses: in the subnet's status, and key by key.
    let subnets: Api<Subnet> = Api::all(env.kube.clone());
    let status = subnets.get(SUBNET).await?.status.unwrap_or_default();
    let using = range_addresses(status.v4_using_ip_range.as_deref().unwrap_or_default())?;
    let want: BTreeSet<IpAddr> = by_addr.keys().map(|a| IpAddr::V4(*a)).collect();
    ensure!(
        using == want,
        "IPAM of {SUBNET} uses {} addresses, the pods {}: extra {:?}, missing {:?}",
        using.len(),
        want.len(),
        using.difference(&want).collect::<Vec<_>>(),
        want.difference(&using).collect::<Vec<_>>()
    );
    ensure!(
        status.v4_using_ips.map(|c| c.0) == Some(want.len() as u128),
        "v4UsingIPs {:?}",
        status.v4_using_ips
    );
    let ipam = ipam_of(metrics).await?;
    let have_ipam: BTreeMap<String, serde_json::Value> = ipam[SUBNET]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    ensure!(
        have_ipam == want_ipam,
        "/debug/ipam of {SUBNET} differs from the pods:\n have {have_ipam:?}\n want {want_ipam:?}"
    );
    let join = subnets.get("join").await?.status.unwrap_or_default();
    let join_using = range_addresses(join.v4_using_ip_range.as_deref().unwrap_or_default())?;
    let mut node_addrs = BTreeSet::new();
    for n in Api::<Node>::all(env.kube.clone()).list(&lp).await?.items {
        let a = n
            .annotations()
            .get("ovn.kubernetes.io/ip_address")
            .cloned()
            .unwrap_or_default();
        node_addrs.insert(a.parse::<IpAddr>()?);
    }
    ensure!(
        join_using == node_addrs,
        "join uses {join_using:?}, nodes have {node_addrs:?}"
    );
    Ok(true)
}
