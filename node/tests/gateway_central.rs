//! Centralized gateways with real traffic: the active gateway node SNATs a subnet to its
//! `node:ip` (or masquerades to its own address), the ovn0 check's NetworkUnavailable moves the
//! subnet to the standby, and with ECMP both gateways carry connections.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::Result;
use common::egress::{FAST_GATEWAY, OUTSIDE_IP, Outside, seen_from, wait_outside_sees};
use common::{Cluster, underlay_ip};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use kube_ovn_testkit::{wait_until, wait_until_async};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);
/// The documented failover bound (docs/operations.md): detection takes up to the check interval
/// plus three unanswered echoes of a second (1 s + 3 s with the tests' interval), then the
/// controller moves the OVN policy and the standby's daemon adds its SNAT address.
const FAILOVER_BOUND: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn centralized_gateway_snats_fails_over_to_the_standby_and_spreads_with_ecmp() -> Result<()> {
    let mut cluster = Cluster::start(2, &FAST_GATEWAY).await?;
    // Held to the end: the outside host is plugged into node 0's underlay bridge.
    let _outside = Outside::attach(&cluster)?;
    let (n0, n1) = (cluster.nodes[0].name.clone(), cluster.nodes[1].name.clone());
    let nat_ips: [IpAddr; 2] = ["172.30.0.50".parse()?, "172.30.0.51".parse()?];
    for (i, ip) in nat_ips.iter().enumerate() {
        cluster.nodes[i]
            .ovs
            .netns()
            .ip(&["addr", "add", &format!("{ip}/32"), "dev", "br-ul"])?;
    }
    cluster.namespace("central").await?;
    cluster.namespace("plain").await?;
    let spec = |ecmp: bool| {
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "central"},
            "spec": {"cidrBlock": "10.20.0.0/16", "namespaces": ["central"], "natOutgoing": true,
                     "gatewayType": "centralized", "enableEcmp": ecmp,
                     "gatewayNode": format!("{n0}:{}, {n1}:{}", nat_ips[0], nat_ips[1])}})
    };
    cluster.apply(spec(false)).await?;
    // Without `node:ip` the gateway masquerades to its own address.
    cluster
        .apply(
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "plain"},
            "spec": {"cidrBlock": "10.24.0.0/16", "namespaces": ["plain"], "natOutgoing": true,
                     "gatewayType": "centralized", "gatewayNode": format!("{n0},{n1}")}}),
        )
        .await?;
    let far = cluster.pod("central", "far", 1, &[]).await?;
    let near = cluster.pod("central", "near", 0, &[]).await?;
    let plain = cluster.pod("plain", "p", 1, &[]).await?;
    assert_eq!(
        cluster
            .subnet("central")
            .await?
            .status
            .and_then(|s| s.activate_gateway),
        Some(n0.clone())
    );
    // Both pods leave through node 0, as its node:ip; the standby SNATs nothing.
    wait_outside_sees(&far, OUTSIDE_IP, nat_ips[0], WAIT).await?;
    wait_outside_sees(&near, OUTSIDE_IP, nat_ips[0], WAIT).await?;
    wait_outside_sees(&plain, OUTSIDE_IP, underlay_ip(0).into(), WAIT).await?;
    assert!(
        !cluster.nat_table(1)?.contains("172.30.0.51"),
        "the standby has no SNAT entry"
    );

    // Failover: node 0's join gateway, reachable so far, stops answering through ovn0 (its
    // echo replies are dropped on the way in, so every probe times out); the daemon reports
    // NetworkUnavailable, the controller moves the subnet.
    let reachable = Some(("False".to_owned(), "JoinSubnetGatewayReachable".to_owned()));
    wait_until_async("node 0 reported reachable", WAIT, || async {
        Ok(cluster.node_condition(0, "NetworkUnavailable").await? == reachable)
    })
    .await?;
    cluster.nodes[0].ovs.netns().exec(&[
        "nft",
        "add table ip block; add chain ip block in { type filter hook input priority 0; }; \
         add rule ip block in iifname \"ovn0\" icmp type echo-reply drop",
    ])?;
    let broken = Instant::now();
    wait_until_async("node 0 NetworkUnavailable", WAIT, || async {
        Ok(cluster.node_condition(0, "NetworkUnavailable").await?
            == Some(("True".into(), "JoinSubnetGatewayUnreachable".into())))
    })
    .await?;
    let detected = broken.elapsed();
    wait_outside_sees(&far, OUTSIDE_IP, nat_ips[1], FAILOVER_BOUND).await?;
    let failover = broken.elapsed();
    assert!(failover < FAILOVER_BOUND, "failover took {failover:?}");
    eprintln!(
        "failover: unreachable detected after {detected:?}, new connections from the standby after {failover:?}"
    );
    assert_eq!(
        cluster
            .subnet("central")
            .await?
            .status
            .and_then(|s| s.activate_gateway),
        Some(n1.clone())
    );
    wait_until("the old gateway stops SNATing", WAIT, || {
        Ok(!cluster.nat_table(0)?.contains("172.30.0.50"))
    })?;
    wait_outside_sees(&plain, OUTSIDE_IP, underlay_ip(1).into(), WAIT).await?;

    // Recovery, then ECMP: every ready gateway carries connections, each as its own node:ip.
    cluster.nodes[0]
        .ovs
        .netns()
        .exec(&["nft", "delete table ip block"])?;
    wait_until_async("node 0 reachable again", WAIT, || async {
        Ok(cluster.node_condition(0, "NetworkUnavailable").await? == reachable)
    })
    .await?;
    cluster.apply(spec(true)).await?;
    wait_until("both gateways SNAT", WAIT, || {
        Ok(cluster.nat_table(0)?.contains("172.30.0.50") && cluster.nat_table(1)?.contains("172.30.0.51"))
    })?;
    let mut seen = BTreeSet::new();
    let start = Instant::now();
    let mut answered = 0;
    while answered < 32 {
        assert!(
            start.elapsed() < WAIT,
            "32 connections did not get through: {seen:?}"
        );
        if let Some(from) = seen_from(&far.netns, OUTSIDE_IP.into(), 80, Duration::from_secs(1)).await? {
            seen.insert(from);
            answered += 1;
        }
    }
    assert_eq!(
        seen,
        nat_ips.into_iter().collect(),
        "32 connections spread over both gateways"
    );

    // A typo in gatewayNode: a Warning event from the daemons, and the previous plan stays.
    let mut bad = spec(true);
    bad["spec"]["gatewayNode"] = json!(format!("{n0}:172.30.0.500, {n1}:{}", nat_ips[1]));
    cluster.apply(bad).await?;
    let events = Api::<Event>::all(cluster.kube.clone());
    wait_until_async("a NodeEgressConfigInvalid event on the subnet", WAIT, || async {
        Ok(events.list(&ListParams::default()).await?.items.iter().any(|e| {
            e.reason.as_deref() == Some("NodeEgressConfigInvalid")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("central")
                && e.note.as_deref().is_some_and(|n| n.contains("spec.gatewayNode"))
        }))
    })
    .await?;
    assert!(cluster.nat_table(0)?.contains("172.30.0.50") && cluster.nat_table(1)?.contains("172.30.0.51"));
    let from = seen_from(&far.netns, OUTSIDE_IP.into(), 80, Duration::from_secs(2)).await?;
    assert!(from.is_some_and(|f| nat_ips.contains(&f)), "{from:?}");
    for node in &mut cluster.nodes {
        node.daemon.check_alive()?;
    }
    Ok(())
}
