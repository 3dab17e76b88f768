//! BGP that follows a centralized gateway, with two `kube-ovn-speaker` binaries (nodes `na` and
//! `nb`, each in its own namespace), a real kube-apiserver and a BIRD ToR with a session to each.
//! A centralized subnet with `bgp: cluster`, and its pod's /32, are learned only from the
//! speaker of the node in `status.activateGateway`; when the controller moves the gateway (the
//! status changes) the old speaker withdraws and the new one announces, on the watch event; with
//! ECMP both announce, with no gateway neither. A distributed subnet beside it is learned from
//! both all along. The time from the status write to the ToR's new best path is printed (a
//! figure, not an assertion; `speaker/benches/gateway_failover.rs` repeats it). Needs root and
//! bird2; fails, never skips.

mod common;

use std::time::Instant;

use anyhow::{Context, Result};
use common::gateways::{TwoGateways, routes, watch_failover};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

const CIDR: &str = "10.30.0.0/16";
const POD: &str = "10.30.0.5/32";
const DISTRIBUTED: &str = "10.40.0.0/16";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_centralized_subnet_is_announced_from_its_active_gateway_and_follows_a_failover() -> Result<()> {
    let mut lab = TwoGateways::start().await?;
    let central = json!({"cidrBlock": CIDR, "vpc": "ovn-cluster", "gatewayType": "centralized",
        "gatewayNode": "na,nb", "natOutgoing": false, "protocol": "IPv4", "provider": "ovn"});
    lab.subnet("central", "cluster", central, "na").await?;
    let distributed = json!({"cidrBlock": DISTRIBUTED, "vpc": "ovn-cluster", "gatewayType": "distributed"});
    lab.subnet("dist", "cluster", distributed, "").await?;
    // A pod of the centralized subnet on nb: still announced by na, the gateway its replies
    // leave through.
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default",
        "annotations": {"ovn.kubernetes.io/ip_address": "10.30.0.5", "ovn.kubernetes.io/logical_switch": "central",
            "ovn.kubernetes.io/allocated": "true"}},
        "spec": {"nodeName": "nb", "containers": [{"name": "c", "image": "x"}]}}))?;
    Api::<Pod>::namespaced(lab.cluster.kube.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await?;
    lab.cluster.ip_record("web", "central", "10.30.0.5").await?;

    tokio::task::block_in_place(|| -> Result<()> {
        lab.wait_learned(CIDR, &["node_a"])?;
        lab.wait_learned(POD, &["node_a"])?;
        lab.wait_learned(DISTRIBUTED, &["node_a", "node_b"])?;
        let route = lab.bird.route_all(CIDR)?;
        assert!(route.contains("BGP.next_hop: 198.51.100.2"), "{route}");
        Ok(())
    })?;

    // Failover to nb: the controller rewrites the status.
    let mut ctl = lab.ctl()?;
    let started = Instant::now();
    lab.set_active("central", "nb").await?;
    let failover =
        tokio::task::block_in_place(|| watch_failover(&mut ctl, CIDR, "node_a", "node_b", started))
            .with_context(|| lab.logs())?;
    println!(
        "failover na -> nb: status write to the ToR's best path via nb {:.1} ms, to na's route gone {:.1} ms",
        failover.best.as_secs_f64() * 1000.0,
        failover.withdrawn.as_secs_f64() * 1000.0
    );
    tokio::task::block_in_place(|| -> Result<()> {
        lab.wait_learned(CIDR, &["node_b"])?;
        lab.wait_learned(POD, &["node_b"])?;
        let route = lab.bird.route_all(CIDR)?;
        assert!(route.contains("BGP.next_hop: 198.51.102.2"), "{route}");
        assert_eq!(
            lab.learned_from(DISTRIBUTED).len(),
            2,
            "the distributed subnet is untouched"
        );
        Ok(())
    })?;

    // ECMP: the controller lists every gateway in use; both announce.
    lab.set_active("central", "na,nb").await?;
    tokio::task::block_in_place(|| {
        lab.wait_learned(CIDR, &["node_a", "node_b"])?;
        lab.wait_learned(POD, &["node_a", "node_b"])
    })?;
    // No gateway ready: nobody announces.
    lab.set_active("central", "").await?;
    tokio::task::block_in_place(|| {
        lab.wait_learned(CIDR, &[])?;
        lab.wait_learned(POD, &[])?;
        lab.wait_learned(DISTRIBUTED, &["node_a", "node_b"])
    })?;
    for s in &mut lab.speakers {
        s.daemon.check_alive()?;
    }
    Ok(())
}

#[test]
fn bird_route_lines_are_read() {
    let reply = "Table master4:\n\
        10.30.0.0/16         unicast [node_a 16:01:02.345] * (100) [AS65001i]\n\
        \tvia 198.51.100.2 on eth1\n\
        \x20                    unicast [node_b 16:01:03.000] (100) [AS65001i]\n\
        \tvia 198.51.102.2 on eth2\n";
    assert_eq!(
        routes(reply),
        [("node_a".to_owned(), true), ("node_b".to_owned(), false)]
    );
}
