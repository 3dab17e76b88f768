use serde_json::json;

use super::*;
use crate::reconcile::service::claims::{Admission, Owners};
use kube_ovn_api::external_ips::ExternalIpCidrs;

/// [`plan_service`] with every claim admissible (external IPs anywhere, annotation VIPs in
/// `vip_vpc`'s ranges) and `svc` the only Service; the claim rule is `service::claims::tests`'.
fn plan_in<'a>(
    svc: &Service,
    slices: &[&EndpointSlice],
    pod: impl Fn(&str) -> Option<&'a Pod>,
    vip_vpc: &str,
) -> ServiceVips {
    let cidrs: ExternalIpCidrs = "0.0.0.0/0,::/0".parse().unwrap();
    let vip_range = |_: &str, _: IpAddr| Ok(vip_vpc.to_owned());
    let admission = Admission {
        external_ip_cidrs: &cidrs,
        vip_range: &vip_range,
    };
    let owners = Owners::compute(&[svc], &admission, None);
    let rules = Rules {
        owners: &owners,
        admission: &admission,
        default_vpc: "ovn-cluster",
        vpc_admits: &|vpc: &str, _: &str| vpc == vip_vpc,
    };
    plan_service(svc, slices, pod, &rules)
}

fn plan<'a>(svc: &Service, slices: &[&EndpointSlice], pod: impl Fn(&str) -> Option<&'a Pod>) -> ServiceVips {
    plan_in(svc, slices, pod, "ovn-cluster")
}

fn svc(v: serde_json::Value) -> Service {
    serde_json::from_value(v).unwrap()
}

fn slice(v: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(v).unwrap()
}

fn web() -> Service {
    svc(json!({"metadata": {"name": "web", "namespace": "ns"},
        "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00:10:96::a"],
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080},
                           {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "dns"}]}}))
}

fn pod(name: &str, router: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns",
        "annotations": {"ovn.kubernetes.io/logical_router": router}},
        "spec": {"containers": [{"name": "c", "ports": [{"name": "dns", "containerPort": 5353}]}]}}))
    .unwrap()
}

fn tcp(session: bool) -> LbKind {
    LbKind {
        protocol: Protocol::Tcp,
        session,
    }
}

const UDP: LbKind = LbKind {
    protocol: Protocol::Udp,
    session: false,
};

#[test]
fn ready_endpoints_of_each_family_back_each_vip_and_port() {
    let v4 = slice(
        json!({"metadata": {"name": "web-a", "namespace": "ns"}, "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}, {"name": "dns", "port": 5353, "protocol": "UDP"}],
        "endpoints": [
            {"addresses": ["10.16.0.5"], "targetRef": {"kind": "Pod", "name": "p1"}},
            {"addresses": ["10.16.0.6"], "conditions": {"ready": true}},
            {"addresses": ["10.16.0.7"], "conditions": {"ready": false}}]}),
    );
    let v6 = slice(
        json!({"metadata": {"name": "web-b", "namespace": "ns"}, "addressType": "IPv6",
        "ports": [{"name": "http", "port": 8080}, {"name": "dns", "port": 5353, "protocol": "UDP"}],
        "endpoints": [{"addresses": ["fd00:10:16::5"]}]}),
    );
    let p1 = pod("p1", "ovn-cluster");
    let got = plan(&web(), &[&v4, &v6], |n| (n == "p1").then_some(&p1));
    assert_eq!(got.problems, Vec::<String>::new());
    assert_eq!(got.vpc, "ovn-cluster");
    assert_eq!(got.ips, ["10.96.0.10", "fd00:10:96::a"]);
    assert_eq!(
        got.vips[&tcp(false)],
        BTreeMap::from([
            (
                "10.96.0.10:80".to_owned(),
                "10.16.0.5:8080,10.16.0.6:8080".to_owned()
            ),
            ("[fd00:10:96::a]:80".to_owned(), "[fd00:10:16::5]:8080".to_owned()),
        ]),
        "the unready 10.16.0.7 is left out"
    );
    assert_eq!(
        got.vips[&UDP],
        BTreeMap::from([
            (
                "10.96.0.10:53".to_owned(),
                "10.16.0.5:5353,10.16.0.6:5353".to_owned()
            ),
            ("[fd00:10:96::a]:53".to_owned(), "[fd00:10:16::5]:5353".to_owned()),
        ])
    );
}

#[test]
fn a_named_target_port_resolves_through_the_pod_and_a_missing_one_is_reported() {
    // A selectorless-style slice without ports: the name is looked up in the pods.
    let s = slice(
        json!({"metadata": {"name": "web-a", "namespace": "ns"}, "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.16.0.5"], "targetRef": {"kind": "Pod", "name": "p1"}},
            {"addresses": ["10.16.0.8"], "targetRef": {"kind": "Pod", "name": "gone"}}]}),
    );
    let p1 = pod("p1", "ovn-cluster");
    let got = plan(&web(), &[&s], |n| (n == "p1").then_some(&p1));
    assert_eq!(got.vips[&UDP]["10.96.0.10:53"], "10.16.0.5:5353");
    assert_eq!(
        got.problems,
        ["service ns/web: spec.ports[1]: targetPort \"dns\" names no container port of pod gone"]
    );
    assert_eq!(
        got.vips[&tcp(false)]["10.96.0.10:80"],
        "10.16.0.5:8080,10.16.0.8:8080",
        "the numeric port is unaffected"
    );
}

#[test]
fn no_ready_endpoint_means_no_vip_and_headless_means_nothing() {
    let s = slice(
        json!({"metadata": {"name": "web-a", "namespace": "ns"}, "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.16.0.5"], "conditions": {"ready": false}}]}),
    );
    let got = plan(&web(), &[&s], |_| None);
    assert!(got.vips.is_empty());
    assert_eq!(got.ips.len(), 2, "its addresses are still its own, to clean");
    let headless = svc(json!({"metadata": {"name": "h", "namespace": "ns"},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}));
    let s = slice(
        json!({"metadata": {"name": "h-a", "namespace": "ns"}, "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.16.0.5"]}]}),
    );
    let got = plan(&headless, &[&s], |_| None);
    assert!(got.vips.is_empty() && got.ips.is_empty() && got.problems.is_empty());
}

#[test]
fn session_affinity_picks_the_session_lb_and_pods_pick_the_vpc() {
    let mut s = web();
    s.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    let e = slice(
        json!({"metadata": {"name": "web-a", "namespace": "ns"}, "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": [{"addresses": ["10.0.1.5"], "targetRef": {"kind": "Pod", "name": "p1"}}]}),
    );
    let p1 = pod("p1", "vpc1");
    let got = plan_in(&s, &[&e], |n| (n == "p1").then_some(&p1), "vpc1");
    assert_eq!(got.vpc, "vpc1");
    assert_eq!(got.vips[&tcp(true)]["10.96.0.10:80"], "10.0.1.5:8080");
    assert!(!got.vips.contains_key(&tcp(false)));
}

#[test]
fn selectorless_services_and_lb_vip_annotations() {
    // No pods behind it: the annotation's VPC, else the default; the VIP from switch_lb_vip.
    let s = svc(json!({"metadata": {"name": "ext", "namespace": "ns",
            "annotations": {"ovn.kubernetes.io/switch_lb_vip": "10.0.9.9", "ovn.kubernetes.io/vpc": "vpc2"}},
        "spec": {"clusterIP": "10.96.0.20", "ports": [{"port": 443, "targetPort": 8443}]}}));
    let e = slice(
        json!({"metadata": {"name": "ext-1", "namespace": "ns"}, "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.168.7.1"]}]}),
    );
    let got = plan_in(&s, &[&e], |_| None, "vpc2");
    assert_eq!(got.vpc, "vpc2");
    assert_eq!(
        got.ips,
        ["10.0.9.9", "10.96.0.20"],
        "its own ClusterIP, unused, to clean"
    );
    assert_eq!(got.vips[&tcp(false)]["10.0.9.9:443"], "192.168.7.1:8443");
}

#[test]
fn malformed_input_names_object_and_field_and_the_rest_still_works() {
    let e = slice(
        json!({"metadata": {"name": "web-a", "namespace": "ns"}, "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": [{"addresses": ["10.16.0.300"]}, {"addresses": ["10.16.0.5"]}]}),
    );
    let got = plan(&web(), &[&e], |_| None);
    assert_eq!(
        got.problems[0],
        "endpointslice ns/web-a: endpoints[0].addresses[0]: \"10.16.0.300\" is not an IPv4 address"
    );
    assert_eq!(got.vips[&tcp(false)]["10.96.0.10:80"], "10.16.0.5:8080");
    let bad = svc(json!({"metadata": {"name": "b", "namespace": "ns",
            "annotations": {"ovn.kubernetes.io/switch_lb_vip": "nope"}},
        "spec": {"clusterIP": "10.96.0.20", "ports": [{"port": 443}]}}));
    let got = plan(&bad, &[&e], |_| None);
    assert_eq!(
        got.problems[0],
        "service ns/b: metadata.annotations[\"ovn.kubernetes.io/switch_lb_vip\"]: \"nope\" is not an IP address"
    );
    assert!(got.vips.is_empty());
}

#[test]
fn load_balancer_ingress_and_external_ips_are_vips_too_but_not_for_headless_services() {
    let mut s = web();
    s.status = serde_json::from_value(
        json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}, {"hostname": "lb.example"}]}}),
    )
    .unwrap();
    s.spec.as_mut().unwrap().external_ips = Some(vec!["192.0.2.20".into(), "192.0.2.10".into()]);
    assert_eq!(
        service_ips(&s).unwrap(),
        ["10.96.0.10", "fd00:10:96::a", "192.0.2.10", "192.0.2.20"]
            .map(|i| i.parse::<IpAddr>().unwrap())
            .to_vec()
    );
    s.spec.as_mut().unwrap().external_ips = Some(vec!["192.0.2.x".into()]);
    assert_eq!(
        service_ips(&s).unwrap_err(),
        "service ns/web: spec.externalIPs[0]: \"192.0.2.x\" is not an IP address"
    );
    s.spec.as_mut().unwrap().external_ips = None;
    s.status = serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.300"}]}})).unwrap();
    assert_eq!(
        service_ips(&s).unwrap_err(),
        "service ns/web: status.loadBalancer.ingress[0].ip: \"192.0.2.300\" is not an IP address"
    );
    let spec = s.spec.as_mut().unwrap();
    spec.cluster_ip = Some("None".into());
    spec.cluster_ips = Some(vec!["None".into()]);
    assert!(service_ips(&s).unwrap().is_empty());
}

#[test]
fn refused_addresses_are_cleared_when_nobody_owns_them_and_left_alone_when_someone_does() {
    let cidrs = ExternalIpCidrs::default();
    let vip_range = |_: &str, _: IpAddr| Err("nowhere".to_owned());
    let admission = Admission {
        external_ip_cidrs: &cidrs,
        vip_range: &vip_range,
    };
    let mut s = web();
    s.spec.as_mut().unwrap().external_ips = Some(vec!["192.0.2.20".into(), "10.96.0.99".into()]);
    let other = svc(json!({"metadata": {"name": "other", "namespace": "ns2"},
        "spec": {"clusterIP": "10.96.0.99", "clusterIPs": ["10.96.0.99"], "ports": [{"port": 80}]}}));
    let owners = Owners::compute(&[&s, &other], &admission, None);
    let rules = Rules {
        owners: &owners,
        admission: &admission,
        default_vpc: "ovn-cluster",
        vpc_admits: &|_: &str, _: &str| false,
    };
    let e = slice(
        json!({"metadata": {"name": "web-a", "namespace": "ns"}, "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}], "endpoints": [{"addresses": ["10.16.0.5"]}]}),
    );
    let got = plan_service(&s, &[&e], |_| None, &rules);
    // 192.0.2.20 is refused (no CIDR allows it) and nobody's: its keys go. 10.96.0.99 is other's.
    assert_eq!(got.ips, ["10.96.0.10", "fd00:10:96::a", "192.0.2.20"]);
    assert_eq!(
        got.vips[&tcp(false)].keys().collect::<Vec<_>>(),
        ["10.96.0.10:80"]
    );
    assert_eq!(got.refused.len(), 2, "{:?}", got.refused);
    assert!(got.refused[1].contains("spec.externalIPs[1]: 10.96.0.99 is the ClusterIP of service ns2/other"));
}

#[test]
fn a_vpc_annotation_naming_a_vpc_that_does_not_admit_the_namespace_is_refused() {
    // A selectorless Service asking, through the tenant-writable annotation, for another
    // tenant's VPC: its VIPs stay in the default VPC and the refusal names the annotation.
    let s = svc(json!({"metadata": {"name": "web", "namespace": "ns",
        "annotations": {"ovn.kubernetes.io/vpc": "vpc-of-others"}},
        "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "ports": [{"port": 80}]}}));
    let got = plan_in(&s, &[], |_| None, "vpc-bound");
    assert_eq!(got.vpc, "ovn-cluster");
    assert!(
        got.problems
            .iter()
            .any(|p| p.contains(r#"metadata.annotations["ovn.kubernetes.io/vpc"]"#)
                && p.contains("vpc-of-others")),
        "{:?}",
        got.problems
    );
    // The same annotation naming a VPC that binds the namespace is honoured.
    let mut bound = s.clone();
    bound
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("ovn.kubernetes.io/vpc".into(), "vpc-bound".into());
    let got = plan_in(&bound, &[], |_| None, "vpc-bound");
    assert_eq!(got.vpc, "vpc-bound");
    assert!(got.problems.is_empty(), "{:?}", got.problems);
}

#[test]
fn a_pods_logical_router_naming_a_vpc_that_does_not_admit_the_namespace_is_not_the_services_vpc() {
    // The tenant writes another tenant's VPC into its pod: the Service's VIPs stay in the
    // default VPC, and the refusal names the pod and the annotation.
    let e = slice(
        json!({"metadata": {"name": "web-a", "namespace": "ns"}, "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": [{"addresses": ["172.17.0.5"], "targetRef": {"kind": "Pod", "name": "p1"}}]}),
    );
    let p1 = pod("p1", "vpc-of-others");
    let got = plan_in(&web(), &[&e], |n| (n == "p1").then_some(&p1), "vpc-bound");
    assert_eq!(got.vpc, "ovn-cluster");
    assert_eq!(
        got.problems,
        [
            "service ns/web: pod ns/p1: metadata.annotations[\"ovn.kubernetes.io/logical_router\"]: VPC vpc-of-others does not admit namespace ns; not used"
        ]
    );
    assert_eq!(got.vips[&tcp(false)]["10.96.0.10:80"], "172.17.0.5:8080");
}
