use super::*;
use crate::provider_network::naming::Naming;
use kube_ovn_api::crd::{ProviderNetworkSpec, ProviderNetworkStatus, VlanSpec};
use kube_ovn_dataplane::RouteMetrics;

fn pn(spec: ProviderNetworkSpec) -> ProviderNetwork {
    ProviderNetwork::new("pn1", spec)
}

fn addr(net: &str) -> AddrRecord {
    AddrRecord {
        net: net.parse().unwrap(),
        peer: None,
        broadcast: None,
        flags: 0,
        scope: 0,
        label: None,
        route_metric: None,
    }
}

fn route(dst: &str, gw: Option<&str>, scope: u8, protocol: u8) -> RouteRecord {
    RouteRecord {
        dst: dst.parse().unwrap(),
        table: 254,
        protocol,
        scope,
        kind: 1,
        tos: 0,
        gateway: gw.map(|g| g.parse().unwrap()),
        prefsrc: None,
        metric: Some(100),
        onlink: false,
        metrics: RouteMetrics::default(),
    }
}

fn nic() -> LinkState {
    LinkState {
        index: 2,
        up: true,
        mtu: Some(1500),
        addrs: vec![addr("172.31.0.11/24"), addr("fe80::1/64")],
        routes: vec![
            route("0.0.0.0/0", Some("172.31.0.1"), 0, 4),
            route("172.31.0.0/24", None, 253, 2),
            route("10.9.0.0/16", None, 253, 4),
        ],
        arp_ignore: Some("0".into()),
        master: None,
        neighbours: vec!["172.31.0.1".parse().unwrap()],
    }
}

/// A name whose bridge `br-<name>` exceeds 15 characters cannot be made: refused before any
/// step, naming the field, instead of a bridge whose internal port never appears.
#[test]
fn a_provider_network_name_too_long_for_its_bridge_is_refused_before_anything_is_done() {
    let spec = ProviderNetworkSpec {
        default_interface: Some("eth1".into()),
        ..Default::default()
    };
    let labels = BTreeMap::new();
    let longest = ProviderNetwork::new("abcdefghijkl", spec.clone());
    assert!(matches!(
        desired(&longest, "n1", &labels, &[]),
        Desired::Present { .. }
    ));
    let too_long = ProviderNetwork::new("abcdefghijklm", spec);
    let Desired::NotReady { reason, message, nic } = desired(&too_long, "n1", &labels, &[]) else {
        panic!("a 13-character name was accepted");
    };
    assert_eq!(reason, "InvalidProviderNetwork");
    assert_eq!(nic.as_deref(), Some("eth1"));
    assert!(
        message.starts_with("provider network abcdefghijklm: metadata.name is longer than 12 characters"),
        "{message}"
    );
}

#[test]
fn nic_choice_exclusion_and_refusals() {
    let base = ProviderNetworkSpec {
        default_interface: Some("eth1".into()),
        ..Default::default()
    };
    let labels = BTreeMap::new();
    assert_eq!(
        desired(&pn(base.clone()), "n1", &labels, &[]),
        Desired::Present {
            naming: Naming::new("pn1", "eth1", false),
            trunks: vec![0]
        }
    );
    let excluded = ProviderNetworkSpec {
        exclude_nodes: Some(vec!["n1".into()]),
        ..base.clone()
    };
    assert_eq!(desired(&pn(excluded), "n1", &labels, &[]), Desired::Excluded);
    // exchangeLinkName: the bridge takes the NIC's name, the NIC becomes br-<pn>.
    let exchange = ProviderNetworkSpec {
        exchange_link_name: Some(true),
        ..base.clone()
    };
    let Desired::Present { naming, .. } = desired(&pn(exchange.clone()), "n1", &labels, &[]) else {
        panic!("exchangeLinkName refused");
    };
    assert_eq!(
        (naming.bridge.as_str(), naming.link.as_str(), naming.nic.as_str()),
        ("eth1", "br-pn1", "eth1")
    );
    // A NIC already called br-<pn> has no name to give: refused, naming the field.
    let taken = ProviderNetworkSpec {
        default_interface: Some("br-pn1".into()),
        ..exchange
    };
    match desired(&pn(taken), "n1", &labels, &[]) {
        Desired::NotReady { reason, message, .. } => {
            assert_eq!(reason, "InvalidProviderNetwork");
            assert!(message.contains("spec.exchangeLinkName"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let sub = ProviderNetworkSpec {
        vlan_interfaces: Some(vec!["eth1.100".into()]),
        ..base
    };
    match desired(&pn(sub), "n1", &labels, &[]) {
        Desired::NotReady { reason, message, .. } => {
            assert_eq!(reason, "VlanSubinterfacesUnsupported");
            assert!(message.contains("spec.vlanInterfaces"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn trunks_are_zero_and_listed_vlans() {
    let mut net = pn(ProviderNetworkSpec::default());
    net.status = Some(ProviderNetworkStatus {
        vlans: Some(vec!["v200".into(), "v100".into()]),
        ..Default::default()
    });
    let vlan = |name: &str, id| {
        Vlan::new(
            name,
            VlanSpec {
                id: Some(id),
                provider: Some("pn1".into()),
                ..Default::default()
            },
        )
    };
    let (v100, v200, v300) = (vlan("v100", 100), vlan("v200", 200), vlan("v300", 300));
    assert_eq!(trunks(&net, &[&v200, &v100, &v300]), vec![0, 100, 200]);
}

#[test]
fn refusals_name_the_nic() {
    let state = nic();
    match nic_refusal("nope", "br-pn1", None, None) {
        Some(Desired::NotReady { reason, message, .. }) => {
            assert_eq!(reason, "NicNotFound");
            assert_eq!(message, "nic nope does not exist");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        nic_refusal("eth1", "br-pn1", Some(&state), Some("br-ul")),
        Some(Desired::NotReady {
            reason: "NicInOtherBridge",
            ..
        })
    ));
    assert_eq!(nic_refusal("eth1", "br-pn1", Some(&state), Some("br-pn1")), None);
    // A ProviderNetwork naming the loopback (which exists everywhere) never moves it.
    let lo = LinkState {
        addrs: vec![addr("127.0.0.1/8")],
        ..nic()
    };
    assert!(matches!(
        nic_refusal("lo", "br-pn1", Some(&lo), None),
        Some(Desired::NotReady {
            reason: "NicIsLoopback",
            ..
        })
    ));
}

#[test]
fn fresh_move_keeps_an_address_at_every_step() {
    let state = nic();
    let cur = Current {
        nic: Some(&state),
        bridge_name: "br-pn1",
        arp_ignore: true,
        ..Default::default()
    };
    let steps = move_steps(&cur, &[0]);
    let a = addr("172.31.0.11/24");
    let default = route("0.0.0.0/0", Some("172.31.0.1"), 0, 4);
    let link = route("10.9.0.0/16", None, 253, 4);
    assert_eq!(
        steps,
        vec![
            Step::CreateBridge,
            Step::SetArpIgnore("1".into()),
            Step::Up(Dev::Bridge),
            Step::AddAddr(Dev::Bridge, a.clone()),
            // Link routes before routes through a gateway; the kernel's prefix route and the
            // link-local address stay.
            Step::Route(Dev::Bridge, link),
            Step::Route(Dev::Bridge, default),
            Step::DelAddr(Dev::Nic, a),
            Step::Announce(Dev::Bridge, vec!["172.31.0.1".parse().unwrap()]),
            Step::WriteMapping,
        ]
    );
}

#[test]
fn a_finished_move_has_no_steps_and_trunk_changes_alone() {
    let before = nic();
    let snap = snapshot_of(&before);
    let mut after_nic = before.clone();
    after_nic.addrs.retain(|a| is_link_local(a.net.addr()));
    after_nic.arp_ignore = Some("1".into());
    let bridge = LinkState {
        addrs: snap.addrs.clone(),
        routes: snap.routes.clone(),
        up: true,
        ..Default::default()
    };
    let mut cur = Current {
        nic: Some(&after_nic),
        bridge: Some(&bridge),
        snapshot: Some(&snap),
        trunks: Some(vec![0]),
        mapping: Some("br-pn1".into()),
        bridge_name: "br-pn1",
        arp_ignore: true,
        exchange: None,
    };
    assert_eq!(move_steps(&cur, &[0]), vec![]);
    assert_eq!(move_steps(&cur, &[0, 100]), vec![Step::SetTrunks(vec![0, 100])]);
    // A crash between adding to the bridge and deleting from the NIC: finish the move.
    let mut half = before.clone();
    half.arp_ignore = Some("1".into());
    cur.nic = Some(&half);
    let steps = move_steps(&cur, &[0]);
    assert_eq!(
        steps,
        vec![
            Step::DelAddr(Dev::Nic, addr("172.31.0.11/24")),
            Step::Announce(Dev::Bridge, vec!["172.31.0.1".parse().unwrap()])
        ]
    );
    // ovs-vswitchd restarted: the tap came back bare; the snapshot puts it all back.
    let bare = LinkState {
        up: false,
        ..Default::default()
    };
    cur.nic = Some(&after_nic);
    cur.bridge = Some(&bare);
    let steps = move_steps(&cur, &[0]);
    assert_eq!(steps[0], Step::Up(Dev::Bridge));
    assert_eq!(steps[1], Step::AddAddr(Dev::Bridge, addr("172.31.0.11/24")));
    assert_eq!(steps.len(), 3 + snap.routes.len());
}

#[test]
fn give_back_restores_from_the_snapshot_when_the_bridge_lost_it() {
    let before = nic();
    let snap = snapshot_of(&before);
    let mut bare = before.clone();
    bare.addrs.retain(|a| is_link_local(a.net.addr()));
    bare.routes.clear();
    bare.arp_ignore = Some("1".into());
    let cur = Current {
        nic: Some(&bare),
        bridge: None,
        snapshot: Some(&snap),
        trunks: Some(vec![0]),
        mapping: Some("br-pn1".into()),
        bridge_name: "br-pn1",
        arp_ignore: true,
        exchange: None,
    };
    let steps = give_back_steps(&cur);
    assert_eq!(
        steps.first(),
        Some(&Step::AddAddr(Dev::Nic, addr("172.31.0.11/24")))
    );
    assert!(steps.contains(&Step::SetArpIgnore("0".into())));
    assert_eq!(
        &steps[steps.len() - 2..],
        &[Step::RemoveMapping, Step::RemoveBridge]
    );
    // Every step of a move has an inverse that is a give-back step.
    assert_eq!(
        Step::Route(Dev::Bridge, snap.routes[0].clone()).inverse(None),
        Some(Step::Route(Dev::Nic, snap.routes[0].clone()))
    );
}

#[test]
fn labels_follow_kube_ovn() {
    let ready = labels(
        "pn1",
        &Outcome::Ready {
            nic: "eth1".into(),
            mtu: Some(1400),
        },
    );
    assert_eq!(
        ready["pn1.provider-network.kubernetes.io/ready"].as_deref(),
        Some("true")
    );
    assert_eq!(
        ready["pn1.provider-network.kubernetes.io/interface"].as_deref(),
        Some("eth1")
    );
    assert_eq!(
        ready["pn1.provider-network.kubernetes.io/mtu"].as_deref(),
        Some("1400")
    );
    assert_eq!(ready["pn1.provider-network.kubernetes.io/exclude"], None);
    let excluded = labels("pn1", &Outcome::Excluded);
    assert_eq!(
        excluded["pn1.provider-network.kubernetes.io/exclude"].as_deref(),
        Some("true")
    );
    assert_eq!(excluded["pn1.provider-network.kubernetes.io/ready"], None);
}

fn exchange(renamed: bool, ports: bool) -> Exchange {
    Exchange {
        nic: "eth1".into(),
        link: "br-pn1".into(),
        renamed,
        ports,
    }
}

/// exchangeLinkName: the record before the rename, the rename before the ports (the bridge's
/// internal port takes the NIC's name), then the same address-keeping move as without it.
#[test]
fn exchanged_move_records_renames_then_adds_the_ports() {
    let state = nic();
    let cur = Current {
        nic: Some(&state),
        bridge_name: "eth1",
        arp_ignore: true,
        exchange: Some(exchange(false, false)),
        ..Default::default()
    };
    let steps = move_steps(&cur, &[0]);
    let rename = Step::Rename {
        from: "eth1".into(),
        to: "br-pn1".into(),
    };
    assert_eq!(
        steps[..4],
        [
            Step::RecordBridge,
            rename.clone(),
            Step::AddPorts,
            Step::SetArpIgnore("1".into())
        ]
    );
    let plain = move_steps(
        &Current {
            exchange: None,
            bridge_name: "eth1",
            ..cur.clone()
        },
        &[0],
    );
    assert_eq!(steps[4..], plain[2..], "after the rename, the move is the same");
    // Every new step is undone by its mirror, in the order the journal replays them.
    assert_eq!(Step::RecordBridge.inverse(None), Some(Step::RemoveBridge));
    assert_eq!(
        rename.inverse(None),
        Some(Step::Rename {
            from: "br-pn1".into(),
            to: "eth1".into()
        })
    );
    assert_eq!(Step::AddPorts.inverse(None), Some(Step::RemovePorts));
    assert_eq!(Step::RemovePorts.inverse(None), Some(Step::AddPorts));
}

/// A daemon killed between the record and the ports: the next pass renames (if not done),
/// brings the NIC up (a crash between rename and up), adds the ports, and finishes the move
/// from the snapshot; no trunks step (the ports are made with them).
#[test]
fn an_exchanged_move_cut_short_is_finished_from_the_record() {
    let before = nic();
    let snap = snapshot_of(&before);
    let mut cur = Current {
        nic: Some(&before),
        snapshot: Some(&snap),
        bridge_name: "eth1",
        arp_ignore: true,
        exchange: Some(exchange(false, false)),
        ..Default::default()
    };
    let steps = move_steps(&cur, &[0]);
    assert_eq!(
        steps[..3],
        [
            Step::Rename {
                from: "eth1".into(),
                to: "br-pn1".into()
            },
            Step::AddPorts,
            Step::SetArpIgnore("1".into())
        ]
    );
    assert!(!steps.iter().any(|s| matches!(s, Step::SetTrunks(_))));
    let mut down = before.clone();
    down.up = false;
    cur.nic = Some(&down);
    cur.exchange = Some(exchange(true, false));
    let steps = move_steps(&cur, &[0]);
    assert_eq!(steps[..2], [Step::Up(Dev::Nic), Step::AddPorts]);
    assert!(steps.contains(&Step::AddAddr(Dev::Bridge, addr("172.31.0.11/24"))));
    assert!(steps.contains(&Step::DelAddr(Dev::Nic, addr("172.31.0.11/24"))));
    assert_eq!(steps.last(), Some(&Step::WriteMapping));
}

/// The give-back with exchanged names: the NIC (still `br-<pn>`) gets the addresses and routes
/// back, the bridge's ports go (freeing the name), the NIC takes its name back, the bridge
/// with its record goes last.
#[test]
fn exchanged_give_back_renames_the_nic_back_before_the_bridge_goes() {
    let before = nic();
    let snap = snapshot_of(&before);
    let mut bare = before.clone();
    bare.addrs.retain(|a| is_link_local(a.net.addr()));
    bare.routes.clear();
    bare.arp_ignore = Some("1".into());
    let bridge = LinkState {
        addrs: snap.addrs.clone(),
        routes: snap.routes.clone(),
        up: true,
        ..Default::default()
    };
    let mut cur = Current {
        nic: Some(&bare),
        bridge: Some(&bridge),
        snapshot: Some(&snap),
        mapping: Some("eth1".into()),
        bridge_name: "eth1",
        arp_ignore: true,
        exchange: Some(exchange(true, true)),
        ..Default::default()
    };
    let steps = give_back_steps(&cur);
    assert_eq!(
        steps.first(),
        Some(&Step::AddAddr(Dev::Nic, addr("172.31.0.11/24")))
    );
    assert_eq!(
        steps[steps.len() - 4..],
        [
            Step::RemoveMapping,
            Step::RemovePorts,
            Step::Rename {
                from: "br-pn1".into(),
                to: "eth1".into()
            },
            Step::RemoveBridge
        ]
    );
    // A crash after the ports went: the NIC is renamed back from the record alone.
    cur.bridge = None;
    cur.mapping = None;
    cur.exchange = Some(exchange(true, false));
    let steps = give_back_steps(&cur);
    assert_eq!(
        steps[steps.len() - 2..],
        [
            Step::Rename {
                from: "br-pn1".into(),
                to: "eth1".into()
            },
            Step::RemoveBridge
        ]
    );
    // A crash before the rename: nothing to rename back.
    cur.exchange = Some(exchange(false, false));
    assert!(
        !give_back_steps(&cur)
            .iter()
            .any(|s| matches!(s, Step::Rename { .. }))
    );
}
