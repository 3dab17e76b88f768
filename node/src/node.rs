//! The node network task: `ovn0` on the join subnet, and kernel routes to the default VPC's
//! subnets through it (planned in `node_routes`), kept in step with the Node and the Subnets.
//! The task owns what it remembers between passes (the subnets as last validated); its inputs
//! are the Node and Subnet caches' changes and the Open_vSwitch replica's.
//!
//! Nothing is reconciled before the Node and Subnet caches have listed once, as the gateway
//! task waits for its own: a daemon restarting with empty caches would plan no subnet and
//! delete every route into `ovn0` until the lists came in.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node as K8sNode;
use kube_ovn_api::crd::Subnet;
use kube_ovn_api::names;
use kube_ovn_api::node::internal_ip_per_family;
use kube_ovn_dataplane::Netlink;
use kube_ovn_support::Watched;

use crate::config::Config;
use crate::error::DaemonError;
use crate::join::{JoinAddress, OVN0, join_address};
use crate::node_routes::{RouteInputs, desired_routes, foreign_source, route_changes, with_last_validated};
use crate::ovs::{Ovs, PortSpec};
use crate::plan::QosPlan;

/// How long the node task waits for the caches' first list before saying so in the log.
const SYNC_WAIT: Duration = Duration::from_secs(30);

/// The flags the node network reads.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--node-name`.
    pub node_name: String,
    /// `--cluster-router`: the default VPC, whose subnets are routed through `ovn0`.
    pub cluster_router: String,
    /// `--node-switch`: the join subnet.
    pub node_switch: String,
    /// `ovn0`'s MTU (`--mtu`, or the derived default).
    pub default_mtu: u32,
}

impl Settings {
    /// From the validated flags.
    pub fn new(config: &Config) -> Self {
        Self {
            node_name: config.flags.node_name.clone(),
            cluster_router: config.flags.cluster_router.clone(),
            node_switch: config.flags.node_switch.clone(),
            default_mtu: config.default_mtu,
        }
    }
}

/// The node network task and its state.
pub struct NodeNetwork {
    settings: Settings,
    ovs: Ovs,
    /// Netlink where ovs-vswitchd runs (`ovn0` is there).
    ovs_nl: Netlink,
    nodes: Watched<K8sNode>,
    subnets: Watched<Subnet>,
    /// Subnets as last validated by the controller (`node_routes::with_last_validated`).
    last_validated: BTreeMap<String, Arc<Subnet>>,
}

impl NodeNetwork {
    /// The task, nothing applied yet.
    pub fn new(
        settings: Settings,
        ovs: Ovs,
        ovs_nl: Netlink,
        nodes: Watched<K8sNode>,
        subnets: Watched<Subnet>,
    ) -> Self {
        Self {
            settings,
            ovs,
            ovs_nl,
            nodes,
            subnets,
            last_validated: BTreeMap::new(),
        }
    }

    /// Keeps `ovn0` and the subnet routes in step with the Node and the Subnets, once their
    /// caches have listed; also re-checks every 30 s as a safety net against outside changes.
    pub async fn run(mut self) {
        while !(self.nodes.synced(SYNC_WAIT).await && self.subnets.synced(SYNC_WAIT).await) {
            tracing::info!("node routes wait for the Node and Subnet caches to list once");
        }
        let mut node_changes = self.nodes.changes();
        let mut subnet_changes = self.subnets.changes();
        let mut ovs_state = self.ovs.state();
        loop {
            match self.reconcile().await {
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

    /// One pass over the node's plumbing: `ovn0` as the Node's join annotations say, and the
    /// routes to the default VPC's subnets. Idempotent; returns `false` while the controller
    /// has not annotated the Node yet.
    pub async fn reconcile(&mut self) -> Result<bool, DaemonError> {
        let name = &self.settings.node_name;
        let Some(node) = self.nodes.get(name, None) else {
            return Ok(false);
        };
        let join = join_address(&node).map_err(|source| DaemonError::Annotation {
            pod: format!("node {name}"),
            source,
        })?;
        let Some(join) = join else { return Ok(false) };
        let ovn0 = self.ensure_ovn0(&join).await?;
        let subnets = with_last_validated(&self.subnets.all(), &mut self.last_validated);
        let desired = desired_routes(&RouteInputs {
            subnets: &subnets,
            join: &join,
            node_ips: internal_ip_per_family(&node),
            cluster_router: &self.settings.cluster_router,
            node_switch: &self.settings.node_switch,
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
        let iface_id = names::node_port_name(&self.settings.node_name);
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
        let mtu = self.settings.default_mtu;
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
