//! What the egress tests add to a [`Cluster`]: an outside host on the nodes' underlay that has
//! no route back to any pod subnet (so an answer proves NAT, unless a test gives it a route),
//! netexec servers that report the client address they saw, and a few Kubernetes helpers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube_ovn_api::crd::Subnet;
use kube_ovn_lab::cluster::matrix::client_ip;
use kube_ovn_lab::netexec;
use kube_ovn_testkit::{Netns, run};

use super::{Cluster, TestPod};

/// Flags that make the gateway loops quick enough for tests.
pub const FAST_GATEWAY: [&str; 2] = ["--gateway-check-interval=1s", "--ovn0-check-interval=1s"];

/// The outside host's address on the underlay.
pub const OUTSIDE_IP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 100);
/// A second address of the outside host (a destination that policy rules treat differently).
pub const OUTSIDE_IP2: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 101);
pub const PORT: u16 = 80;

/// A host plugged into node 0's underlay bridge, serving netexec on `PORT`.
pub struct Outside {
    pub netns: Netns,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Outside {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn dp(ns: &Netns) -> Result<kube_ovn_dataplane::Netns> {
    Ok(kube_ovn_dataplane::Netns::open(ns.path())?)
}

/// A veth pair born in two namespaces at once: `host_end` in `host_ns`, `eth0` in `other_ns`.
pub fn veth_pair(host_ns: &str, host_end: &str, other_ns: &str) -> Result<()> {
    run(
        "ip",
        &[
            "link", "add", host_end, "netns", host_ns, "type", "veth", "peer", "name", "eth0", "netns",
            other_ns,
        ],
    )?;
    Ok(())
}

/// Serves netexec on `0.0.0.0:port` inside `ns` from this runtime.
pub fn serve(ns: &Netns, port: u16, name: &str) -> Result<tokio::task::JoinHandle<()>> {
    let listener = ns.run(|| netexec::bind_tcp(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))))??;
    let name: std::sync::Arc<str> = name.into();
    Ok(tokio::spawn(async move {
        let _ = netexec::serve_http(listener, name).await;
    }))
}

impl Outside {
    /// The outside host: a veth from node 0's `br-ul` (the underlay both nodes share), its
    /// addresses, no routes beyond its own /24.
    pub fn attach(cluster: &Cluster) -> Result<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let netns = Netns::create("out")?;
        let node = &cluster.nodes[0].ovs;
        let veth = format!("o{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        veth_pair(node.name(), &veth, netns.name())?;
        // ovs-vswitchd's userspace datapath reads the port with AF_PACKET: checksums must be
        // complete on both ends (dataplane.md §5.6).
        node.netns().exec(&["ethtool", "-K", &veth, "tx", "off"])?;
        netns.exec(&["ethtool", "-K", "eth0", "tx", "off"])?;
        node.vsctl(&["add-port", "br-ul", &veth])?;
        node.check_interface(&veth)?;
        node.netns().ip(&["link", "set", &veth, "up"])?;
        for ip in [OUTSIDE_IP, OUTSIDE_IP2] {
            netns.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"])?;
        }
        netns.ip(&["link", "set", "eth0", "up"])?;
        let server = serve(&netns, PORT, "outside")?;
        Ok(Self { netns, server })
    }

    /// A route back to `cidr` through `via` (a node's underlay address).
    pub fn route(&self, cidr: &str, via: Ipv4Addr) -> Result<()> {
        self.netns
            .ip(&["route", "replace", cidr, "via", &via.to_string()])
            .map(drop)
    }
}

/// The address `server`'s netexec (at `ip:port`) saw a GET from `client` come from, or `None`
/// when no answer came within `timeout`.
pub async fn seen_from(client: &Netns, ip: IpAddr, port: u16, timeout: Duration) -> Result<Option<IpAddr>> {
    match netexec::http_get_in(&dp(client)?, SocketAddr::new(ip, port), "/clientip", timeout).await {
        Ok(answer) => Ok(Some(client_ip(&answer.body).context("an ip:port answer")?)),
        Err(_) => Ok(None),
    }
}

/// [`seen_from`] a pod to the outside host, retried until an answer comes (ARP, flows being
/// installed) within `within`.
pub async fn outside_sees(pod: &TestPod, ip: Ipv4Addr, within: Duration) -> Result<IpAddr> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(seen) = seen_from(&pod.netns, ip.into(), PORT, Duration::from_millis(700)).await? {
            return Ok(seen);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "pod {}/{} got no answer from {ip}:{PORT} within {within:?}",
            pod.namespace,
            pod.name
        );
    }
}

/// Waits until the outside host, asked by `pod`, reports `want` (the answer may first come
/// from another address while a change spreads); returns how long it took.
pub async fn wait_outside_sees(
    pod: &TestPod,
    ip: Ipv4Addr,
    want: IpAddr,
    within: Duration,
) -> Result<Duration> {
    let start = tokio::time::Instant::now();
    let mut last = None;
    while start.elapsed() < within {
        last = seen_from(&pod.netns, ip.into(), PORT, Duration::from_millis(500)).await?;
        if last == Some(want) {
            return Ok(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!(
        "pod {}/{}: the outside host saw {last:?}, not {want}, for {within:?}",
        pod.namespace,
        pod.name
    )
}

impl Cluster {
    pub async fn subnet(&self, name: &str) -> Result<Subnet> {
        Ok(Api::<Subnet>::all(self.kube.clone()).get(name).await?)
    }

    /// The rule IDs the controller recorded in the Subnet's status for its `count`
    /// natOutgoingPolicyRules (the daemons name their sets after them), once all are there.
    pub async fn policy_rule_ids(&self, name: &str, count: usize) -> Result<Vec<String>> {
        let start = std::time::Instant::now();
        loop {
            let ids: Vec<String> = self
                .subnet(name)
                .await?
                .status
                .and_then(|s| s.nat_outgoing_policy_rules)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|r| r.rule_id)
                .collect();
            if ids.len() == count {
                return Ok(ids);
            }
            anyhow::ensure!(
                start.elapsed() < super::WAIT,
                "subnet {name}: the controller recorded {} of {count} policy rule IDs within {:?}",
                ids.len(),
                super::WAIT
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The Node's condition `type`: `(status, reason)`.
    pub async fn node_condition(&self, node: usize, type_: &str) -> Result<Option<(String, String)>> {
        let n = Api::<Node>::all(self.kube.clone())
            .get(&self.nodes[node].name)
            .await?;
        Ok(n.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status, c.reason.unwrap_or_default())))
    }

    /// `nft -j list table ip kube-ovn` on node `i`, handles removed (they change with every
    /// replace; nothing else may).
    pub fn nat_table(&self, node: usize) -> Result<String> {
        let json = self.nodes[node]
            .ovs
            .netns()
            .exec(&["nft", "-j", "list", "table", "ip", "kube-ovn"])?;
        let mut out = String::with_capacity(json.len());
        let mut rest = json.as_str();
        while let Some(at) = rest.find("\"handle\": ") {
            out.push_str(&rest[..at]);
            rest = rest[at + 10..].trim_start_matches(|c: char| c.is_ascii_digit());
        }
        out.push_str(rest);
        Ok(out)
    }
}
