//! What OVN holds, as Kube-OVN's monitor exports it: chassis (SB `Chassis` and its `Encap` IP),
//! logical switches (NB, with the tunnel key of their SB `Datapath_Binding`) and logical switch
//! ports (NB, joined with their SB `Port_Binding`). Pure: rows in, [`Inventory`] out; the rows
//! come from the replicas of [`crate::collect`]'s OVSDB clients.

use std::collections::{BTreeMap, HashMap};

use kube_ovn_ovsdb::tables::nb::{LogicalSwitch, LogicalSwitchPort};
use kube_ovn_ovsdb::{Uuid, ovsdb_table};

type Map = BTreeMap<String, String>;

ovsdb_table! {
    /// A chassis, with the encapsulations that carry its tunnel IP.
    pub struct SbChassis in "Chassis" {
        name: String => "name",
        hostname: String => "hostname",
        encaps: Vec<Uuid> => "encaps",
    }
}

ovsdb_table! {
    pub struct SbEncap in "Encap" {
        ip: String => "ip",
    }
}

ovsdb_table! {
    /// ovn-northd writes `logical-switch` (the NB switch's UUID) into a switch's datapath.
    pub struct SbDatapathBinding in "Datapath_Binding" {
        tunnel_key: i64 => "tunnel_key",
        external_ids: Map => "external_ids",
    }
}

ovsdb_table! {
    pub struct SbPortBinding in "Port_Binding" {
        logical_port: String => "logical_port",
        chassis: Option<Uuid> => "chassis",
        datapath: Option<Uuid> => "datapath",
        tunnel_key: i64 => "tunnel_key",
    }
}

/// The NB tables the monitor replicates.
pub const NB_TABLES: &[&str] = &["Logical_Switch", "Logical_Switch_Port"];
/// The SB tables the monitor replicates (never `Logical_Flow`: it is the big one).
pub const SB_TABLES: &[&str] = &["Chassis", "Encap", "Datapath_Binding", "Port_Binding"];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    pub chassis: Vec<ChassisInfo>,
    pub switches: Vec<SwitchInfo>,
    pub ports: Vec<PortInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChassisInfo {
    pub uuid: String,
    pub name: String,
    pub hostname: String,
    /// The first encapsulation's IP (Kube-OVN's `IPAddress`), empty without one.
    pub ip: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwitchInfo {
    pub uuid: String,
    pub name: String,
    /// The UUIDs of its ports.
    pub ports: Vec<String>,
    pub external_ids: Map,
    /// 0 until ovn-northd has made its datapath.
    pub tunnel_key: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortInfo {
    pub uuid: String,
    pub name: String,
    /// The UUID of the chassis it is bound to; empty when unbound.
    pub chassis: String,
    pub switch: String,
    /// The UUID of its SB datapath.
    pub datapath: String,
    /// The UUID of its SB port binding.
    pub port_binding: String,
    pub mac: String,
    pub ip: String,
    pub tunnel_key: u64,
}

/// The NB rows and SB rows the inventory is made of.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    pub switches: Vec<LogicalSwitch>,
    pub ports: Vec<LogicalSwitchPort>,
    pub chassis: Vec<SbChassis>,
    pub encaps: Vec<SbEncap>,
    pub datapaths: Vec<SbDatapathBinding>,
    pub bindings: Vec<SbPortBinding>,
}

fn key(k: i64) -> u64 {
    u64::try_from(k).unwrap_or(0)
}

/// Joins NB and SB rows, sorted by name so scrapes compare.
pub fn build(rows: &Rows) -> Inventory {
    let encaps: HashMap<Uuid, &str> = rows.encaps.iter().map(|e| (e.uuid, e.ip.as_str())).collect();
    let mut chassis: Vec<ChassisInfo> = rows
        .chassis
        .iter()
        .map(|c| ChassisInfo {
            uuid: c.uuid.to_string(),
            name: c.name.clone(),
            hostname: c.hostname.clone(),
            ip: c
                .encaps
                .iter()
                .find_map(|e| encaps.get(e))
                .map(|ip| (*ip).to_owned())
                .unwrap_or_default(),
        })
        .collect();
    chassis.sort_by(|a, b| a.name.cmp(&b.name));

    let datapath_of: HashMap<&str, &SbDatapathBinding> = rows
        .datapaths
        .iter()
        .filter_map(|d| Some((d.external_ids.get("logical-switch")?.as_str(), d)))
        .collect();
    let mut switches: Vec<SwitchInfo> = rows
        .switches
        .iter()
        .map(|ls| SwitchInfo {
            uuid: ls.uuid.to_string(),
            name: ls.name.clone(),
            ports: ls.ports.iter().map(ToString::to_string).collect(),
            external_ids: ls.external_ids.clone(),
            tunnel_key: datapath_of
                .get(ls.uuid.to_string().as_str())
                .map_or(0, |d| key(d.tunnel_key)),
        })
        .collect();
    switches.sort_by(|a, b| a.name.cmp(&b.name));

    let switch_of: HashMap<Uuid, &str> = rows
        .switches
        .iter()
        .flat_map(|ls| ls.ports.iter().map(|p| (*p, ls.name.as_str())))
        .collect();
    let binding_of: HashMap<&str, &SbPortBinding> = rows
        .bindings
        .iter()
        .map(|b| (b.logical_port.as_str(), b))
        .collect();
    let uuid = |u: Option<Uuid>| u.map(|u| u.to_string()).unwrap_or_default();
    let mut ports: Vec<PortInfo> = rows
        .ports
        .iter()
        .map(|p| {
            let (mac, ip) = address(&p.addresses);
            let binding = binding_of.get(p.name.as_str());
            PortInfo {
                uuid: p.uuid.to_string(),
                name: p.name.clone(),
                chassis: uuid(binding.and_then(|b| b.chassis)),
                switch: switch_of
                    .get(&p.uuid)
                    .map(|s| (*s).to_owned())
                    .unwrap_or_default(),
                datapath: uuid(binding.and_then(|b| b.datapath)),
                port_binding: uuid(binding.map(|b| b.uuid)),
                mac,
                ip,
                tunnel_key: binding.map_or(0, |b| key(b.tunnel_key)),
            }
        })
        .collect();
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    Inventory {
        chassis,
        switches,
        ports,
    }
}

/// The MAC and IPs of a port's first `addresses` entry (`"0a:00:00:00:00:01 10.16.0.2 fd00::2"`);
/// `router`, `unknown` and `dynamic` stand for both, as in Kube-OVN's `lspAddress`.
pub fn address(addresses: &[String]) -> (String, String) {
    let Some(first) = addresses.first() else {
        return (String::new(), String::new());
    };
    let mut words = first.split_whitespace();
    match words.next() {
        None => (String::new(), String::new()),
        Some(special @ ("router" | "unknown" | "dynamic")) => (special.to_owned(), special.to_owned()),
        Some(mac) => (mac.to_owned(), words.collect::<Vec<_>>().join(" ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            address(&["0a:00:00:00:00:01 10.16.0.2 fd00::2".into()]),
            ("0a:00:00:00:00:01".into(), "10.16.0.2 fd00::2".into())
        );
        assert_eq!(address(&["router".into()]), ("router".into(), "router".into()));
        assert_eq!(address(&["dynamic".into()]), ("dynamic".into(), "dynamic".into()));
        assert_eq!(address(&[]), (String::new(), String::new()));
    }

    #[test]
    fn joins_nb_and_sb() {
        let (ls, lsp, ch, encap, dp, pb) = (
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
        );
        let rows = Rows {
            switches: vec![LogicalSwitch {
                uuid: ls,
                name: "ovn-default".into(),
                ports: vec![lsp],
                ..LogicalSwitch::default()
            }],
            ports: vec![LogicalSwitchPort {
                uuid: lsp,
                name: "pod1.default".into(),
                addresses: vec!["0a:00:00:00:00:01 10.16.0.2".into()],
                ..LogicalSwitchPort::default()
            }],
            chassis: vec![SbChassis {
                uuid: ch,
                name: "node1-id".into(),
                hostname: "node1".into(),
                encaps: vec![encap],
            }],
            encaps: vec![SbEncap {
                uuid: encap,
                ip: "172.18.0.2".into(),
            }],
            datapaths: vec![SbDatapathBinding {
                uuid: dp,
                tunnel_key: 3,
                external_ids: Map::from([("logical-switch".into(), ls.to_string())]),
            }],
            bindings: vec![SbPortBinding {
                uuid: pb,
                logical_port: "pod1.default".into(),
                chassis: Some(ch),
                datapath: Some(dp),
                tunnel_key: 2,
            }],
        };
        let inv = build(&rows);
        assert_eq!(inv.chassis[0].ip, "172.18.0.2");
        assert_eq!(inv.switches[0].tunnel_key, 3);
        assert_eq!(inv.switches[0].ports, vec![lsp.to_string()]);
        let p = &inv.ports[0];
        assert_eq!((p.switch.as_str(), p.tunnel_key), ("ovn-default", 2));
        assert_eq!(p.chassis, ch.to_string());
        assert_eq!(p.datapath, dp.to_string());
        assert_eq!(p.port_binding, pb.to_string());
        assert_eq!(p.ip, "10.16.0.2");
    }
}
