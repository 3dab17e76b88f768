//! A VPC router's gateway port on an external subnet, as northbound rows (pure: plans over the
//! replica).
//!
//! Kube-OVN (`CreateLogicalPatchPort`, `CreateGatewayChassises`): router port `<vpc>-<subnet>`
//! (`networks` = the lrp OvnEip's address with the subnet's prefix, `mac` = its MAC) patched to
//! switch port `<subnet>-<vpc>` (type `router`, `addresses=["router"]`, `options:router-port`)
//! on the external subnet's switch, and one Gateway_Chassis row `<lrp>-<chassis>` per gateway
//! chassis (`external_ids:lrp=<lrp>`), which makes the router port a distributed gateway port:
//! ovn-northd creates `cr-<lrp>` in the southbound database and the chassis with the highest
//! priority alive binds it.
//!
//! Ours (plan §3.0.10): the switch port also gets `options:nat-addresses=router`, so the chassis
//! that binds `cr-<lrp>` sends gratuitous ARPs for the port's address and the router's NAT
//! addresses (ovn-nb(5)), and the external network relearns where they are as soon as the port
//! moves instead of when its MAC table entry ages out. Our rows also carry
//! `external_ids:vpc=<vpc>` and `external_subnet=<subnet>`, so a restart finds connections whose
//! subnet left the spec, and garbage collection those whose VPC is gone.

use std::collections::{BTreeMap, BTreeSet};

use kube_ovn_api::names;
use kube_ovn_ovsdb::tables::nb::{GatewayChassis, LogicalRouter, LogicalRouterPort, LogicalSwitchPort};
use kube_ovn_ovsdb::{Atom, DbCache, Table, Uuid, Value};

use super::chassis::row_name;
use crate::ovn::plan::{Plan, RowRef, is_owned_by, owned_ids};
use crate::ovn::topology::{ensure_switch_port, remove_router_attachment};

/// `external_ids` key naming the external subnet of our router and switch ports.
pub const EXTERNAL_SUBNET_KEY: &str = "external_subnet";

/// The router port of VPC `vpc` on external subnet `subnet` (also its lrp OvnEip's name).
pub fn lrp_name(vpc: &str, subnet: &str) -> String {
    names::router_port_name(vpc, subnet)
}

/// The switch port on the external subnet's switch that the router port is patched to.
pub fn lsp_name(vpc: &str, subnet: &str) -> String {
    names::switch_router_port_name(subnet, vpc)
}

/// One VPC's connection to one external subnet, as it should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub vpc: String,
    pub subnet: String,
    /// `<address>/<subnet prefix>` per family of the lrp OvnEip.
    pub networks: Vec<String>,
    pub mac: String,
    /// The gateway chassis in order, with their priorities ([`super::chassis::order`]).
    pub chassis: Vec<(String, i64)>,
    /// More `external_ids` for the router port (the default VPC's ConfigMap path records the
    /// gateway node list it applied there).
    pub extra_ids: BTreeMap<String, String>,
}

fn owner<'a>(vpc: &'a str, subnet: &'a str) -> [(&'a str, &'a str); 2] {
    [("vpc", vpc), (EXTERNAL_SUBNET_KEY, subnet)]
}

/// The rows of `c`: the router port, the switch port and the Gateway_Chassis rows (pure).
pub fn rows(c: &Connection) -> (LogicalRouterPort, LogicalSwitchPort, Vec<GatewayChassis>) {
    let lrp = lrp_name(&c.vpc, &c.subnet);
    let ids = owned_ids(&owner(&c.vpc, &c.subnet));
    let mut lrp_ids = ids.clone();
    lrp_ids.extend(c.extra_ids.clone());
    let router_port = LogicalRouterPort {
        name: lrp.clone(),
        mac: c.mac.clone(),
        networks: c.networks.clone(),
        external_ids: lrp_ids,
        ..Default::default()
    };
    let switch_port = LogicalSwitchPort {
        name: lsp_name(&c.vpc, &c.subnet),
        r#type: "router".into(),
        addresses: vec!["router".into()],
        options: BTreeMap::from([
            ("router-port".to_owned(), lrp.clone()),
            ("nat-addresses".to_owned(), "router".to_owned()),
        ]),
        external_ids: ids,
        ..Default::default()
    };
    let gateway_chassis = c
        .chassis
        .iter()
        .map(|(chassis, priority)| GatewayChassis {
            name: row_name(&lrp, chassis),
            chassis_name: chassis.clone(),
            priority: *priority,
            external_ids: owned_ids(&[("lrp", lrp.as_str())]),
            ..Default::default()
        })
        .collect();
    (router_port, switch_port, gateway_chassis)
}

/// Plans `c` on top of the replica: creates what is missing, corrects what differs (priorities
/// included) and removes the Gateway_Chassis rows of chassis no longer listed. Nothing when the
/// rows are as they should be. `router` is the VPC's router row; the external subnet's switch
/// must exist (the caller checks).
pub fn connect(plan: &mut Plan, cache: &DbCache, router: &RowRef, switch: &RowRef, c: &Connection) {
    let (lrp, lsp, gateway_chassis) = rows(c);
    let lrp_ref = plan.ensure(cache, &lrp.name, &lrp, &["mac", "networks", "external_ids"]);
    let on_router = set_of(cache, LogicalRouter::NAME, &c.vpc, "ports");
    plan.add_members(
        LogicalRouter::NAME,
        router,
        "ports",
        |u| on_router.contains(u),
        std::slice::from_ref(&lrp_ref),
    );
    ensure_switch_port(
        plan,
        cache,
        switch,
        &c.subnet,
        &lsp,
        &["type", "addresses", "options", "external_ids"],
    );
    let listed = set_of(cache, LogicalRouterPort::NAME, &lrp.name, "gateway_chassis");
    let wanted: BTreeSet<&str> = gateway_chassis.iter().map(|g| g.name.as_str()).collect();
    let refs: Vec<RowRef> = gateway_chassis
        .iter()
        .map(|g| plan.ensure(cache, &g.name, g, &["chassis_name", "priority", "external_ids"]))
        .collect();
    plan.add_members(
        LogicalRouterPort::NAME,
        &lrp_ref,
        "gateway_chassis",
        |u| listed.contains(u),
        &refs,
    );
    let stale: Vec<Uuid> = listed
        .iter()
        .filter(|u| {
            cache
                .get::<GatewayChassis>(u)
                .ok()
                .flatten()
                .is_none_or(|g| !wanted.contains(g.name.as_str()))
        })
        .copied()
        .collect();
    plan.remove_members(LogicalRouterPort::NAME, &lrp_ref, "gateway_chassis", &stale);
}

/// Removes VPC `vpc`'s connection to `subnet`: its router port (and with it the Gateway_Chassis
/// rows, which only it references) and the switch port.
pub fn disconnect(plan: &mut Plan, cache: &DbCache, vpc: &str, subnet: &str) {
    remove_router_attachment(plan, cache, vpc, subnet);
}

/// The external subnets VPC `vpc`'s router is connected to, by our router ports' `external_ids`.
pub fn connected(cache: &DbCache, vpc: &str) -> BTreeSet<String> {
    set_of(cache, LogicalRouter::NAME, vpc, "ports")
        .iter()
        .filter_map(|u| cache.get::<LogicalRouterPort>(u).ok().flatten())
        .filter(|p| is_owned_by(&p.external_ids, &[("vpc", vpc)]))
        .filter_map(|p| {
            let subnet = p.external_ids.get(EXTERNAL_SUBNET_KEY)?;
            (p.name == lrp_name(vpc, subnet)).then(|| subnet.clone())
        })
        .collect()
}

/// The chassis listed now for router port `lrp` (by their Gateway_Chassis rows).
pub fn listed_chassis(cache: &DbCache, lrp: &str) -> BTreeSet<String> {
    set_of(cache, LogicalRouterPort::NAME, lrp, "gateway_chassis")
        .iter()
        .filter_map(|u| cache.get::<GatewayChassis>(u).ok().flatten())
        .map(|g| g.chassis_name)
        .collect()
}

/// The UUIDs in reference column `column` of the row of `table` named `name` (empty if none).
fn set_of(cache: &DbCache, table: &str, name: &str, column: &str) -> BTreeSet<Uuid> {
    cache
        .uuids_by_name(table, name)
        .first()
        .and_then(|u| cache.row(table, u))
        .and_then(|row| match row.get(column) {
            Some(Value::Set(s)) => Some(
                s.iter()
                    .filter_map(|a| match a {
                        Atom::Uuid(u) => Some(*u),
                        _ => None,
                    })
                    .collect(),
            ),
            Some(Value::Atom(Atom::Uuid(u))) => Some(BTreeSet::from([*u])),
            _ => None,
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_have_kube_ovns_names_and_our_gratuitous_arps() {
        let c = Connection {
            vpc: "vpc1".into(),
            subnet: "external".into(),
            networks: vec!["10.200.0.100/24".into()],
            mac: "00:00:00:aa:bb:cc".into(),
            chassis: vec![("c2".into(), 100), ("c1".into(), 99)],
            extra_ids: BTreeMap::new(),
        };
        let (lrp, lsp, gc) = rows(&c);
        assert_eq!(lrp.name, "vpc1-external");
        assert_eq!(lrp.networks, ["10.200.0.100/24"]);
        assert_eq!(lrp.mac, "00:00:00:aa:bb:cc");
        assert_eq!(lrp.external_ids["external_subnet"], "external");
        assert_eq!(lrp.external_ids["vendor"], "kube-ovn");
        assert_eq!(lsp.name, "external-vpc1");
        assert_eq!(lsp.r#type, "router");
        assert_eq!(lsp.addresses, ["router"]);
        assert_eq!(lsp.options["router-port"], "vpc1-external");
        assert_eq!(lsp.options["nat-addresses"], "router");
        let names: Vec<(&str, &str, i64)> = gc
            .iter()
            .map(|g| (g.name.as_str(), g.chassis_name.as_str(), g.priority))
            .collect();
        assert_eq!(
            names,
            [("vpc1-external-c2", "c2", 100), ("vpc1-external-c1", "c1", 99)]
        );
        assert_eq!(gc[0].external_ids["lrp"], "vpc1-external");
    }
}
