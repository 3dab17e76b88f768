//! The node's side of Open_vSwitch over OVSDB (no `ovs-vsctl` forks): `br-int`, the chassis
//! settings ovn-controller reads, pod and `ovn0` ports with Kube-OVN's `external_ids`, QoS,
//! and waiting on the replica for ovs-vswitchd and ovn-controller to answer.

use std::collections::BTreeMap;
use std::time::Duration;

use kube_ovn_ovsdb::tables::vswitch::{Bridge, Interface, Port, Qos};
use kube_ovn_ovsdb::{
    Atom, Client, Condition, Mutation, Operation, Row, Table, TransactError, Uuid, Value, WaitUntil,
};

use crate::error::DaemonError;
use crate::plan::QosPlan;

pub mod mirror;
pub mod provider;

/// How often a QoS write that lost a race to another writer is tried again.
const QOS_RACE_RETRIES: u32 = 3;

/// Tables the daemon reads; a smaller replica than the whole Open_vSwitch schema.
pub const MONITORED: [&str; 7] = [
    "Open_vSwitch",
    "Bridge",
    "Port",
    "Interface",
    "QoS",
    "Queue",
    "Mirror",
];

/// The local Open_vSwitch database.
#[derive(Clone)]
pub struct Ovs {
    client: Client,
    bridge: String,
    /// One QoS writer at a time (see [`Ovs::set_qos`]).
    qos_writes: std::sync::Arc<tokio::sync::Mutex<()>>,
}

/// A port to plug into the integration bridge.
#[derive(Debug, Clone)]
pub struct PortSpec<'a> {
    /// Port and interface name.
    pub name: &'a str,
    /// `Interface.type`: empty for a veth end, `internal` for `ovn0`.
    pub kind: &'a str,
    /// `Interface.mac` for internal ports (OVS creates the device with it).
    pub mac: Option<String>,
    /// `Interface.external_ids`.
    pub external_ids: &'a BTreeMap<String, String>,
    /// Rate limits.
    pub qos: QosPlan,
}

fn map(entries: &BTreeMap<String, String>) -> Value {
    Value::map(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// Sets `ids` in the `external_ids` of the rows `conditions` select, leaving other keys: the
/// old values of those keys are deleted, then the new ones inserted (an insert alone keeps an
/// existing key's value).
fn set_keys(table: &str, conditions: Vec<Condition>, ids: &BTreeMap<String, String>) -> Operation {
    Operation::mutate(
        table,
        conditions,
        vec![
            Mutation::delete("external_ids", Value::set(ids.keys().map(String::as_str))),
            Mutation::insert("external_ids", map(ids)),
        ],
    )
}

fn row(columns: impl IntoIterator<Item = (&'static str, Value)>) -> Row {
    columns.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

impl<'a> PortSpec<'a> {
    /// A pod's port: the host end of its veth, with the pod's `external_ids` and rate limits.
    pub fn pod(name: &'a str, external_ids: &'a BTreeMap<String, String>, qos: QosPlan) -> Self {
        Self {
            name,
            kind: "",
            mac: None,
            external_ids,
            qos,
        }
    }
}

impl Ovs {
    /// Wraps a connected client on the Open_vSwitch database.
    pub fn new(client: Client, bridge: impl Into<String>) -> Self {
        Self {
            client,
            bridge: bridge.into(),
            qos_writes: std::sync::Arc::default(),
        }
    }

    /// The connection's state, to react to a reconnect (ovsdb-server restarted).
    pub fn state(&self) -> tokio::sync::watch::Receiver<kube_ovn_ovsdb::ConnectionState> {
        self.client.state()
    }

    /// The integration bridge's name.
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    async fn transact(&self, op: impl Into<String>, ops: Vec<Operation>) -> Result<(), DaemonError> {
        self.client
            .transact(ops)
            .await
            .map(drop)
            .map_err(DaemonError::ovsdb(op))
    }

    /// Creates the integration bridge as `ovs-vsctl add-br` would (with its internal port),
    /// secure fail mode and in-band control off, or corrects the datapath type of an existing
    /// one.
    pub async fn ensure_bridge(&self, datapath_type: &str) -> Result<(), DaemonError> {
        let op = format!("create bridge {} ({datapath_type})", self.bridge);
        let existing = self
            .client
            .read(|c| c.by_name::<Bridge>(&self.bridge))
            .map_err(|e| DaemonError::ovsdb(op.clone())(e.into()))?;
        if let Some(bridge) = existing {
            if bridge.datapath_type == datapath_type && bridge.fail_mode.as_deref() == Some("secure") {
                return Ok(());
            }
            let update = row([
                ("datapath_type", Value::from(datapath_type)),
                ("fail_mode", Value::from("secure")),
            ]);
            return self
                .transact(
                    op,
                    vec![Operation::update(
                        Bridge::NAME,
                        vec![Condition::uuid(bridge.uuid())],
                        update,
                    )],
                )
                .await;
        }
        let ops = vec![
            Operation::insert_named(
                Interface::NAME,
                row([
                    ("name", Value::from(self.bridge.as_str())),
                    ("type", Value::from("internal")),
                ]),
                "iface",
            ),
            Operation::insert_named(
                Port::NAME,
                row([
                    ("name", Value::from(self.bridge.as_str())),
                    ("interfaces", Value::named_uuid("iface")),
                ]),
                "port",
            ),
            Operation::insert_named(
                Bridge::NAME,
                row([
                    ("name", Value::from(self.bridge.as_str())),
                    ("ports", Value::named_uuid("port")),
                    ("datapath_type", Value::from(datapath_type)),
                    ("fail_mode", Value::from("secure")),
                    ("other_config", Value::map([("disable-in-band", "true")])),
                ]),
                "bridge",
            ),
            Operation::mutate(
                "Open_vSwitch",
                vec![],
                vec![Mutation::insert("bridges", Value::named_uuid("bridge"))],
            ),
        ];
        self.transact(op, ops).await
    }

    /// Sets keys of `Open_vSwitch.external_ids` (the chassis settings), leaving other keys.
    pub async fn set_chassis_ids(&self, ids: &BTreeMap<String, String>) -> Result<(), DaemonError> {
        self.transact(
            "set Open_vSwitch external_ids",
            vec![set_keys("Open_vSwitch", vec![], ids)],
        )
        .await
    }

    /// Whether the database is initialized (`ovs-vsctl init` made its one `Open_vSwitch`
    /// row): until then a write to that row matches nothing and is lost, and a bridge inserted
    /// is not referenced from it, so garbage-collected.
    pub fn initialized(&self) -> bool {
        self.client
            .rows::<kube_ovn_ovsdb::tables::vswitch::OpenVSwitch>()
            .is_ok_and(|rows| !rows.is_empty())
    }

    /// `Open_vSwitch.external_ids`.
    pub fn chassis_ids(&self) -> BTreeMap<String, String> {
        self.client
            .rows::<kube_ovn_ovsdb::tables::vswitch::OpenVSwitch>()
            .ok()
            .and_then(|rows| rows.into_iter().next())
            .map(|r| r.external_ids)
            .unwrap_or_default()
    }

    /// Plugs a port into the bridge, replacing a port of the same name and removing other
    /// ports with the same `iface-id` (left by an earlier sandbox of the same pod), whose names
    /// are returned so the caller can delete their veths.
    pub async fn add_port(&self, spec: &PortSpec<'_>) -> Result<Vec<String>, DaemonError> {
        let iface_id = spec.external_ids.get("iface-id").cloned().unwrap_or_default();
        let mut ops = Vec::new();
        let mut replaced = Vec::new();
        let stale: Vec<(Port, Vec<Uuid>)> = self.client.read(|c| {
            let mut stale = Vec::new();
            for (uuid, row) in c.table(Port::NAME) {
                let Ok(port) = Port::from_row(*uuid, row) else {
                    continue;
                };
                let same_name = port.name == spec.name;
                let same_iface = !iface_id.is_empty()
                    && port.interfaces.iter().any(|i| {
                        c.get::<Interface>(i)
                            .ok()
                            .flatten()
                            .is_some_and(|i| i.external_ids.get("iface-id") == Some(&iface_id))
                    });
                if same_name || same_iface {
                    let qos_rows = qos_rows(c, port.qos);
                    stale.push((port, qos_rows));
                }
            }
            stale
        });
        for (port, qos_rows) in stale {
            ops.extend(remove_port_ops(&port, &qos_rows));
            if port.name != spec.name {
                replaced.push(port.name);
            }
        }
        let mut iface = row([
            ("name", Value::from(spec.name)),
            ("type", Value::from(spec.kind)),
            ("external_ids", map(spec.external_ids)),
            ("ingress_policing_rate", Value::from(spec.qos.policing_rate_kbps)),
            ("ingress_policing_burst", Value::from(spec.qos.policing_burst_kb)),
        ]);
        if let Some(mac) = &spec.mac {
            iface.insert("mac".into(), Value::from(mac.as_str()));
        }
        ops.push(Operation::insert_named(Interface::NAME, iface, "iface"));
        let mut port = row([
            ("name", Value::from(spec.name)),
            ("interfaces", Value::named_uuid("iface")),
        ]);
        if let Some(queue) = spec.qos.queue_config() {
            ops.extend(htb_ops(&queue, spec.external_ids));
            port.insert("qos".into(), Value::named_uuid("qos"));
        }
        ops.push(Operation::insert_named(Port::NAME, port, "port"));
        ops.push(Operation::mutate(
            Bridge::NAME,
            vec![Condition::eq("name", Value::from(self.bridge.as_str()))],
            vec![Mutation::insert("ports", Value::named_uuid("port"))],
        ));
        self.transact(format!("add port {} to {}", spec.name, self.bridge), ops)
            .await?;
        Ok(replaced)
    }

    /// Removes a port, its interface, QoS and queues; `Ok(false)` when it was not there.
    pub async fn delete_port(&self, name: &str) -> Result<bool, DaemonError> {
        let found = self.client.read(|c| {
            let port = c.by_name::<Port>(name).ok().flatten()?;
            let qos_rows = qos_rows(c, port.qos);
            Some((port, qos_rows))
        });
        let Some((port, qos_rows)) = found else {
            return Ok(false);
        };
        self.transact(format!("delete port {name}"), remove_port_ops(&port, &qos_rows))
            .await?;
        Ok(true)
    }

    /// Sets keys of an interface's `external_ids`, leaving the others (ovn-controller's
    /// `ovn-installed` among them) as they are.
    pub async fn set_interface_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> Result<(), DaemonError> {
        self.transact(
            format!("set external_ids of interface {name}"),
            vec![set_keys(
                Interface::NAME,
                vec![Condition::eq("name", Value::from(name))],
                ids,
            )],
        )
        .await
    }

    /// Brings a port's rate limits to `qos` (annotation changed on a running pod).
    ///
    /// Two writers can want the same port at once: an ADD that plugged before the annotations
    /// came, and the live QoS task woken by the same annotations. Both would see a port without
    /// QoS and insert a QoS row each; the port keeps one and the other stays in the database
    /// forever (QoS and Queue are root tables). So writers take turns, and each write commits
    /// only while the port's `qos` is still what the writer read; a write that lost that race
    /// reads again and retries.
    pub async fn set_qos(&self, name: &str, qos: QosPlan) -> Result<(), DaemonError> {
        let _one_writer = self.qos_writes.lock().await;
        let mut attempt = 0;
        loop {
            let ops = self.qos_ops(name, qos)?;
            match self.client.transact(ops).await {
                Ok(_) => return Ok(()),
                Err(kube_ovn_ovsdb::Error::Transact(TransactError::Operation { op: "wait", .. }))
                    if attempt < QOS_RACE_RETRIES =>
                {
                    // The replica has not caught up with a write it lost to; give it a moment.
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
                }
                Err(e) => return Err(DaemonError::ovsdb(format!("set QoS of port {name}"))(e)),
            }
        }
    }

    /// The operations that take port `name` from the QoS the replica shows to `qos`, guarded
    /// by a `wait` (RFC 7047 §5.2.6) on the port's `qos` column being what was read.
    fn qos_ops(&self, name: &str, qos: QosPlan) -> Result<Vec<Operation>, DaemonError> {
        let found = self.client.read(|c| {
            let port = c.by_name::<Port>(name).ok().flatten()?;
            let iface = c.by_name::<Interface>(name).ok().flatten()?;
            let queue = port
                .qos
                .and_then(|q| c.get::<Qos>(&q).ok().flatten())
                .and_then(|q| q.queues.values().next().copied());
            let old_rows = qos_rows(c, port.qos);
            Some((port, iface, queue, old_rows))
        });
        let Some((port, iface, queue, old_rows)) = found else {
            return Err(DaemonError::Interface {
                iface: name.to_owned(),
                error: "no such port on the bridge".into(),
            });
        };
        let read_qos = port.qos.map_or_else(Value::empty_set, Value::uuid);
        let mut ops = vec![
            Operation::Wait {
                table: Port::NAME.into(),
                conditions: vec![Condition::uuid(port.uuid())],
                columns: vec!["qos".into()],
                until: WaitUntil::Equal,
                rows: vec![row([("qos", read_qos)])],
                timeout_ms: Some(0),
            },
            Operation::update(
                Interface::NAME,
                vec![Condition::uuid(iface.uuid())],
                row([
                    ("ingress_policing_rate", Value::from(qos.policing_rate_kbps)),
                    ("ingress_policing_burst", Value::from(qos.policing_burst_kb)),
                ]),
            ),
        ];
        match (qos.queue_config(), queue) {
            // The whole other_config: a burst no longer asked for goes with it.
            (Some(config), Some(queue)) => ops.push(Operation::update(
                "Queue",
                vec![Condition::uuid(queue)],
                row([("other_config", map(&config))]),
            )),
            (Some(config), None) => {
                ops.extend(htb_ops(&config, &iface.external_ids));
                ops.push(Operation::update(
                    Port::NAME,
                    vec![Condition::uuid(port.uuid())],
                    row([("qos", Value::named_uuid("qos"))]),
                ));
            }
            (None, _) if port.qos.is_some() => {
                ops.push(Operation::update(
                    Port::NAME,
                    vec![Condition::uuid(port.uuid())],
                    row([("qos", Value::empty_set())]),
                ));
                ops.extend(delete_rows_ops(&old_rows));
            }
            (None, _) => {}
        }
        Ok(ops)
    }

    /// The interface called `name`.
    pub fn interface(&self, name: &str) -> Option<Interface> {
        self.client.read(|c| c.by_name::<Interface>(name).ok().flatten())
    }

    /// Pod interfaces this daemon made (`vendor=kube-ovn`), by name.
    pub fn pod_interfaces(&self) -> Vec<Interface> {
        self.client
            .rows::<Interface>()
            .unwrap_or_default()
            .into_iter()
            .filter(|i| {
                i.external_ids.get("vendor").is_some_and(|v| v == "kube-ovn")
                    && i.external_ids.contains_key("pod_netns")
            })
            .collect()
    }

    /// Waits until ovn-controller marks the interface `ovn-installed=true`; fails at once when
    /// ovs-vswitchd reports an `error` or no OpenFlow port (`ovs-vsctl` would exit 0 there).
    pub async fn wait_installed(&self, name: &str, timeout: Duration) -> Result<(), DaemonError> {
        let why = format!(
            "ovn-controller did not set external_ids:ovn-installed=true within {timeout:?}; is ovn-controller running and connected to the southbound database?"
        );
        self.wait_interface(name, timeout, &why, |i| {
            i.external_ids.get("ovn-installed").is_some_and(|v| v == "true")
        })
        .await
    }

    /// Waits until the interface exists (ovn-controller's localnet patch port, say); `why`
    /// ends the timeout's message.
    pub async fn wait_exists(&self, name: &str, timeout: Duration, why: &str) -> Result<(), DaemonError> {
        self.wait_interface(name, timeout, why, |_| true).await
    }

    /// Waits until ovs-vswitchd has opened the interface (it has an OpenFlow port).
    pub async fn wait_opened(&self, name: &str, timeout: Duration) -> Result<(), DaemonError> {
        let why = format!("ovs-vswitchd did not open it within {timeout:?}; is ovs-vswitchd running?");
        self.wait_interface(name, timeout, &why, |i| i.ofport.is_some_and(|p| p > 0))
            .await
    }

    async fn wait_interface(
        &self,
        name: &str,
        timeout: Duration,
        why: &str,
        done: impl Fn(&Interface) -> bool,
    ) -> Result<(), DaemonError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.client.subscribe();
        let failed = |error: String| DaemonError::Interface {
            iface: name.to_owned(),
            error,
        };
        loop {
            if let Some(iface) = self.interface(name) {
                if let Some(error) = iface.error.clone().filter(|e| !e.is_empty()) {
                    return Err(failed(error));
                }
                if iface.ofport == Some(-1) {
                    return Err(failed("ovs-vswitchd could not open it (ofport -1)".into()));
                }
                if done(&iface) {
                    return Ok(());
                }
            }
            // Wake only for changes to this interface (100 ADDs at once would otherwise each
            // re-read on every update).
            loop {
                match tokio::time::timeout_at(deadline, changes.recv()).await {
                    Err(_) | Ok(None) => return Err(failed(why.to_owned())),
                    Ok(Some(set)) => {
                        let touches = set.resync
                            || set.changes.iter().any(|ch| {
                                &*ch.table == Interface::NAME
                                    && [ch.new.as_deref(), ch.old.as_deref()]
                                        .into_iter()
                                        .flatten()
                                        .any(|r| kube_ovn_ovsdb::index::row_name(r) == Some(name))
                            });
                        if touches {
                            break;
                        }
                    }
                }
            }
        }
    }

    /// The rate limits a port has now, in the plan's terms.
    pub fn current_qos(&self, name: &str) -> Option<QosPlan> {
        self.client.read(|c| {
            let iface = c.by_name::<Interface>(name).ok().flatten()?;
            let port = c.by_name::<Port>(name).ok().flatten()?;
            let queue = port
                .qos
                .and_then(|q| c.get::<Qos>(&q).ok().flatten())
                .and_then(|q| q.queues.values().next().copied())
                .and_then(|q| c.get::<kube_ovn_ovsdb::tables::vswitch::Queue>(&q).ok().flatten());
            let config = |key: &str| {
                queue
                    .as_ref()
                    .and_then(|q| q.other_config.get(key).and_then(|r| r.parse().ok()))
            };
            Some(QosPlan {
                policing_rate_kbps: iface.ingress_policing_rate,
                policing_burst_kb: iface.ingress_policing_burst,
                htb_max_rate_bps: config("max-rate"),
                htb_burst_bits: config("burst"),
            })
        })
    }
}

/// The QoS row and its queues, to delete with the port (both tables are roots in the schema,
/// so OVSDB would keep them forever).
fn qos_rows(c: &kube_ovn_ovsdb::DbCache, qos: Option<Uuid>) -> Vec<Uuid> {
    let Some(qos) = qos else { return Vec::new() };
    let mut rows = vec![qos];
    if let Ok(Some(q)) = c.get::<Qos>(&qos) {
        rows.extend(q.queues.values().copied());
    }
    rows
}

fn remove_port_ops(port: &Port, qos_rows: &[Uuid]) -> Vec<Operation> {
    // The port is deleted outright rather than left to garbage collection: the server checks
    // references before it collects, so its `qos` would still hold the QoS row we delete.
    let mut ops = vec![
        Operation::mutate(
            Bridge::NAME,
            vec![Condition::includes("ports", Value::uuid(port.uuid()))],
            vec![Mutation::delete("ports", Value::uuid(port.uuid()))],
        ),
        Operation::delete(Port::NAME, vec![Condition::uuid(port.uuid())]),
    ];
    ops.extend(delete_rows_ops(qos_rows));
    ops
}

fn delete_rows_ops(qos_rows: &[Uuid]) -> Vec<Operation> {
    // The first is the QoS row, the rest its queues; the QoS goes first so no reference is
    // left to a deleted queue when the transaction commits.
    qos_rows
        .iter()
        .enumerate()
        .map(|(i, uuid)| {
            Operation::delete(if i == 0 { "QoS" } else { "Queue" }, vec![Condition::uuid(*uuid)])
        })
        .collect()
}

/// A `linux-htb` QoS with one queue capped at `rate` bit/s, tagged with the pod, as Kube-OVN
/// does for a pod's `ingress_rate`.
fn htb_ops(queue: &BTreeMap<String, String>, external_ids: &BTreeMap<String, String>) -> Vec<Operation> {
    let rate = queue.get("max-rate").cloned().unwrap_or_default();
    let tags: BTreeMap<String, String> = external_ids
        .iter()
        .filter(|(k, _)| matches!(k.as_str(), "iface-id" | "pod_name" | "pod_namespace"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    vec![
        Operation::insert_named(
            "Queue",
            row([("other_config", map(queue)), ("external_ids", map(&tags))]),
            "queue",
        ),
        Operation::insert_named(
            "QoS",
            row([
                ("type", Value::from("linux-htb")),
                ("other_config", Value::map([("max-rate", rate)])),
                (
                    "queues",
                    Value::Map([(Atom::from(0i64), Atom::named("queue"))].into_iter().collect()),
                ),
                ("external_ids", map(&tags)),
            ]),
            "qos",
        ),
    ]
}
