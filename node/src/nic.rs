//! Applying a [`NicPlan`]: the veth (host end where ovs-vswitchd runs, peer in the pod), the
//! pod side (addresses, routes, MTU, MAC, TX offload), the OVS port, and the wait for
//! ovn-controller; and the reverse (DEL), the comparison (CHECK), and GC.
//!
//! ADD has two orders. When the controller's annotations are already there, everything is
//! built from the plan. When they are not (and `--early-plug` is on), the veth and the port
//! are made first from what the request alone says ([`EarlyPort`]: the `iface-id` is
//! `<pod>.<namespace>`), so ovs-vswitchd opens the port while the controller works and
//! ovn-controller binds it as soon as the logical port appears (until then it ignores an
//! interface whose `iface-id` names no port binding); the plan then completes the port
//! (`ip`, `attached-mac`, QoS, MTU) and configures the pod side, whose interface stays down
//! until then. Early plugging waits until the pod is seen on this node and is not being
//! deleted: a request for a pod bound elsewhere must not claim its logical port here.
//!
//! On an underlay subnet without `logicalGateway`, the pod side waits for ovn-controller's
//! localnet patch port (Kube-OVN `waitForLocalnetPatchPort`): until the node's bridge mapping
//! serves the subnet, the pod's frames would go nowhere. Once the pod side is configured and
//! the port bound, the pod's addresses are announced (gratuitous ARP, unsolicited NA), the
//! gateway is probed as Kube-OVN does (`gateway_probe`), and ADD fails when a concerned check
//! gets no answer.
//!
//! ADD rolls back what it made when any step fails (annotations that never come included), so
//! a retried ADD starts clean.
//!
//! [`Nic`] keeps nothing between requests: the plans come from the caches ([`PodPlans`]), the
//! ports from the OVS replica; the CNI server (`server`) serializes the requests of one pod.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ipnet::IpNet;
use kube_ovn_api::wire::CniRequest;
use kube_ovn_dataplane::{Netlink, Netns, Route, VethPair, announce, ethtool};

use crate::announce::{Announcer, Repeat};
use crate::config::{Config, Datapath};
use crate::error::DaemonError;
use crate::gateway_probe::{self, ProbeNic};
use crate::metrics::Metrics;
use crate::ovs::{Ovs, PortSpec};
use crate::plan::{self, NicPlan, QosPlan, early_port, host_nic_name};
use crate::pod_plans::PodPlans;

/// How long the first announcement waits for the pod's link to be running (its qdisc
/// activated by the kernel's link watch, which runs at most once a second): frames sent before
/// are dropped without an error. The gateway check, which follows, needs it too.
const WAIT_RUNNING: Duration = Duration::from_millis(1500);

/// The flags ADD reads.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The MTU when the subnet sets none (`--mtu`, or the derived default).
    pub default_mtu: u32,
    /// `--ovs-datapath-type`: on `netdev`, TX checksum offload is turned off in the pod.
    pub datapath: Datapath,
    /// `--early-plug`.
    pub early_plug: bool,
    /// `--wait-ovn-installed-timeout`; also bounds the wait for a localnet patch port.
    pub wait_ovn_installed_timeout: Duration,
    /// `--gateway-check-max-retry`.
    pub gateway_check_max_retry: u32,
}

impl Settings {
    /// From the validated flags.
    pub fn new(config: &Config) -> Self {
        Self {
            default_mtu: config.default_mtu,
            datapath: config.datapath,
            early_plug: config.flags.early_plug,
            wait_ovn_installed_timeout: config.flags.wait_ovn_installed_timeout,
            gateway_check_max_retry: config.flags.gateway_check_max_retry,
        }
    }
}

/// What ADD, DEL, CHECK and GC act on and read.
pub struct Nic {
    pub settings: Settings,
    /// The local Open_vSwitch database.
    pub ovs: Ovs,
    /// Where ovs-vswitchd runs (the host ends of the veths), and netlink in it.
    pub ovs_ns: Netns,
    pub ovs_nl: Netlink,
    /// The plans, from the pods cache.
    pub plans: PodPlans,
    /// The waits for OVS and ovn-controller are measured.
    pub metrics: Metrics,
    /// Where the second announcement of a pod's addresses is queued (`announce`).
    pub announcer: Announcer,
}

impl Nic {
    /// ADD: the NIC for `request`, in the order the annotations allow; the plan it was built to.
    pub async fn add_pod_nic(&self, request: &CniRequest) -> Result<NicPlan, DaemonError> {
        let deadline = tokio::time::Instant::now() + self.plans.wait_address_timeout;
        if self.settings.early_plug && self.plans.plan_now(request)?.is_none() {
            return self.add_before_plan(request, deadline).await;
        }
        let plan = self.plans.wait_for_plan(request, deadline).await?;
        self.add_nic(&plan, &request.net_ns).await?;
        Ok(plan)
    }

    /// Builds the NIC from a complete plan. On failure, removes the port and the veth again.
    pub async fn add_nic(&self, plan: &NicPlan, netns_path: &str) -> Result<(), DaemonError> {
        let pod_ns = open_pod_ns(netns_path)?;
        self.make_veth(&plan.host_nic, &plan.ifname, &pod_ns, plan.mtu, Some(plan.mac))
            .await?;
        let result = async {
            let spec = PortSpec::pod(&plan.host_nic, &plan.external_ids, plan.qos);
            let plugged = self.plug(&spec).await?;
            self.bind(plan, &pod_ns, plugged, true).await
        }
        .await;
        self.undo_on_error(&plan.host_nic, result).await
    }

    /// Plugs the port before the plan exists, then completes it when the annotations come.
    async fn add_before_plan(
        &self,
        request: &CniRequest,
        deadline: tokio::time::Instant,
    ) -> Result<NicPlan, DaemonError> {
        let port = early_port(request);
        self.plans.wait_for_pod(request, deadline).await?;
        let pod_ns = open_pod_ns(&request.net_ns)?;
        self.make_veth(
            &port.host_nic,
            &port.ifname,
            &pod_ns,
            self.settings.default_mtu,
            None,
        )
        .await?;
        let result = async {
            let spec = PortSpec::pod(&port.host_nic, &port.external_ids, QosPlan::default());
            let plugged = self.plug(&spec).await?;
            tracing::info!(port = %port.host_nic, iface_id = %port.iface_id, "plugged before the annotations");
            let opened = async {
                let timeout = self.settings.wait_ovn_installed_timeout;
                self.ovs.wait_opened(&port.host_nic, timeout).await?;
                self.metrics.wait("ovs_port", plugged.elapsed());
                Ok(())
            };
            let (plan, ()) = tokio::try_join!(self.plans.wait_for_plan(request, deadline), opened)?;
            self.metrics.wait("plugged_early", plugged.elapsed());
            // What only the annotations give: the port's addresses and MAC, its QoS, the MTU.
            self.ovs
                .set_interface_ids(&plan.host_nic, &plan.external_ids)
                .await?;
            if plan.qos != QosPlan::default() {
                self.ovs.set_qos(&plan.host_nic, plan.qos).await?;
            }
            if plan.mtu != self.settings.default_mtu {
                let host = self.ovs_nl.require_link(&plan.host_nic).await?;
                self.ovs_nl.configure(host.index, None, Some(plan.mtu), true).await?;
            }
            self.bind(&plan, &pod_ns, Instant::now(), false).await?;
            Ok(plan)
        }
        .await;
        self.undo_on_error(&port.host_nic, result).await
    }

    /// Removes the port and the veth ADD made when `result` is a failure, so a retried ADD
    /// starts clean; passes `result` on.
    async fn undo_on_error<T>(
        &self,
        host_nic: &str,
        result: Result<T, DaemonError>,
    ) -> Result<T, DaemonError> {
        if result.is_err() {
            self.remove_nic(host_nic).await.ok();
        }
        result
    }

    /// The veth, with a leftover of an earlier, interrupted ADD of this sandbox removed first.
    async fn make_veth(
        &self,
        host_nic: &str,
        ifname: &str,
        pod_ns: &Netns,
        mtu: u32,
        mac: Option<[u8; 6]>,
    ) -> Result<(), DaemonError> {
        self.ovs_nl.delete_link(host_nic).await?;
        let pair = VethPair {
            host: host_nic,
            host_ns: &self.ovs_ns,
            peer: ifname,
            peer_ns: pod_ns,
            mtu,
            peer_mac: mac,
        };
        self.ovs_nl.add_veth(&pair).await.map_err(|e| {
            if e.is_exists() {
                DaemonError::BadRequest(format!(
                    "{e}: interface {ifname} already exists in {}",
                    pod_ns.label()
                ))
            } else {
                e.into()
            }
        })
    }

    /// Brings the host end up and plugs it into the bridge (removing ports an earlier sandbox
    /// of the same pod left, with their veths). Returns when the port went in.
    async fn plug(&self, spec: &PortSpec<'_>) -> Result<Instant, DaemonError> {
        let host = self.ovs_nl.require_link(spec.name).await?;
        self.ovs_nl.configure(host.index, None, None, true).await?;
        for stale in self.ovs.add_port(spec).await? {
            tracing::info!(port = %stale, "removed a stale port of the same pod");
            self.ovs_nl.delete_link(&stale).await?;
        }
        Ok(Instant::now())
    }

    /// Configures the pod side while ovn-controller binds the port; both must finish. The
    /// binding is measured in two parts: ovs-vswitchd opening the port (skipped when
    /// `wait_open` is false: the early path already waited), then ovn-controller claiming it
    /// and installing its flows.
    async fn bind(
        &self,
        plan: &NicPlan,
        pod_ns: &Netns,
        since: Instant,
        wait_open: bool,
    ) -> Result<(), DaemonError> {
        let installed = async {
            let timeout = self.settings.wait_ovn_installed_timeout;
            if wait_open {
                self.ovs.wait_opened(&plan.host_nic, timeout).await?;
                self.metrics.wait("ovs_port", since.elapsed());
            }
            let opened = since.elapsed();
            let r = self
                .ovs
                .wait_installed(&plan.host_nic, timeout.saturating_sub(opened))
                .await;
            self.metrics
                .wait("ovn_installed", since.elapsed().saturating_sub(opened));
            r
        };
        let pod_side = async {
            if let Some(port) = &plan.wait_patch_port {
                self.wait_patch_port(plan, port).await?;
            }
            self.configure_pod_side(plan, pod_ns).await
        };
        let (pod_side, installed) = tokio::join!(pod_side, installed);
        pod_side?;
        installed?;
        // Side by side: neither needs the other, and ADD answers after both (the announcement's
        // wait for the link to run would otherwise add to the gateway check's round trip).
        let ((), checked) = tokio::join!(self.announce(plan, pod_ns), self.check_gateway(plan, pod_ns));
        checked
    }

    /// Kube-OVN announces a pod's addresses once they are on its NIC (`configureNic`: a
    /// gratuitous ARP per IPv4 address, an unsolicited NA per IPv6 one): on an underlay subnet
    /// the physical router and the VLAN's hosts replace a MAC they cached for an address (a pod
    /// re-created with its fixed IP and a new MAC) instead of sending to the old one until their
    /// entry expires, and the fabric's switches learn where the MAC is now; on an overlay subnet
    /// OVN's switch sees them, harmless. Once more [`crate::announce::REPEAT_AFTER`] later, by
    /// the `announce` task, which ADD does not wait for. Sent once the port is bound
    /// (`ovn-installed`; on an underlay subnet the localnet patch port exists) and the pod's
    /// link runs (bounded by [`WAIT_RUNNING`]), so they reach the wire. Takes a few milliseconds when the link runs
    /// (`cni_wait_seconds{what="announce"}`); a failure is logged, never fails ADD.
    async fn announce(&self, plan: &NicPlan, pod_ns: &Netns) {
        if !plan.announce || plan.addresses.is_empty() {
            return;
        }
        let started = Instant::now();
        let addresses: Vec<IpAddr> = plan.addresses.iter().map(IpNet::addr).collect();
        match announce::announce(pod_ns, &plan.ifname, plan.mac, &addresses, WAIT_RUNNING).await {
            Ok(done) => tracing::info!(
                ifname = %plan.ifname,
                addresses = ?addresses,
                sent = done.sent,
                running = done.running,
                waited_us = u64::try_from(done.waited.as_micros()).unwrap_or(u64::MAX),
                took_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                "announced the pod's addresses"
            ),
            Err(e) => tracing::warn!(error = %e, "could not announce the pod's addresses"),
        }
        self.metrics.wait("announce", started.elapsed());
        self.announcer
            .later(Repeat::new(pod_ns.clone(), plan, pod_id(plan)));
    }

    /// Kube-OVN `waitForLocalnetPatchPort`, bounded: ovn-controller makes the port when this
    /// node's `ovn-bridge-mappings` names the subnet's provider network.
    async fn wait_patch_port(&self, plan: &NicPlan, port: &str) -> Result<(), DaemonError> {
        let started = Instant::now();
        let timeout = self.settings.wait_ovn_installed_timeout;
        tracing::info!(%port, "waiting for localnet patch port");
        let why = format!(
            "not created by ovn-controller within {timeout:?}; is the subnet's provider network ready on this node (ovn-bridge-mappings)?"
        );
        self.ovs
            .wait_exists(port, timeout, &why)
            .await
            .map_err(|e| DaemonError::Timeout {
                pod: pod_id(plan),
                what: format!("waiting for localnet patch port {port}: {e}"),
            })?;
        self.metrics.wait("localnet_patch_port", started.elapsed());
        Ok(())
    }

    /// The gateway check of the plan, if any (see `gateway_probe`); a failure names the pod.
    async fn check_gateway(&self, plan: &NicPlan, pod_ns: &Netns) -> Result<(), DaemonError> {
        let Some(check) = &plan.gateway_check else {
            return Ok(());
        };
        let started = Instant::now();
        let nic = ProbeNic {
            ns: pod_ns,
            ifname: &plan.ifname,
            mac: plan.mac,
            addresses: &plan.addresses,
        };
        let (name, namespace) = (
            plan.external_ids.get("pod_name").cloned().unwrap_or_default(),
            plan.external_ids
                .get("pod_namespace")
                .cloned()
                .unwrap_or_default(),
        );
        // Kube-OVN stops the retries when the pod is deleted; the pods cache tells.
        let alive = || {
            self.plans
                .pods
                .get(&name, Some(&namespace))
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
        };
        let result = gateway_probe::run(check, &nic, self.settings.gateway_check_max_retry, alive).await;
        self.metrics.wait("gateway_check", started.elapsed());
        result.map(drop).map_err(|e| DaemonError::NotReady {
            pod: pod_id(plan),
            what: e.to_string(),
        })
    }

    async fn configure_pod_side(&self, plan: &NicPlan, pod_ns: &Netns) -> Result<(), DaemonError> {
        if plan.addresses.iter().any(|a| a.addr().is_ipv6()) {
            for scope in ["all", "default", plan.ifname.as_str()] {
                ethtool::write_net_sysctl(pod_ns, &format!("ipv6/conf/{scope}/disable_ipv6"), "0").await?;
            }
        }
        let nl = Netlink::connect_async(pod_ns).await?;
        let link = nl.require_link(&plan.ifname).await?;
        for address in &plan.addresses {
            nl.add_address(link.index, *address).await?;
        }
        // MAC and MTU again: an early-plugged veth was made before the plan gave them.
        nl.configure(link.index, Some(plan.mac), Some(plan.mtu), true)
            .await?;
        if let Some(lo) = nl.link("lo").await? {
            nl.configure(lo.index, None, None, true).await?;
        }
        for route in &plan.routes {
            nl.add_route(&Route {
                dst: route.dst,
                gateway: route.via,
                dev: link.index,
                src: None,
                metric: None,
            })
            .await?;
        }
        if self.settings.datapath == Datapath::Netdev {
            ethtool::disable_tx_checksum(pod_ns, &plan.ifname).await?;
        }
        Ok(())
    }

    /// Removes the OVS port (with its QoS) and the veth; both steps succeed when already gone.
    pub async fn remove_nic(&self, host_nic: &str) -> Result<(), DaemonError> {
        self.ovs.delete_port(host_nic).await?;
        self.ovs_nl.delete_link(host_nic).await?;
        Ok(())
    }

    /// DEL: idempotent; needs neither the pod nor its namespace.
    pub async fn del_nic(&self, container_id: &str, ifname: &str) -> Result<(), DaemonError> {
        if container_id.is_empty() {
            return Err(DaemonError::BadRequest("DEL without a container ID".into()));
        }
        let ifname = if ifname.is_empty() { "eth0" } else { ifname };
        self.remove_nic(&host_nic_name(container_id, ifname)).await
    }

    /// DEL of a NIC an older daemon (or Kube-OVN) named with the legacy shape
    /// ([`plan::legacy_host_nic_name`]), on a node upgraded with pods running. That name could
    /// be shared by another pod's NIC (the collision the new names fix), so the port goes only
    /// when its `external_ids` say it is this pod's (and this sandbox's, when DEL names the
    /// network namespace).
    pub async fn del_legacy_nic(&self, request: &CniRequest) -> Result<(), DaemonError> {
        let ifname = if request.if_name.is_empty() {
            "eth0"
        } else {
            &request.if_name
        };
        let Some(legacy) = plan::legacy_host_nic_name(&request.container_id, ifname) else {
            return Ok(());
        };
        let Some(iface) = self.ovs.interface(&legacy) else {
            return Ok(());
        };
        let id = |k: &str| iface.external_ids.get(k).map_or("", String::as_str);
        let ours = !request.pod_name.is_empty()
            && id("pod_name") == request.pod_name
            && id("pod_namespace") == request.pod_namespace
            && (request.net_ns.is_empty() || id("pod_netns") == request.net_ns);
        if ours {
            tracing::info!(port = %legacy, "removing the port an older daemon named");
            self.remove_nic(&legacy).await?;
        }
        Ok(())
    }

    /// CHECK: the first difference between the plan and what is there.
    pub async fn check_nic(&self, plan: &NicPlan, netns_path: &str) -> Result<(), String> {
        let iface = self
            .ovs
            .interface(&plan.host_nic)
            .ok_or_else(|| format!("OVS port {} is missing from {}", plan.host_nic, self.ovs.bridge()))?;
        if iface.external_ids.get("iface-id") != Some(&plan.iface_id) {
            return Err(format!(
                "OVS port {} is bound to {:?}, expected iface-id {}",
                plan.host_nic,
                iface.external_ids.get("iface-id"),
                plan.iface_id
            ));
        }
        if iface
            .external_ids
            .get("ovn-installed")
            .is_none_or(|v| v != "true")
        {
            return Err(format!("OVS port {} is not ovn-installed", plan.host_nic));
        }
        if self
            .ovs_nl
            .link(&plan.host_nic)
            .await
            .map_err(|e| e.to_string())?
            .is_none()
        {
            return Err(format!("host veth {} is missing", plan.host_nic));
        }
        let pod_ns = Netns::open(netns_path).map_err(|e| e.to_string())?;
        let nl = Netlink::connect_async(&pod_ns).await.map_err(|e| e.to_string())?;
        let link = nl
            .link(&plan.ifname)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("interface {} is missing in {netns_path}", plan.ifname))?;
        if link.mac != Some(plan.mac) {
            return Err(format!(
                "interface {} has MAC {:?}, expected {:?}",
                plan.ifname, link.mac, plan.mac
            ));
        }
        let present: BTreeSet<IpNet> = nl
            .addresses(link.index)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
        for address in &plan.addresses {
            if !present.contains(address) {
                return Err(format!("interface {} lacks address {address}", plan.ifname));
            }
        }
        Ok(())
    }

    /// GC: removes pod ports (and veths) of `provider` whose sandbox is not in `keep`.
    pub async fn gc(&self, provider: &str, keep: &BTreeSet<String>) -> Result<Vec<String>, DaemonError> {
        let mut removed = Vec::new();
        for iface in self.ovs.pod_interfaces() {
            let theirs = iface.external_ids.get("provider").map_or("ovn", String::as_str);
            if theirs != provider || keep.contains(&iface.name) {
                continue;
            }
            self.remove_nic(&iface.name).await?;
            removed.push(iface.name);
        }
        Ok(removed)
    }
}

/// `namespace/name` of the plan's pod, for messages.
fn pod_id(plan: &NicPlan) -> String {
    let id = |k: &str| plan.external_ids.get(k).map_or("", String::as_str);
    format!("{}/{}", id("pod_namespace"), id("pod_name"))
}

/// The pod's namespace; a path that does not exist is the runtime's mistake (bad request).
fn open_pod_ns(netns_path: &str) -> Result<Netns, DaemonError> {
    Netns::open(netns_path).map_err(|e| match e {
        kube_ovn_dataplane::Error::NetnsMissing { .. } => DaemonError::BadRequest(format!("{e}")),
        other => other.into(),
    })
}
