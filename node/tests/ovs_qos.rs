//! The daemon's QoS writes against a real Open_vSwitch database and ovs-vswitchd (userspace
//! datapath) in a network namespace this test creates. Needs root and the OVS packages
//! (scripts/install-deps.sh); fails, never skips, without them.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use kube_ovn_node::ovs::{MONITORED, Ovs, PortSpec};
use kube_ovn_node::plan::{QosPlan, qos_plan};
use kube_ovn_ovsdb::{Client, ClientConfig, MonitorTables, Remote};
use kube_ovn_testkit::OvsNode;

async fn ovs_with_port(node: &OvsNode, port: &str) -> Result<Ovs> {
    let tables = MONITORED.iter().map(|t| (*t).to_owned()).collect();
    let client = Client::start(
        ClientConfig::new(Remote::parse_list(&node.db_remote())?, "Open_vSwitch")
            .monitor(MonitorTables::Only(tables)),
    );
    client.wait_ready(Duration::from_secs(30)).await?;
    let ovs = Ovs::new(client, "br-int");
    ovs.ensure_bridge("netdev").await?;
    let ids = BTreeMap::from([
        ("iface-id".to_owned(), format!("{port}.default")),
        ("pod_name".to_owned(), port.to_owned()),
        ("pod_namespace".to_owned(), "default".to_owned()),
    ]);
    let mut spec = PortSpec::pod(port, &ids, QosPlan::default());
    spec.kind = "internal";
    ovs.add_port(&spec).await?;
    Ok(ovs)
}

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
    let ovs = ovs_with_port(&node, "qos-race").await?;

    let plan = |mbit: i64| QosPlan {
        policing_rate_kbps: 0,
        policing_burst_kb: 0,
        htb_max_rate_bps: Some(mbit * 1_000_000),
        htb_burst_bits: None,
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

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// `ingress_burst` used to be validated by the controller and then ignored: it now reaches the
/// pod's htb queue (`other_config:burst`, in bits), changes with the annotation, and goes when
/// the annotation does; `egress_burst` sets the policing burst. What the replica reads back is
/// the plan, so the live QoS task settles instead of rewriting the port forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_reach_ovs_and_follow_the_annotations() -> Result<()> {
    let node = OvsNode::start("kovn-qosb")?;
    let ovs = ovs_with_port(&node, "qos-burst").await?;
    let queue_config = || -> Result<String> {
        Ok(node
            .vsctl(&["--no-wait", "--bare", "--columns=other_config", "list", "queue"])?
            .trim()
            .to_owned())
    };

    let asked = qos_plan(
        Some(&annotations(&[
            ("ovn.kubernetes.io/ingress_rate", "10"),
            ("ovn.kubernetes.io/ingress_burst", "2"),
            ("ovn.kubernetes.io/egress_rate", "5"),
            ("ovn.kubernetes.io/egress_burst", "1"),
        ])),
        "ovn",
    )?;
    ovs.set_qos("qos-burst", asked).await?;
    assert_eq!(queue_config()?, "burst=2000000 max-rate=10000000");
    let policing = node.vsctl(&[
        "--no-wait",
        "get",
        "interface",
        "qos-burst",
        "ingress_policing_rate",
        "ingress_policing_burst",
    ])?;
    assert_eq!(policing.split_whitespace().collect::<Vec<_>>(), ["5000", "1000"]);
    assert_eq!(ovs.current_qos("qos-burst"), Some(asked));

    let changed = qos_plan(
        Some(&annotations(&[
            ("ovn.kubernetes.io/ingress_rate", "10"),
            ("ovn.kubernetes.io/ingress_burst", "4"),
        ])),
        "ovn",
    )?;
    ovs.set_qos("qos-burst", changed).await?;
    assert_eq!(queue_config()?, "burst=4000000 max-rate=10000000");

    let dropped = qos_plan(
        Some(&annotations(&[("ovn.kubernetes.io/ingress_rate", "10")])),
        "ovn",
    )?;
    ovs.set_qos("qos-burst", dropped).await?;
    assert_eq!(queue_config()?, "max-rate=10000000");
    assert_eq!(ovs.current_qos("qos-burst"), Some(dropped));
    Ok(())
}
