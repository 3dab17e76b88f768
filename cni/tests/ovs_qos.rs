//! The daemon's QoS writes against a real Open_vSwitch database and ovs-vswitchd (userspace
//! datapath) in a network namespace this test creates. Needs root and the OVS packages
//! (scripts/install-deps.sh); fails, never skips, without them.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use kube_ovn_cni::daemon::ovs::{MONITORED, Ovs, PortSpec};
use kube_ovn_cni::daemon::plan::QosPlan;
use kube_ovn_ovsdb::{Client, ClientConfig, MonitorTables, Remote};
use kube_ovn_testkit::OvsNode;

fn rows(node: &OvsNode, table: &str) -> Result<usize> {
    let out = node.vsctl(&["--no-wait", "--bare", "--columns=_uuid", "list", table])?;
    Ok(out.lines().filter(|l| !l.trim().is_empty()).count())
}

/// An ADD that plugged before the annotations came and the live QoS task can both give the
/// same port an htb QoS at once. Each used to see no QoS on the port and insert its own row;
/// the port kept one and the rest stayed in the database forever (QoS and Queue are root
/// tables). However many writers race, one QoS and one queue remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_qos_writers_leave_one_qos_row() -> Result<()> {
    let node = OvsNode::start("kovn-qos")?;
    let tables = MONITORED.iter().map(|t| (*t).to_owned()).collect();
    let client = Client::start(
        ClientConfig::new(Remote::parse_list(&node.db_remote())?, "Open_vSwitch")
            .monitor(MonitorTables::Only(tables)),
    );
    client.wait_ready(Duration::from_secs(30)).await?;
    let ovs = Ovs::new(client, "br-int");
    ovs.ensure_bridge("netdev").await?;
    let ids = BTreeMap::from([
        ("iface-id".to_owned(), "q.default".to_owned()),
        ("pod_name".to_owned(), "q".to_owned()),
        ("pod_namespace".to_owned(), "default".to_owned()),
    ]);
    let mut spec = PortSpec::pod("qos-race", &ids, QosPlan::default());
    spec.kind = "internal";
    ovs.add_port(&spec).await?;

    let plan = |mbit: i64| QosPlan {
        policing_rate_kbps: 0,
        policing_burst_kb: 0,
        htb_max_rate_bps: Some(mbit * 1_000_000),
    };
    let writers = (1..=6).map(|mbit| {
        let ovs = ovs.clone();
        tokio::spawn(async move { ovs.set_qos("qos-race", plan(mbit)).await })
    });
    for writer in futures::future::join_all(writers).await {
        writer??;
    }
    assert_eq!(
        (rows(&node, "qos")?, rows(&node, "queue")?),
        (1, 1),
        "QoS rows after racing writers:\n{}",
        node.vsctl(&["--no-wait", "list", "qos"])?
    );
    let port_qos = node.vsctl(&["--no-wait", "get", "port", "qos-race", "qos"])?;
    let qos_uuid = node.vsctl(&["--no-wait", "--bare", "--columns=_uuid", "list", "qos"])?;
    assert_eq!(port_qos.trim(), qos_uuid.trim(), "the port holds the one QoS row");

    // Taking the QoS away leaves none behind.
    ovs.set_qos("qos-race", QosPlan::default()).await?;
    assert_eq!((rows(&node, "qos")?, rows(&node, "queue")?), (0, 0));
    Ok(())
}
