//! Applying a [`NicPlan`]: the veth (host end where ovs-vswitchd runs, peer in the pod), the
//! pod side (addresses, routes, MTU, MAC, TX offload), the OVS port, and the wait for
//! ovn-controller; and the reverse (DEL), the comparison (CHECK), and GC.
//!
//! ADD rolls back what it made when any step fails, so a retried ADD starts clean.

use std::collections::BTreeSet;
use std::time::Instant;

use ipnet::IpNet;
use kube_ovn_dataplane::{Netlink, Netns, Route, VethPair, ethtool};

use super::Node;
use super::config::Datapath;
use super::error::DaemonError;
use super::ovs::PortSpec;
use super::plan::{NicPlan, host_nic_name};

impl Node {
    /// Builds the NIC. On failure, removes the port and the veth again.
    pub async fn add_nic(&self, plan: &NicPlan, netns_path: &str) -> Result<(), DaemonError> {
        let pod_ns = Netns::open(netns_path).map_err(|e| match e {
            kube_ovn_dataplane::Error::NetnsMissing { .. } => DaemonError::BadRequest(format!("{e}")),
            other => other.into(),
        })?;
        // A leftover from an earlier, interrupted ADD of this sandbox.
        self.ovs_nl.delete_link(&plan.host_nic).await?;
        let pair = VethPair {
            host: &plan.host_nic,
            host_ns: &self.ovs_ns,
            peer: &plan.ifname,
            peer_ns: &pod_ns,
            mtu: plan.mtu,
            peer_mac: plan.mac,
        };
        self.ovs_nl.add_veth(&pair).await.map_err(|e| {
            if e.is_exists() {
                DaemonError::BadRequest(format!(
                    "{e}: interface {} already exists in {netns_path}",
                    plan.ifname
                ))
            } else {
                e.into()
            }
        })?;
        let result = self.plug(plan, &pod_ns).await;
        if result.is_err() {
            self.remove_nic(&plan.host_nic).await.ok();
        }
        result
    }

    async fn plug(&self, plan: &NicPlan, pod_ns: &Netns) -> Result<(), DaemonError> {
        let host = self.ovs_nl.require_link(&plan.host_nic).await?;
        self.ovs_nl.configure(host.index, None, None, true).await?;
        let spec = PortSpec {
            name: &plan.host_nic,
            kind: "",
            mac: None,
            external_ids: &plan.external_ids,
            qos: plan.qos,
        };
        for stale in self.ovs.add_port(&spec).await? {
            tracing::info!(port = %stale, "removed a stale port of the same pod");
            self.ovs_nl.delete_link(&stale).await?;
        }
        // The pod side and the binding proceed together; both must finish. The binding is two
        // waits on the replica, measured apart: ovs-vswitchd opening the port, then
        // ovn-controller claiming it and installing its flows.
        let started = Instant::now();
        let installed = async {
            let timeout = self.config.flags.wait_ovn_installed_timeout;
            self.ovs.wait_opened(&plan.host_nic, timeout).await?;
            let opened = started.elapsed();
            self.metrics.wait("ovs_port", opened);
            let r = self
                .ovs
                .wait_installed(&plan.host_nic, timeout.saturating_sub(opened))
                .await;
            self.metrics
                .wait("ovn_installed", started.elapsed().saturating_sub(opened));
            r
        };
        let (pod_side, installed) = tokio::join!(self.configure_pod_side(plan, pod_ns), installed);
        pod_side?;
        installed
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
        nl.configure(link.index, None, None, true).await?;
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
        if self.config.datapath == Datapath::Netdev {
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
