//! Many ADDs and DELs at once through the real shim and daemon: none is lost, nothing is left.
//! Needs root and the OVS/OVN packages; fails, never skips, without them.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result};
use common::Cluster;

const PODS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_adds_then_dels() -> Result<()> {
    let cluster = Cluster::start(
        1,
        &["--wait-address-timeout=60s", "--wait-ovn-installed-timeout=60s"],
    )
    .await?;
    let node = &cluster.nodes[0];
    let mut sandboxes = Vec::new();
    for i in 0..PODS {
        let name = format!("p{i:03}");
        cluster.create_pod("load", &name, 0, &[]).await?;
        sandboxes.push(Cluster::sandbox("load", &name)?);
    }
    // All ADDs in flight together, each a shim process as the runtime would start it.
    let adds: Vec<_> = sandboxes
        .iter()
        .map(|(_, sandbox)| {
            let runtime = node.runtime.clone();
            let sandbox = sandbox.clone();
            tokio::task::spawn_blocking(move || runtime.add(&sandbox))
        })
        .collect();
    let mut results = Vec::new();
    for (i, add) in adds.into_iter().enumerate() {
        results.push(
            add.await?
                .with_context(|| format!("ADD of pod {i}: {}", node.daemon.log_tail(20)))?,
        );
    }
    let addresses: BTreeSet<String> = results
        .iter()
        .map(|r| r["ips"][0]["address"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(addresses.len(), PODS, "every pod has its own address");
    assert_eq!(node.pod_ports()?.len(), PODS);
    assert_eq!(node.pod_veths()?.len(), PODS);
    for iface in node.pod_ports()? {
        assert_eq!(
            node.iface_column(&iface, "external_ids:ovn-installed")?,
            "true",
            "{iface}"
        );
    }
    // Spot-check the data path at both ends of the batch.
    let first: std::net::Ipv4Addr = results[PODS - 1]["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()?;
    sandboxes[0].0.wait_ping(first, Duration::from_secs(15))?;

    let dels: Vec<_> = sandboxes
        .iter()
        .zip(&results)
        .map(|((_, sandbox), result)| {
            let runtime = node.runtime.clone();
            let sandbox = sandbox.clone();
            let result = result.clone();
            tokio::task::spawn_blocking(move || runtime.del(&sandbox, Some(&result)))
        })
        .collect();
    for (i, del) in dels.into_iter().enumerate() {
        del.await?.with_context(|| format!("DEL of pod {i}"))?;
    }
    assert!(
        node.pod_ports()?.is_empty(),
        "ports left: {:?}",
        node.pod_ports()?
    );
    assert!(
        node.pod_veths()?.is_empty(),
        "veths left: {:?}",
        node.pod_veths()?
    );
    for (netns, _) in &sandboxes {
        assert!(
            netns.exec(&["ip", "link", "show", "eth0"]).is_err(),
            "eth0 left in {}",
            netns.name()
        );
    }
    let metrics = node.metrics()?;
    assert!(
        metrics.contains(&format!(
            "cni_op_latency_seconds_count{{node_name=\"{}\",method=\"add\",status_code=\"200\"}} {PODS}",
            node.name
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "cni_op_latency_seconds_count{{node_name=\"{}\",method=\"del\",status_code=\"204\"}} {PODS}",
            node.name
        )),
        "{metrics}"
    );
    Ok(())
}
