//! From a centralized subnet's `status.activateGateway` changing to the ToR's new best path:
//! two `kube-ovn-speaker` binaries (release; nodes `na` and `nb`, each in its own namespace),
//! a real kube-apiserver and a BIRD ToR with a session to each, as in `tests/k8s_gateway.rs`.
//!
//! `cargo bench -p kube-ovn-speaker --bench gateway_failover -- [FAILOVERS] [PODS] [EIPS]`
//! (defaults 50, 100 and 20). Root. The subnet (`bgp: cluster`) has PODS pods, so each failover
//! moves its CIDR and PODS /32s. The gateway alternates na → nb → na …; each time, timing starts
//! before the status patch and ends at the first poll of BIRD's control socket (every 0.5 ms)
//! that shows, for the CIDR, the new gateway's path as best, and the old gateway's route gone;
//! then until every route of the subnet is from the new gateway only.
//!
//! Then the same for OvnEips (issue 26), once the subnet is withdrawn: vpc1's router port EIP
//! `vpc1-external` and EIPS EIPs of its SNAT rules, which follow it; each failover writes the
//! router EIP's `status.activateGateway`, and is timed to its /32's best path via the new node,
//! its old route gone, and all EIPS + 1 routes moved.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::birdctl::BirdCtl;
use common::gateways::{TwoGateways, watch_failover};
use common::ovn_eips::{self, EipSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

const CIDR: &str = "10.30.0.0/16";

/// Routes BIRD holds from session `protocol` ("N of M routes for K networks in table T" per
/// table; on the control socket a line may start with a reply code, `NNNN-` or `NNNN `).
fn count(ctl: &mut BirdCtl, protocol: &str) -> Result<u32> {
    let reply = ctl.ask(&format!("show route protocol {protocol} count"))?;
    Ok(reply
        .lines()
        .filter(|l| l.contains(" routes for "))
        .filter_map(|l| {
            let coded = l.len() > 5 && l.as_bytes()[..4].iter().all(u8::is_ascii_digit);
            let text = if coded { &l[5..] } else { l };
            text.split_whitespace().next()?.parse::<u32>().ok()
        })
        .sum())
}

fn wait_moved(ctl: &mut BirdCtl, from: &str, to: &str, n: u32, since: Instant) -> Result<Duration> {
    while since.elapsed() < Duration::from_secs(30) {
        if count(ctl, to)? == n && count(ctl, from)? == 0 {
            return Ok(since.elapsed());
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    bail!("the subnet's {n} routes did not move from {from} to {to}")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let failovers: usize = args.first().map_or(Ok(50), |a| a.parse()).context("FAILOVERS")?;
    let pods: u32 = args.get(1).map_or(Ok(100), |a| a.parse()).context("PODS")?;
    let eips: u32 = args.get(2).map_or(Ok(20), |a| a.parse()).context("EIPS")?;
    let lab = TwoGateways::start().await?;
    let spec = json!({"cidrBlock": CIDR, "vpc": "ovn-cluster", "gatewayType": "centralized",
        "gatewayNode": "na,nb"});
    lab.subnet("central", "cluster", spec, "na").await?;
    let api: Api<Pod> = Api::namespaced(lab.cluster.kube.clone(), "default");
    for i in 0..pods {
        let ip = format!("10.30.{}.{}", i / 250, i % 250 + 2);
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": format!("p{i}"), "namespace": "default",
            "annotations": {"ovn.kubernetes.io/ip_address": ip, "ovn.kubernetes.io/logical_switch": "central"}},
            "spec": {"nodeName": if i % 2 == 0 { "na" } else { "nb" }, "containers": [{"name": "c", "image": "x"}]}}),
        )?;
        api.create(&PostParams::default(), &pod).await?;
        // The controller's record of the allocation: without it the speaker announces nothing.
        lab.cluster.ip_record(&format!("p{i}"), "central", &ip).await?;
    }
    let mut ctl = lab.ctl()?;
    let routes = pods + 1;
    tokio::task::block_in_place(|| wait_moved(&mut ctl, "node_b", "node_a", routes, Instant::now()))
        .with_context(|| lab.logs())?;
    let (mut best, mut withdrawn, mut moved) = (Vec::new(), Vec::new(), Vec::new());
    let sessions = [("na", "node_a"), ("nb", "node_b")];
    for i in 0..failovers {
        let (from, to) = (sessions[i % 2], sessions[(i + 1) % 2]);
        let started = Instant::now();
        lab.set_active("central", to.0).await?;
        let (f, all) = tokio::task::block_in_place(|| -> Result<_> {
            let f = watch_failover(&mut ctl, CIDR, from.1, to.1, started)?;
            Ok((f, wait_moved(&mut ctl, from.1, to.1, routes, started)?))
        })
        .with_context(|| lab.logs())?;
        best.push(f.best);
        withdrawn.push(f.withdrawn);
        moved.push(all);
    }
    println!("status.activateGateway written to the ToR, {failovers} failovers, {pods} pods:");
    common::print_latency("CIDR best path via the new gateway", &mut best);
    common::print_latency("CIDR route of the old gateway gone", &mut withdrawn);
    common::print_latency(&format!("all {routes} routes moved"), &mut moved);

    // OvnEips: the subnet withdrawn first, so the sessions' counts are the EIPs' alone.
    lab.set_active("central", "").await?;
    tokio::task::block_in_place(|| {
        wait_moved(&mut ctl, "node_a", "node_b", 0, Instant::now())?;
        wait_moved(&mut ctl, "node_b", "node_a", 0, Instant::now())
    })
    .with_context(|| lab.logs())?;
    let kube = &lab.cluster.kube;
    ovn_eips::external_subnet(kube, "external", "10.200.0.0/16").await?;
    ovn_eips::create(kube, &EipSpec::router("vpc1-external", "10.200.0.2", "na")).await?;
    for i in 0..eips {
        let (name, ip) = (
            format!("snat{i}"),
            format!("10.200.{}.{}", 1 + i / 250, i % 250 + 2),
        );
        ovn_eips::create(kube, &EipSpec::used(&name, &ip, "snat", "vpc1")).await?;
    }
    let routes = eips + 1;
    tokio::task::block_in_place(|| wait_moved(&mut ctl, "node_b", "node_a", routes, Instant::now()))
        .with_context(|| lab.logs())?;
    let (mut best, mut withdrawn, mut moved) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..failovers {
        let (from, to) = (sessions[i % 2], sessions[(i + 1) % 2]);
        let started = Instant::now();
        ovn_eips::set_active(kube, "vpc1-external", to.0).await?;
        let (f, all) = tokio::task::block_in_place(|| -> Result<_> {
            let f = watch_failover(&mut ctl, "10.200.0.2/32", from.1, to.1, started)?;
            Ok((f, wait_moved(&mut ctl, from.1, to.1, routes, started)?))
        })
        .with_context(|| lab.logs())?;
        best.push(f.best);
        withdrawn.push(f.withdrawn);
        moved.push(all);
    }
    println!(
        "OvnEip vpc1-external status.activateGateway written to the ToR, {failovers} failovers, {eips} SNAT EIPs:"
    );
    common::print_latency("router EIP best path via the new node", &mut best);
    common::print_latency("router EIP route of the old node gone", &mut withdrawn);
    common::print_latency(&format!("all {routes} EIP routes moved"), &mut moved);
    Ok(())
}
