//! The node daemon with real OVS (userspace datapath), real ovn-controller, the real
//! controller and the real `kube-ovn` shim run as a runtime runs it, in network namespaces
//! this test creates. Needs root and the OVS/OVN packages (scripts/install-deps.sh); fails,
//! never skips, without them.

mod common;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result};
use common::{Cluster, NorthboundPaused, Options, WAIT};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_ovn_testkit::{tcp_transfer, wait_until};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_gives_a_pod_that_pings_then_del_leaves_nothing() -> Result<()> {
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    let a = cluster.pod("default", "a", 0, &[]).await?;
    let b = cluster.pod("default", "b", 0, &[]).await?;

    // The result carries what the controller allocated, in the version of the conflist the
    // daemon installed (1.0.0 unless --cni-conf-version says otherwise).
    assert_eq!(node.runtime.conflist()?["cniVersion"], "1.0.0");
    assert_eq!(a.result["cniVersion"], "1.0.0");
    let pod_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.kube.clone(), "default");
    let ann = pod_api.get("a").await?.metadata.annotations.unwrap_or_default();
    assert_eq!(a.ip().to_string(), ann["ovn.kubernetes.io/ip_address"]);
    assert_eq!(
        a.result["interfaces"][0]["mac"],
        ann["ovn.kubernetes.io/mac_address"].as_str()
    );
    assert_eq!(a.result["interfaces"][0]["sandbox"], a.sandbox.netns.as_str());
    assert!(
        a.netns
            .exec(&["ip", "link", "show", "eth0"])?
            .contains("mtu 1400")
    );
    assert!(
        a.netns
            .exec(&["ethtool", "-k", "eth0"])?
            .contains("tx-checksumming: off")
    );
    assert!(
        a.netns
            .exec(&["ip", "route", "show", "default"])?
            .contains("via 10.16.0.1 dev eth0")
    );
    let host = common::runtime::Sandbox { ..a.sandbox.clone() };
    let host_nic = format!("{}_h", &host.container_id[..12]);
    assert_eq!(
        node.iface_column(&host_nic, "external_ids:iface-id")?,
        "a.default"
    );
    assert_eq!(
        node.iface_column(&host_nic, "external_ids:ovn-installed")?,
        "true"
    );

    a.netns
        .wait_ping(std::net::Ipv4Addr::new(10, 16, 0, 1), Duration::from_secs(10))?;
    a.netns.wait_ping(b.ip(), Duration::from_secs(10))?;
    // The node reaches pods through ovn0 and its route to the subnet.
    node.ovs.netns().wait_ping(b.ip(), Duration::from_secs(10))?;
    tcp_transfer(
        &b.netns,
        b.ip().into(),
        5201,
        &a.netns,
        1 << 20,
        Duration::from_secs(20),
    )?;

    // DEL removes port, interface and veth; a second DEL and a DEL after the netns is gone
    // both succeed.
    node.runtime.del(&a.sandbox, Some(&a.result))?;
    assert!(
        !node.pod_ports()?.contains(&host_nic),
        "port left: {:?}",
        node.pod_ports()?
    );
    assert!(!node.pod_veths()?.contains(&host_nic), "veth left");
    assert!(
        a.netns.exec(&["ip", "link", "show", "eth0"]).is_err(),
        "eth0 left in the pod"
    );
    node.runtime.del(&a.sandbox, Some(&a.result))?;
    let b_sandbox = b.sandbox.clone();
    b.netns.delete()?;
    node.runtime.del(&b_sandbox, None)?;
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

    let metrics = node.metrics()?;
    assert!(
        metrics.contains(&format!(
            "cni_op_latency_seconds_count{{node_name=\"{}\",method=\"add\",status_code=\"200\"}} 2",
            node.name
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "cni_op_latency_seconds_count{{node_name=\"{}\",method=\"del\",status_code=\"204\"}} 3",
            node.name
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("cni_wait_seconds_count{what=\"ovn_installed\"} 2"),
        "{metrics}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_detects_a_removed_address_and_gc_drops_unknown_sandboxes() -> Result<()> {
    // GC needs a 1.1.0 conflist, which a runtime on libcni 1.2 or later reads.
    let cluster = Cluster::start(1, &["--cni-conf-version=1.1.0"]).await?;
    let node = &cluster.nodes[0];
    let a = cluster.pod("default", "a", 0, &[]).await?;
    let b = cluster.pod("default", "b", 0, &[]).await?;

    let ok = node.runtime.check(&a.sandbox, &a.result)?;
    assert!(ok.success && ok.stdout.is_empty(), "{ok:?}");
    let cidr = a.result["ips"][0]["address"].as_str().unwrap();
    a.netns.exec(&["ip", "addr", "del", cidr, "dev", "eth0"])?;
    let bad = node.runtime.check(&a.sandbox, &a.result)?;
    assert!(!bad.success, "CHECK passed without the address");
    let error = bad.json()?;
    assert!(
        error["msg"].as_str().unwrap().contains("lacks address"),
        "{error}"
    );

    // GC: the runtime still has b only, so a's port and veth go.
    let gc = node.runtime.gc(&[&b.sandbox])?;
    assert!(gc.success, "{gc:?}");
    let ports = node.pod_ports()?;
    assert_eq!(ports, vec![format!("{}_h", &b.sandbox.container_id[..12])]);
    assert_eq!(node.pod_veths()?, ports);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_follows_the_annotations_live_and_goes_with_the_pod() -> Result<()> {
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    let ann = [
        ("ovn.kubernetes.io/ingress_rate", "10"),
        ("ovn.kubernetes.io/egress_rate", "5"),
    ];
    let pod = cluster.pod("default", "q", 0, &ann).await?;
    let nic = format!("{}_h", &pod.sandbox.container_id[..12]);
    // Directions turn around: the pod's egress is what OVS receives.
    assert_eq!(node.iface_column(&nic, "ingress_policing_rate")?, "5000");
    assert_eq!(node.iface_column(&nic, "ingress_policing_burst")?, "4000");
    assert_eq!(node.ovs_rows("qos")?, 1);
    let max_rate = node
        .ovs
        .vsctl(&["--no-wait", "--bare", "--columns=other_config", "list", "queue"])?;
    assert!(max_rate.contains("max-rate=10000000"), "{max_rate}");

    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.kube.clone(), "default");
    let patch = json!({"metadata": {"annotations": {"ovn.kubernetes.io/egress_rate": "20", "ovn.kubernetes.io/ingress_rate": null}}});
    pods.patch("q", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_until("egress_rate 20 applied and the htb QoS removed", WAIT, || {
        Ok(node.iface_column(&nic, "ingress_policing_rate")? == "20000"
            && node.ovs_rows("qos")? == 0
            && node.ovs_rows("queue")? == 0)
    })?;
    let patch = json!({"metadata": {"annotations": {"ovn.kubernetes.io/ingress_rate": "3"}}});
    pods.patch("q", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_until(
        "ingress_rate 3 applied",
        WAIT,
        || Ok(node.ovs_rows("queue")? == 1),
    )?;

    node.runtime.del(&pod.sandbox, Some(&pod.result))?;
    assert_eq!(
        (node.ovs_rows("qos")?, node.ovs_rows("queue")?),
        (0, 0),
        "QoS rows left after DEL"
    );
    Ok(())
}

/// OVSDB refuses the QoS change while another port still references the pod's QoS row (a
/// strong reference blocks the row's deletion); once that reference goes, the daemon's retry
/// applies the change with no further event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_qos_change_is_retried_until_it_applies() -> Result<()> {
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    let pod = cluster
        .pod("default", "q", 0, &[("ovn.kubernetes.io/ingress_rate", "10")])
        .await?;
    let nic = format!("{}_h", &pod.sandbox.container_id[..12]);
    let qos = node.ovs.vsctl(&["--no-wait", "get", "port", &nic, "qos"])?;
    let qos = qos.trim();
    assert_eq!(node.ovs_rows("qos")?, 1, "the pod's htb QoS");
    node.ovs.vsctl(&[
        "--no-wait",
        "add-port",
        "br-int",
        "qhold",
        "--",
        "set",
        "interface",
        "qhold",
        "type=internal",
        "--",
        "set",
        "port",
        "qhold",
        &format!("qos={qos}"),
    ])?;

    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.kube.clone(), "default");
    let patch = json!({"metadata": {"annotations": {"ovn.kubernetes.io/ingress_rate": null}}});
    pods.patch("q", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_until("the daemon to report the refused QoS change", WAIT, || {
        Ok(node.daemon.log().contains("QoS update failed"))
    })?;
    assert_eq!(
        node.ovs.vsctl(&["--no-wait", "get", "port", &nic, "qos"])?.trim(),
        qos,
        "the refused transaction changed nothing"
    );

    node.ovs.vsctl(&["--no-wait", "clear", "port", "qhold", "qos"])?;
    wait_until("the retry to remove the pod's QoS", WAIT, || {
        Ok(
            node.ovs.vsctl(&["--no-wait", "get", "port", &nic, "qos"])?.trim() == "[]"
                && node.ovs_rows("qos")? == 0
                && node.ovs_rows("queue")? == 0,
        )
    })
    .with_context(|| node.daemon.log_tail(10))?;
    Ok(())
}

/// With the controller held back (its northbound database stopped), ADD plugs the port from
/// the request alone: ovs-vswitchd opens it, with the pod's `iface-id`, and the pod's
/// interface exists, down, before any route is annotated. When the controller resumes, the port
/// is completed and bound and the pod works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_is_plugged_before_the_annotations_and_completed_when_they_come() -> Result<()> {
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.kube.clone(), "default");
    let paused = NorthboundPaused::new(&cluster.ovn)?;
    cluster.create_pod("default", "late", 0, &[]).await?;
    let (netns, sandbox) = Cluster::sandbox("default", "late")?;
    let runtime = node.runtime.clone();
    let sb = sandbox.clone();
    let add = tokio::task::spawn_blocking(move || runtime.add(&sb));
    let host_nic = format!("{}_h", &sandbox.container_id[..12]);
    wait_until("the port plugged and opened before the annotations", WAIT, || {
        Ok(node
            .iface_column(&host_nic, "ofport")
            .is_ok_and(|p| p.parse::<i64>().is_ok_and(|p| p > 0)))
    })
    .with_context(|| node.daemon.log_tail(10))?;
    assert_eq!(
        node.iface_column(&host_nic, "external_ids:iface-id")?,
        "late.default"
    );
    let before = pods.get("late").await?.metadata.annotations.unwrap_or_default();
    assert!(
        !before.contains_key("ovn.kubernetes.io/routed"),
        "the controller was not held back: {before:?}"
    );
    let eth0 = netns.ip(&["link", "show", "eth0"])?;
    assert!(eth0.contains("state DOWN"), "{eth0}");

    drop(paused);
    let result = add.await??;
    let ann = pods.get("late").await?.metadata.annotations.unwrap_or_default();
    let ip = &ann["ovn.kubernetes.io/ip_address"];
    let mac = &ann["ovn.kubernetes.io/mac_address"];
    assert_eq!(
        result["ips"][0]["address"]
            .as_str()
            .unwrap_or_default()
            .split('/')
            .next(),
        Some(ip.as_str())
    );
    assert_eq!(&node.iface_column(&host_nic, "external_ids:ip")?, ip);
    assert_eq!(&node.iface_column(&host_nic, "external_ids:attached-mac")?, mac);
    assert_eq!(
        node.iface_column(&host_nic, "external_ids:ovn-installed")?,
        "true"
    );
    assert!(
        netns
            .ip(&["link", "show", "eth0"])?
            .contains(&format!("link/ether {mac}"))
    );
    netns.wait_ping(std::net::Ipv4Addr::new(10, 16, 0, 1), Duration::from_secs(10))?;
    let metrics = node.metrics()?;
    assert!(
        metrics.contains("cni_wait_seconds_count{what=\"plugged_early\"} 1"),
        "{metrics}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_fails_clearly_and_leaves_nothing() -> Result<()> {
    let mut cluster = Cluster::start(
        1,
        &["--wait-address-timeout=3s", "--wait-ovn-installed-timeout=2s"],
    )
    .await?;
    let node = &cluster.nodes[0];
    // A static address outside every subnet: the controller refuses it, so no address comes.
    cluster
        .create_pod(
            "default",
            "bad",
            0,
            &[("ovn.kubernetes.io/ip_address", "192.0.2.7")],
        )
        .await?;
    let (netns, sandbox) = Cluster::sandbox("default", "bad")?;
    let run = node.runtime.add_raw(&sandbox)?;
    assert!(!run.success);
    let error = run.json()?;
    assert_eq!(error["code"], 11, "{error}");
    assert!(
        error["msg"].as_str().unwrap().contains("no address allocated"),
        "{error}"
    );
    // With no annotations at ADD the port was plugged early; the failure took it away again.
    assert!(node.daemon.log().contains("plugged before the annotations"));
    assert!(node.pod_ports()?.is_empty() && node.pod_veths()?.is_empty());
    // A sandbox path that does not exist: refused as bad config, nothing created.
    cluster.create_pod("default", "gone", 0, &[]).await?;
    let (_other, mut gone) = Cluster::sandbox("default", "gone")?;
    gone.netns = "/run/netns/no-such-sandbox".into();
    let run = node.runtime.add_raw(&gone)?;
    let error = run.json()?;
    assert_eq!(error["code"], 7, "{error}");
    assert!(
        error["msg"]
            .as_str()
            .unwrap()
            .contains("/run/netns/no-such-sandbox"),
        "{error}"
    );
    assert!(node.pod_ports()?.is_empty() && node.pod_veths()?.is_empty());
    drop(netns);

    // ovn-controller down: the port never becomes ovn-installed; ADD says so and rolls back
    // the veth and the port it made.
    cluster.nodes[0].ovs.stop_ovn_controller();
    let node = &cluster.nodes[0];
    cluster.create_pod("default", "unbound", 0, &[]).await?;
    let (netns, sandbox) = Cluster::sandbox("default", "unbound")?;
    let run = node.runtime.add_raw(&sandbox)?;
    let error = run.json()?;
    assert!(
        error["msg"].as_str().unwrap().contains("ovn-installed"),
        "{error}"
    );
    assert!(node.pod_ports()?.is_empty(), "port left: {:?}", node.pod_ports()?);
    assert!(node.pod_veths()?.is_empty(), "veth left: {:?}", node.pod_veths()?);
    assert!(
        netns.exec(&["ip", "link", "show", "eth0"]).is_err(),
        "eth0 left in the pod"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_two_nodes_talk_in_one_subnet_and_across_subnets() -> Result<()> {
    let cluster = Cluster::start(2, &[]).await?;
    cluster.namespace("other").await?;
    cluster
        .apply(
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "other"},
            "spec": {"cidrBlock": "10.17.0.0/16", "namespaces": ["other"]}}),
        )
        .await?;
    let a = cluster.pod("default", "a", 0, &[]).await?;
    let b = cluster.pod("default", "b", 1, &[]).await?;
    let c = cluster.pod("other", "c", 1, &[]).await?;
    assert!(c.ip().to_string().starts_with("10.17."), "{}", c.ip());
    for (from, to, what) in [
        (&a, &b, "same subnet, other node"),
        (&a, &c, "other subnet, other node"),
        (&c, &a, "back"),
    ] {
        from.netns
            .wait_ping(to.ip(), Duration::from_secs(15))
            .map_err(|e| e.context(what))?;
    }
    tcp_transfer(
        &b.netns,
        b.ip().into(),
        5202,
        &a.netns,
        1 << 20,
        Duration::from_secs(30),
    )?;
    tcp_transfer(
        &c.netns,
        c.ip().into(),
        5203,
        &a.netns,
        1 << 20,
        Duration::from_secs(30),
    )?;
    // Each node routes the new subnet through its ovn0 (its daemon adds the route when it sees
    // the subnet validated, independently of the pods' traffic above: waited for, bounded).
    for node in &cluster.nodes {
        wait_until(
            &format!("{}: a route to 10.17.0.0/16 via 100.64.0.1 on ovn0", node.name),
            WAIT,
            || {
                let routes = node.ovs.netns().ip(&["route", "show", "dev", "ovn0"])?;
                Ok(routes.contains("10.17.0.0/16 via 100.64.0.1"))
            },
        )?;
    }
    Ok(())
}

/// Opens a TCP connection from `client` to `ip:port` served in `server` and returns the source
/// address the server saw. Connect and accept are both bounded.
fn source_seen(
    server: &kube_ovn_testkit::Netns,
    ip: IpAddr,
    port: u16,
    client: &kube_ovn_testkit::Netns,
) -> Result<IpAddr> {
    let listener = server.run(|| TcpListener::bind((ip, port)))??;
    listener.set_nonblocking(true)?;
    let to = SocketAddr::new(ip, port);
    let _stream = client
        .run(|| TcpStream::connect_timeout(&to, Duration::from_secs(10)))?
        .with_context(|| format!("connect to {to}"))?;
    // The client's connect returns on the SYN-ACK; the server queues the connection on the
    // final ACK, a moment later.
    let mut peer = None;
    wait_until(
        &format!("{to} to accept the connection"),
        Duration::from_secs(10),
        || {
            match listener.accept() {
                Ok((_, from)) => peer = Some(from.ip()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
            Ok(peer.is_some())
        },
    )?;
    peer.context("accepted")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_reaches_pods_from_its_internal_ip_in_both_families() -> Result<()> {
    let cluster = Cluster::start_with(Options {
        nodes: 1,
        controller_flags: vec![
            "--default-cidr=10.16.0.0/16,fd00:10:16::/112".into(),
            "--node-switch-cidr=100.64.0.0/16,fd00:100:64::/112".into(),
        ],
        dual_stack: true,
        ..Options::default()
    })
    .await?;
    let node = &cluster.nodes[0];
    let node_ns = node.ovs.netns();
    let v6 = node.internal_ipv6.context("a dual-stack node")?;
    let pod = cluster.pod("default", "a", 0, &[]).await?;
    let pod_v6: IpAddr = pod.result["ips"][1]["address"]
        .as_str()
        .context("an IPv6 address in the result")?
        .split('/')
        .next()
        .unwrap_or_default()
        .parse()?;

    // Node → pod packets leave from the node's InternalIP of the family (not the join address).
    node_ns.wait_ping(pod.ip(), Duration::from_secs(10))?;
    assert_eq!(
        source_seen(&pod.netns, pod.ip().into(), 7101, node_ns)?,
        IpAddr::from(node.internal_ip)
    );
    assert_eq!(source_seen(&pod.netns, pod_v6, 7102, node_ns)?, IpAddr::from(v6));
    // Because of Kube-OVN's route set: subnets via the join gateway with the node's InternalIP of the family as
    // source, the join CIDR as the kernel's link route.
    let v4_routes = node_ns.ip(&["-4", "route", "show", "dev", "ovn0"])?;
    let v6_routes = node_ns.ip(&["-6", "route", "show", "dev", "ovn0"])?;
    let line = |table: &str, dst: &str| {
        table
            .lines()
            .find(|l| l.starts_with(dst))
            .unwrap_or_default()
            .to_owned()
    };
    let subnet_v4 = line(&v4_routes, "10.16.0.0/16 ");
    assert!(
        subnet_v4.contains("via 100.64.0.1") && subnet_v4.contains(&format!("src {}", node.internal_ip)),
        "{v4_routes}"
    );
    let join_v4 = line(&v4_routes, "100.64.0.0/16 ");
    assert!(
        join_v4.contains("scope link") && join_v4.contains("src 100.64.0.2"),
        "{v4_routes}"
    );
    // The IPv6 join gateway as the controller chose it (the Node's annotation).
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cluster.kube.clone());
    let annotations = nodes
        .get(&node.name)
        .await?
        .metadata
        .annotations
        .unwrap_or_default();
    let join_gw_v6 = annotations["ovn.kubernetes.io/gateway"]
        .split(',')
        .find(|g| g.contains(':'))
        .context("an IPv6 join gateway")?
        .to_owned();
    let subnet_v6 = line(&v6_routes, "fd00:10:16::/112 ");
    assert!(
        subnet_v6.contains(&format!("via {join_gw_v6} ")) && subnet_v6.contains(&format!("src {v6}")),
        "{v6_routes}"
    );
    assert!(!line(&v6_routes, "fd00:100:64::/112 ").is_empty(), "{v6_routes}");

    // What an earlier daemon left (no source), a missing join route and a route no subnet wants
    // are all put right on the next pass.
    node_ns.ip(&[
        "route",
        "replace",
        "10.16.0.0/16",
        "via",
        "100.64.0.1",
        "dev",
        "ovn0",
    ])?;
    node_ns.ip(&["route", "add", "10.99.0.0/16", "via", "100.64.0.1", "dev", "ovn0"])?;
    node_ns.ip(&["route", "del", "100.64.0.0/16", "dev", "ovn0"])?;
    let touch = json!({"metadata": {"annotations": {"test.kube-ovn.io/touch": "1"}}});
    nodes
        .patch(&node.name, &PatchParams::default(), &Patch::Merge(&touch))
        .await?;
    wait_until("the daemon to restore Kube-OVN's routes on ovn0", WAIT, || {
        let table = node_ns.ip(&["-4", "route", "show", "dev", "ovn0"])?;
        Ok(
            line(&table, "10.16.0.0/16 ").contains(&format!("src {}", node.internal_ip))
                && line(&table, "100.64.0.0/16 ").contains("src 100.64.0.2")
                && line(&table, "10.99.0.0/16 ").is_empty(),
        )
    })
    .with_context(|| {
        format!(
            "{}\n{}",
            node_ns.ip(&["route", "show", "dev", "ovn0"]).unwrap_or_default(),
            node.daemon.log_tail(10)
        )
    })?;
    Ok(())
}
