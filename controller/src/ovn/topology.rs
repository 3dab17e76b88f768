//! Switches, routers, the ports between them, switch ports and port groups, as Kube-OVN names
//! them (`<router>-<subnet>` / `<subnet>-<router>`, `<pod>.<ns>`, `node-<node>`, `<subnet>.<node>`).
//!
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use kube_ovn_api::annotations::MacAddr;
use kube_ovn_api::names;
use kube_ovn_ovsdb::tables::nb::{
    LogicalRouter, LogicalRouterPort, LogicalSwitch, LogicalSwitchPort, PortGroup,
};
use kube_ovn_ovsdb::{Atom, DbCache, Table, Value};

use super::plan::{Plan, RowRef, owned_ids};

/// A switch named `name` with these `other_config` and owner ids.
pub fn ensure_switch(
    plan: &mut Plan,
    cache: &DbCache,
    name: &str,
    other_config: BTreeMap<String, String>,
    owner: &[(&str, &str)],
) -> RowRef {
    let ls = LogicalSwitch {
        name: name.into(),
        other_config,
        external_ids: owned_ids(owner),
        ..Default::default()
    };
    plan.ensure(cache, name, &ls, &["other_config", "external_ids"])
}

/// The cluster router as the controller starts: created when missing, with Kube-OVN's options for
/// a VPC without peerings (`mac_binding_age_threshold=300`, `dynamic_neigh_routers=true`,
/// `always_learn_from_arp_request=false`), and otherwise left as it is. Its options belong to the
/// default VPC's reconcile, which turns ARP learning on for a U2O underlay subnet; writing them
/// here as well turned it off and on again at every controller start, each flip a recompute of
/// the router's flows by northd and by every ovn-controller.
pub fn create_router_if_missing(
    plan: &mut Plan,
    cache: &DbCache,
    name: &str,
    owner: &[(&str, &str)],
) -> RowRef {
    plan.ensure(cache, name, &vpc_router(name, owner, false), &[])
}

/// A VPC's router. Kube-OVN stops the router learning MAC bindings from every ARP request it sees
/// (`always_learn_from_arp_request=false`, which keeps the MAC_Binding table small) unless the VPC
/// talks to other routers — peerings or an external network — whose addresses it must learn.
pub fn ensure_vpc_router(
    plan: &mut Plan,
    cache: &DbCache,
    name: &str,
    owner: &[(&str, &str)],
    learn_from_arp_request: bool,
) -> RowRef {
    let lr = vpc_router(name, owner, learn_from_arp_request);
    plan.ensure(cache, name, &lr, &["options", "external_ids"])
}

fn vpc_router(name: &str, owner: &[(&str, &str)], learn_from_arp_request: bool) -> LogicalRouter {
    let mut options: BTreeMap<String, String> = [
        ("mac_binding_age_threshold", "300"),
        ("dynamic_neigh_routers", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    if !learn_from_arp_request {
        options.insert("always_learn_from_arp_request".into(), "false".into());
    }
    LogicalRouter {
        name: name.into(),
        options,
        external_ids: owned_ids(owner),
        ..Default::default()
    }
}

/// One end of a VPC peering: router port `<router>-<remote>` with the local connect address(es),
/// peered with the remote router's `<remote>-<router>` (which the remote VPC creates; until it
/// does, northd leaves the port down). `external_ids` as Kube-OVN writes them: `lr`, `vendor`.
pub fn ensure_peer_port(
    plan: &mut Plan,
    cache: &DbCache,
    router: &str,
    router_ref: &RowRef,
    remote: &str,
    networks: Vec<String>,
) {
    let name = names::router_port_name(router, remote);
    let mac = cache
        .by_name::<LogicalRouterPort>(&name)
        .ok()
        .flatten()
        .map_or_else(|| router_port_mac(&name).to_string(), |p| p.mac);
    let lrp = LogicalRouterPort {
        name: name.clone(),
        mac,
        networks,
        peer: Some(names::router_port_name(remote, router)),
        external_ids: owned_ids(&[("lr", router)]),
        ..Default::default()
    };
    let port = plan.ensure(cache, &name, &lrp, &["mac", "networks", "peer", "external_ids"]);
    let is_member = member_test(cache, LogicalRouter::NAME, router);
    plan.add_members(LogicalRouter::NAME, router_ref, "ports", is_member, &[port]);
}

/// The peering ports on `router` (router ports with a `peer`, written by us) whose remote VPC is
/// not in `keep`: removed from the router, so the server drops them.
pub fn remove_stale_peer_ports(plan: &mut Plan, cache: &DbCache, router: &str, keep: &[String]) {
    let Ok(Some(lr)) = cache.by_name::<LogicalRouter>(router) else {
        return;
    };
    let stale: Vec<_> = lr
        .ports
        .iter()
        .filter_map(|u| cache.get::<LogicalRouterPort>(u).ok().flatten())
        .filter(|p| p.peer.is_some() && super::plan::is_owned_by(&p.external_ids, &[]))
        .filter(|p| {
            !keep
                .iter()
                .any(|remote| p.name == names::router_port_name(router, remote))
        })
        .map(|p| p.uuid)
        .collect();
    plan.remove_members(LogicalRouter::NAME, &RowRef::Existing(lr.uuid), "ports", &stale);
}

/// A stable, locally administered MAC for a router port, derived from its name, so restarts and
/// replicas agree without storing it anywhere.
pub fn router_port_mac(port: &str) -> MacAddr {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    port.hash(&mut h);
    let b = h.finish().to_le_bytes();
    MacAddr([0x0a, b[0], b[1], b[2], b[3], b[4]])
}

/// A router and a switch to join.
pub struct Attachment<'a> {
    pub router: &'a str,
    pub router_ref: &'a RowRef,
    pub switch: &'a str,
    pub switch_ref: &'a RowRef,
    /// The router port's addresses: the subnet's gateway(s) with prefix, e.g. `10.16.0.1/16`.
    pub networks: Vec<String>,
    /// The router port's MAC when the caller chose it (a U2O port takes the MAC allocated with
    /// its address, as Kube-OVN's `u2oInterconnectionMAC`); `None` keeps the port's MAC, or
    /// derives one from its name.
    pub mac: Option<MacAddr>,
}

/// The patch between a router and a switch: router port `<router>-<switch>` and switch port
/// `<switch>-<router>` of type `router`. Returns the router port's MAC.
pub fn ensure_router_attachment(
    plan: &mut Plan,
    cache: &DbCache,
    a: Attachment<'_>,
    owner: &[(&str, &str)],
) -> MacAddr {
    let Attachment {
        router,
        router_ref,
        switch,
        switch_ref,
        networks,
        mac,
    } = a;
    let lrp_name = names::router_port_name(router, switch);
    let lsp_name = names::switch_router_port_name(switch, router);
    let mac = mac.unwrap_or_else(|| {
        cache
            .by_name::<LogicalRouterPort>(&lrp_name)
            .ok()
            .flatten()
            .and_then(|p| kube_ovn_api::annotations::parse::<MacAddr>("mac", &p.mac).ok())
            .unwrap_or_else(|| router_port_mac(&lrp_name))
    });
    let lrp = LogicalRouterPort {
        name: lrp_name.clone(),
        mac: mac.to_string(),
        networks,
        external_ids: owned_ids(owner),
        ..Default::default()
    };
    let lrp_ref = plan.ensure(cache, &lrp_name, &lrp, &["mac", "networks", "external_ids"]);
    let is_member = member_test(cache, LogicalRouter::NAME, router);
    plan.add_members(LogicalRouter::NAME, router_ref, "ports", is_member, &[lrp_ref]);
    let lsp = LogicalSwitchPort {
        name: lsp_name.clone(),
        r#type: "router".into(),
        addresses: vec!["router".into()],
        options: BTreeMap::from([("router-port".to_owned(), lrp_name)]),
        external_ids: owned_ids(owner),
        ..Default::default()
    };
    ensure_switch_port(
        plan,
        cache,
        switch_ref,
        switch,
        &lsp,
        &["type", "addresses", "options", "external_ids"],
    );
    mac
}

/// Removes the patch between a router and a switch: the router port `<router>-<switch>` from the
/// router and the switch port `<switch>-<router>` from the switch, in one plan (the server drops
/// both rows). Kube-OVN's `RemoveLogicalPatchPort`, for an underlay subnet whose gateway is the
/// physical router.
pub fn remove_router_attachment(plan: &mut Plan, cache: &DbCache, router: &str, switch: &str) {
    let lrp = names::router_port_name(router, switch);
    if let (Some(r), Some(p)) = (
        cache.uuids_by_name(LogicalRouter::NAME, router).first(),
        cache.uuids_by_name(LogicalRouterPort::NAME, &lrp).first(),
    ) {
        plan.remove_members(LogicalRouter::NAME, &RowRef::Existing(*r), "ports", &[*p]);
    }
    remove_switch_port(plan, cache, &names::switch_router_port_name(switch, router));
}

/// An underlay subnet's localnet port (built by the subnet's plan): created, or brought to the
/// wanted type, addresses, options, tag and `external_ids` in place — a Vlan's new ID retags it,
/// a new provider rewrites `network_name`.
pub fn ensure_localnet_port(
    plan: &mut Plan,
    cache: &DbCache,
    switch_ref: &RowRef,
    switch: &str,
    desired: &LogicalSwitchPort,
) -> RowRef {
    ensure_switch_port(
        plan,
        cache,
        switch_ref,
        switch,
        desired,
        &["type", "addresses", "options", "tag", "external_ids"],
    )
}

/// A switch port on `switch`: created or brought to `desired` in `columns`, and a member of the
/// switch.
pub fn ensure_switch_port(
    plan: &mut Plan,
    cache: &DbCache,
    switch_ref: &RowRef,
    switch: &str,
    desired: &LogicalSwitchPort,
    columns: &[&str],
) -> RowRef {
    let port_ref = plan.ensure(cache, &desired.name, desired, columns);
    let is_member = member_test(cache, LogicalSwitch::NAME, switch);
    plan.add_members(
        LogicalSwitch::NAME,
        switch_ref,
        "ports",
        is_member,
        std::slice::from_ref(&port_ref),
    );
    port_ref
}

/// Whether a row of the named switch, router or port group already holds a port. Sets are
/// ordered, so this is a lookup, not a decode of the row's thousands of ports for every pod.
fn member_test<'c>(
    cache: &'c DbCache,
    table: &str,
    name: &str,
) -> impl Fn(&kube_ovn_ovsdb::Uuid) -> bool + 'c {
    let ports = cache
        .uuids_by_name(table, name)
        .first()
        .and_then(|u| cache.row(table, u))
        .and_then(|row| match row.get("ports") {
            Some(Value::Set(s)) => Some(s),
            _ => None,
        });
    move |u| ports.is_some_and(|s| s.contains(&Atom::Uuid(*u)))
}

/// Removes a switch port from whatever switch holds it (the server then drops the row).
pub fn remove_switch_port(plan: &mut Plan, cache: &DbCache, port: &str) {
    let Some(uuid) = cache
        .uuids_by_name(LogicalSwitchPort::NAME, port)
        .first()
        .copied()
    else {
        return;
    };
    // Sets are ordered: membership is a lookup, not a scan of a switch's thousands of ports.
    let holds = |row: &kube_ovn_ovsdb::Row| matches!(row.get("ports"), Some(Value::Set(s)) if s.contains(&Atom::Uuid(uuid)));
    for table in [LogicalSwitch::NAME, PortGroup::NAME] {
        for (parent, row) in cache.table(table) {
            if holds(row) {
                plan.remove_members(table, &RowRef::Existing(*parent), "ports", &[uuid]);
            }
        }
    }
}

/// A port group (`<subnet>.<node>`, `node.<node>`), kept with these owner ids.
pub fn ensure_port_group(plan: &mut Plan, cache: &DbCache, name: &str, owner: &[(&str, &str)]) -> RowRef {
    let pg = PortGroup {
        name: name.into(),
        external_ids: owned_ids(owner),
        ..Default::default()
    };
    plan.ensure(cache, name, &pg, &["external_ids"])
}

/// Adds a port to a port group.
pub fn add_to_port_group(plan: &mut Plan, cache: &DbCache, group: &RowRef, group_name: &str, port: &RowRef) {
    let is_member = member_test(cache, PortGroup::NAME, group_name);
    plan.add_members(
        PortGroup::NAME,
        group,
        "ports",
        is_member,
        std::slice::from_ref(port),
    );
}
