//! A provider network's OVS side: the bridge `br-<pn>` with the NIC as its port (Kube-OVN
//! `configExternalBridge` / `configProviderNic`), the NIC port's `trunks`, and the
//! `ovn-bridge-mappings` / `ovn-chassis-mac-mappings` entries of `Open_vSwitch.external_ids`
//! (Kube-OVN `addOvnMapping`, `initProviderChassisMac`), written over OVSDB.

use std::collections::BTreeMap;
use std::time::Duration;

use kube_ovn_ovsdb::tables::vswitch::{Bridge, Interface, OpenVSwitch, Port};
use kube_ovn_ovsdb::{
    Atom, Condition, Mutation, Mutator, Operation, OperationResult, Table, TransactError, Value, WaitUntil,
};

use super::{Ovs, map, row};
use crate::error::DaemonError;

/// `Open_vSwitch.external_ids` key ovn-controller reads the provider bridges from.
pub const BRIDGE_MAPPINGS: &str = "ovn-bridge-mappings";
/// `Open_vSwitch.external_ids` key with one chassis MAC per provider network.
pub const CHASSIS_MAC_MAPPINGS: &str = "ovn-chassis-mac-mappings";
/// Bridge `external_ids` key naming the NIC we moved into it: what marks a bridge as ours to
/// give back, even when the ProviderNetwork is gone from the API.
pub const PROVIDER_NIC: &str = "kube-ovn-rs/provider-nic";

/// How often a mappings write that lost a race to another writer is tried again.
const MAPPING_RACE_RETRIES: u32 = 3;
/// How long ovs-vswitchd gets to apply a provider bridge change (`cur_cfg` to reach the
/// transaction's `next_cfg`).
const APPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The bridge to create with the NIC in it, in one transaction.
#[derive(Debug, Clone)]
pub struct ProviderBridge<'a> {
    /// `br-<pn>`.
    pub bridge: &'a str,
    /// The NIC, added as a port.
    pub nic: &'a str,
    /// `Bridge.datapath_type` (br-int's).
    pub datapath_type: &'a str,
    /// `Port.trunks` of the NIC.
    pub trunks: &'a [u16],
    /// `mtu_request` of the bridge's internal interface (the NIC's MTU: a netdev tap starts at
    /// 1500 whatever the NIC has).
    pub mtu: Option<u32>,
    /// `other_config:hwaddr`: the bridge's own MAC (OVS would otherwise take the NIC's).
    pub hwaddr: String,
    /// `Bridge.external_ids`: Kube-OVN's keys and our snapshot of the NIC.
    pub external_ids: BTreeMap<String, String>,
    /// `other_config:mac-learning-fallback`, as Kube-OVN's flag.
    pub mac_learning_fallback: bool,
}

impl Ovs {
    /// The bridge called `name`.
    pub fn bridge_row(&self, name: &str) -> Option<Bridge> {
        self.client.read(|c| c.by_name::<Bridge>(name).ok().flatten())
    }

    /// Bridges holding a NIC we moved (their `external_ids` name it, [`PROVIDER_NIC`]).
    pub fn provider_bridges(&self) -> Vec<Bridge> {
        self.client
            .rows::<Bridge>()
            .unwrap_or_default()
            .into_iter()
            .filter(|b| b.external_ids.contains_key(PROVIDER_NIC))
            .collect()
    }

    /// The bridge that has a port called `port`.
    pub fn bridge_of_port(&self, port: &str) -> Option<String> {
        self.client.read(|c| {
            let port = c.by_name::<Port>(port).ok().flatten()?;
            let bridges = c.rows::<Bridge>().ok()?;
            bridges
                .into_iter()
                .find(|b| b.ports.contains(&port.uuid()))
                .map(|b| b.name)
        })
    }

    /// `Port.trunks` of `port` (the Port table type does not model it; read from the row).
    pub fn port_trunks(&self, port: &str) -> Option<Vec<u16>> {
        self.client.read(|c| {
            let found = c.by_name::<Port>(port).ok().flatten()?;
            let raw = c.row(Port::NAME, &found.uuid())?;
            let trunks = raw
                .get("trunks")
                .and_then(Value::set_elements)
                .unwrap_or_default();
            let mut ids: Vec<u16> = trunks
                .into_iter()
                .filter_map(|a| a.as_i64().and_then(|i| u16::try_from(i).ok()))
                .collect();
            ids.sort_unstable();
            Some(ids)
        })
    }

    /// Creates `spec.bridge` with its internal port and `spec.nic` as a port, tagged
    /// `vendor=kube-ovn`, in one transaction: the snapshot in `external_ids` exists exactly
    /// when the NIC is in the bridge.
    pub async fn create_provider_bridge(&self, spec: &ProviderBridge<'_>) -> Result<(), DaemonError> {
        let mut ops = port_ops(spec);
        ops.extend(bridge_ops(
            spec,
            Value::set([Atom::named("br_port"), Atom::named("nic_port")]),
        ));
        self.transact_applied(
            format!("create bridge {} with port {}", spec.bridge, spec.nic),
            ops,
        )
        .await
    }

    /// Runs `ops` with `Open_vSwitch.next_cfg` incremented, as `ovs-vsctl` does for every
    /// command, and waits until ovs-vswitchd reports that configuration applied (`cur_cfg`).
    /// Without the increment ovs-vswitchd 3.1 (Debian 12's) was seen, in about half of the
    /// lab's ProviderNetwork re-creations, to keep a port's old `trunks` after the column
    /// changed — it dropped VLAN 100 ("port eth1 not configured for trunking VLAN 100") until
    /// some later `next_cfg` change; and the mover must not go on (move addresses, report the
    /// node ready) before the bridge is as written.
    async fn transact_applied(&self, op: String, mut ops: Vec<Operation>) -> Result<(), DaemonError> {
        ops.push(Operation::mutate(
            OpenVSwitch::NAME,
            vec![],
            vec![Mutation::new("next_cfg", Mutator::Add, 1)],
        ));
        ops.push(Operation::select(OpenVSwitch::NAME, vec![]));
        let results = self
            .client
            .transact(ops)
            .await
            .map_err(DaemonError::ovsdb(op.clone()))?;
        let next = match results.last() {
            Some(OperationResult::Rows(rows)) => rows.first().and_then(|r| match r.get("next_cfg") {
                Some(Value::Atom(a)) => a.as_i64(),
                _ => None,
            }),
            _ => None,
        }
        .ok_or_else(|| {
            DaemonError::ProviderNetwork(format!("{op}: no Open_vSwitch.next_cfg in the reply"))
        })?;
        let applied = || {
            self.client
                .rows::<OpenVSwitch>()
                .ok()
                .and_then(|rows| rows.into_iter().next())
                .is_some_and(|r| r.cur_cfg >= next)
        };
        let mut changes = self.client.subscribe();
        let deadline = tokio::time::Instant::now() + APPLY_TIMEOUT;
        while !applied() {
            match tokio::time::timeout_at(deadline, changes.recv()).await {
                Ok(Some(_)) => {}
                Err(_) | Ok(None) => {
                    return Err(DaemonError::ProviderNetwork(format!(
                        "{op}: ovs-vswitchd did not apply configuration {next} within {APPLY_TIMEOUT:?}; is ovs-vswitchd running?"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Creates `spec.bridge` without ports, with its `external_ids`: with exchanged names the
    /// record must exist before the NIC is renamed, and the internal port cannot exist before
    /// (it takes the NIC's name). [`Self::add_provider_ports`] adds them.
    pub async fn record_provider_bridge(&self, spec: &ProviderBridge<'_>) -> Result<(), DaemonError> {
        self.transact_applied(
            format!("create bridge {} (no ports yet)", spec.bridge),
            bridge_ops(spec, Value::set(std::iter::empty::<Atom>())),
        )
        .await
    }

    /// Adds the internal port and the NIC's port to the existing `spec.bridge`.
    pub async fn add_provider_ports(&self, spec: &ProviderBridge<'_>) -> Result<(), DaemonError> {
        let mut ops = port_ops(spec);
        ops.push(Operation::mutate(
            Bridge::NAME,
            vec![Condition::eq("name", Value::from(spec.bridge))],
            vec![Mutation::insert(
                "ports",
                Value::set([Atom::named("br_port"), Atom::named("nic_port")]),
            )],
        ));
        self.transact_applied(
            format!(
                "add ports {} and {} to bridge {}",
                spec.bridge, spec.nic, spec.bridge
            ),
            ops,
        )
        .await
    }

    /// Removes every port of bridge `name` (they go with the reference), keeping the bridge.
    pub async fn remove_provider_ports(&self, name: &str) -> Result<(), DaemonError> {
        self.transact_applied(
            format!("remove the ports of bridge {name}"),
            vec![Operation::update(
                Bridge::NAME,
                vec![Condition::eq("name", Value::from(name))],
                row([("ports", Value::set(std::iter::empty::<Atom>()))]),
            )],
        )
        .await
    }

    /// Whether bridge `name` has any port.
    pub fn bridge_has_ports(&self, name: &str) -> bool {
        self.bridge_row(name).is_some_and(|b| !b.ports.is_empty())
    }

    /// Sets `Port.trunks` of `port`.
    pub async fn set_port_trunks(&self, port: &str, trunks: &[u16]) -> Result<(), DaemonError> {
        self.transact_applied(
            format!("set trunks of port {port}"),
            vec![Operation::update(
                Port::NAME,
                vec![Condition::eq("name", Value::from(port))],
                row([("trunks", trunks_value(trunks))]),
            )],
        )
        .await
    }

    /// Deletes bridge `name` with its ports and interfaces (they go with it: only the bridge
    /// refers to them); `Ok(false)` when it was not there.
    pub async fn remove_provider_bridge(&self, name: &str) -> Result<bool, DaemonError> {
        let Some(bridge) = self.bridge_row(name) else {
            return Ok(false);
        };
        let ops = vec![
            Operation::mutate(
                OpenVSwitch::NAME,
                vec![],
                vec![Mutation::delete("bridges", Value::uuid(bridge.uuid()))],
            ),
            Operation::delete(Bridge::NAME, vec![Condition::uuid(bridge.uuid())]),
        ];
        self.transact_applied(format!("delete bridge {name}"), ops)
            .await?;
        Ok(true)
    }

    /// Puts `<pn>:<bridge>` into `ovn-bridge-mappings` (or takes the `<pn>` entry out when
    /// `bridge` is `None`), and likewise `<pn>:<chassis_mac>` into `ovn-chassis-mac-mappings`
    /// (kept when present: ovn-controller has told the chassis its MAC). Other providers'
    /// entries and their order stay. A read-modify-write guarded by a `wait` (RFC 7047 §5.2.6)
    /// on the value read, so two writers cannot lose each other's entry.
    pub async fn set_mappings(
        &self,
        pn: &str,
        bridge: Option<&str>,
        chassis_mac: Option<&str>,
    ) -> Result<(), DaemonError> {
        let op = format!("set {BRIDGE_MAPPINGS} entry {pn}");
        let mut attempt = 0;
        loop {
            let Some(root) = self
                .client
                .rows::<OpenVSwitch>()
                .ok()
                .and_then(|rows| rows.into_iter().next())
            else {
                return Err(DaemonError::ProviderNetwork(format!(
                    "{op}: the Open_vSwitch database has no root row (not initialized)"
                )));
            };
            let ids = &root.external_ids;
            let mut set = BTreeMap::new();
            let mut unset = Vec::new();
            let old = ids.get(BRIDGE_MAPPINGS).map_or("", String::as_str);
            match merge_mapping(old, pn, bridge) {
                Some(v) => {
                    set.insert(BRIDGE_MAPPINGS.to_owned(), v);
                }
                None => unset.push(BRIDGE_MAPPINGS),
            }
            let old_macs = ids.get(CHASSIS_MAC_MAPPINGS).map_or("", String::as_str);
            let macs = match (bridge, chassis_mac) {
                (Some(_), Some(mac)) if mapping_entry(old_macs, pn).is_none() => {
                    merge_mapping(old_macs, pn, Some(mac))
                }
                (Some(_), _) => (!old_macs.is_empty()).then(|| old_macs.to_owned()),
                (None, _) => merge_mapping(old_macs, pn, None),
            };
            match macs {
                Some(v) => {
                    set.insert(CHASSIS_MAC_MAPPINGS.to_owned(), v);
                }
                None => unset.push(CHASSIS_MAC_MAPPINGS),
            }
            let ops = vec![
                Operation::Wait {
                    table: OpenVSwitch::NAME.into(),
                    conditions: vec![Condition::uuid(root.uuid())],
                    columns: vec!["external_ids".into()],
                    until: WaitUntil::Equal,
                    rows: vec![row([("external_ids", map(ids))])],
                    timeout_ms: Some(0),
                },
                Operation::mutate(
                    OpenVSwitch::NAME,
                    vec![Condition::uuid(root.uuid())],
                    vec![
                        Mutation::delete(
                            "external_ids",
                            Value::set(set.keys().map(String::as_str).chain(unset.iter().copied())),
                        ),
                        Mutation::insert("external_ids", map(&set)),
                    ],
                ),
            ];
            match self.client.transact(ops).await {
                Ok(_) => return Ok(()),
                Err(kube_ovn_ovsdb::Error::Transact(TransactError::Operation { op: "wait", .. }))
                    if attempt < MAPPING_RACE_RETRIES =>
                {
                    // Someone else wrote first; the replica catches up in a moment.
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
                }
                Err(e) => return Err(DaemonError::ovsdb(op)(e)),
            }
        }
    }
}

/// The internal interface and port `spec.bridge` (named `br_port`) and the NIC's
/// (`nic_port`).
fn port_ops(spec: &ProviderBridge<'_>) -> Vec<Operation> {
    let mut internal = row([
        ("name", Value::from(spec.bridge)),
        ("type", Value::from("internal")),
    ]);
    if let Some(mtu) = spec.mtu {
        internal.insert("mtu_request".into(), Value::from(i64::from(mtu)));
    }
    let vendor = Value::map([("vendor", "kube-ovn")]);
    vec![
        Operation::insert_named(Interface::NAME, internal, "br_iface"),
        Operation::insert_named(
            Port::NAME,
            row([
                ("name", Value::from(spec.bridge)),
                ("interfaces", Value::named_uuid("br_iface")),
            ]),
            "br_port",
        ),
        Operation::insert_named(
            Interface::NAME,
            row([("name", Value::from(spec.nic)), ("external_ids", vendor.clone())]),
            "nic_iface",
        ),
        Operation::insert_named(
            Port::NAME,
            row([
                ("name", Value::from(spec.nic)),
                ("interfaces", Value::named_uuid("nic_iface")),
                ("trunks", trunks_value(spec.trunks)),
                ("external_ids", vendor),
            ]),
            "nic_port",
        ),
    ]
}

/// The Bridge row with `ports`, and its reference from the root row.
fn bridge_ops(spec: &ProviderBridge<'_>, ports: Value) -> Vec<Operation> {
    vec![
        Operation::insert_named(
            Bridge::NAME,
            row([
                ("name", Value::from(spec.bridge)),
                ("ports", ports),
                ("datapath_type", Value::from(spec.datapath_type)),
                ("external_ids", map(&spec.external_ids)),
                (
                    "other_config",
                    Value::map([
                        ("hwaddr", spec.hwaddr.clone()),
                        ("mac-learning-fallback", spec.mac_learning_fallback.to_string()),
                    ]),
                ),
            ]),
            "bridge",
        ),
        Operation::mutate(
            OpenVSwitch::NAME,
            vec![],
            vec![Mutation::insert("bridges", Value::named_uuid("bridge"))],
        ),
    ]
}

fn trunks_value(trunks: &[u16]) -> Value {
    Value::set(trunks.iter().map(|t| Atom::from(i64::from(*t))))
}

/// The value of `key` in a `key:value,key:value` list.
pub fn mapping_entry<'a>(list: &'a str, key: &str) -> Option<&'a str> {
    list.split(',')
        .filter_map(|e| e.split_once(':'))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim())
}

/// `list` with `key`'s entry set to `value` (in place when present, else appended) or removed
/// (`None`), other entries in their order; `None` when nothing is left (the key then goes, as
/// Kube-OVN's `setOvnMappings` removes an empty one).
pub fn merge_mapping(list: &str, key: &str, value: Option<&str>) -> Option<String> {
    let mut entries: Vec<(String, String)> = list
        .split(',')
        .filter_map(|e| e.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .collect();
    match value {
        Some(v) => match entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => v.clone_into(&mut entry.1),
            None => entries.push((key.to_owned(), v.to_owned())),
        },
        None => entries.retain(|(k, _)| k != key),
    }
    (!entries.is_empty()).then(|| {
        entries
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(",")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_merge_keeps_others_and_their_order() {
        assert_eq!(
            merge_mapping("", "pn1", Some("br-pn1")).as_deref(),
            Some("pn1:br-pn1")
        );
        assert_eq!(
            merge_mapping("other:br-other", "pn1", Some("br-pn1")).as_deref(),
            Some("other:br-other,pn1:br-pn1")
        );
        assert_eq!(
            merge_mapping("pn1:br-old,other:br-other", "pn1", Some("br-pn1")).as_deref(),
            Some("pn1:br-pn1,other:br-other")
        );
        assert_eq!(
            merge_mapping("other:br-other,pn1:br-pn1", "pn1", None).as_deref(),
            Some("other:br-other")
        );
        assert_eq!(merge_mapping("pn1:br-pn1", "pn1", None), None);
        // A MAC value holds colons: only the first one splits.
        assert_eq!(
            mapping_entry("pn1:0a:00:00:00:00:01", "pn1"),
            Some("0a:00:00:00:00:01")
        );
    }
}
