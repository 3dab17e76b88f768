//! Crash safety (issue 4): the controller runs as its own process (the real binary, reaching the
//! API emulator over TCP through a kubeconfig and OVN over its NB remote) and is killed with
//! SIGKILL — no cleanup, a real crash — at random points while 500 pods are created and deleted;
//! pods come and go while it is down, and a new process is started. Once it has converged, every live pod is routed with an address of its own, IPAM
//! (seen through the subnet's status), the IP CRs and the northbound ports hold exactly the live
//! pods' addresses (and the nodes' join addresses), and nothing of a deleted pod is left.
//!
//! The subnet is a /24 and up to 180 pods live at once, so released addresses are handed out
//! again during the run. Each seed is a different schedule; `CRASH_SEED=<n>` replays one.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use common::process::{Binary, Process};
use common::{Env, init_logging, range_addresses};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_ovn_api::crd::{Ip, Subnet};
use kube_ovn_testkit::wait_until_async;
use serde_json::json;

const NS: &str = "crash";
const SUBNET: &str = "crash";
const PODS: usize = 500;
const MAX_LIVE: usize = 180;
const NODES: [(&str, &str); 2] = [("n1", "172.18.0.2"), ("n2", "172.18.0.3")];

/// splitmix64: a seeded schedule without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).unwrap()
    }
}

fn seeds(default: u64) -> u64 {
    std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_seed_1() {
    crash_run(seeds(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_seed_2() {
    crash_run(seeds(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_seed_3() {
    crash_run(seeds(3)).await;
}

async fn crash_run(seed: u64) {
    init_logging();
    eprintln!("crash test seed {seed} (replay with CRASH_SEED={seed})");
    let started = Instant::now();
    let env = Env::start_idle(&[]).await;
    let mut bin = Binary::new(&env, &[]).await;
    let mut controller: Option<Process> = Some(bin.spawn("controller", &[]).await);
    for (name, ip) in NODES {
        env.node(name, ip).await;
    }
    env.namespace(NS).await;
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": SUBNET},
        "spec": {"cidrBlock": "10.99.0.0/24", "namespaces": [NS]}}),
    )
    .await;
    env.subnet_ready(SUBNET).await;

    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), NS);
    let mut rng = Rng(seed);
    let mut live: Vec<String> = Vec::new();
    let mut created = 0;
    let mut batch = 0;
    let mut kills = 0;
    // Kills of a controller that was past its start-up, reconciling.
    let mut kills_at_work = 0;
    // Down for this many more batches (0: running).
    let mut down_for = 0;
    while created < PODS {
        for _ in 0..20 {
            let create = created < PODS && (live.is_empty() || (live.len() < MAX_LIVE && rng.below(10) < 6));
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
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}))
                .unwrap();
                pods.create(&PostParams::default(), &pod).await.unwrap();
                live.push(name);
                created += 1;
            } else {
                let name = live.swap_remove(rng.below(live.len()));
                pods.delete(&name, &DeleteParams::default()).await.unwrap();
            }
        }
        batch += 1;
        // Let the controller work for a random while, then maybe kill it mid-flight.
        tokio::time::sleep(Duration::from_millis(rng.below(60) as u64)).await;
        if down_for > 0 {
            down_for -= 1;
            if down_for == 0 {
                controller = Some(bin.spawn("controller", &[]).await);
            }
        } else if batch % 5 == 0 || rng.below(6) == 0 {
            let c = controller.take().expect("the controller is running");
            if c.kill() {
                kills_at_work += 1;
            }
            kills += 1;
            down_for = 1 + rng.below(3);
        }
    }
    let mut controller = match controller {
        Some(c) => c,
        None => bin.spawn("controller", &[]).await,
    };
    assert!(kills >= 3, "only {kills} kills");
    assert!(
        kills_at_work >= 3,
        "only {kills_at_work} of {kills} kills hit a controller past its start-up"
    );
    eprintln!(
        "seed {seed}: {created} pods created, {} live, {kills} kills ({kills_at_work} at work), {:?} so far",
        live.len(),
        started.elapsed()
    );
    let live: BTreeSet<String> = live.into_iter().collect();
    let what = format!(
        "the controller to converge on {} live pods (seed {seed})",
        live.len()
    );
    let converged = wait_until_async(&what, Duration::from_mins(2), || check(&env, &live)).await;
    if let Err(e) = converged {
        panic!("{e}\nthe controller's log ends:\n{}", controller.log_tail(40));
    }
    assert!(
        controller.is_running(),
        "the controller exited:\n{}",
        controller.log_tail(40)
    );
    eprintln!("seed {seed}: converged after {:?}", started.elapsed());
}

/// The end state, or what is still wrong with it.
async fn check(env: &Env, live: &BTreeSet<String>) -> anyhow::Result<bool> {
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
            panic!("duplicate address {ip}: pods {other} and {}", p.name_any());
        }
        want_ports.insert(
            format!("{}.{NS}", p.name_any()),
            format!("{} {ip}", get("mac_address")),
        );
    }
    // The northbound ports are exactly the live pods', with their addresses.
    let listing = env.ovn.nbctl(&[
        "--data=bare",
        "--format=csv",
        "--no-headings",
        "--columns=name,addresses,external_ids",
        "list",
        "Logical_Switch_Port",
    ])?;
    let mut have_ports = BTreeMap::new();
    for line in listing.lines().filter(|l| l.contains("pod=")) {
        let mut cols = line.splitn(3, ',');
        let name = cols.next().unwrap_or_default().to_owned();
        have_ports.insert(name, cols.next().unwrap_or_default().to_owned());
    }
    ensure!(
        have_ports == want_ports,
        "northbound ports differ from the pods:\n have {have_ports:?}\n want {want_ports:?}"
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
    let want_nodes: BTreeSet<String> = NODES.iter().map(|(n, _)| format!("node-{n}")).collect();
    ensure!(node_ips == want_nodes, "node IP CRs: {node_ips:?}");
    // IPAM holds exactly these addresses (its view is the subnets' status).
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
