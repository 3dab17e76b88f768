//! Unit tests of the OvnEip rule ([`crate::announce::ovn_eips`]): each condition on and off;
//! where an EIP lives (an `lrp` EIP's own node, a NAT EIP following its VPC's `lrp` EIP, a
//! distributed FIP's EIP on its own node); dual stack; the refusals, made only by the speaker
//! that would have announced. Objects as our controller writes them (labels, status).

use serde_json::{Value, json};

use super::{obj, on, prefixes, subnet};
use crate::announce::ovn_eips::{Location, location};
use crate::announce::*;

const SUBNET_LABEL_FIELD: &str = r#"metadata.labels["ovn.kubernetes.io/subnet"]"#;

/// An OvnEip as the controller leaves it: labels `subnet` (`external`), `ovn_eip_type`, and
/// `vpc` when given; status `ready`, `type`, `nat`, `v4Ip`/`v6Ip`, `activateGateway` when
/// given; the annotation `bgp: "true"`.
fn eip(name: &str, ips: &str, kind: &str, nat: &str, vpc: Option<&str>, active: Option<&str>) -> Value {
    let v4 = ips.split(',').find(|a| a.contains('.'));
    let v6 = ips.split(',').find(|a| a.contains(':'));
    let mut labels = json!({"ovn.kubernetes.io/subnet": "external", "ovn.kubernetes.io/ovn_eip_type": kind});
    if let Some(vpc) = vpc {
        labels["ovn.kubernetes.io/vpc"] = json!(vpc);
    }
    let mut status = json!({"ready": true, "type": kind, "nat": nat, "macAddress": "00:00:00:aa:bb:cc"});
    if let Some(v4) = v4 {
        status["v4Ip"] = json!(v4);
    }
    if let Some(v6) = v6 {
        status["v6Ip"] = json!(v6);
    }
    if let Some(active) = active {
        status["activateGateway"] = json!(active);
    }
    json!({"apiVersion": "kubeovn.io/v1", "kind": "OvnEip",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels,
            "annotations": {"ovn.kubernetes.io/bgp": "true"}},
        "spec": {"externalSubnet": "external", "type": kind},
        "status": status})
}

/// vpc1's router port on `external` (active on `active`), an EIP of its SNAT rule, and an EIP of
/// a distributed FIP to a pod on n2 (vpc1 too: its own field wins).
fn vpc1(active: &str) -> Vec<Value> {
    vec![
        eip("vpc1-external", "10.200.0.10", "lrp", "", None, Some(active)),
        eip("snat1", "10.200.0.20", "nat", "snat", Some("vpc1"), None),
        eip("fip1", "10.200.0.30", "nat", "fip", Some("vpc1"), Some("n2")),
    ]
}

fn external(ready: bool) -> Arc<Subnet> {
    subnet("external", "10.200.0.0/24,fd00:200::/64", None, ready)
}

fn run_with(eips: &[Value], subnets: &[Arc<Subnet>], node: &'static str) -> Desired {
    let eips: Vec<Arc<OvnEip>> = eips.iter().map(|v| obj(v.clone())).collect();
    desired(
        &Objects {
            subnets,
            ovn_eips: &eips,
            ..Objects::default()
        },
        &on(node),
    )
}

fn announced(eips: &[Value], node: &'static str) -> Vec<String> {
    let d = run_with(eips, &[external(true)], node);
    assert!(d.refusals.is_empty(), "{:?}", d.refusals);
    prefixes(&d)
}

#[test]
fn each_eip_goes_out_from_where_it_lives_and_follows_its_router() {
    let eips = vpc1("n1");
    // n1 holds vpc1's gateway port: the router's address and the SNAT EIP; the distributed
    // FIP's EIP lives on its pod's node.
    assert_eq!(announced(&eips, "n1"), ["10.200.0.10/32", "10.200.0.20/32"]);
    assert_eq!(announced(&eips, "n2"), ["10.200.0.30/32"]);
    assert!(announced(&eips, "n3").is_empty());
    let d = run_with(&eips, &[external(true)], "n1");
    assert_eq!(
        d.prefixes[&"10.200.0.20/32".parse().unwrap()],
        Origin::OvnEip("snat1".into())
    );
    // The port fails over to n3: one status write moves the router's address and the SNAT EIP.
    let eips = vpc1("n3");
    assert!(announced(&eips, "n1").is_empty());
    assert_eq!(announced(&eips, "n2"), ["10.200.0.30/32"]);
    assert_eq!(announced(&eips, "n3"), ["10.200.0.10/32", "10.200.0.20/32"]);
    // Bound to no chassis (the controller writes ""): nobody, the SNAT EIP included.
    let eips = vpc1("");
    for node in ["n1", "n2", "n3"] {
        assert!(!announced(&eips, node).contains(&"10.200.0.10/32".to_owned()));
        assert!(!announced(&eips, node).contains(&"10.200.0.20/32".to_owned()));
    }
}

#[test]
fn where_an_eip_lives() {
    let of = |values: &[Value], name: &str| {
        let eips: Vec<OvnEip> = values
            .iter()
            .map(|v| serde_json::from_value(v.clone()).unwrap())
            .collect();
        let by_name = eips
            .iter()
            .map(|e| (e.metadata.name.as_deref().unwrap(), e))
            .collect();
        let me = eips
            .iter()
            .find(|e| e.metadata.name.as_deref() == Some(name))
            .unwrap();
        location(me, &by_name)
    };
    let nodes = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let mut eips = vpc1("n1");
    assert_eq!(of(&eips, "vpc1-external"), Location::Own(nodes(&["n1"])));
    assert_eq!(
        of(&eips, "snat1"),
        Location::Router("vpc1-external".into(), nodes(&["n1"]))
    );
    assert_eq!(of(&eips, "fip1"), Location::Own(nodes(&["n2"])));
    // A centralized FIP and a DNAT rule share an EIP: both on the gateway chassis.
    eips.push(eip(
        "shared",
        "10.200.0.40",
        "nat",
        "dnat,fip",
        Some("vpc1"),
        None,
    ));
    assert_eq!(
        of(&eips, "shared"),
        Location::Router("vpc1-external".into(), nodes(&["n1"]))
    );
    // The type from the label alone (a status written without it) is enough.
    let mut bare = eip("vpc2-external", "10.200.0.11", "lrp", "", None, Some("n2"));
    bare["status"].as_object_mut().unwrap().remove("type");
    let user = eip("snat2", "10.200.0.21", "nat", "snat", Some("vpc2"), None);
    assert_eq!(
        of(&[bare, user.clone()], "snat2"),
        Location::Router("vpc2-external".into(), nodes(&["n2"]))
    );
    // No lrp EIP for that VPC (not enabled yet), or one not written yet: unknown.
    assert_eq!(of(std::slice::from_ref(&user), "snat2"), Location::Unknown);
    let unwritten = eip("vpc2-external", "10.200.0.11", "lrp", "", None, None);
    assert_eq!(of(&[unwritten.clone(), user.clone()], "snat2"), Location::Unknown);
    assert_eq!(of(&[unwritten], "vpc2-external"), Location::Unknown);
    // An EIP of type nat that happens to bear the router's name does not steer anything.
    let impostor = eip(
        "vpc2-external",
        "10.200.0.11",
        "nat",
        "fip",
        Some("vpc2"),
        Some("n3"),
    );
    assert_eq!(of(&[impostor, user], "snat2"), Location::Unknown);
    // No VPC label (in use, but the controller has not labelled it yet): unknown.
    let unlabelled = eip("snat3", "10.200.0.22", "nat", "snat", None, None);
    assert_eq!(of(&[unlabelled], "snat3"), Location::Unknown);
    // An own "" wins over the router: nowhere, never the gateway chassis.
    let mut eips = vpc1("n1");
    eips[2]["status"]["activateGateway"] = json!("");
    assert_eq!(of(&eips, "fip1"), Location::Own(vec![]));
}

#[test]
fn every_condition_must_hold() {
    let on_n1 = |edit: &dyn Fn(&mut Value)| {
        let mut eips = vpc1("n1");
        edit(&mut eips[1]);
        announced(&eips, "n1")
    };
    let both = ["10.200.0.10/32", "10.200.0.20/32"];
    assert_eq!(on_n1(&|_| {}), both);
    // The annotation must be the literal "true".
    for bgp in [json!("cluster"), json!("local"), json!("True"), json!("false")] {
        assert_eq!(
            on_n1(&|e| e["metadata"]["annotations"]["ovn.kubernetes.io/bgp"] = bgp.clone()),
            ["10.200.0.10/32"],
            "bgp: {bgp}"
        );
    }
    assert_eq!(
        on_n1(&|e| {
            e["metadata"].as_object_mut().unwrap().remove("annotations");
        }),
        ["10.200.0.10/32"]
    );
    // Ready.
    assert_eq!(
        on_n1(&|e| e["status"]["ready"] = json!(false)),
        ["10.200.0.10/32"]
    );
    assert_eq!(
        on_n1(&|e| {
            e["status"].as_object_mut().unwrap().remove("ready");
        }),
        ["10.200.0.10/32"]
    );
    assert_eq!(
        on_n1(&|e| {
            e.as_object_mut().unwrap().remove("status");
        }),
        ["10.200.0.10/32"]
    );
    // In use: the rule deleted (`nat` emptied), or a word that names no rule kind.
    assert_eq!(on_n1(&|e| e["status"]["nat"] = json!("")), ["10.200.0.10/32"]);
    assert_eq!(on_n1(&|e| e["status"]["nat"] = json!("vip")), ["10.200.0.10/32"]);
    // Being deleted, held by the controller's finalizer while a rule uses it: still announced.
    assert_eq!(
        on_n1(&|e| {
            e["metadata"]["deletionTimestamp"] = json!("2026-11-28T08:00:00Z");
            e["metadata"]["finalizers"] = json!(["kubeovn.io/kube-ovn-controller"]);
        }),
        both
    );
    // An lsp EIP (a node's BFD next hop) is not announced.
    let mut eips = vpc1("n1");
    eips.push(eip("lsp1", "10.200.0.50", "lsp", "", Some("vpc1"), Some("n1")));
    assert_eq!(announced(&eips, "n1"), both);
    // The router's own EIP follows the same conditions.
    let mut eips = vpc1("n1");
    eips[0]["status"]["ready"] = json!(false);
    eips[0]["metadata"]["annotations"] = json!({});
    // Not announced itself, but its SNAT user still follows where it says the port is.
    assert_eq!(announced(&eips, "n1"), ["10.200.0.20/32"]);
}

#[test]
fn a_dual_stack_eip_goes_out_as_a_host_route_per_family() {
    let eips = [
        eip(
            "vpc1-external",
            "10.200.0.10,fd00:200::10",
            "lrp",
            "",
            None,
            Some("n1"),
        ),
        eip("v6only", "fd00:200::20", "nat", "snat", Some("vpc1"), None),
    ];
    assert_eq!(
        announced(&eips, "n1"),
        ["10.200.0.10/32", "fd00:200::10/128", "fd00:200::20/128"]
    );
}

fn refused(d: &Desired) -> Vec<(String, String, Reason)> {
    d.refusals
        .iter()
        .map(|r| (r.object_name(), r.field.clone(), r.reason))
        .collect()
}

#[test]
fn an_eip_outside_its_subnet_or_of_no_ready_subnet_is_refused_by_the_node_it_lives_on() {
    let mut eips = vpc1("n1");
    // Written by hand (or by another controller) with an address outside `external`.
    eips.push(eip(
        "forged",
        "192.0.2.7,fd00:200::7",
        "nat",
        "snat",
        Some("vpc1"),
        None,
    ));
    let d = run_with(&eips, &[external(true)], "n1");
    assert_eq!(
        prefixes(&d),
        ["10.200.0.10/32", "10.200.0.20/32", "fd00:200::7/128"]
    );
    assert_eq!(
        refused(&d),
        [(
            "OvnEip forged".to_owned(),
            "status.v4Ip".to_owned(),
            Reason::OutsideSubnet
        )]
    );
    assert!(
        d.refusals[0].message.contains("192.0.2.7"),
        "{}",
        d.refusals[0].message
    );
    assert_eq!(d.refusals[0].object.uid.as_deref(), Some("uid-forged"));
    // n2 would not have announced it: no refusal there either.
    assert!(run_with(&eips, &[external(true)], "n2").refusals.is_empty());

    // The external subnet not Ready, or missing: nothing of it, one refusal per EIP here.
    for subnets in [vec![external(false)], vec![]] {
        let d = run_with(&vpc1("n1"), &subnets, "n1");
        assert!(d.prefixes.is_empty(), "{:?}", d.prefixes);
        assert_eq!(
            refused(&d),
            [
                (
                    "OvnEip vpc1-external".to_owned(),
                    SUBNET_LABEL_FIELD.to_owned(),
                    Reason::SubnetNotReady
                ),
                (
                    "OvnEip snat1".to_owned(),
                    SUBNET_LABEL_FIELD.to_owned(),
                    Reason::SubnetNotReady
                ),
            ]
        );
    }
    // A subnet of another name than the label's does not count.
    let other = subnet("external2", "10.200.0.0/24", None, true);
    let d = run_with(&vpc1("n2"), &[other], "n2");
    assert!(d.prefixes.is_empty());
    assert_eq!(refused(&d)[0].2, Reason::SubnetNotReady);
    // A non-unicast address inside a (strange) subnet is refused alone.
    let mut eips = vpc1("n1");
    eips[1]["status"]["v4Ip"] = json!("239.1.1.1");
    let mcast = subnet("external", "10.200.0.0/24,239.1.1.0/24", None, true);
    let d = run_with(&eips, &[mcast], "n1");
    assert_eq!(prefixes(&d), ["10.200.0.10/32"]);
    assert_eq!(refused(&d)[0].2, Reason::NotUnicast);
}
