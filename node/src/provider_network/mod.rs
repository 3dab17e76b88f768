//! The provider-network task: on each node a ProviderNetwork applies to, the NIC moves into the
//! OVS bridge `br-<pn>` with its addresses and routes, `ovn-bridge-mappings` gets
//! `<pn>:br-<pn>`, and the Node is labelled `<pn>.provider-network.kubernetes.io/{ready,
//! interface,mtu}`; on an excluded node, or when the ProviderNetwork is deleted, the NIC is
//! given back as it was (Kube-OVN `pkg/daemon/controller.go handleAddOrUpdateProviderNetwork /
//! handleDeleteProviderNetwork`).
//!
//! Kube-OVN's failure report is kept: the `ready`/`interface`/`mtu` labels removed, the
//! daemon's own pod annotated `<pn>.provider-network.kubernetes.io/err_mesg`, and a Warning
//! event `InitOVSBridgeFailed` on the ProviderNetwork; retried with backoff. Where we differ
//! (plan §3.0): the move also happens on the netdev datapath, it never leaves the node without
//! its address, a failed move is undone, and a crash mid-move is finished or undone at start
//! from the snapshot kept in the bridge's `external_ids`.
//!
//! With `spec.exchangeLinkName` the bridge takes the NIC's name and the NIC is renamed
//! `br-<pn>` (`naming`); every place that names the bridge (mappings, the give-back of a
//! deleted network, the switch between the two namings) reads it from the bridge's record.
//!
//! `plan` and `naming` decide (pure), `mover` changes the NIC, `report` writes the labels, the
//! annotation and the events; this file reads the caches, OVS and the kernel.

pub mod mover;
pub mod naming;
pub mod plan;
mod report;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node as K8sNode;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::keys::PROVIDER_NETWORK_LABELS;
use kube_ovn_api::crd::{ProviderNetwork, Vlan};
use kube_ovn_dataplane::{Netlink, Netns};
use kube_ovn_support::Watched;
use tokio::time::Instant;

use self::mover::{Mover, mac_of, read_link};
use self::naming::Naming;
use self::plan::{Current, Desired, Exchange, Outcome, PROVIDER_KEY, SNAPSHOT_KEY, Snapshot, Step};
use crate::config::{Config, Datapath};
use crate::error::DaemonError;
use crate::metrics::Metrics;
use crate::ovs::Ovs;
use crate::ovs::provider::{BRIDGE_MAPPINGS, mapping_entry};

/// How long the task waits for the caches' first list before saying so in the log.
const SYNC_WAIT: Duration = Duration::from_secs(30);
/// A pass runs at least this often: a NIC that appears (Kube-OVN: "nic does not exist" until
/// it does) or an outside change to the bridge is seen without an API event.
const TICK: Duration = Duration::from_secs(30);
/// Retry backoff after a failure: doubles from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_mins(1));

/// How long a removed bridge's internal port may take to go.
const LINK_GONE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the task reads from the flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--node-name`.
    pub node_name: String,
    /// `--ovs-datapath-type`.
    pub datapath: Datapath,
    /// `--mac-learning-fallback`.
    pub mac_learning_fallback: bool,
    /// `--pod-name` / `--pod-namespace`: the daemon's pod (err_mesg); empty name: none.
    pub pod: Option<(String, String)>,
    /// How often the task looks again without an event.
    pub tick: Duration,
}

impl Settings {
    /// From the validated flags.
    pub fn new(config: &Config) -> Self {
        let f = &config.flags;
        Self {
            node_name: f.node_name.clone(),
            datapath: config.datapath,
            mac_learning_fallback: f.mac_learning_fallback,
            pod: (!f.pod_name.is_empty()).then(|| (f.pod_namespace.clone(), f.pod_name.clone())),
            tick: TICK,
        }
    }
}

/// The task's inputs.
pub struct ProviderNetworks {
    /// Flags.
    pub settings: Settings,
    /// The API.
    pub kube: kube::Client,
    /// The Open_vSwitch database.
    pub ovs: Ovs,
    /// Where ovs-vswitchd and the NIC are.
    pub ovs_ns: Netns,
    /// Netlink there.
    pub ovs_nl: Netlink,
    /// Every ProviderNetwork.
    pub pns: Watched<ProviderNetwork>,
    /// Every Vlan.
    pub vlans: Watched<Vlan>,
    /// The Nodes (this one's labels).
    pub nodes: Watched<K8sNode>,
    /// Test hook passed to the mover (see [`Mover::fail_at`]); `None` in the daemon.
    pub fail_at: Option<mover::FailPoint>,
    /// `provider_network_moves_total`.
    pub metrics: Metrics,
}

/// What the task keeps between passes.
#[derive(Default)]
struct State {
    /// Per ProviderNetwork: when to try again after a failure, and the current delay.
    backoff: HashMap<String, (Instant, Duration)>,
    /// The failure last reported per ProviderNetwork (one event per distinct failure).
    reported: HashMap<String, String>,
    /// The `err_mesg` last written per ProviderNetwork.
    err_mesg: HashMap<String, Option<String>>,
}

impl ProviderNetworks {
    /// Runs until dropped: a pass on every cache or OVS change, on the tick, and when a
    /// backoff runs out.
    pub async fn run(self) {
        while !(self.pns.synced(SYNC_WAIT).await
            && self.vlans.synced(SYNC_WAIT).await
            && self.nodes.synced(SYNC_WAIT).await)
        {
            tracing::info!(
                "provider networks wait for the ProviderNetwork, Vlan and Node caches to list once"
            );
        }
        let mut state = State::default();
        let mut pn_changes = self.pns.changes();
        let mut vlan_changes = self.vlans.changes();
        let mut node_changes = self.nodes.changes();
        let mut ovs_state = self.ovs.state();
        loop {
            self.pass(&mut state).await;
            let now = Instant::now();
            let wake = state
                .backoff
                .values()
                .map(|(at, _)| *at)
                .filter(|at| *at > now)
                .min()
                .unwrap_or(now + self.settings.tick)
                .min(now + self.settings.tick);
            tokio::select! {
                _ = pn_changes.changed() => {}
                _ = vlan_changes.changed() => {}
                _ = node_changes.changed() => {}
                _ = ovs_state.changed() => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// One pass over every ProviderNetwork, then over our bridges whose ProviderNetwork is gone.
    async fn pass(&self, state: &mut State) {
        let me = &self.settings.node_name;
        let Some(node) = self.nodes.get(me, None) else {
            tracing::info!(node = %me, "provider networks wait for this node's Node object");
            return;
        };
        let vlans = self.vlans.all();
        let vlan_refs: Vec<&Vlan> = vlans.iter().map(Arc::as_ref).collect();
        let pns = self.pns.all();
        for pn in &pns {
            let name = pn.name_any();
            if pn.meta().deletion_timestamp.is_some() {
                continue; // Kube-OVN: nothing on update while it is being deleted.
            }
            if state
                .backoff
                .get(&name)
                .is_some_and(|(at, _)| *at > Instant::now())
            {
                continue;
            }
            let span = tracing::info_span!("provider_network", pn = %name, node = %me);
            let _entered = span.enter();
            let desired = plan::desired(pn, me, node.labels(), &vlan_refs);
            let (outcome, error, nic) = match self.reconcile(&name, &desired).await {
                Ok(outcome) => (outcome, None, desired_nic(&desired)),
                Err((nic, message)) => (Outcome::NotReady, Some(message), nic),
            };
            self.report(state, pn, &node, &outcome, error, nic.as_deref())
                .await;
        }
        // Labels and err_mesg of ProviderNetworks gone from the API that had no bridge here
        // (refused or excluded; or deleted while the daemon was down): removed as Kube-OVN's
        // delete handler removes them.
        let gone: std::collections::BTreeSet<String> = node
            .labels()
            .keys()
            .filter_map(|k| k.split_once(".provider-network.kubernetes.io/"))
            .filter(|(_, name)| PROVIDER_NETWORK_LABELS.contains(name))
            .map(|(pn, _)| pn.to_owned())
            .chain(
                state
                    .err_mesg
                    .iter()
                    .filter(|(_, e)| e.is_some())
                    .map(|(pn, _)| pn.clone()),
            )
            .filter(|pn| !pns.iter().any(|p| &p.name_any() == pn))
            // A bridge `br-<pn>` made by hand (not ours) keeps them too, as before names
            // could be exchanged: someone runs that provider network without the CR.
            .filter(|pn| {
                self.ours(pn).is_none()
                    && self
                        .ovs
                        .bridge_row(&kube_ovn_api::crd::provider_network::provider_bridge_name(pn))
                        .is_none()
            })
            .collect();
        for pn in gone {
            self.patch_labels(&node, &plan::labels(&pn, &Outcome::Deleted))
                .await;
            self.set_err_mesg(state, &pn, None).await;
            state.backoff.remove(&pn);
            state.reported.remove(&pn);
        }
        // Bridges of ours whose ProviderNetwork is gone from the API: give the NIC back.
        for bridge in self.ovs.provider_bridges() {
            let Some(pn) = bridge.external_ids.get(PROVIDER_KEY) else {
                continue;
            };
            if pns.iter().any(|p| &p.name_any() == pn) {
                continue;
            }
            let span = tracing::info_span!("provider_network", pn = %pn, node = %me);
            let _entered = span.enter();
            let Some(naming) = Naming::of_bridge(&bridge.name, &bridge.external_ids) else {
                continue;
            };
            let nic = naming.nic.clone();
            match self.give_back(pn, &naming).await {
                Ok(()) => {
                    tracing::info!(nic = %nic, "provider network deleted: nic given back");
                    self.patch_labels(&node, &plan::labels(pn, &Outcome::Deleted))
                        .await;
                    self.set_err_mesg(state, pn, None).await;
                    state.backoff.remove(pn);
                    state.reported.remove(pn);
                }
                Err(e) => {
                    tracing::warn!(nic = %nic, error = %e, "cannot give the nic of a deleted provider network back; will retry");
                }
            }
        }
    }

    /// Brings one ProviderNetwork to `desired` on this node. `Err((nic, message))` when it is
    /// not ready here.
    async fn reconcile(&self, pn: &str, desired: &Desired) -> Result<Outcome, (Option<String>, String)> {
        let ours = self.ours(pn);
        match desired {
            Desired::NotReady { message, nic, .. } => Err((nic.clone(), message.clone())),
            Desired::Excluded => {
                if let Some(naming) = ours {
                    self.give_back(pn, &naming)
                        .await
                        .map_err(|e| (Some(naming.nic.clone()), e.to_string()))?;
                    tracing::info!(nic = %naming.nic, "node excluded: nic given back");
                }
                Ok(Outcome::Excluded)
            }
            Desired::Present { naming, trunks } => {
                let fail = |e: &dyn std::fmt::Display| (Some(naming.nic.clone()), e.to_string());
                if let Some(old) = ours.as_ref().filter(|old| *old != naming) {
                    // The NIC changed (customInterfaces), or exchangeLinkName did: the NIC
                    // first goes back under its old names, then moves with the new ones.
                    self.give_back(pn, old).await.map_err(|e| fail(&e))?;
                    tracing::info!(old = ?old, new = ?naming, "provider nic given back to move it with new names");
                    if old.bridge == naming.link && naming.link != naming.nic {
                        // Switching to exchanged names: the NIC takes the old bridge's name,
                        // whose internal port goes a moment after the bridge. (Switching back,
                        // the old bridge had the NIC's own name, which the give-back has
                        // already returned to the NIC.)
                        self.wait_link_gone(&old.bridge).await.map_err(|e| fail(&e))?;
                    }
                }
                let mtu = self.move_in(pn, naming, trunks).await.map_err(|e| fail(&e))?;
                Ok(Outcome::Ready {
                    nic: naming.nic.clone(),
                    mtu,
                })
            }
        }
    }

    /// Waits (bounded) until no link is called `name`.
    async fn wait_link_gone(&self, name: &str) -> Result<(), DaemonError> {
        let deadline = Instant::now() + LINK_GONE_TIMEOUT;
        while self.ovs_nl.link(name).await?.is_some() {
            if Instant::now() >= deadline {
                return Err(DaemonError::ProviderNetwork(format!(
                    "link {name} still exists {LINK_GONE_TIMEOUT:?} after its bridge was removed"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// The names of our bridge for `pn` on this node, if there is one.
    fn ours(&self, pn: &str) -> Option<Naming> {
        self.ovs.provider_bridges().into_iter().find_map(|b| {
            let of = b
                .external_ids
                .get(PROVIDER_KEY)
                .cloned()
                .unwrap_or_else(|| b.name.strip_prefix("br-").unwrap_or_default().to_owned());
            if of != pn {
                return None;
            }
            Naming::of_bridge(&b.name, &b.external_ids)
        })
    }

    /// Where a move with exchanged names stands (`None`: names not exchanged): whether the
    /// NIC carries its new name (the link `br-<pn>` exists, and the bridge's internal port or
    /// nothing holds the old one), whether the bridge has its ports.
    async fn exchange_state(&self, naming: &Naming, recorded: bool) -> Result<Option<Exchange>, DaemonError> {
        if !naming.exchanged {
            return Ok(None);
        }
        let ports = recorded && self.ovs.bridge_has_ports(&naming.bridge);
        let link_there = self.ovs_nl.link(&naming.link).await?.is_some();
        let nic_there = self.ovs_nl.link(&naming.nic).await?.is_some();
        Ok(Some(Exchange {
            nic: naming.nic.clone(),
            link: naming.link.clone(),
            renamed: recorded && link_there && (ports || !nic_there),
            ports,
        }))
    }

    /// Moves the NIC into the bridge (or finishes that); returns the NIC's MTU.
    async fn move_in(&self, pn: &str, naming: &Naming, trunks: &[u16]) -> Result<Option<u32>, DaemonError> {
        let (bridge, nic) = (naming.bridge.as_str(), naming.nic.as_str());
        let snapshot = self.snapshot(naming);
        let exchange = self.exchange_state(naming, snapshot.is_some()).await?;
        let nic_now = current_nic(naming, exchange.as_ref());
        let nic_state = read_link(&self.ovs_nl, &self.ovs_ns, nic_now).await?;
        if snapshot.is_none()
            && let Some(Desired::NotReady { message, .. }) = plan::nic_refusal(
                nic,
                bridge,
                nic_state.as_ref(),
                self.ovs.bridge_of_port(nic).as_deref(),
            )
        {
            return Err(DaemonError::ProviderNetwork(message));
        }
        if snapshot.is_none() && self.ovs.bridge_row(bridge).is_some() {
            return Err(DaemonError::ProviderNetwork(format!(
                "OVS bridge {bridge} exists and was not made by kube-ovn-rs for nic {nic}; it is left alone"
            )));
        }
        if snapshot.is_none() && naming.exchanged && self.ovs_nl.link(&naming.link).await?.is_some() {
            return Err(DaemonError::ProviderNetwork(format!(
                "provider network {pn}: spec.exchangeLinkName: nic {nic} cannot be renamed {}: a link \
                 called {} exists; it is left alone",
                naming.link, naming.link
            )));
        }
        let Some(nic_link) = nic_state.as_ref() else {
            return Err(DaemonError::ProviderNetwork(format!("nic {nic} does not exist")));
        };
        let bridge_state = match snapshot {
            Some(_) if exchange.as_ref().is_none_or(|e| e.ports) => {
                read_link(&self.ovs_nl, &self.ovs_ns, bridge).await?
            }
            _ => None,
        };
        let cur = Current {
            nic: Some(nic_link),
            bridge: bridge_state.as_ref(),
            snapshot: snapshot.as_ref(),
            trunks: self.ovs.port_trunks(&naming.link),
            mapping: self.mapping(pn),
            bridge_name: bridge,
            arp_ignore: self.settings.datapath == Datapath::Netdev,
            exchange,
        };
        let steps = plan::move_steps(&cur, trunks);
        let taken = snapshot.clone().unwrap_or_else(|| plan::snapshot_of(nic_link));
        if !steps.is_empty() {
            tracing::info!(
                nic,
                bridge,
                exchanged = naming.exchanged,
                steps = steps.len(),
                "moving the nic into the provider bridge"
            );
            let ran = self
                .mover(pn, naming, nic_now, trunks, &taken)
                .await?
                .run(&steps)
                .await;
            self.count(ran, "moved")?;
        }
        Ok(taken.mtu.or(nic_link.mtu))
    }

    /// Gives the NIC back from the bridge (under its own name) and removes the bridge and the
    /// mapping entry.
    async fn give_back(&self, pn: &str, naming: &Naming) -> Result<(), DaemonError> {
        let bridge = naming.bridge.as_str();
        let snapshot = self.snapshot(naming);
        let exchange = self.exchange_state(naming, snapshot.is_some()).await?;
        let nic_now = current_nic(naming, exchange.as_ref());
        let nic_state = read_link(&self.ovs_nl, &self.ovs_ns, nic_now).await?;
        let bridge_state = if exchange.as_ref().is_none_or(|e| e.ports) {
            read_link(&self.ovs_nl, &self.ovs_ns, bridge).await?
        } else {
            None
        };
        let trunks = self.ovs.port_trunks(&naming.link).unwrap_or_default();
        let cur = Current {
            nic: nic_state.as_ref(),
            bridge: bridge_state.as_ref(),
            snapshot: snapshot.as_ref(),
            trunks: None,
            mapping: self.mapping(pn),
            bridge_name: bridge,
            arp_ignore: self.settings.datapath == Datapath::Netdev,
            exchange,
        };
        let mut steps = plan::give_back_steps(&cur);
        if snapshot.is_none() && self.ovs.bridge_row(bridge).is_some() {
            steps.push(Step::RemoveBridge);
        }
        let taken = snapshot.unwrap_or_default();
        tracing::info!(nic = %naming.nic, bridge, steps = steps.len(), "giving the nic back");
        let ran = self
            .mover(pn, naming, nic_now, &trunks, &taken)
            .await?
            .run(&steps)
            .await;
        self.count(ran, "given_back")
    }

    /// Counts a mover run in `provider_network_moves_total` (`ok` when it succeeded).
    fn count(&self, ran: Result<(), mover::MoveError>, ok: &'static str) -> Result<(), DaemonError> {
        let result = match &ran {
            Ok(()) => ok,
            Err(e) if e.rolled_back.is_ok() => "rolled_back",
            Err(_) => "failed",
        };
        self.metrics.provider_network_move(result);
        ran.map_err(|e| DaemonError::ProviderNetwork(e.to_string()))
    }

    async fn mover<'a>(
        &'a self,
        pn: &'a str,
        naming: &'a Naming,
        nic: &'a str,
        trunks: &'a [u16],
        snapshot: &'a Snapshot,
    ) -> Result<Mover<'a>, DaemonError> {
        Ok(Mover {
            ovs: &self.ovs,
            nl: &self.ovs_nl,
            ns: &self.ovs_ns,
            pn,
            bridge: &naming.bridge,
            nic,
            exchanged: naming.exchanged,
            renamed: std::sync::Mutex::new(None),
            datapath: self.settings.datapath,
            trunks,
            snapshot,
            nic_mac: mac_of(&self.ovs_nl, nic).await?,
            mac_learning_fallback: self.settings.mac_learning_fallback,
            fail_at: self.fail_at,
        })
    }

    /// The snapshot in the bridge's `external_ids`, when the bridge is ours and records these
    /// names.
    fn snapshot(&self, naming: &Naming) -> Option<Snapshot> {
        let bridge = naming.bridge.as_str();
        let row = self.ovs.bridge_row(bridge)?;
        if Naming::of_bridge(bridge, &row.external_ids).as_ref() != Some(naming) {
            return None;
        }
        let text = row.external_ids.get(SNAPSHOT_KEY)?;
        match serde_json::from_str(text) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(bridge, error = %e, "unreadable snapshot in the bridge's external_ids; using an empty one");
                Some(Snapshot::default())
            }
        }
    }

    fn mapping(&self, pn: &str) -> Option<String> {
        let ids = self.ovs.chassis_ids();
        mapping_entry(ids.get(BRIDGE_MAPPINGS).map_or("", String::as_str), pn).map(str::to_owned)
    }
}

/// The NIC's name now: `br-<pn>` once an exchanged move renamed it.
fn current_nic<'a>(naming: &'a Naming, exchange: Option<&Exchange>) -> &'a str {
    if exchange.is_some_and(|e| e.renamed) {
        &naming.link
    } else {
        &naming.nic
    }
}

fn desired_nic(desired: &Desired) -> Option<String> {
    match desired {
        Desired::Present { naming, .. } => Some(naming.nic.clone()),
        Desired::NotReady { nic, .. } => nic.clone(),
        Desired::Excluded => None,
    }
}
