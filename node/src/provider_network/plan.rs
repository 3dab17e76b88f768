//! What a ProviderNetwork wants on this node and the steps that get there, without I/O.
//!
//! Kube-OVN (`pkg/daemon/controller.go initProviderNetwork`, `ovs_linux.go
//! transferAddrsAndRoutes / removeProviderNic`) moves the NIC's addresses and routes onto
//! `br-<pn>` and back. We keep its result and change the order so the node never loses its
//! address (plan §3.0 2): the NIC joins the bridge first (on the netdev datapath OVS reads it
//! through a packet socket, the kernel keeps using it), the addresses are added to the bridge,
//! the routes re-pointed, and only then are the addresses taken off the NIC. Give-back mirrors
//! it. Each step has an inverse, so the mover can undo a half-done move (plan §3.0 3).
//!
//! With exchanged names (`spec.exchangeLinkName`, see `naming`) three steps come first: the
//! bridge without ports but with its record, the NIC's rename to `br-<pn>` (the one moment the
//! NIC is down: Linux refuses to rename a running link), the ports; the give-back ends with the
//! ports removed, the NIC renamed back, the bridge removed.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube_ovn_api::annotations::keys::provider_network_label;
use kube_ovn_api::crd::provider_network::provider_bridge_name;
use kube_ovn_api::crd::{ProviderNetwork, Vlan};
use kube_ovn_dataplane::{AddrRecord, RouteRecord, is_link_local};
use serde::{Deserialize, Serialize};

use super::naming::{Naming, naming_refusal};

/// The longest Linux interface name (IFNAMSIZ - 1).
pub const MAX_IFNAME: usize = 15;

/// Bridge `external_ids` keys of the snapshot (`kube-ovn-rs/provider-nic` is in `ovs::provider`).
pub const SNAPSHOT_KEY: &str = "kube-ovn-rs/snapshot";
pub use super::naming::PROVIDER_KEY;

/// What the NIC looked like before the move: what the give-back restores, kept in the bridge's
/// `external_ids` so that a daemon that died mid-move can finish or undo it (the bridge's tap,
/// with the addresses moved onto it, does not survive an ovs-vswitchd restart).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Addresses moved (link-local ones stay on the NIC).
    pub addrs: Vec<AddrRecord>,
    /// Routes moved, in replay order.
    pub routes: Vec<RouteRecord>,
    /// `net.ipv4.conf.<nic>.arp_ignore` before we set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arp_ignore: Option<String>,
    /// The NIC's MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
}

/// The kernel's view of one link.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkState {
    /// Interface index.
    pub index: u32,
    /// Administratively up.
    pub up: bool,
    /// MTU.
    pub mtu: Option<u32>,
    /// Every address.
    pub addrs: Vec<AddrRecord>,
    /// Every route out of it, all tables.
    pub routes: Vec<RouteRecord>,
    /// `arp_ignore` (IPv4 sysctl).
    pub arp_ignore: Option<String>,
    /// The link it is enslaved to in the kernel (a Linux bridge or bond), by name.
    pub master: Option<String>,
    /// Neighbours learnt on it (not link-local), to announce a move to: the kernel forgets
    /// them when the addresses leave the link, so they are read before.
    pub neighbours: Vec<std::net::IpAddr>,
}

/// What the ProviderNetwork wants here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Desired {
    /// The NIC in the bridge.
    Present {
        /// The bridge's and the NIC's names (`spec.exchangeLinkName`).
        naming: Naming,
        /// `trunks` of the NIC port: 0 first (Kube-OVN: "always add trunk 0 so that the ovs
        /// bridge can communicate with the external network"), then the Vlans' ids, sorted.
        trunks: Vec<u16>,
    },
    /// Excluded from this node: the NIC given back, label `exclude=true`.
    Excluded,
    /// Not possible as asked: reported, nothing changed.
    NotReady {
        /// Short reason (`NicNotFound`, `NicInOtherBridge`, ...).
        reason: &'static str,
        /// The message for `err_mesg` and the event.
        message: String,
        /// The NIC, when known.
        nic: Option<String>,
    },
}

/// The decision for `pn` on node `node` (labels `labels`); `vlans` is every Vlan.
pub fn desired(
    pn: &ProviderNetwork,
    node: &str,
    labels: &BTreeMap<String, String>,
    vlans: &[&Vlan],
) -> Desired {
    let nic = pn.nic_for(node).filter(|n| !n.is_empty()).map(str::to_owned);
    match pn.excludes(node, labels) {
        Ok(true) => return Desired::Excluded,
        Ok(false) => {}
        Err(e) => {
            return Desired::NotReady {
                reason: "InvalidSelector",
                message: format!("provider network {}: {e}", pn.name_any()),
                nic,
            };
        }
    }
    // The bridge's internal port is a Linux interface named `br-<pn>`: IFNAMSIZ allows 15
    // characters. The controller refuses such a network too (InvalidProviderNetwork); the
    // daemon does not wait for its verdict, so it checks before it touches anything.
    let bridge = provider_bridge_name(&pn.name_any());
    if bridge.len() > MAX_IFNAME {
        return Desired::NotReady {
            reason: "InvalidProviderNetwork",
            message: format!(
                "provider network {}: metadata.name is longer than {} characters: its bridge {bridge} \
                 would not fit a {MAX_IFNAME}-character interface name",
                pn.name_any(),
                MAX_IFNAME - "br-".len(),
            ),
            nic,
        };
    }
    let Some(nic) = nic else {
        return Desired::NotReady {
            reason: "NicNotSet",
            message: format!(
                "provider network {}: spec.defaultInterface is empty and no spec.customInterfaces entry names node {node}",
                pn.name_any()
            ),
            nic: None,
        };
    };
    let spec = &pn.spec;
    // No 8021q in the kernels this runs on; refuse instead of ignoring (plan §3.0 5).
    for (set, field) in [
        (
            spec.auto_create_vlan_subinterfaces == Some(true),
            "spec.autoCreateVlanSubinterfaces",
        ),
        (
            spec.preserve_vlan_interfaces == Some(true),
            "spec.preserveVlanInterfaces",
        ),
        (
            spec.vlan_interfaces.as_ref().is_some_and(|v| !v.is_empty()),
            "spec.vlanInterfaces",
        ),
    ] {
        if set {
            return Desired::NotReady {
                reason: "VlanSubinterfacesUnsupported",
                message: format!(
                    "provider network {}: {field} is not supported by kube-ovn-rs (VLAN sub-interfaces); unset it",
                    pn.name_any()
                ),
                nic: Some(nic),
            };
        }
    }
    let naming = Naming::new(&pn.name_any(), &nic, spec.exchange_link_name == Some(true));
    if let Some(message) = naming_refusal(&pn.name_any(), &naming) {
        return Desired::NotReady {
            reason: "InvalidProviderNetwork",
            message,
            nic: Some(nic),
        };
    }
    Desired::Present {
        trunks: trunks(pn, vlans),
        naming,
    }
}

/// `{0}` ∪ the ids of the Vlans named in `pn.status.vlans` (Kube-OVN `initProviderNetwork`).
pub fn trunks(pn: &ProviderNetwork, vlans: &[&Vlan]) -> Vec<u16> {
    let listed = pn
        .status
        .as_ref()
        .and_then(|s| s.vlans.clone())
        .unwrap_or_default();
    let mut ids: Vec<u16> = std::iter::once(0)
        .chain(
            vlans
                .iter()
                .filter(|v| listed.contains(&v.name_any()))
                .map(|v| v.spec.effective_id()),
        )
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Why the NIC cannot be moved now, if it cannot: it does not exist (Kube-OVN's text), it is a
/// port of another OVS bridge (never stolen: in the lab `br-ul` carries the node's own
/// traffic), or it is enslaved to a Linux bridge or bond.
pub fn nic_refusal(
    nic: &str,
    bridge: &str,
    state: Option<&LinkState>,
    ovs_bridge: Option<&str>,
) -> Option<Desired> {
    let refuse = |reason, message| {
        Some(Desired::NotReady {
            reason,
            message,
            nic: Some(nic.to_owned()),
        })
    };
    let Some(state) = state else {
        return refuse("NicNotFound", format!("nic {nic} does not exist"));
    };
    // The loopback exists on every node and is no uplink: moving 127.0.0.1 and its routes
    // into an OVS bridge would cut the node off from its own local services.
    if nic == "lo" {
        return refuse(
            "NicIsLoopback",
            format!("nic {nic} is the loopback interface, not an uplink; it is left alone"),
        );
    }
    if let Some(other) = ovs_bridge.filter(|b| *b != bridge) {
        return refuse(
            "NicInOtherBridge",
            format!("nic {nic} is a port of OVS bridge {other}, not {bridge}; it is left there"),
        );
    }
    if let Some(master) = &state.master {
        return refuse(
            "NicIsBridgePort",
            format!("nic {nic} is enslaved to {master}; it is left there"),
        );
    }
    None
}

/// The NIC's addresses and routes that move: link-local ones and the routes the kernel makes
/// for addresses stay (Kube-OVN skips link-local; the kernel makes the others again on the
/// bridge), routes in replay order (host, link, then via a gateway).
pub fn snapshot_of(nic: &LinkState) -> Snapshot {
    let addrs: Vec<AddrRecord> = nic
        .addrs
        .iter()
        .filter(|a| !is_link_local(a.net.addr()))
        .cloned()
        .collect();
    let mut routes: Vec<RouteRecord> = nic
        .routes
        .iter()
        .filter(|r| !r.kernel_made() && !is_link_local(r.dst.addr()))
        .cloned()
        .collect();
    routes.sort_by_key(RouteRecord::replay_rank);
    Snapshot {
        addrs,
        routes,
        arp_ignore: nic.arp_ignore.clone(),
        mtu: nic.mtu,
    }
}

/// Which link a step acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dev {
    /// The provider NIC.
    Nic,
    /// The bridge's internal port `br-<pn>`.
    Bridge,
}

/// One change; [`Step::inverse`] undoes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Bridge and NIC port in one OVSDB transaction, with the snapshot.
    CreateBridge,
    /// Exchanged names: the bridge alone (no port: its internal port's name is still the
    /// NIC's), recording the names and the snapshot before the NIC is renamed, so that a crash
    /// from here on is finished or undone from the record.
    RecordBridge,
    /// Rename the NIC: down (Linux refuses to rename a running link: EBUSY), rename, up, and
    /// put back what going down took (IPv4 routes through it; IPv6 addresses and their routes
    /// unless `keep_addr_on_down`), as read just before (Kube-OVN `changeProviderNicName`).
    Rename {
        /// Its name now.
        from: String,
        /// Its new name.
        to: String,
    },
    /// Exchanged names: the bridge's internal port and the NIC's port, once the NIC is renamed.
    AddPorts,
    /// Exchanged names: the bridge's ports removed (the bridge and its record stay), so that
    /// its internal port's name is free for the NIC again.
    RemovePorts,
    /// `Port.trunks` of the NIC.
    SetTrunks(Vec<u16>),
    /// `arp_ignore` of the NIC (netdev: the kernel still sees every frame on it, and must not
    /// answer ARP for the moved addresses with the NIC's MAC).
    SetArpIgnore(String),
    /// Bring a link up.
    Up(Dev),
    /// Add an address.
    AddAddr(Dev, AddrRecord),
    /// Point a route out of a link (replace: the same route out of the other link is replaced).
    Route(Dev, RouteRecord),
    /// Remove an address.
    DelAddr(Dev, AddrRecord),
    /// Make the neighbours learn the MAC the node's addresses now answer from: forget each
    /// neighbour learnt on the other link on this one, and send it a datagram, so the kernel
    /// asks with a broadcast ARP request / multicast solicitation carrying this link's MAC
    /// (which a Linux neighbour takes into its existing entry). On netdev the bridge has its
    /// own MAC; without this the neighbours would keep sending to a MAC that is gone until
    /// their entry goes stale (seconds without the node).
    Announce(Dev, Vec<std::net::IpAddr>),
    /// `ovn-bridge-mappings` `<pn>:br-<pn>` (and the chassis MAC).
    WriteMapping,
    /// Take the `<pn>` entries out of the mappings.
    RemoveMapping,
    /// Delete the bridge (the NIC port and the snapshot go with it).
    RemoveBridge,
}

impl Step {
    /// The step that undoes this one, given the value it overwrote (`arp_ignore`); `None` when
    /// nothing needs undoing (bringing a link up) or nothing can (the bridge is gone).
    pub fn inverse(&self, old_arp_ignore: Option<&str>) -> Option<Step> {
        let other = |d: &Dev| match d {
            Dev::Nic => Dev::Bridge,
            Dev::Bridge => Dev::Nic,
        };
        match self {
            Self::CreateBridge | Self::RecordBridge => Some(Self::RemoveBridge),
            Self::Rename { from, to } => Some(Self::Rename {
                from: to.clone(),
                to: from.clone(),
            }),
            Self::AddPorts => Some(Self::RemovePorts),
            Self::RemovePorts => Some(Self::AddPorts),
            Self::SetArpIgnore(_) => old_arp_ignore.map(|v| Self::SetArpIgnore(v.to_owned())),
            Self::AddAddr(d, a) => Some(Self::DelAddr(*d, a.clone())),
            Self::DelAddr(d, a) => Some(Self::AddAddr(*d, a.clone())),
            Self::Route(d, r) => Some(Self::Route(other(d), r.clone())),
            Self::WriteMapping => Some(Self::RemoveMapping),
            Self::RemoveMapping => Some(Self::WriteMapping),
            Self::SetTrunks(_) | Self::Up(_) | Self::Announce(..) | Self::RemoveBridge => None,
        }
    }
}

/// What is there now, for [`move_steps`] and [`give_back_steps`].
#[derive(Debug, Clone, Default)]
pub struct Current<'a> {
    /// The NIC.
    pub nic: Option<&'a LinkState>,
    /// The bridge's internal link (`None`: no bridge, or its tap not made yet).
    pub bridge: Option<&'a LinkState>,
    /// The snapshot in the bridge's `external_ids` (`None`: no bridge of ours).
    pub snapshot: Option<&'a Snapshot>,
    /// The NIC port's trunks.
    pub trunks: Option<Vec<u16>>,
    /// `<pn>`'s entry in `ovn-bridge-mappings`.
    pub mapping: Option<String>,
    /// The bridge name.
    pub bridge_name: &'a str,
    /// Whether `arp_ignore` is set on the NIC while it is in the bridge (netdev datapath).
    pub arp_ignore: bool,
    /// Exchanged names (`spec.exchangeLinkName`): where the renaming stands.
    pub exchange: Option<Exchange>,
}

/// Where a move with exchanged names stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exchange {
    /// The NIC's original name (the bridge's).
    pub nic: String,
    /// The NIC's name in the bridge (`br-<pn>`).
    pub link: String,
    /// The NIC is called `link` now.
    pub renamed: bool,
    /// The bridge has its ports (its internal one and the NIC).
    pub ports: bool,
}

/// The steps that bring the NIC into the bridge, or finish a move a crash interrupted;
/// empty when everything is in place. A fresh move is planned from the NIC as it is; a
/// resumed one from the snapshot (the move is incomplete while a snapshot address is missing
/// on the bridge or still on the NIC).
pub fn move_steps(cur: &Current<'_>, trunks: &[u16]) -> Vec<Step> {
    let mut steps = Vec::new();
    let fresh;
    let ex = cur.exchange.as_ref();
    let rename = |e: &Exchange| Step::Rename {
        from: e.nic.clone(),
        to: e.link.clone(),
    };
    let snap = if let Some(s) = cur.snapshot {
        s
    } else {
        match ex {
            // The record first, then the rename, then the ports: the bridge's internal port
            // takes the NIC's name, which is free only once the NIC is renamed.
            Some(e) => steps.extend([Step::RecordBridge, rename(e), Step::AddPorts]),
            None => steps.push(Step::CreateBridge),
        }
        fresh = cur.nic.map(snapshot_of).unwrap_or_default();
        &fresh
    };
    if cur.snapshot.is_some()
        && let Some(e) = ex
    {
        // A move a crash interrupted between the record and the ports.
        if !e.renamed {
            steps.push(rename(e));
        } else if !cur.nic.is_some_and(|n| n.up) {
            steps.push(Step::Up(Dev::Nic));
        }
        if !e.ports {
            steps.push(Step::AddPorts);
        }
    }
    let ports_made = steps
        .iter()
        .any(|s| matches!(s, Step::CreateBridge | Step::AddPorts));
    if cur.snapshot.is_some() && !ports_made && cur.trunks.as_deref() != Some(trunks) {
        steps.push(Step::SetTrunks(trunks.to_vec()));
    }
    let nic_has = |a: &AddrRecord| cur.nic.is_some_and(|n| n.addrs.iter().any(|x| x.net == a.net));
    let bridge_has = |a: &AddrRecord| cur.bridge.is_some_and(|b| b.addrs.iter().any(|x| x.net == a.net));
    if cur.arp_ignore && cur.nic.and_then(|n| n.arp_ignore.as_deref()) != Some("1") {
        steps.push(Step::SetArpIgnore("1".into()));
    }
    if cur.snapshot.is_none() || !cur.bridge.is_some_and(|b| b.up) {
        steps.push(Step::Up(Dev::Bridge));
    }
    let incomplete = cur.snapshot.is_none() || snap.addrs.iter().any(|a| nic_has(a) || !bridge_has(a));
    if incomplete {
        for a in snap.addrs.iter().filter(|a| !bridge_has(a)) {
            steps.push(Step::AddAddr(Dev::Bridge, a.clone()));
        }
        let on_bridge = |r: &RouteRecord| cur.bridge.is_some_and(|b| b.routes.contains(r));
        for r in snap.routes.iter().filter(|r| !on_bridge(r)) {
            steps.push(Step::Route(Dev::Bridge, r.clone()));
        }
        for a in snap.addrs.iter().filter(|a| cur.snapshot.is_none() || nic_has(a)) {
            steps.push(Step::DelAddr(Dev::Nic, a.clone()));
        }
        let neighbours = cur.nic.map(|n| n.neighbours.clone()).unwrap_or_default();
        if !neighbours.is_empty() {
            steps.push(Step::Announce(Dev::Bridge, neighbours));
        }
    }
    if cur.mapping.as_deref() != Some(cur.bridge_name) {
        steps.push(Step::WriteMapping);
    }
    steps
}

/// The steps that give the NIC back as it was: its addresses and routes from the bridge (from
/// the snapshot when the bridge lost them: ovs-vswitchd restarted), restored with the
/// snapshot's attributes, `arp_ignore` as it was, the NIC up; then the mapping entry and the
/// bridge removed.
pub fn give_back_steps(cur: &Current<'_>) -> Vec<Step> {
    let mut steps = Vec::new();
    let empty = Snapshot::default();
    let snap = cur.snapshot.unwrap_or(&empty);
    let bridge_addrs: Vec<&AddrRecord> = cur
        .bridge
        .map(|b| b.addrs.iter().filter(|a| !is_link_local(a.net.addr())).collect())
        .unwrap_or_default();
    // The snapshot's record of an address carries its original flags and label.
    let original = |a: &AddrRecord| {
        snap.addrs
            .iter()
            .find(|s| s.net == a.net)
            .cloned()
            .unwrap_or_else(|| a.clone())
    };
    let addrs: Vec<AddrRecord> = if bridge_addrs.is_empty() {
        snap.addrs.clone()
    } else {
        bridge_addrs.into_iter().map(original).collect()
    };
    let nic_has = |a: &AddrRecord| cur.nic.is_some_and(|n| n.addrs.iter().any(|x| x.net == a.net));
    if let Some(nic) = cur.nic {
        for a in addrs.iter().filter(|a| !nic_has(a)) {
            steps.push(Step::AddAddr(Dev::Nic, a.clone()));
        }
        let mut routes: Vec<RouteRecord> = match cur.bridge {
            Some(b) if b.routes.iter().any(|r| !r.kernel_made()) => b
                .routes
                .iter()
                .filter(|r| !r.kernel_made() && !is_link_local(r.dst.addr()))
                .cloned()
                .collect(),
            _ => snap.routes.clone(),
        };
        routes.sort_by_key(RouteRecord::replay_rank);
        for r in routes.into_iter().filter(|r| !nic.routes.contains(r)) {
            steps.push(Step::Route(Dev::Nic, r));
        }
        if let Some(old) = &snap.arp_ignore
            && nic.arp_ignore.as_ref() != Some(old)
        {
            steps.push(Step::SetArpIgnore(old.clone()));
        }
        if !nic.up {
            steps.push(Step::Up(Dev::Nic));
        }
        // Off the bridge, as the move takes them off the NIC: the bridge's prefix routes go
        // with them, so the announcement (and all traffic) leaves through the NIC.
        if let Some(bridge) = cur.bridge {
            for a in bridge.addrs.iter().filter(|a| !is_link_local(a.net.addr())) {
                steps.push(Step::DelAddr(Dev::Bridge, a.clone()));
            }
        }
        if let Some(bridge) = cur.bridge
            && !bridge.neighbours.is_empty()
        {
            steps.push(Step::Announce(Dev::Nic, bridge.neighbours.clone()));
        }
    }
    if cur.mapping.is_some() {
        steps.push(Step::RemoveMapping);
    }
    if let Some(e) = &cur.exchange {
        // The bridge's internal port holds the NIC's name: it goes first, then the NIC takes
        // its name back; the bridge (with the record) last, so a crash in between is finished
        // from the record.
        if e.ports {
            steps.push(Step::RemovePorts);
        }
        if e.renamed && cur.nic.is_some() {
            steps.push(Step::Rename {
                from: e.link.clone(),
                to: e.nic.clone(),
            });
        }
    }
    if cur.snapshot.is_some() {
        steps.push(Step::RemoveBridge);
    }
    steps
}

/// The node labels for `pn` after a pass: `Some` sets, `None` removes (a merge patch).
pub fn labels(pn: &str, outcome: &Outcome) -> BTreeMap<String, Option<String>> {
    let key = |name| provider_network_label(pn, name);
    let mut out = BTreeMap::new();
    let (ready, interface, mtu, exclude) = match outcome {
        Outcome::Ready { nic, mtu } => (
            Some("true".into()),
            Some(nic.clone()),
            mtu.map(|m| m.to_string()),
            None,
        ),
        Outcome::Excluded => (None, None, None, Some("true".into())),
        Outcome::NotReady | Outcome::Deleted => (None, None, None, None),
    };
    out.insert(key("ready"), ready);
    out.insert(key("interface"), interface);
    out.insert(key("mtu"), mtu);
    out.insert(key("vlan_interfaces"), None);
    // Kube-OVN leaves `exclude` alone on a failed init; a node that is not excluded has none.
    out.insert(key("exclude"), exclude);
    out
}

/// How a pass ended for one provider network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The NIC is in the bridge.
    Ready {
        /// The NIC.
        nic: String,
        /// Its MTU.
        mtu: Option<u32>,
    },
    /// The node is excluded; the NIC was given back.
    Excluded,
    /// Not ready (refused or failed).
    NotReady,
    /// The provider network is gone; the NIC was given back.
    Deleted,
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
