//! The verdicts of real `ovn-trace` (OVN 23.03, Debian 12's, as our image ships it) outputs,
//! recorded from a NB with Kube-OVN's layout: switches `ovn-default` (pods `a.demo`, `b.demo`)
//! and `sub2` (`c.demo`) behind the router `ovn-cluster`, and NetworkPolicy port groups.

use super::*;

const LOGGED_DROP: &str = include_str!("../testdata/acl_logged_drop.txt");
const UNLOGGED_DROP: &str = include_str!("../testdata/acl_unlogged_drop_via_router.txt");
const DELIVERED: &str = include_str!("../testdata/delivered_via_router.txt");
const NO_ROUTE: &str = include_str!("../testdata/no_route.txt");

fn groups() -> BTreeMap<String, String> {
    [
        ("deny.demo".to_owned(), "demo/deny".to_owned()),
        ("deny2.demo".to_owned(), "demo/deny2".to_owned()),
    ]
    .into_iter()
    .collect()
}

#[test]
fn a_packet_through_the_router_is_delivered_to_the_pod() {
    assert_eq!(
        ovn_verdict(DELIVERED),
        OvnVerdict::Delivered(vec!["c.demo".into()])
    );
}

#[test]
fn a_logged_acl_drop_names_the_acl_and_its_policy() {
    let OvnVerdict::DroppedByAcl { flow, name, action } = ovn_verdict(LOGGED_DROP) else {
        panic!("{:?}", ovn_verdict(LOGGED_DROP));
    };
    assert_eq!(name.as_deref(), Some("deny.demo"));
    assert_eq!(action, "drop");
    assert_eq!(flow.stage, "ls_out_acl");
    assert_eq!(flow.priority, Some(3000));
    let acls = [NbAcl {
        name: Some("deny.demo".into()),
        priority: 2000,
        r#match: "outport == @deny.demo && ip".into(),
        action: "drop".into(),
        ..NbAcl::default()
    }];
    let who = attribute(&flow, name.as_deref(), &acls, &groups());
    assert_eq!(who.acl.as_ref(), Some(&acls[0]));
    assert_eq!(who.policy.as_deref(), Some("demo/deny"));
}

#[test]
fn an_unlogged_acl_drop_is_found_by_its_match_and_priority() {
    let OvnVerdict::DroppedByAcl { flow, name, .. } = ovn_verdict(UNLOGGED_DROP) else {
        panic!("{:?}", ovn_verdict(UNLOGGED_DROP));
    };
    assert_eq!(name, None);
    assert_eq!(flow.r#match, "reg0[9] == 1 && (outport == @deny2.demo && ip)");
    let acls = [
        NbAcl {
            name: None,
            priority: 2001,
            r#match: "outport == @deny2.demo && ip4.src == 1.2.3.4".into(),
            action: "allow-related".into(),
            ..NbAcl::default()
        },
        NbAcl {
            name: None,
            priority: 2000,
            r#match: "outport == @deny2.demo && ip".into(),
            action: "drop".into(),
            ..NbAcl::default()
        },
    ];
    let who = attribute(&flow, None, &acls, &groups());
    assert_eq!(who.acl.as_ref(), Some(&acls[1]));
    assert_eq!(who.policy.as_deref(), Some("demo/deny2"));
}

#[test]
fn a_drop_outside_the_acls_names_its_stage() {
    let OvnVerdict::Dropped { flow, .. } = ovn_verdict(NO_ROUTE) else {
        panic!("{:?}", ovn_verdict(NO_ROUTE));
    };
    assert_eq!(flow.stage, "lr_in_ip_routing");
}

#[test]
fn no_matching_flow_is_an_implicit_drop_and_other_ports_leave_ovn() {
    let t = "ingress(dp=\"s\", inport=\"a\")\n 3. ls_in_foo: no match (implicit drop)\n";
    assert!(matches!(ovn_verdict(t), OvnVerdict::Dropped { flow, .. } if flow.stage == "ls_in_foo"));
    let t = " 9. ls_out_apply_port_sec (northd.c:1): 1, priority 0, uuid 1\n    output;\n    /* output to \"ln-underlay\", type \"localnet\" */\n";
    assert_eq!(
        ovn_verdict(t),
        OvnVerdict::LeftThrough {
            port: "ln-underlay".into(),
            kind: "localnet".into()
        }
    );
    assert!(matches!(ovn_verdict(""), OvnVerdict::Unknown(None)));
}

#[test]
fn ovs_verdicts() {
    let drop = "Flow: icmp,in_port=7\n\nbridge(\"br-int\")\n 0. priority 0\n    drop\n\nFinal flow: unchanged\nMegaflow: recirc_id=0,in_port=7\nDatapath actions: drop\n";
    assert_eq!(
        ovs_verdict(drop, "node1"),
        "OVS on node1 drops the packet (Datapath actions: drop)"
    );
    let out = "Final flow: unchanged\nDatapath actions: ct(zone=5),recirc(0x2)\n\nrecirc(0x2)\nDatapath actions: 4\n";
    assert_eq!(datapath_actions(out).as_deref(), Some("4"));
    let tunnel =
        "Datapath actions: set(tunnel(tun_id=0x1,dst=172.30.0.12,ttl=64,tp_dst=6081,flags(df|csum|key))),2\n";
    assert_eq!(
        ovs_verdict(tunnel, "node1"),
        "OVS on node1 sends the packet through a tunnel to the node at 172.30.0.12"
    );
    let native = "    output:1\n     -> output to native tunnel\n     -> tunneling to 172.30.0.12 via br-ul\n\
                  Datapath actions: ct(commit,zone=35),tnl_push(tnl_port(4),header(size=58)),out_port(2)),3\n";
    assert_eq!(
        ovs_verdict(native, "node1"),
        "OVS on node1 sends the packet through a tunnel to the node at 172.30.0.12"
    );
    assert!(ovs_verdict("", "node1").contains("no datapath actions"));
}

#[test]
fn port_groups_of_a_match() {
    assert_eq!(
        port_groups_in("inport == @np.a.b && ip4.dst == $np.a.b.egress.allow.IPv4.0"),
        vec!["np.a.b".to_owned()]
    );
    assert!(port_groups_in("ip").is_empty());
}
