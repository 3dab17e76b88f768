//! The provider-network tests' rig: a node's OVS in a netns with `eth1` wired to a peer
//! netns, the task run against a real API server, and what the tests read back.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node as K8sNode, Pod};
use kube::Api;
use kube::ResourceExt as _;
use kube::api::PostParams;
use kube_ovn_api::crd::ProviderNetwork;
use kube_ovn_node::config::Datapath;
use kube_ovn_node::metrics::Metrics;
use kube_ovn_node::ovs::{MONITORED, Ovs};
use kube_ovn_node::provider_network::mover::FailPoint;
use kube_ovn_node::provider_network::{ProviderNetworks, Settings};
use kube_ovn_ovsdb::{Client, ClientConfig, MonitorTables, Remote};
use kube_ovn_support::Watched;
use kube_ovn_testkit::{Netns, OvsNode, run, wait_until_async};
use serde_json::json;

pub const WAIT: Duration = Duration::from_secs(30);
const LABEL: &str = ".provider-network.kubernetes.io/";

/// One node: OVS in a netns with `eth1` wired to a peer netns (the "router", 172.31.0.1),
/// `eth1` carrying addresses and routes worth preserving.
pub struct Rig {
    pub node: OvsNode,
    pub peer: Netns,
    pub ovs: Ovs,
    /// The registry every task of this rig records into.
    pub metrics: Metrics,
}

pub async fn rig(prefix: &str) -> Result<Rig> {
    kube_ovn_testkit::init_logging();
    let node = OvsNode::start(prefix)?;
    let peer = Netns::create(&format!("{prefix}-peer"))?;
    run(
        "ip",
        &[
            "link",
            "add",
            "eth1",
            "netns",
            node.netns().name(),
            "type",
            "veth",
            "peer",
            "name",
            "up1",
            "netns",
            peer.name(),
        ],
    )?;
    // AF_PACKET on a veth sees frames before checksum offload fills them in (dataplane.md §5.6).
    node.netns().exec(&["ethtool", "-K", "eth1", "tx", "off"])?;
    peer.exec(&["ethtool", "-K", "up1", "tx", "off"])?;
    for args in [
        &["link", "set", "up1", "up"][..],
        &["addr", "add", "172.31.0.1/24", "dev", "up1"],
        &["-6", "addr", "add", "fd00:31::1/64", "dev", "up1", "nodad"],
    ] {
        peer.ip(args)?;
    }
    for args in [
        &["link", "set", "eth1", "up"][..],
        &["addr", "add", "172.31.0.11/24", "brd", "+", "dev", "eth1"],
        &[
            "addr",
            "add",
            "172.31.0.12/24",
            "dev",
            "eth1",
            "label",
            "eth1:sec",
        ],
        &["-6", "addr", "add", "fd00:31::11/64", "dev", "eth1", "nodad"],
        &[
            "route",
            "add",
            "default",
            "via",
            "172.31.0.1",
            "dev",
            "eth1",
            "metric",
            "100",
        ],
        // A policy-routing table, an onlink gateway, a static link route with an MTU.
        &[
            "route",
            "add",
            "10.55.0.0/24",
            "via",
            "172.31.0.1",
            "dev",
            "eth1",
            "table",
            "100",
        ],
        &[
            "route",
            "add",
            "10.66.0.0/24",
            "via",
            "192.0.2.1",
            "dev",
            "eth1",
            "onlink",
        ],
        &[
            "route",
            "add",
            "10.77.0.0/24",
            "dev",
            "eth1",
            "proto",
            "static",
            "metric",
            "50",
            "mtu",
            "1400",
        ],
        &[
            "-6",
            "route",
            "add",
            "fd00:99::/64",
            "via",
            "fd00:31::1",
            "dev",
            "eth1",
            "metric",
            "300",
        ],
    ] {
        node.netns().ip(args)?;
    }
    let tables = MONITORED.iter().map(|t| (*t).to_owned()).collect();
    let client = Client::start(
        ClientConfig::new(Remote::parse_list(&node.db_remote())?, "Open_vSwitch")
            .monitor(MonitorTables::Only(tables)),
    );
    client.wait_ready(WAIT).await?;
    let ovs = Ovs::new(client, "br-int");
    ovs.ensure_bridge("netdev").await?;
    node.vsctl(&[
        "set",
        "Open_vSwitch",
        ".",
        "external_ids:ovn-bridge-mappings=other:br-other",
    ])?;
    let rig = Rig {
        node,
        peer,
        ovs,
        metrics: Metrics::new(),
    };
    // The "before" picture is taken once the link-local address has finished DAD.
    wait_until_async("eth1's link-local address out of DAD", WAIT, || async {
        Ok(!rig.dump("eth1")?.iter().any(|l| l.contains("tentative")))
    })
    .await?;
    Ok(rig)
}

impl Rig {
    /// `ip -j` of a link's addresses and routes (all tables, both families), sorted: what
    /// "given back as it was" is compared on.
    pub fn dump(&self, dev: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let addrs: serde_json::Value =
            serde_json::from_str(&self.node.netns().ip(&["-j", "addr", "show", "dev", dev])?)?;
        for link in addrs.as_array().into_iter().flatten() {
            for a in link["addr_info"].as_array().into_iter().flatten() {
                out.push(format!("addr {a}"));
            }
        }
        for family in ["-4", "-6"] {
            let routes = self
                .node
                .netns()
                .ip(&[family, "-j", "route", "show", "table", "all", "dev", dev])?;
            let routes: serde_json::Value = serde_json::from_str(&routes)?;
            out.extend(
                routes
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| format!("route {r}")),
            );
        }
        out.sort();
        Ok(out)
    }

    pub fn mappings(&self) -> Result<String> {
        Ok(self
            .node
            .vsctl(&[
                "--no-wait",
                "get",
                "Open_vSwitch",
                ".",
                "external_ids:ovn-bridge-mappings",
            ])?
            .trim()
            .trim_matches('"')
            .to_owned())
    }

    pub fn has_bridge(&self, name: &str) -> bool {
        self.node.vsctl(&["--no-wait", "br-exists", name]).is_ok()
    }

    pub async fn task(
        &self,
        kube: &kube::Client,
        node: &str,
        fail_at: Option<FailPoint>,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let ovs_ns = self.node.netns().handle()?;
        let ovs_nl = kube_ovn_dataplane::Netlink::connect_async(&ovs_ns).await?;
        let task = ProviderNetworks {
            settings: Settings {
                node_name: node.to_owned(),
                datapath: Datapath::Netdev,
                mac_learning_fallback: false,
                pod: Some(("default".into(), format!("daemon-{node}"))),
                tick: Duration::from_secs(1),
            },
            kube: kube.clone(),
            ovs: self.ovs.clone(),
            ovs_ns,
            ovs_nl,
            pns: Watched::start(Api::all(kube.clone()), None, None),
            vlans: Watched::start(Api::all(kube.clone()), None, None),
            nodes: Watched::start(Api::all(kube.clone()), None, None),
            fail_at,
            metrics: self.metrics.clone(),
        };
        Ok(tokio::spawn(task.run()))
    }
}

pub async fn create_node_and_pod(kube: &kube::Client, node: &str) -> Result<()> {
    let nodes: Api<K8sNode> = Api::all(kube.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": node}}))?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(kube.clone(), "default");
    let pod = json!({"metadata": {"name": format!("daemon-{node}")},
        "spec": {"containers": [{"name": "cni", "image": "kube-ovn-rs"}]}});
    pods.create(&PostParams::default(), &serde_json::from_value(pod)?)
        .await?;
    Ok(())
}

pub async fn create_pn(kube: &kube::Client, name: &str, nic: &str) -> Result<()> {
    let api: Api<ProviderNetwork> = Api::all(kube.clone());
    let pn = json!({"apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
        "metadata": {"name": name}, "spec": {"defaultInterface": nic}});
    api.create(&PostParams::default(), &serde_json::from_value(pn)?)
        .await?;
    Ok(())
}

pub async fn labels(kube: &kube::Client, node: &str, pn: &str) -> Result<Vec<(String, String)>> {
    let nodes: Api<K8sNode> = Api::all(kube.clone());
    let prefix = format!("{pn}{LABEL}");
    Ok(nodes
        .get(node)
        .await?
        .metadata
        .labels
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|k| (k.to_owned(), v)))
        .collect())
}

pub async fn err_mesg(kube: &kube::Client, node: &str, pn: &str) -> Result<Option<String>> {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), "default");
    let key = format!("{pn}{LABEL}err_mesg");
    Ok(pods
        .get(&format!("daemon-{node}"))
        .await?
        .annotations()
        .get(&key)
        .cloned())
}

pub async fn warnings(kube: &kube::Client, pn: &str) -> Result<Vec<String>> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(kube.clone());
    Ok(events
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pn))
        .filter(|e| e.reason.as_deref() == Some("InitOVSBridgeFailed"))
        .filter_map(|e| e.note)
        .collect())
}

/// `ping -i 0.01` from the peer into a file (the move takes well under a second), stopped
/// with SIGINT; its summary says what was lost, and `DUP!` marks a reply the node sent twice.
pub fn start_ping(peer: &Netns, ip: &str, out: &std::path::Path) -> Result<Child> {
    let file = std::fs::File::create(out)?;
    Ok(Command::new("ip")
        .args(["netns", "exec", peer.name(), "ping", "-n", "-i", "0.01", ip])
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()?)
}

pub fn stop_ping(mut child: Child, out: &std::path::Path) -> Result<String> {
    anyhow::ensure!(
        child.try_wait()?.is_none(),
        "ping ended by itself: {}",
        std::fs::read_to_string(out)?
    );
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id())?);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT)?;
    child.wait()?;
    Ok(std::fs::read_to_string(out)?)
}

/// `(transmitted, received)` from ping's summary.
pub fn ping_counts(summary: &str) -> Option<(u32, u32)> {
    let line = summary.lines().find(|l| l.contains("packets transmitted"))?;
    let mut numbers = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty());
    Some((numbers.next()?.parse().ok()?, numbers.next()?.parse().ok()?))
}

pub fn echo(client: &mut TcpStream, server: &mut TcpStream, byte: u8) -> Result<()> {
    client.write_all(&[byte]).context("client write")?;
    let mut got = [0u8];
    server.read_exact(&mut got).context("server read")?;
    server.write_all(&got)?;
    client.read_exact(&mut got).context("client read")?;
    anyhow::ensure!(got == [byte], "echo returned {got:?}");
    Ok(())
}
