//! The node's OVS and OVN health, as Kube-OVN's pinger checks it (`pkg/pinger/ovn.go`):
//!
//! - OVS is up when both ovsdb-server and ovs-vswitchd answer `version` on their control
//!   sockets, ovn-controller is up when it does (Kube-OVN runs `ovs-appctl -t <daemon> -T 1
//!   version`; here the same unixctl JSON-RPC request is sent directly, so the check needs no
//!   `ovs-appctl` in the image and is bounded by `--ovs.timeout`).
//! - Port bindings are consistent when every OVS interface with an `external_ids:iface-id` has a
//!   Southbound Port_Binding bound to this node's chassis (the Chassis whose `hostname` is the
//!   node name); the gauge is the number of interfaces without one.
//!
//! A daemon's control socket is `<name>.<pid>.ctl` beside its pidfile (the OVS default). When the
//! pidfile is missing or stale, `<name>.ctl` and any `<name>.<digits>.ctl` in that directory are
//! tried too: a daemon started with `--unixctl=<name>.ctl`, or without a pidfile.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_ovn_ovsdb::{Atom, Client, ClientConfig, Condition, MonitorTables, Operation, Remote, Row, Value};
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Why a daemon did not answer.
#[derive(Debug, thiserror::Error)]
pub enum UnixctlError {
    #[error("{component}: no control socket found beside {}", pidfile.display())]
    NoSocket { component: String, pidfile: PathBuf },
    #[error("{}: {source}", socket.display())]
    Io { socket: PathBuf, source: std::io::Error },
    #[error("{}: no answer within {timeout:?}", socket.display())]
    Timeout { socket: PathBuf, timeout: Duration },
    #[error("{}: {why}", socket.display())]
    Reply { socket: PathBuf, why: String },
}

/// The control sockets to try for `component`, best first. `pid` is the pidfile's content;
/// `listing` the file names in the pidfile's directory.
pub fn control_sockets(
    pidfile: &Path,
    component: &str,
    pid: Option<u32>,
    listing: &[String],
) -> Vec<PathBuf> {
    let dir = pidfile.parent().unwrap_or_else(|| Path::new("."));
    let mut out = Vec::new();
    if let Some(pid) = pid {
        out.push(dir.join(format!("{component}.{pid}.ctl")));
    }
    let plain = format!("{component}.ctl");
    if listing.contains(&plain) {
        out.push(dir.join(plain));
    }
    let prefix = format!("{component}.");
    let mut numbered: Vec<&String> = listing
        .iter()
        .filter(|name| {
            name.strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(".ctl"))
                .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    numbered.sort();
    for name in numbered {
        let path = dir.join(name);
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// The `result` of a unixctl reply, or its `error`.
pub fn parse_unixctl_reply(reply: &Json) -> Result<String, String> {
    match (reply.get("error"), reply.get("result")) {
        (Some(error), _) if !error.is_null() => {
            Err(error.as_str().map_or_else(|| error.to_string(), str::to_owned))
        }
        (_, Some(Json::String(result))) => Ok(result.clone()),
        _ => Err(format!("unexpected reply {reply}")),
    }
}

async fn unixctl_call(socket: &Path, method: &str, timeout: Duration) -> Result<String, UnixctlError> {
    let io = |source| UnixctlError::Io {
        socket: socket.to_owned(),
        source,
    };
    let call = async {
        let mut stream = UnixStream::connect(socket).await.map_err(io)?;
        let request = json!({"id": 0, "method": method, "params": []});
        stream
            .write_all(request.to_string().as_bytes())
            .await
            .map_err(io)?;
        let mut buf = Vec::new();
        loop {
            if stream.read_buf(&mut buf).await.map_err(io)? == 0 {
                return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            // One reply per connection: it is complete once it parses.
            if let Ok(reply) = serde_json::from_slice::<Json>(&buf) {
                return parse_unixctl_reply(&reply).map_err(|why| UnixctlError::Reply {
                    socket: socket.to_owned(),
                    why,
                });
            }
        }
    };
    tokio::time::timeout(timeout, call).await.unwrap_or_else(|_| {
        Err(UnixctlError::Timeout {
            socket: socket.to_owned(),
            timeout,
        })
    })
}

/// `version` from `component`, whose pidfile is `pidfile`: its version line when it answers.
pub async fn daemon_version(
    pidfile: &Path,
    component: &str,
    timeout: Duration,
) -> Result<String, UnixctlError> {
    // Two small local reads; blocking them is cheaper than a trip to the blocking pool.
    let pid = std::fs::read_to_string(pidfile)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let dir = pidfile.parent().unwrap_or_else(|| Path::new("."));
    let listing: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let mut last = None;
    for socket in control_sockets(pidfile, component, pid, &listing) {
        match unixctl_call(&socket, "version", timeout).await {
            Ok(version) => return Ok(version.trim().to_owned()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| UnixctlError::NoSocket {
        component: component.to_owned(),
        pidfile: pidfile.to_owned(),
    }))
}

/// The `iface-id`s of OVS Interface rows (their `external_ids` column), blanks skipped.
pub fn iface_ids(rows: &[Row]) -> BTreeSet<String> {
    rows.iter()
        .filter_map(|row| match row.get("external_ids")? {
            Value::Map(map) => map.get(&Atom::from("iface-id"))?.as_str().map(str::to_owned),
            _ => None,
        })
        .filter(|id| !id.trim().is_empty())
        .map(|id| id.trim().to_owned())
        .collect()
}

/// The `logical_port`s of Port_Binding rows.
pub fn logical_ports(rows: &[Row]) -> BTreeSet<String> {
    rows.iter()
        .filter_map(|row| match row.get("logical_port")? {
            Value::Atom(atom) => atom.as_str().map(str::to_owned),
            _ => None,
        })
        .collect()
}

/// OVS interfaces without a binding on this chassis, sorted.
pub fn unbound(ovs: &BTreeSet<String>, sb: &BTreeSet<String>) -> Vec<String> {
    ovs.difference(sb).cloned().collect()
}

/// Why the port bindings could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    #[error("{database}: {source}")]
    Ovsdb {
        database: &'static str,
        source: kube_ovn_ovsdb::Error,
    },
    #[error("{database}: no answer within {timeout:?}")]
    Timeout {
        database: &'static str,
        timeout: Duration,
    },
    #[error("no Southbound address (neither --ovn-sb-address nor OVN_SB_SERVICE_HOST is set)")]
    NoSouthbound,
    #[error("no Southbound Chassis has hostname {0:?}")]
    NoChassis(String),
    #[error("{0} Southbound Chassis rows have hostname {1:?}")]
    ManyChassis(usize, String),
}

/// Clients of the node's Open_vSwitch database and of the Southbound database, transactions
/// only (no replica: the Port_Binding table is the whole cluster's).
pub struct Databases {
    vswitch: Client,
    sb: Option<Client>,
    timeout: Duration,
}

impl Databases {
    pub fn start(
        vswitch: &str,
        vswitch_name: &str,
        sb: Option<&str>,
        timeout: Duration,
    ) -> Result<Self, kube_ovn_ovsdb::Error> {
        let client = |remote: &str, db: &str| -> Result<Client, kube_ovn_ovsdb::Error> {
            let mut config = ClientConfig::new(Remote::parse_list(remote)?, db).monitor(MonitorTables::None);
            config.leader_only = false;
            config.connect_timeout = timeout;
            config.request_timeout = timeout;
            Ok(Client::start(config))
        };
        Ok(Self {
            vswitch: client(vswitch, vswitch_name)?,
            sb: sb.map(|remote| client(remote, "OVN_Southbound")).transpose()?,
            timeout,
        })
    }

    async fn select(
        &self,
        client: &Client,
        database: &'static str,
        op: Operation,
    ) -> Result<Vec<Row>, BindingError> {
        let reply = tokio::time::timeout(self.timeout * 2, client.transact(vec![op]))
            .await
            .map_err(|_| BindingError::Timeout {
                database,
                timeout: self.timeout * 2,
            })?
            .map_err(|source| BindingError::Ovsdb { database, source })?;
        Ok(reply
            .first()
            .and_then(|r| r.rows())
            .map(<[Row]>::to_vec)
            .unwrap_or_default())
    }

    /// The interfaces on this node without a Southbound binding on `node`'s chassis.
    pub async fn unbound_ports(&self, node: &str) -> Result<Vec<String>, BindingError> {
        let interfaces = Operation::Select {
            table: "Interface".into(),
            conditions: vec![],
            columns: Some(vec!["external_ids".into()]),
        };
        let ovs = iface_ids(&self.select(&self.vswitch, "Open_vSwitch", interfaces).await?);
        let sb = self.sb.as_ref().ok_or(BindingError::NoSouthbound)?;
        let chassis = Operation::Select {
            table: "Chassis".into(),
            conditions: vec![Condition::eq("hostname", node)],
            columns: Some(vec!["_uuid".into()]),
        };
        let rows = self.select(sb, "OVN_Southbound", chassis).await?;
        let uuid = match rows.as_slice() {
            [row] => row.get("_uuid").and_then(|v| match v {
                Value::Atom(a) => a.as_uuid(),
                _ => None,
            }),
            [] => return Err(BindingError::NoChassis(node.to_owned())),
            many => return Err(BindingError::ManyChassis(many.len(), node.to_owned())),
        }
        .ok_or_else(|| BindingError::NoChassis(node.to_owned()))?;
        let bindings = Operation::Select {
            table: "Port_Binding".into(),
            conditions: vec![Condition::eq("chassis", uuid)],
            columns: Some(vec!["logical_port".into()]),
        };
        let sb_ports = logical_ports(&self.select(sb, "OVN_Southbound", bindings).await?);
        Ok(unbound(&ovs, &sb_ports))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_beside_the_pidfile() {
        let pidfile = Path::new("/run/openvswitch/ovs-vswitchd.pid");
        let listing: Vec<String> = [
            "ovs-vswitchd.77.ctl",
            "ovs-vswitchd.ctl",
            "ovsdb-server.9.ctl",
            "ovs-vswitchd.x.ctl",
            "ovs-vswitchd.12.ctl",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            control_sockets(pidfile, "ovs-vswitchd", Some(77), &listing),
            ["ovs-vswitchd.77.ctl", "ovs-vswitchd.ctl", "ovs-vswitchd.12.ctl"]
                .map(|n| PathBuf::from("/run/openvswitch").join(n))
                .to_vec()
        );
        // No pidfile and no socket: nothing to try.
        assert!(control_sockets(pidfile, "ovn-controller", None, &listing).is_empty());
    }

    #[test]
    fn unixctl_replies() {
        let ok = json!({"id": 0, "result": "ovs-vswitchd (Open vSwitch) 3.1.0\n", "error": null});
        assert_eq!(
            parse_unixctl_reply(&ok).unwrap(),
            "ovs-vswitchd (Open vSwitch) 3.1.0\n"
        );
        let err = json!({"id": 0, "result": null, "error": "\"nope\" is not a valid command"});
        assert!(
            parse_unixctl_reply(&err)
                .unwrap_err()
                .contains("not a valid command")
        );
        assert!(parse_unixctl_reply(&json!({"id": 0})).is_err());
    }

    #[test]
    fn bindings_compare_iface_ids_with_logical_ports() {
        let iface = |ids: &[(&str, &str)]| -> Row {
            let map = ids
                .iter()
                .map(|(k, v)| (Atom::from(*k), Atom::from(*v)))
                .collect();
            [("external_ids".to_owned(), Value::Map(map))]
                .into_iter()
                .collect()
        };
        let ovs = iface_ids(&[
            iface(&[("iface-id", "pinger-a.kube-system"), ("vendor", "kube-ovn")]),
            iface(&[("iface-id", "web.default")]),
            iface(&[("iface-id", "")]),
            iface(&[]),
        ]);
        let port = |name: &str| -> Row {
            [("logical_port".to_owned(), Value::from(name))]
                .into_iter()
                .collect()
        };
        let sb = logical_ports(&[port("pinger-a.kube-system"), port("node-n1")]);
        assert_eq!(unbound(&ovs, &sb), vec!["web.default".to_owned()]);
    }
}
