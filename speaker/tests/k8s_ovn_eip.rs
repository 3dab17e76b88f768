//! OvnEips announced from where they live (issue 26), with the `kube-ovn-speaker` binaries of
//! two nodes (`na`, `nb`, each in its own namespace), a real kube-apiserver and a BIRD ToR with
//! a session to each; every OvnEip written as our controller writes it (`common::ovn_eips`).
//!
//! vpc1's router port EIP `vpc1-external` and the EIPs of its SNAT and of a DNAT + centralized
//! FIP are learned only from the node in the router EIP's `status.activateGateway`, with that
//! node as next hop; a distributed FIP's EIP from the node in its own `activateGateway`. When
//! the controller moves the router's port (one status write), the old node withdraws and the new
//! one announces all of vpc1's (the time from the write to the ToR's new best path is printed);
//! vpc2's stay where they are. An EIP without `bgp: "true"` is never learned; one outside the
//! external subnet is refused with one Warning event from the speaker that would have announced
//! it; `nat` emptied, the EIP deleted, the port bound nowhere: withdrawn. Then the same rule with
//! FRR as the ToR. Needs root, bird2 and FRR; fails, never skips.

mod common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use common::gateways::{TwoGateways, watch_failover};
use common::k8s::{Cluster, speaker};
use common::ovn_eips::{self, EipSpec};
use common::peers::{Frr, PeerSpec};
use common::{Lab, NODE_V4, TOR_V4};
use serde_json::json;

const ROUTER: &str = "10.200.0.10/32";
const SNAT: &str = "10.200.0.20/32";
const SHARED: &str = "10.200.0.21/32";
const FIP: &str = "10.200.0.30/32";
const NO_BGP: &str = "10.200.0.40/32";
const VPC2_ROUTER: &str = "10.200.0.11/32";
const VPC2_SNAT: &str = "10.200.0.22/32";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ovn_eips_are_announced_from_where_they_live_and_follow_the_gateway_port() -> Result<()> {
    let mut lab = TwoGateways::start().await?;
    let kube = &lab.cluster.kube.clone();
    ovn_eips::external_subnet(kube, "external", "10.200.0.0/24").await?;
    let mut fip = EipSpec::used("fip1", "10.200.0.30", "fip", "vpc1");
    // A distributed FIP: the controller writes the pod's node.
    fip.active = Some("nb");
    let mut no_bgp = EipSpec::used("nobgp", "10.200.0.40", "snat", "vpc1");
    no_bgp.bgp = false;
    for eip in [
        EipSpec::router("vpc1-external", "10.200.0.10", "na"),
        EipSpec::used("snat1", "10.200.0.20", "snat", "vpc1"),
        EipSpec::used("shared", "10.200.0.21", "dnat,fip", "vpc1"),
        fip,
        no_bgp,
        EipSpec::router("vpc2-external", "10.200.0.11", "na"),
        EipSpec::used("snat2", "10.200.0.22", "snat", "vpc2"),
        // Outside `external`: refused by na, where vpc2's port is.
        EipSpec::used("forged", "192.0.2.7", "snat", "vpc2"),
    ] {
        ovn_eips::create(kube, &eip).await?;
    }

    tokio::task::block_in_place(|| -> Result<()> {
        for prefix in [ROUTER, SNAT, SHARED, VPC2_ROUTER, VPC2_SNAT] {
            lab.wait_learned(prefix, &["node_a"])?;
        }
        lab.wait_learned(FIP, &["node_b"])?;
        for (prefix, hop) in [
            (ROUTER, "198.51.100.2"),
            (SNAT, "198.51.100.2"),
            (FIP, "198.51.102.2"),
        ] {
            let route = lab.bird.route_all(prefix)?;
            assert!(
                route.contains(&format!("BGP.next_hop: {hop}")),
                "{prefix}: {route}"
            );
        }
        Ok(())
    })?;

    // vpc1's gateway port moves to nb: the controller rewrites the router EIP's status.
    let mut ctl = lab.ctl()?;
    let started = Instant::now();
    ovn_eips::set_active(kube, "vpc1-external", "nb").await?;
    let failover =
        tokio::task::block_in_place(|| watch_failover(&mut ctl, ROUTER, "node_a", "node_b", started))
            .with_context(|| lab.logs())?;
    println!(
        "OvnEip failover na -> nb: status write to the ToR's best path via nb {:.1} ms, to na's route gone {:.1} ms",
        failover.best.as_secs_f64() * 1000.0,
        failover.withdrawn.as_secs_f64() * 1000.0
    );
    tokio::task::block_in_place(|| -> Result<()> {
        for prefix in [ROUTER, SNAT, SHARED, FIP] {
            lab.wait_learned(prefix, &["node_b"])?;
        }
        let route = lab.bird.route_all(SNAT)?;
        assert!(route.contains("BGP.next_hop: 198.51.102.2"), "{route}");
        // vpc2's port did not move.
        for prefix in [VPC2_ROUTER, VPC2_SNAT] {
            assert_eq!(lab.learned_from(prefix), ["node_a".to_owned()].into());
        }
        Ok(())
    })?;

    // The SNAT rule deleted (`nat` emptied), the distributed FIP's EIP released: withdrawn.
    ovn_eips::set_status(kube, "snat1", json!({"nat": ""})).await?;
    ovn_eips::delete(kube, "fip1").await?;
    tokio::task::block_in_place(|| {
        lab.wait_learned(SNAT, &[])?;
        lab.wait_learned(FIP, &[])
    })?;
    // The port bound to no chassis: vpc1's remaining EIPs go nowhere.
    ovn_eips::set_active(kube, "vpc1-external", "").await?;
    tokio::task::block_in_place(|| {
        lab.wait_learned(ROUTER, &[])?;
        lab.wait_learned(SHARED, &[])?;
        lab.wait_learned(VPC2_SNAT, &["node_a"])
    })?;

    // Every pass so far had them: never learned.
    assert!(
        lab.learned_from(NO_BGP).is_empty(),
        "an EIP without bgp: \"true\" was learned"
    );
    assert!(
        lab.learned_from("192.0.2.7/32").is_empty(),
        "an address outside the subnet was learned"
    );
    // One Warning, from na (the speaker that would have announced it), naming the field.
    kube_ovn_testkit::wait_until_async("a BgpAddressOutsideSubnet event on forged", WAIT, || async {
        Ok(!ovn_eips::warnings(kube, "forged").await?.is_empty())
    })
    .await
    .with_context(|| lab.logs())?;
    let events = ovn_eips::warnings(kube, "forged").await?;
    assert_eq!(events.len(), 1, "{events:?}");
    let (reason, note, instance) = &events[0];
    assert_eq!(reason, "BgpAddressOutsideSubnet");
    assert_eq!(instance, "na");
    assert!(
        note.contains("status.v4Ip") && note.contains("192.0.2.7") && note.contains("speaker on na"),
        "{note}"
    );
    for name in [
        "vpc1-external",
        "snat1",
        "shared",
        "nobgp",
        "vpc2-external",
        "snat2",
    ] {
        assert!(ovn_eips::warnings(kube, name).await?.is_empty(), "{name}");
    }
    for s in &mut lab.speakers {
        s.daemon.check_alive()?;
    }
    Ok(())
}

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frr_learns_an_ovn_eip_from_its_node_and_loses_it_when_the_port_moves() -> Result<()> {
    let lab = Lab::direct()?;
    let frr = Frr::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut speaker = speaker(&cluster, &lab, dir.path(), &[])?;
    let kube = &cluster.kube;
    ovn_eips::external_subnet(kube, "external", "10.200.0.0/24").await?;
    // The speaker is n1's.
    ovn_eips::create(kube, &EipSpec::router("vpc1-external", "10.200.0.10", "n1")).await?;
    ovn_eips::create(kube, &EipSpec::used("snat1", "10.200.0.20", "snat", "vpc1")).await?;
    tokio::task::block_in_place(|| -> Result<()> {
        frr.wait_received("ipv4", 2)
            .with_context(|| speaker.log_tail(20))?;
        let route = frr.vtysh(&format!("show bgp ipv4 unicast {SNAT} json"))?;
        let route: serde_json::Value = serde_json::from_str(&route)?;
        let hop = &route["paths"][0]["nexthops"][0]["ip"];
        assert_eq!(hop, &json!(NODE_V4.to_string()), "{route}");
        Ok(())
    })?;
    ovn_eips::set_active(kube, "vpc1-external", "n2").await?;
    tokio::task::block_in_place(|| frr.wait_received("ipv4", 0)).with_context(|| speaker.log_tail(20))?;
    speaker.daemon.check_alive()?;
    Ok(())
}
