//! Underlay subnets for the daemon's tests, without the controller: two nodes whose `eth1` is
//! a trunk of the fabric's router ([`VlanRouter`]), an OVS bridge `br-pn1` with `eth1` in it
//! and `ovn-bridge-mappings pn1:br-pn1` made here with ovs-vsctl (the daemon's
//! ProviderNetwork task is tested on its own), and the controller's part written by the test:
//! the logical switch with its `localnet.<subnet>` port (type localnet, `network_name`, `tag`,
//! addresses `unknown`, as Kube-OVN's controller writes it), one logical port per pod, the
//! Subnet object the daemon reads, and the pod's annotations.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kube_ovn_testkit::VlanRouter;
use serde_json::{Value, json};

use super::runtime::PluginRun;
use super::{Cluster, Options, TestPod};

/// The provider network's name.
pub const PN: &str = "pn1";
/// Its bridge on each node (Kube-OVN's `br-<pn>`).
pub const PN_BRIDGE: &str = "br-pn1";
/// The provider NIC on each node.
pub const NIC: &str = "eth1";

/// One underlay subnet as the test declares it.
#[derive(Debug, Clone)]
pub struct UnderlaySubnet {
    pub name: String,
    /// `10.100.0.0/24`, or one CIDR per family (`10.100.0.0/24,fd00:100::/64`).
    pub cidr: String,
    /// The physical router's addresses, the pods' gateways (one per family, as `cidr`).
    pub gateways: Vec<IpAddr>,
    /// The VLAN id (0: untagged).
    pub vlan: u16,
}

impl UnderlaySubnet {
    /// `gateway` is one address per family, comma-separated, as the Subnet's `gateway`.
    pub fn new(name: &str, cidr: &str, gateway: &str, vlan: u16) -> Self {
        Self {
            name: name.into(),
            cidr: cidr.into(),
            gateways: gateway
                .split(',')
                .map(|g| g.parse().expect("an IP gateway"))
                .collect(),
            vlan,
        }
    }

    /// The Subnet's `protocol`: `IPv4`, `IPv6` or `Dual`.
    pub fn protocol(&self) -> &'static str {
        match (
            self.gateways.iter().any(IpAddr::is_ipv4),
            self.gateways.iter().any(IpAddr::is_ipv6),
        ) {
            (true, true) => "Dual",
            (false, true) => "IPv6",
            _ => "IPv4",
        }
    }

    /// The gateways as the Subnet and the pod annotation write them.
    pub fn gateway_list(&self) -> String {
        let list: Vec<String> = self.gateways.iter().map(ToString::to_string).collect();
        list.join(",")
    }
}

/// A pod's addresses: one IPv4 address, or one per family of a dual-stack or IPv6 subnet.
pub trait PodAddrs {
    fn addrs(&self) -> Vec<IpAddr>;
}

impl PodAddrs for Ipv4Addr {
    fn addrs(&self) -> Vec<IpAddr> {
        vec![IpAddr::V4(*self)]
    }
}

impl<const N: usize> PodAddrs for [IpAddr; N] {
    fn addrs(&self) -> Vec<IpAddr> {
        self.to_vec()
    }
}

/// The cluster (no controller) and the fabric.
pub struct Underlay {
    pub cluster: Cluster,
    pub router: VlanRouter,
    /// The router-side trunk port of each node's `eth1`, by node index.
    pub trunks: Vec<String>,
}

impl Underlay {
    /// Two nodes with daemons (flags from `options`), the router, each node's `eth1` wired to
    /// it with `nic_mtu`, and `br-pn1` holding `eth1` on each node. The bridge mapping is left
    /// to [`Underlay::map`], so a test can hold it back.
    pub async fn start(options: Options, nic_mtu: u32) -> Result<Self> {
        let cluster = Cluster::start_with(Options {
            nodes: 2,
            no_controller: true,
            ..options
        })
        .await?;
        let router = tokio::task::spawn_blocking(|| VlanRouter::start("fab")).await??;
        let mut trunks = Vec::new();
        for node in &cluster.nodes {
            trunks.push(router.attach(node.ovs.name(), NIC, nic_mtu)?);
            let mtu = format!("mtu_request={nic_mtu}");
            node.ovs.vsctl(&[
                "--may-exist",
                "add-br",
                PN_BRIDGE,
                "--",
                "set",
                "Bridge",
                PN_BRIDGE,
                "datapath_type=netdev",
                "--",
                "set",
                "Interface",
                PN_BRIDGE,
                &mtu,
                "--",
                "--may-exist",
                "add-port",
                PN_BRIDGE,
                NIC,
            ])?;
            node.ovs.check_interface(NIC)?;
        }
        Ok(Self {
            cluster,
            router,
            trunks,
        })
    }

    /// `ovn-bridge-mappings pn1:br-pn1` on node `node`: ovn-controller then patches br-int to
    /// the bridge for every localnet port of that network.
    pub fn map(&self, node: usize) -> Result<()> {
        self.cluster.nodes[node]
            .ovs
            .vsctl(&[
                "set",
                "Open_vSwitch",
                ".",
                &format!("external_ids:ovn-bridge-mappings={PN}:{PN_BRIDGE}"),
            ])
            .map(drop)
    }

    /// Sets (or with `None` removes) a label of node `node`'s Node object, as the daemon's
    /// ProviderNetwork task labels it (`pn1.provider-network.kubernetes.io/mtu`).
    pub async fn label_node(&self, node: usize, key: &str, value: Option<&str>) -> Result<()> {
        let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.cluster.kube.clone());
        api.patch(
            &self.cluster.nodes[node].name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
        )
        .await?;
        Ok(())
    }

    /// The subnet's logical switch and localnet port in the northbound database, and the
    /// Subnet object (`vlan` set; `extra` merged into its spec).
    pub async fn subnet(&self, subnet: &UnderlaySubnet, extra: Value) -> Result<()> {
        let ls = subnet.name.as_str();
        let localnet = format!("localnet.{ls}");
        let ovn = &self.cluster.ovn;
        ovn.nbctl(&["--may-exist", "ls-add", ls])?;
        ovn.nbctl(&[
            "--may-exist",
            "lsp-add",
            ls,
            &localnet,
            "--",
            "lsp-set-type",
            &localnet,
            "localnet",
            "--",
            "lsp-set-addresses",
            &localnet,
            "unknown",
            "--",
            "lsp-set-options",
            &localnet,
            &format!("network_name={PN}"),
        ])?;
        if subnet.vlan != 0 {
            ovn.nbctl(&[
                "set",
                "logical_switch_port",
                &localnet,
                &format!("tag={}", subnet.vlan),
            ])?;
        }
        let gateways: Vec<String> = subnet.gateways.iter().map(ToString::to_string).collect();
        let mut spec = json!({"protocol": subnet.protocol(), "cidrBlock": subnet.cidr,
            "gateway": subnet.gateway_list(), "vlan": format!("vlan{}", subnet.vlan),
            "provider": "ovn", "excludeIps": gateways});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        // The subnet's Vlan: the daemons take the provider network (whose MTU label a pod
        // gets) from it, never from the pod's provider_network annotation.
        self.cluster
            .apply(json!({"apiVersion": "kubeovn.io/v1", "kind": "Vlan",
                "metadata": {"name": format!("vlan{}", subnet.vlan)},
                "spec": {"id": subnet.vlan, "provider": PN}}))
            .await?;
        self.cluster
            .apply(json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
                "metadata": {"name": ls}, "spec": spec}))
            .await
    }

    /// Changes the Subnet's spec (merge patch); the daemons see it through their watch.
    pub async fn patch_subnet(&self, name: &str, spec: Value) -> Result<()> {
        let mut value = json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": name}});
        value["spec"] = spec;
        let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", "Subnet");
        let (ar, _) = kube::discovery::pinned_kind(&self.cluster.kube, &gvk).await?;
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.cluster.kube.clone(), &ar);
        api.patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(value),
        )
        .await?;
        Ok(())
    }

    /// What the controller does for a pod of an underlay subnet: its logical port, and the Pod
    /// with the complete annotations (Kube-OVN's, `vlan_id` and `provider_network` included);
    /// `extra` annotations are added. The MAC is made of the last four bytes of the first
    /// address.
    pub async fn create_pod(
        &self,
        subnet: &UnderlaySubnet,
        name: &str,
        node: usize,
        ip: impl PodAddrs,
        extra: &[(&str, &str)],
    ) -> Result<()> {
        let namespace = "ul";
        let ips = ip.addrs();
        let octets: Vec<u8> = match ips.first().context("a pod address")? {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets()[12..].to_vec(),
        };
        let mac = format!(
            "0a:00:{:02x}:{:02x}:{:02x}:{:02x}",
            octets[0], octets[1], octets[2], octets[3]
        );
        let ip_list: Vec<String> = ips.iter().map(ToString::to_string).collect();
        let lsp = format!("{name}.{namespace}");
        self.cluster.ovn.nbctl(&[
            "lsp-add",
            &subnet.name,
            &lsp,
            "--",
            "lsp-set-addresses",
            &lsp,
            &format!("{mac} {}", ip_list.join(" ")),
        ])?;
        let vlan = subnet.vlan.to_string();
        let ip_s = ip_list.join(",");
        let gw = subnet.gateway_list();
        let mut ann: BTreeMap<&str, &str> = BTreeMap::from([
            ("ovn.kubernetes.io/allocated", "true"),
            ("ovn.kubernetes.io/routed", "true"),
            ("ovn.kubernetes.io/ip_address", ip_s.as_str()),
            ("ovn.kubernetes.io/cidr", subnet.cidr.as_str()),
            ("ovn.kubernetes.io/gateway", gw.as_str()),
            ("ovn.kubernetes.io/mac_address", mac.as_str()),
            ("ovn.kubernetes.io/logical_switch", subnet.name.as_str()),
            ("ovn.kubernetes.io/vlan_id", vlan.as_str()),
            ("ovn.kubernetes.io/provider_network", PN),
        ]);
        ann.extend(extra.iter().copied());
        self.cluster.namespace(namespace).await?;
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "annotations": ann},
            "spec": {"nodeName": self.cluster.nodes[node].name,
                "containers": [{"name": "c", "image": "x"}]}}))?;
        Api::<Pod>::namespaced(self.cluster.kube.clone(), namespace)
            .create(&PostParams::default(), &pod)
            .await?;
        Ok(())
    }

    /// [`Underlay::create_pod`], then ADD through the shim; fails with the daemon's log tail.
    pub async fn pod(
        &self,
        subnet: &UnderlaySubnet,
        name: &str,
        node: usize,
        ip: impl PodAddrs,
        extra: &[(&str, &str)],
    ) -> Result<TestPod> {
        let (pod, run) = self.try_pod(subnet, name, node, ip, extra).await?;
        anyhow::ensure!(
            run.success,
            "ADD of {name} failed: {}\n{}",
            run.stdout,
            self.cluster.nodes[node].daemon.log_tail(30)
        );
        Ok(pod)
    }

    /// ADD of a new underlay pod, whatever its outcome: the pod and the shim's run.
    pub async fn try_pod(
        &self,
        subnet: &UnderlaySubnet,
        name: &str,
        node: usize,
        ip: impl PodAddrs,
        extra: &[(&str, &str)],
    ) -> Result<(TestPod, PluginRun)> {
        self.create_pod(subnet, name, node, ip, extra).await?;
        let (netns, sandbox) = Cluster::sandbox("ul", name)?;
        let runtime = self.cluster.nodes[node].runtime.clone();
        let sb = sandbox.clone();
        let run = tokio::task::spawn_blocking(move || runtime.add_raw(&sb)).await??;
        let result = serde_json::from_str(&run.stdout).unwrap_or(Value::Null);
        Ok((
            TestPod {
                name: name.into(),
                namespace: "ul".into(),
                netns,
                sandbox,
                result,
            },
            run,
        ))
    }
}

/// `ping -c1 -W1` from a pod, `-M do -s size` when given: true when answered.
pub fn ping_sized(pod: &TestPod, ip: impl Into<IpAddr>, size: Option<u32>) -> bool {
    let ip = ip.into().to_string();
    let size = size.map(|s| s.to_string());
    let mut args = vec!["ping", "-c1", "-W1"];
    if let Some(size) = &size {
        args.extend(["-M", "do", "-s", size]);
    }
    args.push(&ip);
    pod.netns.exec(&args).is_ok()
}

/// How long an underlay path gets to come up (ovn-controller's patch ports, ARP).
pub const PATH_WAIT: Duration = Duration::from_secs(30);

/// Waits until `pod` pings `ip`.
pub fn wait_ping(pod: &TestPod, ip: impl Into<IpAddr>) -> Result<()> {
    let ip: IpAddr = ip.into();
    pod.netns
        .wait_ping(ip, PATH_WAIT)
        .with_context(|| format!("pod {} to ping {ip}", pod.name))
}
