//! Node egress with real traffic: a cluster in network namespaces (real OVN, our controller,
//! two nodes with the real daemon) and an outside host on the underlay that has no route back to
//! the pod subnets, whose netexec server reports the address each request came from.
//! Centralized gateways are in `gateway_central.rs`.

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::egress::{
    FAST_GATEWAY, OUTSIDE_IP, OUTSIDE_IP2, Outside, outside_sees, seen_from, serve, veth_pair,
    wait_outside_sees,
};
use common::{Cluster, underlay_ip};
use kube::Api;
use kube::api::DeleteParams;
use kube_ovn_api::crd::Subnet;
use kube_ovn_testkit::{Netns, run, wait_until};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

fn node_ip(i: usize) -> IpAddr {
    underlay_ip(i).into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_egress_leaves_from_each_pods_node_and_routed_traffic_keeps_its_source() -> Result<()> {
    let cluster = Cluster::start(2, &FAST_GATEWAY).await?;
    let outside = Outside::attach(&cluster)?;
    let a = cluster.pod("default", "a", 0, &[]).await?;
    let b = cluster.pod("default", "b", 1, &[]).await?;
    // natOutgoing (ovn-default's default): each pod leaves through its own node's address.
    assert_eq!(outside_sees(&a, OUTSIDE_IP, WAIT).await?, node_ip(0));
    assert_eq!(outside_sees(&b, OUTSIDE_IP, WAIT).await?, node_ip(1));
    // Pod to pod across nodes: not NATed.
    let _b_server = serve(&b.netns, 8080, "b")?;
    a.netns.wait_ping(b.ip(), WAIT)?;
    let seen = seen_from(&a.netns, b.ip().into(), 8080, Duration::from_secs(5)).await?;
    assert_eq!(
        seen,
        Some(IpAddr::from(a.ip())),
        "pod to pod keeps the pod's address"
    );
    // Routed ingress (as over BGP): the outside host reaches a pod through its node, and the pod
    // sees the outside host's own address (rule 7 returns before any masquerade).
    outside.route("10.16.0.0/16", underlay_ip(0))?;
    let _a_server = serve(&a.netns, 8080, "a")?;
    let seen = eventually_seen(&outside.netns, a.ip().into(), 8080).await?;
    assert_eq!(seen, IpAddr::from(OUTSIDE_IP), "routed ingress is not NATed");

    // natOutgoing false: no answer while the outside host has no route back; then its own address.
    cluster.namespace("plain").await?;
    cluster
        .apply(
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "plain"},
            "spec": {"cidrBlock": "10.17.0.0/16", "namespaces": ["plain"], "natOutgoing": false}}),
        )
        .await?;
    let c = cluster.pod("plain", "c", 0, &[]).await?;
    c.netns.wait_ping(underlay_ip(0), WAIT)?;
    for _ in 0..2 {
        let seen = seen_from(&c.netns, OUTSIDE_IP.into(), 80, Duration::from_secs(1)).await?;
        assert_eq!(seen, None, "natOutgoing false must not be masqueraded");
    }
    outside.route("10.17.0.0/16", underlay_ip(0))?;
    wait_outside_sees(&c, OUTSIDE_IP, c.ip().into(), WAIT).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nat_outgoing_policy_rules_forward_one_destination_and_nat_another() -> Result<()> {
    let cluster = Cluster::start(2, &FAST_GATEWAY).await?;
    let outside = Outside::attach(&cluster)?;
    cluster.namespace("pol").await?;
    let rules = json!([
        {"action": "forward", "match": {"dstIPs": OUTSIDE_IP.to_string()}},
        {"action": "nat", "match": {"srcIPs": "10.21.0.0/16", "dstIPs": OUTSIDE_IP2.to_string()}},
    ]);
    cluster
        .apply(
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "pol"},
            "spec": {"cidrBlock": "10.21.0.0/16", "namespaces": ["pol"], "natOutgoing": true,
                     "natOutgoingPolicyRules": rules}}),
        )
        .await?;
    // The controller records the rules with their IDs; the node reads the status.
    cluster.policy_rule_ids("pol", 2).await?;
    let p = cluster.pod("pol", "p", 0, &[]).await?;
    // Forwarded traffic keeps the pod's address, so the outside host needs a way back.
    outside.route("10.21.0.0/16", underlay_ip(0))?;
    wait_outside_sees(&p, OUTSIDE_IP, p.ip().into(), WAIT).await?;
    wait_outside_sees(&p, OUTSIDE_IP2, node_ip(0), WAIT).await?;
    // The default subnet has no rules: NATed to both destinations.
    let q = cluster.pod("default", "q", 0, &[]).await?;
    assert_eq!(outside_sees(&q, OUTSIDE_IP, WAIT).await?, node_ip(0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_egress_gateway_routes_through_a_router_on_the_pods_node_or_the_gateway_node() -> Result<()>
{
    let cluster = Cluster::start(2, &FAST_GATEWAY).await?;
    // A router beside node 0 (172.31.0.254), which owns 198.51.100.10 and serves netexec there;
    // no node has a route to 198.51.100.0/24, so only policy routing can reach it.
    let router = Netns::create("rtr")?;
    let node0 = cluster.nodes[0].ovs.netns();
    let veth = format!("r{}", std::process::id());
    veth_pair(node0.name(), &veth, router.name())?;
    node0.ip(&["addr", "add", "172.31.0.1/24", "dev", &veth])?;
    node0.ip(&["link", "set", &veth, "up"])?;
    // Replies come back through node 0's kernel into ovn0, read by the userspace datapath.
    router.exec(&["ethtool", "-K", "eth0", "tx", "off"])?;
    router.ip(&["addr", "add", "172.31.0.254/24", "dev", "eth0"])?;
    router.ip(&["addr", "add", "198.51.100.10/32", "dev", "lo"])?;
    router.ip(&["link", "set", "eth0", "up"])?;
    for cidr in ["10.22.0.0/16", "10.23.0.0/16"] {
        router.ip(&["route", "add", cidr, "via", "172.31.0.1"])?;
    }
    let _server = serve(&router, 80, "router")?;
    let target = "198.51.100.10".parse::<IpAddr>()?;

    cluster.namespace("egw").await?;
    cluster
        .apply(
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "egw"},
            "spec": {"cidrBlock": "10.22.0.0/16", "namespaces": ["egw"], "natOutgoing": false,
                     "externalEgressGateway": "172.31.0.254", "policyRoutingPriority": 1000,
                     "policyRoutingTableID": 1000}}),
        )
        .await?;
    let d = cluster.pod("egw", "d", 0, &[]).await?;
    let seen = eventually_seen(&d.netns, target, 80)
        .await
        .with_context(|| format!("distributed: {}", cluster.nodes[0].daemon.log_tail(30)))?;
    assert_eq!(seen, IpAddr::from(d.ip()), "the router sees the pod itself");
    let rules = node0.ip(&["rule", "show", "table", "1000"])?;
    assert!(
        rules.contains(&format!("from {} lookup 1000", d.ip())) && rules.contains("proto 150"),
        "{rules}"
    );

    // Centralized: the pod is on node 1, the gateway node 0 routes the whole CIDR.
    cluster.namespace("egwc").await?;
    cluster
        .apply(
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "egwc"},
            "spec": {"cidrBlock": "10.23.0.0/16", "namespaces": ["egwc"], "natOutgoing": false,
                     "gatewayType": "centralized", "gatewayNode": cluster.nodes[0].name,
                     "externalEgressGateway": "172.31.0.254", "policyRoutingPriority": 1001,
                     "policyRoutingTableID": 1001}}),
        )
        .await?;
    let e = cluster.pod("egwc", "e", 1, &[]).await?;
    let seen = eventually_seen(&e.netns, target, 80)
        .await
        .with_context(|| format!("centralized: {}", cluster.nodes[0].daemon.log_tail(30)))?;
    assert_eq!(seen, IpAddr::from(e.ip()));
    assert!(
        node0
            .ip(&["rule", "show", "table", "1001"])?
            .contains("from 10.23.0.0/16 lookup 1001")
    );
    assert!(
        !cluster.nodes[1]
            .ovs
            .netns()
            .ip(&["rule"])?
            .contains("10.23.0.0/16"),
        "node 1 is no gateway"
    );

    // Deleting the subnets takes their rules and routes away.
    let api = Api::<Subnet>::all(cluster.kube.clone());
    cluster.delete_pod_object("egw", "d").await?;
    cluster.delete_pod_object("egwc", "e").await?;
    for name in ["egw", "egwc"] {
        api.delete(name, &DeleteParams::default()).await?;
    }
    wait_until("policy rules and routes removed", WAIT, || {
        let rules = node0.ip(&["rule"])?;
        let routes = node0.ip(&["route", "show", "table", "all", "proto", "150"])?;
        Ok(!rules.contains("proto 150") && routes.trim().is_empty())
    })?;
    Ok(())
}

/// The address `target:port`'s server saw, retrying while rules, routes and flows settle.
async fn eventually_seen(from: &Netns, target: IpAddr, port: u16) -> Result<IpAddr> {
    let start = Instant::now();
    loop {
        if let Some(seen) = seen_from(from, target, port, Duration::from_millis(700)).await? {
            return Ok(seen);
        }
        ensure!(start.elapsed() < WAIT, "no answer from {target} within {WAIT:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_survive_reapply_restart_and_flushes_and_follow_subnet_deletion() -> Result<()> {
    let mut cluster = Cluster::start(2, &FAST_GATEWAY).await?;
    let outside = Outside::attach(&cluster)?;
    let node0 = cluster.nodes[0].ovs.netns().name().to_owned();
    // Someone else's table, which nothing of ours may touch.
    run(
        "ip",
        &[
            "netns",
            "exec",
            &node0,
            "nft",
            "add table inet foreign; add chain inet foreign c; add rule inet foreign c counter",
        ],
    )?;
    let a = cluster.pod("default", "a", 0, &[]).await?;
    assert_eq!(outside_sees(&a, OUTSIDE_IP, WAIT).await?, node_ip(0));

    // An established TCP flow through the NAT, held open across a daemon restart.
    let listener = outside
        .netns
        .run(|| std::net::TcpListener::bind((OUTSIDE_IP, 9000)))??;
    let mut client = a
        .netns
        .run(|| std::net::TcpStream::connect_timeout(&(OUTSIDE_IP, 9000).into(), Duration::from_secs(5)))??;
    let (mut served, from) = listener.accept()?;
    assert_eq!(from.ip(), node_ip(0));
    let before = cluster.nat_table(0)?;
    let restarted = Instant::now();
    cluster.nodes[0].restart_daemon()?;
    // The restarted daemon replaces the table (new handles) with the same content.
    wait_until("the restarted daemon to apply the tables", WAIT, || {
        Ok(cluster.nodes[0]
            .daemon
            .log()
            .matches("egress NAT tables applied")
            .count()
            >= 2)
    })?;
    assert_eq!(cluster.nat_table(0)?, before, "re-applied identically");
    echo(&mut client, &mut served, b"still there")?;
    tracing::info!(elapsed = ?restarted.elapsed(), "daemon restarted, flow kept");

    // A flush of our table by someone else is repaired within the check interval.
    run(
        "ip",
        &["netns", "exec", &node0, "nft", "delete table ip kube-ovn"],
    )?;
    let flushed = Instant::now();
    wait_until("the table restored", WAIT, || {
        Ok(cluster.nat_table(0).is_ok_and(|t| t == before))
    })?;
    tracing::info!(elapsed = ?flushed.elapsed(), "table restored after a flush");
    echo(&mut client, &mut served, b"and again")?;
    assert!(
        run(
            "ip",
            &["netns", "exec", &node0, "nft", "list", "table", "inet", "foreign"]
        )?
        .contains("counter"),
        "the foreign table is untouched"
    );

    // A subnet with policy rules: its set entries and chains come, and go with it.
    cluster.namespace("gone").await?;
    cluster
        .apply(json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "gone"},
            "spec": {"cidrBlock": "10.40.0.0/16", "namespaces": ["gone"], "natOutgoing": true,
                     "natOutgoingPolicyRules": [{"action": "forward", "match": {"dstIPs": "192.0.2.0/24"}}]}}))
        .await?;
    let [id] = <[String; 1]>::try_from(cluster.policy_rule_ids("gone", 1).await?)
        .map_err(|ids| anyhow::anyhow!("one rule ID expected, got {ids:?}"))?;
    let dst_set = format!("ovn40natpr-{id}-dst");
    let present = |table: &str| table.contains("10.40.0.0") && table.contains(&dst_set);
    wait_until("subnet gone in the NAT sets", WAIT, || {
        Ok(present(&cluster.nat_table(1)?))
    })?;
    Api::<Subnet>::all(cluster.kube.clone())
        .delete("gone", &DeleteParams::default())
        .await?;
    wait_until("subnet gone out of the NAT sets", WAIT, || {
        let table = cluster.nat_table(1)?;
        Ok(!table.contains("10.40.0.0") && !table.contains("natpr") && !table.contains("OVN-NAT-PSUBNET"))
    })?;
    // Node 0 too, back where it was (each daemon follows the subnet on its own).
    wait_until("node 0's table as before the subnet", WAIT, || {
        Ok(cluster.nat_table(0)? == before)
    })?;
    cluster.nodes[0].daemon.check_alive().context("daemon alive")?;
    Ok(())
}

/// Sends `message` from `client` and reads it at `served`, then back: the flow still works.
fn echo(client: &mut std::net::TcpStream, served: &mut std::net::TcpStream, message: &[u8]) -> Result<()> {
    use std::io::{Read, Write};
    for s in [&*client, &*served] {
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
    }
    client.write_all(message)?;
    let mut got = vec![0u8; message.len()];
    served.read_exact(&mut got)?;
    served.write_all(&got)?;
    client.read_exact(&mut got)?;
    ensure!(got == message, "echo came back changed");
    Ok(())
}
