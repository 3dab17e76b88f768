//! Node start-up and the node's own plumbing: `br-int`, the chassis settings for
//! ovn-controller, the `ovn.kubernetes.io/chassis` annotation, `ovn0` on the join subnet, and
//! kernel routes to the default VPC's subnets through it (planned in `node_routes`), kept in
//! step with the Node and the Subnets.
//!
//! Nothing is reconciled before the Node and Subnet caches have listed once, as the gateway
//! task waits for its own: a daemon restarting with empty caches would plan no subnet and
//! delete every route into `ovn0` until the lists came in.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node as K8sNode;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_ovn_api::annotations::keys;
use kube_ovn_api::names;
use kube_ovn_api::node::internal_ip_per_family;

use crate::Node;
use crate::error::DaemonError;
use crate::join::{JoinAddress, OVN0, join_address};
use crate::node_routes::{RouteInputs, desired_routes, foreign_source, route_changes, with_last_validated};
use crate::ovs::PortSpec;
use crate::plan::QosPlan;

/// How long the node task waits for the caches' first list before saying so in the log.
const SYNC_WAIT: Duration = Duration::from_secs(30);

/// Keeps `ovn0` and the subnet routes in step with the Node and the Subnets, once their caches
/// have listed; also re-checks every 30 s as a safety net against outside changes.
pub async fn node_task(node: std::sync::Arc<Node>) {
    while !(node.nodes.synced(SYNC_WAIT).await && node.subnets.synced(SYNC_WAIT).await) {
        tracing::info!("node routes wait for the Node and Subnet caches to list once");
    }
    let mut node_changes = node.nodes.changes();
    let mut subnet_changes = node.subnets.changes();
    let mut ovs_state = node.ovs.state();
    loop {
        match node.reconcile_node_network().await {
            Ok(true) => {}
            Ok(false) => tracing::info!("waiting for the controller's join annotations on this node"),
            Err(e) => tracing::warn!(error = %e, "node network not ready; will retry"),
        }
        tokio::select! {
            _ = node_changes.changed() => {}
            _ = subnet_changes.changed() => {}
            _ = ovs_state.changed() => {}
            () = tokio::time::sleep(Duration::from_secs(30)) => {}
        }
    }
}

impl Node {
    /// The chassis settings ovn-controller reads, and `br-int`. Waits for the database to be
    /// initialized first: the daemon and `ovs-ovn` start side by side, and ovsdb-server
    /// serves before `ovs-vsctl init` made its row.
    pub async fn init_ovs(&self) -> Result<String, DaemonError> {
        let flags = &self.config.flags;
        let mut waited = false;
        while !self.ovs.initialized() {
            if !waited {
                tracing::info!("waiting for the Open_vSwitch database to be initialized (ovs-vsctl init)");
                waited = true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.ovs.ensure_bridge(self.config.datapath.as_str()).await?;
        // The chassis name OVS already has (ovs-ovn sets it from the node's file in the same
        // transaction as `init`), else the file, else the node's name.
        let system_id = self
            .ovs
            .chassis_ids()
            .get("system-id")
            .cloned()
            .filter(|s| !s.is_empty())
            .or_else(|| {
                std::fs::read_to_string(&flags.system_id_file)
                    .ok()
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| flags.node_name.clone());
        let mut ids = BTreeMap::from([
            ("system-id".to_owned(), system_id.clone()),
            ("hostname".to_owned(), flags.node_name.clone()),
            ("ovn-bridge".to_owned(), flags.ovs_bridge.clone()),
            ("ovn-encap-type".to_owned(), flags.network_type.clone()),
            ("ovn-encap-csum".to_owned(), flags.encap_checksum.to_string()),
            (
                "ovn-bridge-datapath-type".to_owned(),
                self.config.datapath.as_str().to_owned(),
            ),
        ]);
        if let Some(ip) = self.encap_ip().await? {
            ids.insert("ovn-encap-ip".into(), ip.to_string());
        }
        if !self.config.ovn_remote.is_empty() {
            ids.insert("ovn-remote".into(), self.config.ovn_remote.clone());
        }
        self.ovs.set_chassis_ids(&ids).await?;
        let patch = serde_json::json!({"metadata": {"annotations": {keys::CHASSIS: system_id}}});
        Api::<K8sNode>::all(self.kube.clone())
            .patch(&flags.node_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| DaemonError::Kube {
                op: format!("annotate node {} with its chassis", flags.node_name),
                source: Box::new(source),
            })?;
        Ok(system_id)
    }

    async fn encap_ip(&self) -> Result<Option<IpAddr>, DaemonError> {
        if let Some(ip) = self.config.encap_ip {
            return Ok(Some(ip));
        }
        let iface = &self.config.flags.iface;
        if iface.is_empty() {
            return Ok(None);
        }
        let link = self.ovs_nl.require_link(iface).await?;
        let addresses = self.ovs_nl.addresses(link.index).await?;
        let first = addresses
            .iter()
            .find(|a| a.addr().is_ipv4())
            .or_else(|| addresses.first());
        first.map(|a| Some(a.addr())).ok_or_else(|| {
            DaemonError::BadRequest(format!(
                "--iface {iface} has no address to use as the tunnel endpoint"
            ))
        })
    }

    /// One pass over the node's plumbing: `ovn0` as the Node's join annotations say, and the
    /// routes to the default VPC's subnets. Idempotent; returns `false` while the controller
    /// has not annotated the Node yet.
    pub async fn reconcile_node_network(&self) -> Result<bool, DaemonError> {
        let name = &self.config.flags.node_name;
        let Some(node) = self.nodes.get(name, None) else {
            return Ok(false);
        };
        let join = join_address(&node).map_err(|source| DaemonError::Annotation {
            pod: format!("node {name}"),
            source,
        })?;
        let Some(join) = join else { return Ok(false) };
        let ovn0 = self.ensure_ovn0(&join).await?;
        let subnets = {
            let mut last = self
                .last_validated
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            with_last_validated(&self.subnets.all(), &mut last)
        };
        let desired = desired_routes(&RouteInputs {
            subnets: &subnets,
            join: &join,
            node_ips: internal_ip_per_family(&node),
            cluster_router: &self.config.flags.cluster_router,
            node_switch: &self.config.flags.node_switch,
            ovn0,
        });
        // The kernel refuses a source the host does not have; say which field is wrong
        // before changing anything.
        let local = self.ovs_nl.local_addresses().await?;
        if let Some(src) = foreign_source(&desired, &local) {
            return Err(DaemonError::BadRequest(format!(
                "node {name}: InternalIP {src} (status.addresses) is not an address of this host's namespace {}; routes to pods leave from it",
                self.ovs_nl.ns()
            )));
        }
        let mut existing = self.ovs_nl.routes(false, Some(ovn0)).await?;
        existing.extend(self.ovs_nl.routes(true, Some(ovn0)).await?);
        let changes = route_changes(&existing, &desired);
        for route in &changes.delete {
            tracing::info!(?route, "removing a route no subnet wants");
            self.ovs_nl.delete_route(route).await?;
        }
        for route in &changes.add {
            tracing::info!(?route, "adding a route to pods");
            self.ovs_nl.add_route(route).await?;
        }
        Ok(true)
    }

    async fn ensure_ovn0(&self, join: &JoinAddress) -> Result<u32, DaemonError> {
        let iface_id = names::node_port_name(&self.config.flags.node_name);
        let ips = join
            .addresses
            .iter()
            .map(|a| a.addr().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let external_ids = BTreeMap::from([("iface-id".to_owned(), iface_id), ("ip".to_owned(), ips)]);
        let current = self.ovs.interface(OVN0);
        let up_to_date = current.as_ref().is_some_and(|i| {
            i.r#type == "internal"
                && i.external_ids.get("iface-id") == external_ids.get("iface-id")
                && i.external_ids.get("ip") == external_ids.get("ip")
                && i.mac.as_deref() == Some(join.mac.to_string().as_str())
        });
        if !up_to_date {
            let spec = PortSpec {
                name: OVN0,
                kind: "internal",
                mac: Some(join.mac.to_string()),
                external_ids: &external_ids,
                qos: QosPlan::default(),
            };
            self.ovs.add_port(&spec).await?;
        }
        self.ovs.wait_opened(OVN0, Duration::from_secs(10)).await?;
        let link = self.ovs_nl.require_link(OVN0).await?;
        let mtu = self.config.default_mtu;
        if link.mac != Some(join.mac.0) || link.mtu != Some(mtu) || !link.up {
            self.ovs_nl
                .configure(link.index, Some(join.mac.0), Some(mtu), true)
                .await?;
        }
        let present = self.ovs_nl.addresses(link.index).await?;
        for address in &join.addresses {
            if !present.contains(address) {
                self.ovs_nl.add_address(link.index, *address).await?;
            }
        }
        Ok(link.index)
    }
}
