//! [`plan_pod`] on inputs built in memory: a northbound replica with the rows a case needs, a pod,
//! its effective subnet and allocation; each case asserts on the plan's rows (read back by name),
//! the groups it waits for and the annotations it writes.

use std::collections::HashMap;
use std::sync::Arc;

use kube_ovn_api::annotations::MacAddr;
use kube_ovn_ovsdb::cache::RowUpdate;
use kube_ovn_ovsdb::{DatabaseSchema, Operation};
use serde_json::json;

use super::*;

const ROUTER: &str = "ovn-cluster";
const MAC: MacAddr = MacAddr([0, 0, 0, 0x0a, 0x10, 0x05]);

/// A replica with the tables a pod's plan touches, as OVN's NB schema indexes them: ports and
/// port groups unique by name, switches not.
struct Nb {
    cache: DbCache,
}

impl Nb {
    fn new() -> Self {
        let schema: DatabaseSchema = serde_json::from_value(json!({
            "name": "OVN_Northbound", "version": "7.0.0", "tables": {
                "Logical_Switch_Port": {"columns": {"name": {"type": "string"}}, "indexes": [["name"]]},
                "Port_Group": {"columns": {"name": {"type": "string"}}, "isRoot": true, "indexes": [["name"]]},
                "Logical_Switch": {"columns": {"name": {"type": "string"}}, "isRoot": true}}}))
        .unwrap();
        Self {
            cache: DbCache::new(Some(Arc::new(schema))),
        }
    }

    fn add<T: Table>(&mut self, row: &T) -> Uuid {
        let uuid = Uuid::new_v4();
        let update = RowUpdate {
            old: None,
            new: Some(row.to_row()),
        };
        self.cache.apply_update(HashMap::from([(
            T::NAME.to_owned(),
            HashMap::from([(uuid, update)]),
        )]));
        uuid
    }

    fn switch(&mut self, name: &str, ports: &[Uuid]) -> Uuid {
        self.add(&LogicalSwitch {
            name: name.into(),
            ports: ports.to_vec(),
            ..Default::default()
        })
    }

    /// A node's port group, as the node and subnet reconcilers write it.
    fn group(&mut self, name: &str, node: &str, ports: &[Uuid]) -> Uuid {
        self.add(&PortGroup {
            name: name.into(),
            ports: ports.to_vec(),
            external_ids: owned_ids(&[("node", node)]),
            ..Default::default()
        })
    }

    /// The name of the row a condition `_uuid == <uuid>` or a mutation value refers to.
    fn name_of(&self, table: &str, atom: &Atom) -> String {
        match atom {
            Atom::Uuid(u) => self
                .cache
                .row(table, u)
                .and_then(|r| kube_ovn_ovsdb::index::row_name(r))
                .unwrap_or("?")
                .to_owned(),
            Atom::NamedUuid(n) => format!("new:{n}"),
            other => format!("{other:?}"),
        }
    }

    /// The plan's operations, one line each, rows named: `insert <table> <name>`, `update <table>
    /// <name> <columns>`, `<table> <name>: insert|delete <column> <members>`.
    fn summary(&self, plan: &Plan) -> Vec<String> {
        let target = |table: &str, conditions: &[kube_ovn_ovsdb::Condition]| match conditions {
            [c] if c.column == "_uuid" => match &c.value {
                Value::Atom(a) => self.name_of(table, a),
                other => format!("{other:?}"),
            },
            other => format!("{other:?}"),
        };
        plan.ops()
            .iter()
            .map(|op| match op {
                Operation::Insert { table, row, .. } => {
                    format!(
                        "insert {table} {}",
                        kube_ovn_ovsdb::index::row_name(row).unwrap_or("?")
                    )
                }
                Operation::Update {
                    table,
                    conditions,
                    row,
                } => {
                    let columns: Vec<&str> = row.keys().map(String::as_str).collect();
                    format!(
                        "update {table} {} {}",
                        target(table, conditions),
                        columns.join(",")
                    )
                }
                Operation::Mutate {
                    table,
                    conditions,
                    mutations,
                } => {
                    let m = &mutations[0];
                    let members: Vec<String> = m
                        .value
                        .set_elements()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|a| self.name_of(LogicalSwitchPort::NAME, a))
                        .collect();
                    format!(
                        "{table} {}: {:?} {} {}",
                        target(table, conditions),
                        m.mutator,
                        m.column,
                        members.join(",")
                    )
                    .to_lowercase()
                }
                other => format!("{other:?}"),
            })
            .collect()
    }
}

/// The port the plan inserts or the columns it updates, decoded.
fn written_port(plan: &Plan) -> LogicalSwitchPort {
    let row = plan
        .ops()
        .iter()
        .find_map(|op| match op {
            Operation::Insert { table, row, .. } | Operation::Update { table, row, .. }
                if table == LogicalSwitchPort::NAME =>
            {
                Some(row)
            }
            _ => None,
        })
        .expect("the plan writes the port");
    LogicalSwitchPort::from_row(Uuid::nil(), row).unwrap()
}

fn pod(node: Option<&str>, annotations: serde_json::Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeName": node, "containers": [{"name": "c"}]}});
    v["metadata"]["annotations"] = annotations;
    serde_json::from_value(v).unwrap()
}

fn subnet(vpc: &str, gateway_type: &str, cidrs: &[&str], gateways: &[&str]) -> Effective {
    Effective {
        cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
        gateways: gateways.iter().map(|g| g.parse().unwrap()).collect(),
        exclude_ips: Vec::new(),
        protocol: "IPv4",
        provider: "ovn".into(),
        vpc: vpc.into(),
        gateway_type: gateway_type.into(),
        underlay: None,
    }
}

fn default_subnet() -> Effective {
    subnet(ROUTER, "distributed", &["10.16.0.0/16"], &["10.16.0.1"])
}

fn v4(addr: &str) -> Allocation {
    Allocation {
        v4: Some(addr.parse().unwrap()),
        v6: None,
        mac: MAC,
        pool: String::new(),
    }
}

fn plan(nb: &Nb, pod: &Pod, subnet_name: &str, eff: &Effective, alloc: &Allocation) -> Result<PodPlan> {
    let input = PodInput {
        pod,
        key: "p.ns",
        subnet: subnet_name,
        effective: eff,
        alloc,
        cluster_router: ROUTER,
        vlan: None,
    };
    plan_pod(&input, &nb.cache)
}

/// `want`'s annotations as a map of owned strings.
fn annotations(want: &[(&str, &str)]) -> BTreeMap<String, String> {
    want.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn a_plain_pod_gets_its_port_its_node_groups_and_the_whole_handshake() {
    let mut nb = Nb::new();
    nb.switch("ovn-default", &[]);
    nb.group("node.n1", "n1", &[]);
    nb.group("ovn.default.n1", "n1", &[]);
    let p = plan(
        &nb,
        &pod(Some("n1"), json!({})),
        "ovn-default",
        &default_subnet(),
        &v4("10.16.0.5"),
    )
    .unwrap();

    assert_eq!(
        nb.summary(&p.rows),
        [
            "insert Logical_Switch_Port p.ns",
            "logical_switch ovn-default: insert ports new:row1",
            "port_group node.n1: insert ports new:row1",
            "port_group ovn.default.n1: insert ports new:row1",
        ]
    );
    let port = written_port(&p.rows);
    assert_eq!(port.addresses, ["00:00:00:0a:10:05 10.16.0.5"]);
    assert!(port.port_security.is_empty(), "no port security unless asked for");
    assert_eq!(
        port.external_ids,
        annotations(&[("vendor", "kube-ovn"), ("pod", "ns/p"), ("ls", "ovn-default")])
    );
    assert!(p.missing_groups.is_empty());
    // The address and routed=true in one patch: the groups exist already.
    assert_eq!(
        p.annotations,
        annotations(&[
            (keys::ALLOCATED, "true"),
            (keys::CIDR, "10.16.0.0/16"),
            (keys::GATEWAY, "10.16.0.1"),
            (keys::IP_ADDRESS, "10.16.0.5"),
            (keys::LOGICAL_ROUTER, ROUTER),
            (keys::LOGICAL_SWITCH, "ovn-default"),
            (keys::MAC_ADDRESS, "00:00:00:0a:10:05"),
            (keys::ROUTED, "true"),
        ])
    );
}

#[test]
fn fixed_ip_and_mac_with_port_security_are_the_ports_addresses_and_its_security() {
    let mut nb = Nb::new();
    nb.switch("ovn-default", &[]);
    nb.group("node.n1", "n1", &[]);
    nb.group("ovn.default.n1", "n1", &[]);
    let fixed = pod(
        Some("n1"),
        json!({keys::IP_ADDRESS: "10.16.0.9", keys::MAC_ADDRESS: "00:00:00:0a:10:05",
               keys::PORT_SECURITY: "true"}),
    );
    let p = plan(&nb, &fixed, "ovn-default", &default_subnet(), &v4("10.16.0.9")).unwrap();

    let port = written_port(&p.rows);
    assert_eq!(port.addresses, ["00:00:00:0a:10:05 10.16.0.9"]);
    assert_eq!(port.port_security, port.addresses);
    // The pod names its address and MAC, but not the rest of the handshake: all of it is written,
    // its own values unchanged.
    assert_eq!(p.annotations[keys::IP_ADDRESS], "10.16.0.9");
    assert_eq!(p.annotations[keys::MAC_ADDRESS], "00:00:00:0a:10:05");
    assert_eq!(p.annotations[keys::CIDR], "10.16.0.0/16");
    assert_eq!(p.annotations[keys::ROUTED], "true");
}

#[test]
fn a_pod_in_a_custom_vpc_joins_no_node_group_and_is_routed_at_once() {
    let mut nb = Nb::new();
    nb.switch("tenant", &[]);
    // The default VPC's groups exist, but a custom VPC's pod is not theirs.
    nb.group("node.n1", "n1", &[]);
    let eff = subnet("vpc1", "distributed", &["192.168.0.0/24"], &["192.168.0.1"]);
    let p = plan(
        &nb,
        &pod(Some("n1"), json!({})),
        "tenant",
        &eff,
        &v4("192.168.0.2"),
    )
    .unwrap();

    assert_eq!(
        nb.summary(&p.rows),
        [
            "insert Logical_Switch_Port p.ns",
            "logical_switch tenant: insert ports new:row1"
        ]
    );
    assert!(p.missing_groups.is_empty());
    assert_eq!(p.annotations[keys::LOGICAL_ROUTER], "vpc1");
    assert_eq!(p.annotations[keys::LOGICAL_SWITCH], "tenant");
    assert_eq!(p.annotations[keys::GATEWAY], "192.168.0.1");
    assert_eq!(p.annotations[keys::ROUTED], "true");
}

#[test]
fn missing_port_groups_are_waited_for_and_routed_is_not_written() {
    let mut nb = Nb::new();
    nb.switch("ovn-default", &[]);
    nb.group("node.n1", "n1", &[]);
    let p = plan(
        &nb,
        &pod(Some("n1"), json!({})),
        "ovn-default",
        &default_subnet(),
        &v4("10.16.0.5"),
    )
    .unwrap();
    assert_eq!(p.missing_groups, ["ovn.default.n1"]);
    assert!(
        nb.summary(&p.rows)
            .contains(&"port_group node.n1: insert ports new:row1".to_owned()),
        "the group that exists is joined already"
    );
    assert_eq!(p.annotations[keys::IP_ADDRESS], "10.16.0.5");
    assert!(!p.annotations.contains_key(keys::ROUTED));

    // A centralized subnet has no per-node gateway group; a pod not scheduled yet joins none.
    let centralized = subnet(ROUTER, "centralized", &["10.16.0.0/16"], &["10.16.0.1"]);
    let p = plan(
        &nb,
        &pod(Some("n2"), json!({})),
        "ovn-default",
        &centralized,
        &v4("10.16.0.5"),
    )
    .unwrap();
    assert_eq!(p.missing_groups, ["node.n2"]);
    let p = plan(
        &nb,
        &pod(None, json!({})),
        "ovn-default",
        &default_subnet(),
        &v4("10.16.0.5"),
    )
    .unwrap();
    assert!(p.missing_groups.is_empty());
    assert!(
        !p.annotations.contains_key(keys::ROUTED),
        "routed waits for a node"
    );
}

#[test]
fn a_missing_switch_is_waited_for() {
    let p = plan(
        &Nb::new(),
        &pod(Some("n1"), json!({})),
        "ovn-default",
        &default_subnet(),
        &v4("10.16.0.5"),
    );
    assert!(
        matches!(&p, Err(Error::NotReady(m)) if m == "logical switch ovn-default does not exist yet"),
        "{p:?}"
    );
}

#[test]
fn a_pod_whose_port_and_annotations_match_gets_an_empty_plan() {
    let eff = default_subnet();
    let alloc = v4("10.16.0.5");
    let mut want = handshake("ovn-default", ROUTER, &eff.cidrs, &eff.gateways, &alloc);
    let mut nb = Nb::new();
    let port = nb.add(&LogicalSwitchPort {
        name: "p.ns".into(),
        addresses: vec!["00:00:00:0a:10:05 10.16.0.5".into()],
        external_ids: owned_ids(&[("pod", "ns/p"), ("ls", "ovn-default")]),
        // northd's column, not ours: left alone.
        up: Some(true),
        ..Default::default()
    });
    nb.switch("ovn-default", &[port]);
    nb.group("node.n1", "n1", &[port]);
    nb.group("ovn.default.n1", "n1", &[port]);

    let addressed = pod(Some("n1"), json!(want));
    let p = plan(&nb, &addressed, "ovn-default", &eff, &alloc).unwrap();
    assert!(p.rows.is_empty(), "{:?}", nb.summary(&p.rows));
    assert!(p.missing_groups.is_empty());
    // Addressed, not yet routed: routed alone, not the address again.
    assert_eq!(p.annotations, annotations(&[(keys::ROUTED, "true")]));

    want.insert(keys::ROUTED.into(), "true".into());
    let done = pod(Some("n1"), json!(want));
    let p = plan(&nb, &done, "ovn-default", &eff, &alloc).unwrap();
    assert!(p.rows.is_empty() && p.missing_groups.is_empty() && p.annotations.is_empty());

    // Port security asked for since: the port's one column is updated, nothing else.
    let mut secured = done.clone();
    secured
        .annotations_mut()
        .insert(keys::PORT_SECURITY.into(), "true".into());
    let p = plan(&nb, &secured, "ovn-default", &eff, &alloc).unwrap();
    assert_eq!(
        nb.summary(&p.rows),
        ["update Logical_Switch_Port p.ns port_security"]
    );
}

#[test]
fn a_dual_stack_pod_has_both_addresses_on_one_port_line_and_in_each_annotation() {
    let mut nb = Nb::new();
    nb.switch("dual", &[]);
    let eff = subnet(
        ROUTER,
        "centralized",
        &["10.17.0.0/16", "fd00:10:17::/64"],
        &["10.17.0.1", "fd00:10:17::1"],
    );
    let alloc = Allocation {
        v4: Some("10.17.0.5".parse().unwrap()),
        v6: Some("fd00:10:17::5".parse().unwrap()),
        mac: MAC,
        pool: String::new(),
    };
    let p = plan(&nb, &pod(None, json!({})), "dual", &eff, &alloc).unwrap();
    assert_eq!(
        written_port(&p.rows).addresses,
        ["00:00:00:0a:10:05 10.17.0.5 fd00:10:17::5"]
    );
    assert_eq!(p.annotations[keys::IP_ADDRESS], "10.17.0.5,fd00:10:17::5");
    assert_eq!(p.annotations[keys::CIDR], "10.17.0.0/16,fd00:10:17::/64");
    assert_eq!(p.annotations[keys::GATEWAY], "10.17.0.1,fd00:10:17::1");
}

#[test]
fn a_port_that_moved_leaves_its_old_switch_and_the_old_nodes_groups() {
    let eff = default_subnet();
    let alloc = v4("10.16.0.5");
    let mut nb = Nb::new();
    let port = nb.add(&LogicalSwitchPort {
        name: "p.ns".into(),
        addresses: vec!["00:00:00:0a:10:05 10.16.0.5".into()],
        external_ids: owned_ids(&[("pod", "ns/p"), ("ls", "old")]),
        ..Default::default()
    });
    nb.switch("old", &[port]);
    nb.switch("ovn-default", &[]);
    nb.group("node.n1", "n1", &[port]);
    nb.group("node.n2", "n2", &[]);
    nb.group("ovn.default.n2", "n2", &[]);
    // Not a node's group (a network policy's): membership there is not ours to change.
    nb.add(&PortGroup {
        name: "np.ns".into(),
        ports: vec![port],
        ..Default::default()
    });

    let p = plan(&nb, &pod(Some("n2"), json!({})), "ovn-default", &eff, &alloc).unwrap();
    let mut ops = nb.summary(&p.rows);
    ops.sort();
    assert_eq!(
        ops,
        [
            "logical_switch old: delete ports p.ns",
            "logical_switch ovn-default: insert ports p.ns",
            "port_group node.n1: delete ports p.ns",
            "port_group node.n2: insert ports p.ns",
            "port_group ovn.default.n2: insert ports p.ns",
            "update Logical_Switch_Port p.ns external_ids",
        ]
    );
}

/// A tenant writes its pod's annotations. On a plain underlay subnet the handshake has no
/// `logical_router` (the physical router is the gateway), so one the tenant wrote — say a custom
/// VPC's router, which a Service's VPC is read from — would stay forever; it is removed, and so
/// are `vlan_id` and `provider_network` on an overlay pod.
#[test]
fn handshake_keys_the_subnet_does_not_give_are_removed_from_the_pod() {
    let mut nb = Nb::new();
    nb.switch("ul", &[]);
    nb.group("node.n1", "n1", &[]);
    let mut underlay = subnet(ROUTER, "distributed", &["172.17.0.0/24"], &["172.17.0.1"]);
    underlay.underlay = Some(crate::reconcile::subnet_spec::Underlay {
        vlan: "v100".into(),
        logical_gateway: false,
        u2o: false,
        u2o_ips: Vec::new(),
        overlay_only: false,
    });
    let forged = pod(
        Some("n1"),
        json!({(keys::LOGICAL_ROUTER): "vpc-of-others", (keys::VLAN_ID): "200"}),
    );
    let input = PodInput {
        pod: &forged,
        key: "p.ns",
        subnet: "ul",
        effective: &underlay,
        alloc: &v4("172.17.0.5"),
        cluster_router: ROUTER,
        vlan: Some((100, "pn1")),
    };
    let p = plan_pod(&input, &nb.cache).unwrap();
    assert_eq!(p.removed, [keys::LOGICAL_ROUTER]);
    assert_eq!(
        p.annotations[keys::VLAN_ID],
        "100",
        "the Vlan's ID, not the tenant's"
    );
    assert_eq!(p.annotations[keys::PROVIDER_NETWORK], "pn1");

    nb.switch("ovn-default", &[]);
    nb.group("ovn.default.n1", "n1", &[]);
    let overlay_pod = pod(
        Some("n1"),
        json!({(keys::PROVIDER_NETWORK): "pn1", (keys::VLAN_ID): "100"}),
    );
    let p = plan(
        &nb,
        &overlay_pod,
        "ovn-default",
        &default_subnet(),
        &v4("10.16.0.5"),
    )
    .unwrap();
    assert_eq!(p.removed, [keys::VLAN_ID, keys::PROVIDER_NETWORK]);
    assert_eq!(p.annotations[keys::LOGICAL_ROUTER], ROUTER);
    // Nothing to remove on a pod carrying only what its subnet gives.
    let clean = plan(
        &nb,
        &pod(Some("n1"), json!({})),
        "ovn-default",
        &default_subnet(),
        &v4("10.16.0.5"),
    );
    assert!(clean.unwrap().removed.is_empty());
}
