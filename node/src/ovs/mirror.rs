//! The traffic mirror's OVS side (Kube-OVN `configureGlobalMirror`, `configureEmptyMirror` and
//! `ConfigInterfaceMirror`): an internal port on `br-int` (`--mirror-iface`, `mirror0`) and one
//! `Mirror` row, named as Kube-OVN names it (`m0`), whose `output_port` is that port and which
//! selects either every packet of the bridge (`select_all`) or the packets arriving on and
//! leaving through the chosen pods' ports (`select_src_port` and `select_dst_port`).
//!
//! Unlike Kube-OVN, which clears `br-int`'s whole `mirrors` column before adding its own, only
//! the row named [`MIRROR_NAME`] is ours: a mirror someone set up by hand on the bridge stays.

use std::collections::{BTreeMap, BTreeSet};

use kube_ovn_ovsdb::tables::vswitch::{Bridge, Interface, Port};
use kube_ovn_ovsdb::{Atom, Condition, DbCache, Mutation, Operation, Table, Uuid, Value};

use super::{Ovs, remove_port_ops, row};
use crate::error::DaemonError;

/// `Mirror.name` of the mirror the daemon manages (Kube-OVN's `util.MirrorDefaultName`).
pub const MIRROR_NAME: &str = "m0";

kube_ovn_ovsdb::ovsdb_table! {
    /// A port mirror (ovs-vswitchd.conf.db(5) `Mirror`): the ports are weak references, so a
    /// pod port deleted by DEL leaves the selection by itself.
    pub struct Mirror in "Mirror" {
        name: String => "name",
        select_all: bool => "select_all",
        select_src_port: Vec<Uuid> => "select_src_port",
        select_dst_port: Vec<Uuid> => "select_dst_port",
        output_port: Option<Uuid> => "output_port",
        external_ids: BTreeMap<String, String> => "external_ids",
    }
}

/// What the mirror copies to its port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every packet on the bridge (`--enable-mirror`).
    All,
    /// Packets to and from these ports (pods annotated `ovn.kubernetes.io/mirror: "true"`).
    Ports(BTreeSet<String>),
}

/// The managed mirror as the replica shows it, with ports by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorState {
    /// The mirror port exists on the bridge (`Port` and `Interface` rows).
    pub port: bool,
    /// The `Mirror` row on the bridge, if any.
    pub mirror: Option<MirrorRow>,
}

/// The parts of the `Mirror` row the daemon sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRow {
    /// `select_all`.
    pub select_all: bool,
    /// `select_src_port`, by port name.
    pub src: BTreeSet<String>,
    /// `select_dst_port`, by port name.
    pub dst: BTreeSet<String>,
    /// `output_port`'s name.
    pub output: Option<String>,
}

impl MirrorRow {
    /// Whether this row already does what `selection` asks, into port `iface`.
    pub fn matches(&self, selection: &Selection, iface: &str) -> bool {
        if self.output.as_deref() != Some(iface) {
            return false;
        }
        match selection {
            Selection::All => self.select_all,
            Selection::Ports(ports) => !self.select_all && &self.src == ports && &self.dst == ports,
        }
    }
}

/// The uuids of the rows in a bridge's `mirrors` column (the typed `Bridge` does not read it).
fn bridge_mirrors(c: &DbCache, bridge: &str) -> Vec<Uuid> {
    let Some(uuid) = c.uuids_by_name(Bridge::NAME, bridge).first() else {
        return Vec::new();
    };
    c.row(Bridge::NAME, uuid)
        .and_then(|r| r.get("mirrors").cloned())
        .and_then(|v| {
            v.set_elements().map(|atoms| {
                atoms
                    .into_iter()
                    .filter_map(|a| match a {
                        Atom::Uuid(u) => Some(*u),
                        _ => None,
                    })
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// Our mirror row on `bridge`.
fn our_mirror(c: &DbCache, bridge: &str) -> Option<Mirror> {
    bridge_mirrors(c, bridge)
        .iter()
        .filter_map(|u| c.get::<Mirror>(u).ok().flatten())
        .find(|m| m.name == MIRROR_NAME)
}

fn port_names(c: &DbCache, uuids: &[Uuid]) -> BTreeSet<String> {
    uuids
        .iter()
        .filter_map(|u| c.get::<Port>(u).ok().flatten())
        .map(|p| p.name)
        .collect()
}

fn bridge_is(bridge: &str) -> Vec<Condition> {
    vec![Condition::eq("name", Value::from(bridge))]
}

impl Ovs {
    /// The managed mirror and its port, as the replica shows them.
    pub fn mirror_state(&self, iface: &str) -> MirrorState {
        self.client.read(|c| MirrorState {
            port: c.by_name::<Port>(iface).ok().flatten().is_some(),
            mirror: our_mirror(c, &self.bridge).map(|m| MirrorRow {
                select_all: m.select_all,
                src: port_names(c, &m.select_src_port),
                dst: port_names(c, &m.select_dst_port),
                output: m
                    .output_port
                    .and_then(|u| c.get::<Port>(&u).ok().flatten())
                    .map(|p| p.name),
            }),
        })
    }

    /// In one transaction: the internal port `iface` on the bridge (created when missing), and
    /// the mirror into it selecting `selection` (created, or its selection replaced). Ports of
    /// `selection` that are not on the bridge are left out.
    pub async fn apply_mirror(&self, iface: &str, selection: &Selection) -> Result<(), DaemonError> {
        let (port, mirror, selected) = self.client.read(|c| {
            let port = c.by_name::<Port>(iface).ok().flatten().map(|p| p.uuid);
            let mirror = our_mirror(c, &self.bridge).map(|m| m.uuid);
            let selected: Vec<Uuid> = match selection {
                Selection::All => Vec::new(),
                Selection::Ports(names) => names
                    .iter()
                    .filter_map(|n| c.by_name::<Port>(n).ok().flatten())
                    .map(|p| p.uuid)
                    .collect(),
            };
            (port, mirror, selected)
        });
        let mut ops = Vec::new();
        let output = if let Some(uuid) = port {
            Value::uuid(uuid)
        } else {
            ops.push(Operation::insert_named(
                Interface::NAME,
                row([("name", Value::from(iface)), ("type", Value::from("internal"))]),
                "mirror_iface",
            ));
            ops.push(Operation::insert_named(
                Port::NAME,
                row([
                    ("name", Value::from(iface)),
                    ("interfaces", Value::named_uuid("mirror_iface")),
                ]),
                "mirror_port",
            ));
            ops.push(Operation::mutate(
                Bridge::NAME,
                bridge_is(&self.bridge),
                vec![Mutation::insert("ports", Value::named_uuid("mirror_port"))],
            ));
            Value::named_uuid("mirror_port")
        };
        let ports = Value::set(selected);
        let columns = row([
            ("select_all", Value::from(matches!(selection, Selection::All))),
            ("select_src_port", ports.clone()),
            ("select_dst_port", ports),
            ("output_port", output),
        ]);
        if let Some(uuid) = mirror {
            ops.push(Operation::update("Mirror", vec![Condition::uuid(uuid)], columns));
        } else {
            let mut columns = columns;
            columns.insert("name".into(), Value::from(MIRROR_NAME));
            ops.push(Operation::insert_named("Mirror", columns, "mirror"));
            ops.push(Operation::mutate(
                Bridge::NAME,
                bridge_is(&self.bridge),
                vec![Mutation::insert("mirrors", Value::named_uuid("mirror"))],
            ));
        }
        self.transact(
            format!("mirror {selection:?} onto {iface} on {}", self.bridge),
            ops,
        )
        .await
    }

    /// Removes the mirror and its port `iface`; `Ok(false)` when neither was there.
    pub async fn remove_mirror(&self, iface: &str) -> Result<bool, DaemonError> {
        let (port, mirror) = self.client.read(|c| {
            (
                c.by_name::<Port>(iface).ok().flatten(),
                our_mirror(c, &self.bridge).map(|m| m.uuid),
            )
        });
        let mut ops = Vec::new();
        if let Some(uuid) = mirror {
            // Mirror is not a root table: dropped from the bridge, the server collects it.
            ops.push(Operation::mutate(
                Bridge::NAME,
                bridge_is(&self.bridge),
                vec![Mutation::delete("mirrors", Value::uuid(uuid))],
            ));
        }
        if let Some(port) = &port {
            ops.extend(remove_port_ops(port, &[]));
        }
        if ops.is_empty() {
            return Ok(false);
        }
        self.transact(format!("remove mirror {MIRROR_NAME} and port {iface}"), ops)
            .await?;
        Ok(true)
    }

    /// Changes to the replica's rows, for tasks that react to ports coming and going.
    pub fn subscribe(
        &self,
    ) -> tokio::sync::mpsc::UnboundedReceiver<std::sync::Arc<kube_ovn_ovsdb::ChangeSet>> {
        self.client.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_row_matches_only_its_own_selection_and_output() {
        let all = MirrorRow {
            select_all: true,
            src: BTreeSet::new(),
            dst: BTreeSet::new(),
            output: Some("mirror0".into()),
        };
        assert!(all.matches(&Selection::All, "mirror0"));
        assert!(!all.matches(&Selection::All, "mirror1"), "another output port");
        assert!(!all.matches(&Selection::Ports(BTreeSet::new()), "mirror0"));

        let some = MirrorRow {
            select_all: false,
            src: names(&["a_h", "b_h"]),
            dst: names(&["a_h", "b_h"]),
            output: Some("mirror0".into()),
        };
        assert!(some.matches(&Selection::Ports(names(&["a_h", "b_h"])), "mirror0"));
        assert!(!some.matches(&Selection::Ports(names(&["a_h"])), "mirror0"));
        assert!(!some.matches(&Selection::All, "mirror0"));
        // Kube-OVN's per-pod mirror selects only departing packets (select_dst_port): ours
        // wants both directions, so a row with one of them is corrected.
        let dst_only = MirrorRow {
            src: BTreeSet::new(),
            ..some
        };
        assert!(!dst_only.matches(&Selection::Ports(names(&["a_h", "b_h"])), "mirror0"));
    }
}
