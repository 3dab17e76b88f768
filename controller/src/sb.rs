//! The controller's view of the southbound database: which chassis holds each gateway router
//! port. Read only (ovn-northd and ovn-controller own the SB).
//!
//! OVN 23.03's northbound has no `Logical_Router_Port.status:hosting-chassis` (newer OVN has),
//! so the place a VPC's external gateway port lives is only in the SB: ovn-northd makes a
//! `chassisredirect` Port_Binding `cr-<lrp>` for a router port with Gateway_Chassis rows, and
//! the chassis that claims it writes itself into its `chassis` column. The controller turns
//! that into `OvnEip.status.activateGateway` (issue 26), which the speakers read.
//!
//! The replica holds `Chassis` and the `chassisredirect` rows of `Port_Binding` only:
//! Port_Binding has a row per logical port (every pod, and ovn-controller rewrites it as the pod
//! comes up), so the monitor asks the server for the gateway ports alone (`monitor_cond`'s
//! `where`, [`MonitorTables::Where`]).
//!
//! The SB is optional: without `--ovn-sb-addr` (or `--ovn-db-ips`) there is no client and every
//! question answers "unknown"; with it, the client connects and reconnects in the background,
//! and nothing else in the controller waits for it (an unreachable SB is logged, and only the
//! gateway-port facts are missing while it lasts).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube_ovn_ovsdb::tables::sb::{Chassis, PortBinding, chassis_redirect_port};
use kube_ovn_ovsdb::{ChangeSet, Client, ClientConfig, Condition, ConnectionState, MonitorTables, Table};
use tokio::sync::mpsc;

use crate::config::Config;

/// The Port_Binding type ovn-northd gives a gateway router port's redirect port.
const CHASSIS_REDIRECT: &str = "chassisredirect";

/// A handle on the southbound replica. Cheap to clone.
#[derive(Clone)]
pub struct Sb {
    client: Option<Client>,
}

/// What one southbound update changed that the controller acts on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayChanges {
    /// The `cr-<lrp>` ports whose row appeared, went, or changed chassis.
    pub ports: BTreeSet<String>,
    /// A Chassis row appeared, went or was renamed (a gateway node's chassis may now exist).
    pub chassis: bool,
}

impl GatewayChanges {
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty() && !self.chassis
    }
}

fn client_config(config: &Config) -> ClientConfig {
    let tables = MonitorTables::Where(vec![
        (Chassis::NAME.to_owned(), Vec::new()),
        (
            PortBinding::NAME.to_owned(),
            vec![Condition::eq("type", CHASSIS_REDIRECT)],
        ),
    ]);
    let mut c = ClientConfig::new(config.sb_remotes.clone(), "OVN_Southbound").monitor(tables);
    c.connect_timeout = config.ovsdb_connect_timeout;
    c.inactivity_probe = config.ovsdb_inactivity_probe;
    c.request_timeout = config.ovn_timeout;
    c
}

impl Sb {
    /// Starts the client in the background when SB remotes are configured; returns at once.
    pub fn start(config: &Config) -> Self {
        if config.sb_remotes.is_empty() {
            tracing::info!("no --ovn-sb-addr: gateway ports' chassis are not observed");
            return Self::disabled();
        }
        Self {
            client: Some(Client::start(client_config(config))),
        }
    }

    /// No southbound database: every question answers "unknown".
    pub fn disabled() -> Self {
        Self { client: None }
    }

    pub fn is_configured(&self) -> bool {
        self.client.is_some()
    }

    /// `Ok` while a session is up with the replica in sync; otherwise why not.
    pub fn readiness(&self) -> Result<(), String> {
        match &self.client {
            Some(c) => c.readiness(),
            None => Err("no southbound database configured".to_owned()),
        }
    }

    /// Waits until the replica is in sync (for tests and callers that must not act on an empty
    /// replica); an error when not configured or not within `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), String> {
        let client = self.client.as_ref().ok_or("no southbound database configured")?;
        client.wait_ready(timeout).await.map_err(|e| e.to_string())
    }

    /// Whether the replica is in sync now; a disconnected replica keeps its last rows, which may
    /// be stale.
    pub fn is_synced(&self) -> bool {
        self.client
            .as_ref()
            .is_some_and(|c| matches!(*c.state().borrow(), ConnectionState::Ready { .. }))
    }

    /// The name of the chassis that holds router port `lrp`'s gateway (`cr-<lrp>`): `None` when
    /// no chassis claims it, the port is not a gateway port, or the SB is unknown.
    pub fn gateway_chassis(&self, lrp: &str) -> Option<String> {
        let client = self.client.as_ref()?;
        let port = chassis_redirect_port(lrp);
        client.read(|db| {
            let binding = db
                .find::<PortBinding>(|p| p.logical_port == port && p.r#type == CHASSIS_REDIRECT)
                .ok()
                .flatten()?;
            let chassis = db.get::<Chassis>(&binding.chassis?).ok().flatten()?;
            Some(chassis.name)
        })
    }

    /// How many Port_Binding rows the replica holds: the gateway ports only (the monitor's
    /// condition), not one per pod.
    pub fn port_binding_rows(&self) -> usize {
        self.client
            .as_ref()
            .map_or(0, |c| c.read(|db| db.len(PortBinding::NAME)))
    }

    /// The names of every chassis in the SB (empty when unknown).
    pub fn chassis_names(&self) -> BTreeSet<String> {
        let Some(client) = &self.client else {
            return BTreeSet::new();
        };
        client
            .rows::<Chassis>()
            .map(|rows| rows.into_iter().map(|c| c.name).collect())
            .unwrap_or_default()
    }

    /// Every change from now on that concerns gateway ports or chassis, in order. Without a
    /// southbound database the stream never yields.
    pub fn subscribe(&self) -> SbChanges {
        SbChanges {
            rx: self.client.as_ref().map(Client::subscribe),
        }
    }

    /// Logs the session's ups and downs until dropped (an unreachable SB is a warning, not an
    /// error: the rest of the controller works without it).
    pub async fn log_connection(self) {
        let Some(client) = self.client else {
            return std::future::pending().await;
        };
        let mut state = client.state();
        let mut was_ready = false;
        loop {
            let ready = match &*state.borrow_and_update() {
                ConnectionState::Ready { remote } => {
                    if !was_ready {
                        tracing::info!(%remote, "southbound database connected");
                    }
                    true
                }
                ConnectionState::Connecting => {
                    if was_ready {
                        tracing::warn!("southbound database connection lost; reconnecting");
                    }
                    false
                }
                ConnectionState::Stopped => return,
            };
            was_ready = ready;
            if !ready {
                // Say why once a connect timeout has passed without a session.
                if tokio::time::timeout(client_config_wait(), state.changed())
                    .await
                    .is_err()
                {
                    if let Err(why) = client.readiness() {
                        tracing::warn!(%why, "southbound database unreachable; retrying");
                    }
                    if state.changed().await.is_err() {
                        return;
                    }
                }
                continue;
            }
            if state.changed().await.is_err() {
                return;
            }
        }
    }
}

/// How long a disconnected session may last before it is logged as a warning.
fn client_config_wait() -> Duration {
    Duration::from_secs(5)
}

/// The stream of [`GatewayChanges`] ([`Sb::subscribe`]).
pub struct SbChanges {
    rx: Option<mpsc::UnboundedReceiver<Arc<ChangeSet>>>,
}

impl SbChanges {
    /// The next non-empty change; `None` once the client stopped; never without a southbound
    /// database.
    pub async fn recv(&mut self) -> Option<GatewayChanges> {
        let Some(rx) = &mut self.rx else {
            return std::future::pending().await;
        };
        loop {
            let set = rx.recv().await?;
            let changes = gateway_changes(&set);
            if !changes.is_empty() {
                return Some(changes);
            }
        }
    }
}

/// Pure: what in one update concerns gateway ports (a `chassisredirect` binding that appeared,
/// went, or changed `chassis`) or the chassis set. Every pod's binding changes too (ovn-controller
/// claims it, `up` flips); those are skipped here.
pub fn gateway_changes(set: &ChangeSet) -> GatewayChanges {
    let mut out = GatewayChanges::default();
    for change in &set.changes {
        if *change.table == *Chassis::NAME {
            let name = |row: &Option<Arc<kube_ovn_ovsdb::Row>>| {
                row.as_ref()
                    .and_then(|r| Chassis::from_row(change.uuid, r).ok())
                    .map(|c| c.name)
            };
            if name(&change.old) != name(&change.new) {
                out.chassis = true;
            }
        } else if *change.table == *PortBinding::NAME {
            let binding = |row: &Option<Arc<kube_ovn_ovsdb::Row>>| {
                row.as_ref()
                    .and_then(|r| PortBinding::from_row(change.uuid, r).ok())
                    .filter(|p| p.r#type == CHASSIS_REDIRECT)
            };
            let (old, new) = (binding(&change.old), binding(&change.new));
            let moved = match (&old, &new) {
                (Some(o), Some(n)) => o.chassis != n.chassis || o.logical_port != n.logical_port,
                (None, None) => false,
                _ => true,
            };
            if moved {
                out.ports
                    .extend(old.into_iter().chain(new).map(|p| p.logical_port));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_ovn_ovsdb::{Change, Uuid};

    fn row<T: Table>(t: &T) -> Arc<kube_ovn_ovsdb::Row> {
        Arc::new(t.to_row())
    }

    fn binding(port: &str, ty: &str, chassis: Option<Uuid>) -> PortBinding {
        PortBinding {
            logical_port: port.into(),
            r#type: ty.into(),
            chassis,
            ..PortBinding::default()
        }
    }

    fn change<T: Table>(old: Option<&T>, new: Option<&T>) -> Change {
        Change {
            table: T::NAME.into(),
            uuid: Uuid::from_u128(1),
            old: old.map(row),
            new: new.map(row),
        }
    }

    #[test]
    fn only_gateway_ports_and_the_chassis_set_matter() {
        let (a, b) = (Some(Uuid::from_u128(10)), Some(Uuid::from_u128(11)));
        let cr = |c| binding("cr-vpc1-external", "chassisredirect", c);
        let pod = |c| binding("p1.ns", "", c);
        let set = |changes| ChangeSet {
            changes,
            resync: false,
        };
        // The gateway port moves from chassis a to b, and is claimed from nothing.
        let got = gateway_changes(&set(vec![change(Some(&cr(a)), Some(&cr(b)))]));
        assert_eq!(got.ports, BTreeSet::from(["cr-vpc1-external".to_owned()]));
        assert!(!got.chassis);
        assert!(!gateway_changes(&set(vec![change(Some(&cr(None)), Some(&cr(a)))])).is_empty());
        // Made and removed by ovn-northd.
        assert!(!gateway_changes(&set(vec![change(None, Some(&cr(None)))])).is_empty());
        assert!(!gateway_changes(&set(vec![change(Some(&cr(a)), None)])).is_empty());
        // Other columns of the gateway port, and pods' bindings, are not gateway changes.
        let mut up = cr(a);
        up.up = Some(true);
        assert!(gateway_changes(&set(vec![change(Some(&cr(a)), Some(&up))])).is_empty());
        assert!(gateway_changes(&set(vec![change(Some(&pod(None)), Some(&pod(a)))])).is_empty());
        // A chassis that appears or goes.
        let ch = Chassis {
            name: "node1-id".into(),
            ..Chassis::default()
        };
        assert!(gateway_changes(&set(vec![change(None, Some(&ch))])).chassis);
        let mut other = ch.clone();
        other.hostname = "node1".into();
        assert!(!gateway_changes(&set(vec![change(Some(&ch), Some(&other))])).chassis);
    }
}
