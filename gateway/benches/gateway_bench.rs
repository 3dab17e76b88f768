//! The egress NAT's apply cost with 1,000 subnets, ours against Kube-OVN's mechanism, on the same
//! machine in the same run (root; nft, ipset, iptables-restore):
//!
//! - one subnet added and one removed: ours is one netlink batch of set elements (what the node
//!   daemon sends when only sets change); Kube-OVN's is `ipset restore` with the members added
//!   and deleted, plus `iptables-restore --noflush` re-asserting its chains, as its gateway loop
//!   re-asserts them on every pass (also shown: ipset alone), with iptables-nft (Debian 12's
//!   `iptables`) and with iptables-legacy;
//! - the whole ruleset rebuilt: ours is `nft -f` replacing the table in one transaction; Kube-OVN's
//!   is `ipset restore` creating and filling the sets plus `iptables-restore` of its chains.
//!
//! Each side runs in a network namespace of its own, its tools started from a thread inside it
//! (no `ip netns exec`). Equivalent rules on both sides: the planner's chains, written as
//! Kube-OVN writes them for iptables. Kube-OVN also keeps two counting rules per subnet in
//! `filter FORWARD`; a second Kube-OVN row includes them (ours has no such rules).
//!
//! `cargo bench -p kube-ovn-gateway --bench gateway_bench` (env `GATEWAY_BENCH_SUBNETS`, default
//! 1000; `GATEWAY_BENCH_ROUNDS`, default 30).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kube_ovn_api::crd::Subnet;
use kube_ovn_dataplane::nft::{self, ElementUpdate, NftFamily, NftNetlink};
use kube_ovn_gateway::{GatewayInput, LastGood, NodeFacts, Ruleset, TABLE, plan};
use kube_ovn_testkit::Netns;

fn subnet(name: &str, cidr: &str) -> Arc<Subnet> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": name, "uid": format!("00000000-0000-0000-0000-{:0>12}", name.len())},
            "spec": {"cidrBlock": cidr, "natOutgoing": true},
            "status": {"conditions": [{"type": "Validated", "status": "True"}]},
        }))
        .expect("a subnet"),
    )
}

fn cidr(i: usize) -> String {
    format!("10.{}.{}.0/24", 16 + i / 256, i % 256)
}

struct Cluster {
    subnets: Vec<Arc<Subnet>>,
    others: Vec<std::net::IpAddr>,
}

impl Cluster {
    fn new(n: usize) -> Self {
        let mut subnets = vec![subnet("join", "100.64.0.0/16")];
        subnets.extend((0..n).map(|i| subnet(&format!("s{i}"), &cidr(i))));
        let others = (2..12)
            .map(|i| format!("172.30.0.{i}").parse().expect("an address"))
            .collect();
        Self { subnets, others }
    }

    fn ruleset(&self) -> Ruleset {
        let labels = BTreeMap::new();
        let planned = plan(
            &GatewayInput {
                node: NodeFacts {
                    name: "node1",
                    labels: &labels,
                    internal_ips: (Some("172.30.0.1".parse().expect("an address")), None),
                },
                subnets: &self.subnets,
                cluster_router: "ovn-cluster",
                join_cidrs: &[],
                service_cidrs: &["10.96.0.0/12".parse().expect("a CIDR")],
                other_node_ips: &self.others,
                local_pods: &[],
                lb_ingress: &[],
                lb_local: &[],
                join_gateways: &[],
            },
            &LastGood::default(),
        );
        assert!(planned.errors.is_empty(), "{:?}", planned.errors);
        planned.plan.ruleset
    }
}

/// Runs `program args` with `stdin` from a thread inside `ns`.
fn run_in(ns: &Netns, program: &str, args: &[&str], stdin: &str) -> Result<()> {
    let output = ns.run(|| -> std::io::Result<std::process::Output> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        child.stdin.take().expect("stdin").write_all(stdin.as_bytes())?;
        child.wait_with_output()
    })??;
    ensure!(
        output.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Kube-OVN's sets as an `ipset restore` input that (re)creates and fills them.
fn ipset_full(cidrs: &[String], others: &[std::net::IpAddr]) -> String {
    let mut out = String::new();
    let mut set = |name: &str, members: &mut dyn Iterator<Item = String>| {
        let _ = writeln!(
            out,
            "create {name} hash:net family inet hashsize 1024 maxelem 1048576 -exist"
        );
        let _ = writeln!(out, "flush {name}");
        for m in members {
            let _ = writeln!(out, "add {name} {m}");
        }
    };
    set("ovn40services", &mut ["10.96.0.0/12".to_owned()].into_iter());
    set(
        "ovn40subnets",
        &mut cidrs.iter().cloned().chain(["100.64.0.0/16".to_owned()]),
    );
    set("ovn40subnets-nat", &mut cidrs.iter().cloned());
    set(
        "ovn40subnets-distributed-gw",
        &mut cidrs.iter().cloned().chain(["100.64.0.0/16".to_owned()]),
    );
    set("ovn40other-node", &mut others.iter().map(ToString::to_string));
    set("ovn40subnets-nat-policy", &mut std::iter::empty());
    set("ovn40subnets-snat", &mut std::iter::empty());
    out
}

/// The planner's chains as Kube-OVN writes them for iptables (nat, mangle, filter), in user
/// chains the built-in ones jump to; with `counters`, Kube-OVN's two FORWARD rules per subnet.
fn iptables_rules(cidrs: &[String], counters: bool) -> String {
    let mut out = String::from(
        "*nat\n:OVN-PREROUTING - [0:0]\n:OVN-POSTROUTING - [0:0]\n:OVN-MASQUERADE - [0:0]\n:OVN-NAT-POLICY - [0:0]\n\
-A OVN-PREROUTING -i ovn0 -m set --match-set ovn40subnets src -m set --match-set ovn40services dst -j MARK --set-xmark 0x4000/0x4000\n\
-A OVN-POSTROUTING -m set --match-set ovn40services src -m set --match-set ovn40subnets dst -m mark --mark 0x4000/0x4000 -j SNAT --to-source 172.30.0.1 --random-fully\n\
-A OVN-POSTROUTING -m mark --mark 0x4000/0x4000 -j OVN-MASQUERADE\n\
-A OVN-POSTROUTING -m set --match-set ovn40subnets src -m set --match-set ovn40subnets dst -j OVN-MASQUERADE\n\
-A OVN-POSTROUTING -m mark --mark 0x80000/0x80000 -m set --match-set ovn40subnets-distributed-gw dst -j RETURN\n\
-A OVN-POSTROUTING -m mark --mark 0x80000/0x80000 -j OVN-MASQUERADE\n\
-A OVN-POSTROUTING -p tcp -m tcp --tcp-flags SYN NONE -m conntrack --ctstate NEW -j RETURN\n\
-A OVN-POSTROUTING -m set ! --match-set ovn40subnets src -m set ! --match-set ovn40other-node src -m set --match-set ovn40subnets-nat dst -j RETURN\n\
-A OVN-POSTROUTING -m set --match-set ovn40subnets-nat-policy src -m set ! --match-set ovn40subnets dst -j OVN-NAT-POLICY\n\
-A OVN-POSTROUTING -m mark --mark 0x90001/0x90001 -j OVN-MASQUERADE\n\
-A OVN-POSTROUTING -m mark --mark 0x90002/0x90002 -j RETURN\n\
-A OVN-POSTROUTING -m set --match-set ovn40subnets-nat src -m set ! --match-set ovn40subnets dst -j OVN-MASQUERADE\n\
-A OVN-MASQUERADE -j MARK --set-xmark 0x0/0xffffffff\n\
-A OVN-MASQUERADE -j MASQUERADE --random-fully\nCOMMIT\n\
*mangle\n:OVN-POSTROUTING - [0:0]\n\
-A OVN-POSTROUTING -p tcp -m set --match-set ovn40subnets src -m tcp --tcp-flags RST RST -m state --state INVALID -j DROP\n\
-A OVN-POSTROUTING -s 10.255.0.0/16 -p tcp -m tcp --tcp-flags SYN NONE -m conntrack --ctstate NEW -m set ! --match-set ovn40subnets dst -j DROP\nCOMMIT\n\
*filter\n:OVN-INPUT - [0:0]\n:OVN-FORWARD - [0:0]\n:OVN-OUTPUT - [0:0]\n",
    );
    for chain in ["OVN-INPUT", "OVN-FORWARD"] {
        for (set, dir) in [
            ("ovn40subnets", "src"),
            ("ovn40subnets", "dst"),
            ("ovn40services", "src"),
            ("ovn40services", "dst"),
        ] {
            let _ = writeln!(out, "-A {chain} -m set --match-set {set} {dir} -j ACCEPT");
        }
    }
    if counters {
        for (i, c) in cidrs.iter().enumerate() {
            let _ = writeln!(
                out,
                "-A OVN-FORWARD -s {c} -m comment --comment ovn-subnet-gateway,s{i}"
            );
            let _ = writeln!(
                out,
                "-A OVN-FORWARD -d {c} -m comment --comment ovn-subnet-gateway,s{i}"
            );
        }
    }
    out.push_str("-A OVN-OUTPUT -p udp -m udp --dport 6081 -j MARK --set-xmark 0x0/0xffffffff\n");
    out.push_str("-A OVN-OUTPUT -p udp -m udp --dport 4789 -j MARK --set-xmark 0x0/0xffffffff\nCOMMIT\n");
    out
}

/// The jumps from the built-in chains, made once (Kube-OVN checks them with `iptables -C`).
const JUMPS: &str = "*nat\n:OVN-PREROUTING - [0:0]\n:OVN-POSTROUTING - [0:0]\n\
-A PREROUTING -j OVN-PREROUTING\n-A POSTROUTING -j OVN-POSTROUTING\nCOMMIT\n\
*mangle\n:OVN-POSTROUTING - [0:0]\n-A POSTROUTING -j OVN-POSTROUTING\nCOMMIT\n\
*filter\n:OVN-INPUT - [0:0]\n:OVN-FORWARD - [0:0]\n:OVN-OUTPUT - [0:0]\n\
-A INPUT -j OVN-INPUT\n-A FORWARD -j OVN-FORWARD\n-A OUTPUT -j OVN-OUTPUT\nCOMMIT\n";

fn ipset_delta(add: &str, del: &str) -> String {
    let mut out = String::new();
    for set in ["ovn40subnets", "ovn40subnets-nat", "ovn40subnets-distributed-gw"] {
        let _ = writeln!(out, "add {set} {add}\ndel {set} {del}");
    }
    out
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Times `f` `rounds` times, running `undo` (untimed) after each.
fn time(
    rounds: usize,
    mut f: impl FnMut() -> Result<()>,
    mut undo: impl FnMut() -> Result<()>,
) -> Result<Duration> {
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        f()?;
        samples.push(start.elapsed());
        undo()?;
    }
    Ok(median(samples))
}

fn main() -> Result<()> {
    let n: usize = std::env::var("GATEWAY_BENCH_SUBNETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rounds: usize = std::env::var("GATEWAY_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ours_ns = Netns::create("gwbo")?;
    let ours = kube_ovn_dataplane::Netns::open(ours_ns.path())?;

    // Ours.
    let base = Cluster::new(n);
    let plan_start = Instant::now();
    let ruleset = base.ruleset();
    let plan_time = plan_start.elapsed();
    let script = ruleset.script();
    let rebuild_ours = time(
        rounds.min(15),
        || {
            runtime
                .block_on(nft::apply_script(&ours, script.clone()))
                .context("nft -f")
        },
        || Ok(()),
    )?;
    let mut changed = Cluster::new(n);
    changed
        .subnets
        .retain(|s| s.metadata.name.as_deref() != Some("s5"));
    changed.subnets.push(subnet("added", "10.200.0.0/24"));
    let after = changed.ruleset();
    let to_element = |u: kube_ovn_gateway::SetUpdate| ElementUpdate {
        family: NftFamily::Ipv4,
        table: TABLE.into(),
        set: u.set,
        delete: u.delete,
        add: u.add,
    };
    let forward: Vec<ElementUpdate> = after
        .updates_from(&ruleset)
        .context("only sets change")?
        .into_iter()
        .map(to_element)
        .collect();
    let back: Vec<ElementUpdate> = ruleset
        .updates_from(&after)
        .context("only sets change")?
        .into_iter()
        .map(to_element)
        .collect();
    let diff_start = Instant::now();
    let _ = after.updates_from(&ruleset);
    let diff_time = diff_start.elapsed();
    let netlink = runtime.block_on(NftNetlink::open(&ours))?;
    let change_ours = time(
        rounds,
        || {
            runtime
                .block_on(netlink.update_elements(forward.clone()))
                .context("elements")
        },
        || {
            runtime
                .block_on(netlink.update_elements(back.clone()))
                .context("elements back")
        },
    )?;
    let generation = time(
        rounds,
        || {
            runtime
                .block_on(netlink.generation())
                .map(drop)
                .context("generation")
        },
        || Ok(()),
    )?;
    let listed = runtime
        .block_on(nft::list_table_json(&ours, NftFamily::Ipv4, TABLE))?
        .context("our table")?;
    ensure!(
        listed.contains("10.16.5.0") && !listed.contains("10.200.0.0"),
        "the benchmark left the table as planned"
    );

    // Kube-OVN's mechanism, with each iptables backend (Debian 12's `iptables` is iptables-nft;
    // Kube-OVN follows the host), each in a namespace of its own.
    let cidrs: Vec<String> = (0..n).map(cidr).collect();
    let sets = ipset_full(&cidrs, &base.others);
    let delta = ipset_delta("10.200.0.0/24", "10.16.5.0/24");
    let undo = ipset_delta("10.16.5.0/24", "10.200.0.0/24");
    let mut rows = Vec::new();
    for (backend, restore) in [
        ("iptables-nft", "iptables-nft-restore"),
        ("iptables-legacy", "iptables-legacy-restore"),
    ] {
        let ns = Netns::create("gwbk")?;
        run_in(&ns, "ipset", &["restore"], &sets)?;
        run_in(&ns, restore, &["--noflush"], JUMPS)?;
        for counters in [false, true] {
            let rules = iptables_rules(&cidrs, counters);
            let rebuild = time(
                rounds.min(15),
                || {
                    run_in(&ns, "ipset", &["restore"], &sets)?;
                    run_in(&ns, restore, &["--noflush"], &rules)
                },
                || Ok(()),
            )?;
            let ipset_only = time(
                rounds,
                || run_in(&ns, "ipset", &["restore"], &delta),
                || run_in(&ns, "ipset", &["restore"], &undo),
            )?;
            let change = time(
                rounds,
                || {
                    run_in(&ns, "ipset", &["restore"], &delta)?;
                    run_in(&ns, restore, &["--noflush"], &rules)
                },
                || run_in(&ns, "ipset", &["restore"], &undo),
            )?;
            rows.push((backend, counters, change, ipset_only, rebuild));
        }
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!("egress NAT with {n} subnets ({rounds} rounds, medians)");
    println!("| | one subnet added, one removed | ratio | whole ruleset rebuilt | ratio |");
    println!("|---|---|---|---|---|");
    println!(
        "| ours: element batch over netlink / `nft -f` (one transaction each) | {} | | {} | |",
        ms(change_ours),
        ms(rebuild_ours)
    );
    for (backend, counters, change, ipset_only, rebuild) in &rows {
        let rules = if *counters {
            ", with 2 counting rules per subnet"
        } else {
            ""
        };
        println!(
            "| Kube-OVN: ipset + {backend}-restore{rules} | {} (ipset {}) | {:.3}x ({:.3}x of ipset alone) | {} | {:.3}x |",
            ms(*change),
            ms(*ipset_only),
            ratio(change_ours, *change),
            ratio(change_ours, *ipset_only),
            ms(*rebuild),
            ratio(rebuild_ours, *rebuild),
        );
    }
    println!(
        "ours, besides: planning {n} subnets {}, the element diff {}, the drift check's generation read {}",
        ms(plan_time),
        ms(diff_time),
        ms(generation)
    );
    Ok(())
}
