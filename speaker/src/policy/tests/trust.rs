//! What an advertisement can select is what the speaker may announce from this node: EIPs from
//! where they live, pods only with the controller's IP record, centralized subnets only from
//! their gateways. No annotation needed.

use serde_json::json;

use super::*;

const TOR: &str = "192.168.0.1";

fn eip_world(ads: Vec<ValidatedAdvertisement>) -> World {
    let mut w = World {
        subnets: vec![
            subnet("external", "10.200.0.0/24", &json!({"role": "external"}), None),
            subnet("other", "10.201.0.0/24", &json!({"role": "other"}), None),
        ],
        ads,
        ..World::default()
    };
    // An OvnEip on vpc1's router port, living on n1; an IptablesEIP whose NAT gateway pod runs
    // on n1; none annotated.
    w.ovn_eips = vec![obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "OvnEip",
        "metadata": {"name": "vpc1-external",
            "labels": {"ovn.kubernetes.io/subnet": "external", "ovn.kubernetes.io/ovn_eip_type": "lrp"}},
        "spec": {"externalSubnet": "external", "type": "lrp"},
        "status": {"ready": true, "type": "lrp", "v4Ip": "10.200.0.10", "activateGateway": "n1"}}))];
    w.eips = vec![obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "IptablesEIP",
        "metadata": {"name": "eip1"},
        "spec": {"natGwDp": "gw1", "v4ip": "10.201.0.5", "externalSubnet": "other"},
        "status": {"ready": true}}))];
    w.pods = vec![obj(
        json!({"metadata": {"name": "vpc-nat-gw-gw1-0", "namespace": "kube-system",
            "labels": {"ovn.kubernetes.io/vpc-nat-gw": "true"},
            "annotations": {"ovn.kubernetes.io/vpc_nat_gw": "gw1"}},
        "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}}),
    )];
    w.peers = vec![peer(TOR, &[], false)];
    w
}

#[test]
fn eips_are_selected_by_their_external_subnet_from_where_they_live() {
    let all = eip_world(vec![ad(
        "eips",
        json!({"advertise": ["EIPs"], "communities": ["65000:5"]}),
    )]);
    let e = all.eval();
    assert_eq!(prefixes(&e, TOR), ["10.200.0.10/32", "10.201.0.5/32"]);
    assert_eq!(route(&e, TOR, "10.200.0.10/32").kind, AdvertiseKind::Eips);
    assert_eq!(
        *route(&e, TOR, "10.201.0.5/32").origin,
        Origin::Eip("eip1".into())
    );
    // Not from n2: neither lives there.
    assert_eq!(prefixes(&all.eval_on("n2"), TOR), Vec::<String>::new());
    let external = eip_world(vec![ad(
        "external",
        json!({"advertise": ["EIPs"], "subnetSelector": {"matchLabels": {"role": "external"}}}),
    )]);
    assert_eq!(prefixes(&external.eval(), TOR), ["10.200.0.10/32"]);
    // Aggregation within the external subnet.
    let agg = eip_world(vec![ad(
        "agg",
        json!({"advertise": ["EIPs"], "aggregationLengthV4": 24}),
    )]);
    assert_eq!(prefixes(&agg.eval(), TOR), ["10.200.0.0/24", "10.201.0.0/24"]);
}

#[test]
fn an_advertisement_selects_only_what_the_speaker_may_announce() {
    let mut w = World {
        peers: vec![peer(TOR, &[], false)],
        ..World::default()
    };
    w.subnets = vec![
        subnet("s", "10.5.0.0/16", &json!({}), None),
        // Centralized: only from its active gateway, n2.
        obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": "central"},
            "spec": {"cidrBlock": "10.6.0.0/16", "gatewayType": "centralized", "gatewayNode": "n1,n2"},
            "status": {"activateGateway": "n2", "conditions": [{"type": "Ready", "status": "True"}]}})),
    ];
    w.pods = vec![
        pod(&mut w.ips, "ns", "ok", "n1", "10.5.0.1", "s", None),
        pod(&mut w.ips, "ns", "central", "n1", "10.6.0.1", "central", None),
    ];
    // A pod whose annotation claims an address no IP record gives it.
    let mut forged = Vec::new();
    w.pods.push(pod(
        &mut forged,
        "ns",
        "forged",
        "n1",
        "10.5.0.99",
        "s",
        Some("cluster"),
    ));
    w.ads = vec![ad("all", json!({"advertise": ["PodIPs", "SubnetCIDRs"]}))];
    assert_eq!(prefixes(&w.eval(), TOR), ["10.5.0.0/16", "10.5.0.1/32"]);
    assert_eq!(
        prefixes(&w.eval_on("n2"), TOR),
        ["10.5.0.0/16", "10.6.0.0/16", "10.6.0.1/32"]
    );
    // The forged address is still refused by the annotation path, as before.
    assert!(
        w.eval()
            .desired
            .refusals
            .iter()
            .any(|r| r.message.contains("10.5.0.99"))
    );
}

#[test]
fn a_local_services_outside_addresses_are_selected_only_where_a_ready_endpoint_is() {
    let mut w = World {
        peers: vec![peer(TOR, &[], false)],
        external: "192.0.2.0/24".parse().unwrap(),
        ..World::default()
    };
    let mut svc = (*service(
        "ns",
        "web",
        &json!({}),
        "10.96.0.10",
        &["192.0.2.7"],
        &["203.0.113.9"],
        None,
    ))
    .clone();
    svc.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
    w.services = vec![Arc::new(svc)];
    w.endpoint_slices = vec![obj(json!({
        "metadata": {"name": "web-x", "namespace": "ns", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.5.0.1"], "nodeName": "n2", "conditions": {"ready": true}}]
    }))];
    w.ads = vec![ad(
        "svc",
        json!({"advertise": ["ClusterIPs", "ExternalIPs", "LoadBalancerIPs"]}),
    )];
    // n1 has no endpoint: only the ClusterIP, which Local does not concern.
    assert_eq!(prefixes(&w.eval_on("n1"), TOR), ["10.96.0.10/32"]);
    assert_eq!(
        prefixes(&w.eval_on("n2"), TOR),
        ["10.96.0.10/32", "192.0.2.7/32", "203.0.113.9/32"]
    );
}
