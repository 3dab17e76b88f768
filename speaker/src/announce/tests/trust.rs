//! Unit tests of what [`crate::announce::desired`] refuses: addresses a tenant chose (a pod's annotation
//! without the controller's IP record, `externalIPs` outside the operator's CIDRs), addresses
//! outside their subnet or of a subnet not Ready, and non-unicast prefixes, each dropped alone
//! with a refusal naming the object and the field.

use serde_json::json;

use super::{allocated, here, obj, pod, prefixes, record, records_for, subnet};
use crate::announce::*;
use crate::bgp::rib_out::{AdjRibOut, RouteAttributes, check_unicast};

const IP_ADDRESS_FIELD: &str = r#"metadata.annotations["ovn.kubernetes.io/ip_address"]"#;

fn refused(d: &Desired) -> Vec<(String, String, Reason)> {
    let mut out: Vec<_> = d
        .refusals
        .iter()
        .map(|r| (r.object_name(), r.field.clone(), r.reason))
        .collect();
    out.sort();
    out
}

fn pod_refusal(name: &str, reason: Reason) -> (String, String, Reason) {
    (format!("Pod ns/{name}"), IP_ADDRESS_FIELD.to_owned(), reason)
}

fn bgp_pod(name: &str, node: &str, ip: &str, subnet: &str) -> Arc<Pod> {
    let mut ann = allocated(ip, subnet);
    ann["ovn.kubernetes.io/bgp"] = json!("true");
    // The pod's author may write this one too: it proves nothing.
    ann["ovn.kubernetes.io/allocated"] = json!("true");
    pod(name, node, &ann, "Running")
}

fn run(pods: &[Arc<Pod>], subnets: &[Arc<Subnet>], ips: &[Arc<Ip>]) -> Desired {
    desired(
        &Objects {
            pods,
            subnets,
            ips,
            ..Objects::default()
        },
        &here(),
    )
}

#[test]
fn an_address_no_ip_record_gives_the_pod_is_refused() {
    let subnets = [subnet("s1", "10.16.0.0/16", None, true)];
    let honest = bgp_pod("honest", "n2", "10.16.0.5", "s1");
    let pods = [
        honest.clone(),
        // No record at all.
        bgp_pod("forged", "n2", "8.8.8.8", "s1"),
        // Another pod's address, which a record gives to that pod, not this one.
        bgp_pod("thief", "n2", "10.16.0.5", "s1"),
        // A record names this pod, with another address.
        bgp_pod("liar", "n2", "10.16.0.99", "s1"),
        // A reservation the controller has not accepted (no ip_reserved label).
        bgp_pod("early", "n2", "10.16.0.7", "s1"),
    ];
    let mut ips = records_for(std::slice::from_ref(&honest));
    ips.push(record("liar.ns", "liar", "ns", "s1", "10.16.0.9"));
    ips.push(obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": "early.ns"},
        "spec": {"podName": "early", "namespace": "ns", "subnet": "s1", "v4IpAddress": "10.16.0.7"}})));
    let d = run(&pods, &subnets, &ips);
    assert_eq!(prefixes(&d), ["10.16.0.5/32"]);
    assert_eq!(
        refused(&d),
        [
            pod_refusal("early", Reason::NotAllocated),
            pod_refusal("forged", Reason::NotAllocated),
            pod_refusal("liar", Reason::NotAllocated),
            pod_refusal("thief", Reason::NotAllocated),
        ]
    );
    let forged = d.refusals.iter().find(|r| r.message.contains("8.8.8.8")).unwrap();
    assert_eq!(forged.object.kind.as_deref(), Some("Pod"));
    assert_eq!(forged.object.namespace.as_deref(), Some("ns"));
}

#[test]
fn a_reservation_the_controller_carried_out_counts() {
    let subnets = [subnet("s1", "10.16.0.0/16", Some("cluster"), true)];
    let pods = [pod("r", "n2", &allocated("10.16.0.8", "s1"), "Running")];
    let reserved = obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": "r.ns", "labels": {"ovn.kubernetes.io/ip_reserved": "true"}},
        "spec": {"podName": "r", "namespace": "ns", "subnet": "s1", "v4IpAddress": "10.16.0.8"}}));
    let d = run(&pods, &subnets, &[reserved]);
    assert_eq!(prefixes(&d), ["10.16.0.0/16", "10.16.0.8/32"]);
    assert!(d.refusals.is_empty(), "{:?}", d.refusals);
}

#[test]
fn the_records_subnet_must_be_ready_and_contain_the_address() {
    let subnets = [
        subnet("s1", "10.16.0.0/16", None, true),
        subnet("cold", "10.17.0.0/16", None, false),
    ];
    let pods = [
        bgp_pod("outside", "n2", "10.99.0.5", "s1"),
        bgp_pod("cold", "n2", "10.17.0.5", "cold"),
        bgp_pod("gone", "n2", "10.18.0.5", "nosuch"),
        bgp_pod("fine", "n2", "10.16.0.6", "s1"),
    ];
    let d = run(&pods, &subnets, &records_for(&pods));
    assert_eq!(prefixes(&d), ["10.16.0.6/32"]);
    assert_eq!(
        refused(&d),
        [
            pod_refusal("cold", Reason::SubnetNotReady),
            pod_refusal("gone", Reason::SubnetNotReady),
            pod_refusal("outside", Reason::OutsideSubnet),
        ]
    );
}

#[test]
fn the_records_subnet_not_the_pods_annotation_gives_the_policy() {
    // The pod claims a subnet announced `cluster`; the controller put it in one without a
    // policy. Nothing to announce, and nothing refused either: not a BGP pod.
    let subnets = [
        subnet("loud", "10.16.0.0/16", Some("cluster"), true),
        subnet("quiet", "10.17.0.0/16", None, true),
    ];
    let pods = [pod("p", "n1", &allocated("10.17.0.5", "loud"), "Running")];
    let ips = [record("p.ns", "p", "ns", "quiet", "10.17.0.5")];
    let d = run(&pods, &subnets, &ips);
    assert_eq!(prefixes(&d), ["10.16.0.0/16"]);
    assert!(d.refusals.is_empty(), "{:?}", d.refusals);
}

#[test]
fn a_local_pods_refusal_is_made_only_on_its_node() {
    let subnets = [subnet("s1", "10.16.0.0/16", Some("local"), true)];
    let pods = [
        pod("mine", "n1", &allocated("8.8.8.8", "s1"), "Running"),
        pod("theirs", "n2", &allocated("8.8.4.4", "s1"), "Running"),
    ];
    let d = run(&pods, &subnets, &[]);
    assert!(prefixes(&d).is_empty());
    assert_eq!(refused(&d), [pod_refusal("mine", Reason::NotAllocated)]);
}

#[test]
fn every_non_unicast_address_is_dropped_alone() {
    let subnets = [
        subnet("s1", "10.16.0.0/16", None, true),
        // The controller would refuse these CIDRs; the records are made up all the same, to
        // show the speaker's own check.
        subnet("wide4", "0.0.0.0/0", None, true),
        subnet("wide6", "::/0", None, true),
        subnet("mcast", "224.0.0.0/24", Some("cluster"), true),
    ];
    let bad = [
        ("m", "239.1.1.1", "wide4"),
        ("b", "255.255.255.255", "wide4"),
        ("z", "0.0.0.0", "wide4"),
        ("l", "127.0.0.1", "wide4"),
        ("ll", "169.254.1.1", "wide4"),
        ("e", "240.0.0.1", "wide4"),
        ("m6", "ff02::1", "wide6"),
        ("ll6", "fe80::1", "wide6"),
        ("l6", "::1", "wide6"),
        ("map", "::ffff:10.16.0.9", "wide6"),
    ];
    let mut pods: Vec<Arc<Pod>> = bad.iter().map(|(n, ip, s)| bgp_pod(n, "n1", ip, s)).collect();
    pods.push(bgp_pod("good", "n2", "10.16.0.5", "s1"));
    let services = [obj::<Service>(
        json!({"metadata": {"name": "lb", "namespace": "ns", "annotations": {"ovn.kubernetes.io/bgp": "true"}},
        "spec": {"clusterIP": "10.96.0.10"},
        "status": {"loadBalancer": {"ingress": [{"ip": "239.1.1.1"}, {"ip": "198.51.100.7"}]}}}),
    )];
    let ips = records_for(&pods);
    let d = desired(
        &Objects {
            pods: &pods,
            subnets: &subnets,
            services: &services,
            ips: &ips,
            ..Objects::default()
        },
        &here(),
    );
    assert_eq!(prefixes(&d), ["10.16.0.5/32", "198.51.100.7/32"]);
    let mut want: Vec<_> = bad
        .iter()
        .map(|(n, ..)| pod_refusal(n, Reason::NotUnicast))
        .collect();
    want.push((
        "Service ns/lb".into(),
        "status.loadBalancer.ingress[0].ip".into(),
        Reason::NotUnicast,
    ));
    want.push(("Subnet mcast".into(), "spec.cidrBlock".into(), Reason::NotUnicast));
    want.sort();
    assert_eq!(refused(&d), want);
    // What comes out is what an Adj-RIB-Out takes whole.
    assert!(d.prefixes.keys().all(|p| check_unicast(p).is_ok()));
    let mut rib = AdjRibOut::new(65001);
    let routes = d.prefixes.keys().map(|p| (*p, RouteAttributes::default()));
    assert_eq!(rib.replace_all(routes), Ok(()));
}

#[test]
fn external_ips_are_announced_only_inside_the_operators_cidrs() {
    let services = [obj::<Service>(
        json!({"metadata": {"name": "web", "namespace": "ns", "annotations": {"ovn.kubernetes.io/bgp": "true"}},
        "spec": {"clusterIP": "10.96.0.10", "externalIPs": ["192.0.2.10", "198.51.100.1", "224.0.0.9"]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}),
    )];
    let objects = Objects {
        services: &services,
        ..Objects::default()
    };
    let external = |i: usize, reason| {
        (
            "Service ns/web".to_owned(),
            format!("spec.externalIPs[{i}]"),
            reason,
        )
    };
    // By default none: the LoadBalancer address (the platform's) still goes out.
    let d = desired(&objects, &here());
    assert_eq!(prefixes(&d), ["203.0.113.7/32"]);
    assert_eq!(
        refused(&d),
        [
            external(0, Reason::ExternalIpNotAllowed),
            external(1, Reason::ExternalIpNotAllowed),
            external(2, Reason::ExternalIpNotAllowed),
        ]
    );
    assert!(d.refusals[0].message.contains("--service-external-ip-cidrs"));
    // Inside the list: announced; outside: refused; inside but multicast: refused all the same.
    let allowed: ExternalIpCidrs = "192.0.2.0/24,224.0.0.0/4".parse().unwrap();
    let scope = Scope {
        external_ip_cidrs: &allowed,
        announce_cluster_ip: true,
        ..here()
    };
    let d = desired(&objects, &scope);
    assert_eq!(prefixes(&d), ["10.96.0.10/32", "192.0.2.10/32", "203.0.113.7/32"]);
    assert_eq!(
        refused(&d),
        [
            external(1, Reason::ExternalIpNotAllowed),
            external(2, Reason::NotUnicast),
        ]
    );
}

#[test]
fn a_multicast_eip_is_refused_alone() {
    let gw = obj::<Pod>(
        json!({"metadata": {"name": "vpc-nat-gw-gw1-0", "namespace": "kube-system",
            "labels": {"ovn.kubernetes.io/vpc-nat-gw": "true"},
            "annotations": {"ovn.kubernetes.io/vpc_nat_gw": "gw1"}},
        "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}}),
    );
    let eip = obj::<IptablesEIP>(json!({"apiVersion": "kubeovn.io/v1", "kind": "IptablesEIP",
        "metadata": {"name": "eip1", "annotations": {"ovn.kubernetes.io/bgp": "true"}},
        "spec": {"natGwDp": "gw1", "v4ip": "224.0.0.5", "v6ip": "2001:db8:5::5"},
        "status": {"ready": true}}));
    let d = desired(
        &Objects {
            pods: &[gw],
            eips: &[eip],
            ..Objects::default()
        },
        &here(),
    );
    assert_eq!(prefixes(&d), ["2001:db8:5::5/128"]);
    assert_eq!(
        refused(&d),
        [(
            "IptablesEIP eip1".to_owned(),
            "spec.v4ip".to_owned(),
            Reason::NotUnicast
        )]
    );
}
