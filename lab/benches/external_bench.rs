//! Issue 26's figures, on a lab with vpc1's external gateway (`examples/lab/50-external.yaml`):
//! - gateway failover: vpc1's gateway port moved off its node and back, `rounds` times
//!   (`kube-ovn-lab failover`): when the lrp OvnEip's `activateGateway` and the ToR's route to the
//!   FIP followed, and how long the outside host's requests to the FIP failed (median, p99);
//! - FIP created → reachable: a new OvnEip (`bgp: "true"`) and OvnFip for `vpc1/tenant-2` applied
//!   with kubectl, then the outside host's requests to its address until the first answer; deleted
//!   and made again, `fips` times (median, p99).
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p kube-ovn-lab --bench external_bench -- [rounds] [fips] [install]
//! #   default 10 rounds (20 moves), 10 FIPs, `processes`
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kube_ovn_lab::cluster::failover::percentile;

mod support;
use support::Lab;

/// An address of the external subnet no example uses, and the pod behind it.
const FIP: &str = "10.200.0.210";
const POD_PORT: u16 = 8080;
const REACHABLE_WITHIN: Duration = Duration::from_mins(1);

fn manifest() -> String {
    format!(
        "apiVersion: kubeovn.io/v1\nkind: OvnEip\nmetadata:\n  name: bench-fip\n  annotations:\n    ovn.kubernetes.io/bgp: \"true\"\n\
         spec:\n  externalSubnet: external\n  v4Ip: {FIP}\n  type: nat\n---\n\
         apiVersion: kubeovn.io/v1\nkind: OvnFip\nmetadata:\n  name: bench-fip\nspec:\n  ovnEip: bench-fip\n  ipType: ip\n  ipName: tenant-2.vpc1\n"
    )
}

/// Applies the FIP, then asks the outside host every 20 ms (200 ms each) until it is answered.
fn created_to_reachable(lab: &Lab, file: &std::path::Path) -> Result<Duration> {
    let outside = kube_ovn_dataplane::Netns::open(lab.netns("outside"))?;
    let to = SocketAddr::new(FIP.parse()?, POD_PORT);
    let start = Instant::now();
    lab.ok(&["kubectl", "apply", "-f", &file.to_string_lossy()])?;
    let answered = outside.run(move || {
        while start.elapsed() < REACHABLE_WITHIN {
            let sent = Instant::now();
            if kube_ovn_lab::netexec::http_get(to, "/hostname", Duration::from_millis(200))
                .is_ok_and(|a| a.status == 200)
            {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20).saturating_sub(sent.elapsed()));
        }
        None
    })?;
    answered.with_context(|| format!("{FIP}:{POD_PORT} not answered within {REACHABLE_WITHIN:?}"))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let rounds: u32 = args.first().map_or(Ok(10), |a| a.parse())?;
    let fips: usize = args.get(1).map_or(Ok(10), |a| a.parse())?;
    let install = args.get(2).map_or("processes", String::as_str);
    let lab = Lab::new("xb")?;
    lab.up(&["--install", install, "--nodes", "2"])?;

    let failover = lab.ok(&["failover", "--rounds", &rounds.to_string()])?;
    print!("{failover}");

    let file = lab.dir.path().join("bench-fip.yaml");
    std::fs::write(&file, manifest())?;
    let mut took = Vec::new();
    for i in 0..fips {
        let t = created_to_reachable(&lab, &file)?;
        println!("FIP {}: created → reachable from outside in {t:?}", i + 1);
        took.push(t);
        lab.ok(&["kubectl", "delete", "-f", &file.to_string_lossy(), "--wait=true"])?;
        let gone = lab.ok(&["kubectl", "get", "ovn-eips", "-o", "name"])?;
        ensure!(
            !gone.contains("bench-fip"),
            "OvnEip bench-fip still there: {gone}"
        );
    }
    println!(
        "FIP created → reachable ({install}, n={}): median {:?}, p99 {:?}",
        took.len(),
        percentile(&took, 50).unwrap_or_default(),
        percentile(&took, 99).unwrap_or_default()
    );
    lab.down()
}
