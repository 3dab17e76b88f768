use super::*;

fn request(ifname: &str) -> CniRequest {
    CniRequest {
        cni_type: "kube-ovn".into(),
        pod_name: "web".into(),
        pod_namespace: "shop".into(),
        container_id: "0123456789abcdef0123".into(),
        net_ns: "/var/run/netns/cni-1".into(),
        if_name: ifname.into(),
        provider: "ovn".into(),
        ..CniRequest::default()
    }
}

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

const ROUTED: [(&str, &str); 7] = [
    ("ovn.kubernetes.io/allocated", "true"),
    ("ovn.kubernetes.io/routed", "true"),
    ("ovn.kubernetes.io/ip_address", "10.16.0.5,fd00:10:16::5"),
    ("ovn.kubernetes.io/cidr", "10.16.0.0/16,fd00:10:16::/64"),
    ("ovn.kubernetes.io/gateway", "10.16.0.1,fd00:10:16::1"),
    ("ovn.kubernetes.io/mac_address", "0a:00:00:10:00:05"),
    ("ovn.kubernetes.io/logical_switch", "ovn-default"),
];

fn subnet_with_mtu(mtu: Option<u32>) -> Option<Subnet> {
    mtu.map(|mtu| {
        serde_json::from_value(
            serde_json::json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": "ovn-default"}, "spec": {"mtu": mtu}}),
        )
        .unwrap()
    })
}

fn ready(ann: &BTreeMap<String, String>, req: &CniRequest, subnet_mtu: Option<u32>) -> NicPlan {
    let subnet = subnet_with_mtu(subnet_mtu);
    let inputs = PlanInputs {
        request: req,
        subnet: subnet.as_ref(),
        provider_network: None,
        node_labels: None,
        default_mtu: 1400,
    };
    match readiness(Some(ann), &inputs).unwrap() {
        Readiness::Ready(plan) => *plan,
        Readiness::Waiting(w) => panic!("waiting for {w:?}"),
    }
}

#[test]
fn waits_for_address_then_route() {
    let req = request("eth0");
    let inputs = PlanInputs {
        request: &req,
        subnet: None,
        provider_network: None,
        node_labels: None,
        default_mtu: 1400,
    };
    assert_eq!(
        readiness(None, &inputs).unwrap(),
        Readiness::Waiting(WaitingFor::Address)
    );
    let mut ann = annotations(&ROUTED);
    ann.remove("ovn.kubernetes.io/routed");
    assert_eq!(
        readiness(Some(&ann), &inputs).unwrap(),
        Readiness::Waiting(WaitingFor::Route)
    );
    // A NIC without the default route does not wait for `routed` (Kube-OVN's rule).
    ann.insert("ovn.kubernetes.io/default_route".into(), "false".into());
    assert!(matches!(
        readiness(Some(&ann), &inputs).unwrap(),
        Readiness::Ready(_)
    ));
}

#[test]
fn plan_from_annotations() {
    let req = request("eth0");
    let plan = ready(&annotations(&ROUTED), &req, None);
    assert_eq!(plan.iface_id, "web.shop");
    assert_eq!(plan.host_nic, "0123456789ab_h");
    assert_eq!(plan.mac, [0x0a, 0, 0, 0x10, 0, 5]);
    assert_eq!(
        plan.addresses,
        vec![
            "10.16.0.5/16".parse::<IpNet>().unwrap(),
            "fd00:10:16::5/64".parse().unwrap()
        ]
    );
    assert_eq!(plan.mtu, 1400);
    let defaults: Vec<_> = plan
        .routes
        .iter()
        .map(|r| (r.dst.to_string(), r.via.unwrap().to_string()))
        .collect();
    assert_eq!(
        defaults,
        [
            ("0.0.0.0/0".into(), "10.16.0.1".into()),
            ("::/0".into(), "fd00:10:16::1".into())
        ]
    );
    assert_eq!(plan.external_ids["iface-id"], "web.shop");
    assert_eq!(plan.external_ids["vendor"], "kube-ovn");
    assert_eq!(plan.external_ids["pod_netns"], "/var/run/netns/cni-1");
    assert_eq!(plan.external_ids["ip"], "10.16.0.5,fd00:10:16::5");
    assert_eq!(plan.qos, QosPlan::default());
    assert_eq!(ready(&annotations(&ROUTED), &req, Some(9000)).mtu, 9000);

    let response = response(&plan, &req);
    let json = serde_json::to_value(&response).unwrap();
    assert_eq!(
        json["ips"][0],
        serde_json::json!({"protocol": "IPv4", "ip": "10.16.0.5", "cidr": "10.16.0.0/16", "gateway": "10.16.0.1"})
    );
    assert_eq!(json["nicname"], "eth0");
    assert_eq!(
        json["routes"],
        serde_json::Value::Null,
        "no routes beyond the defaults: the shim adds those"
    );
}

#[test]
fn underlay_plans_carry_the_subnets_decisions_and_u2o_takes_the_default_route() {
    let req = request("eth0");
    let ann = annotations(&ROUTED);
    let labels = annotations(&[("pn1.provider-network.kubernetes.io/mtu", "1450")]);
    let plan_for = |spec: serde_json::Value, status: serde_json::Value| {
        let subnet: Subnet = serde_json::from_value(serde_json::json!({"apiVersion": "kubeovn.io/v1",
            "kind": "Subnet", "metadata": {"name": "ovn-default"}, "spec": spec, "status": status}))
        .unwrap();
        let inputs = PlanInputs {
            request: &req,
            subnet: Some(&subnet),
            provider_network: Some("pn1"),
            node_labels: Some(&labels),
            default_mtu: 1400,
        };
        readiness(Some(&ann), &inputs)
    };
    let Ok(Readiness::Ready(plain)) = plan_for(serde_json::json!({"vlan": "v1"}), serde_json::json!({}))
    else {
        panic!("no plan");
    };
    assert_eq!(plain.mtu, 1450);
    assert_eq!(
        plain.wait_patch_port.as_deref(),
        Some("patch-localnet.ovn-default-to-br-int")
    );
    assert_eq!(plain.gateway_check.unwrap().mode, GatewayCheckMode::Arping);
    assert_eq!(plain.routes[0].via, Some("10.16.0.1".parse().unwrap()));

    let u2o = serde_json::json!({"vlan": "v1", "u2oInterconnection": true});
    let Ok(Readiness::Ready(plan)) = plan_for(
        u2o.clone(),
        serde_json::json!({"u2oInterconnectionIP": "10.16.0.254"}),
    ) else {
        panic!("no plan");
    };
    let v4_default = plan
        .routes
        .iter()
        .find(|r| r.dst.to_string() == "0.0.0.0/0")
        .unwrap();
    assert_eq!(v4_default.via, Some("10.16.0.254".parse().unwrap()));
    // The IPv6 half has no U2O IP: its gateway stays.
    let v6_default = plan.routes.iter().find(|r| r.dst.to_string() == "::/0").unwrap();
    assert_eq!(v6_default.via, Some("fd00:10:16::1".parse().unwrap()));
    // The result still reports the subnet's gateway, as Kube-OVN's does, and the routes
    // as installed.
    assert_eq!(plan.gateways[0], "10.16.0.1".parse::<IpAddr>().unwrap());
    let reported: Vec<_> = plan
        .reported_routes
        .iter()
        .map(|r| (r.dst.unwrap().to_string(), r.gw))
        .collect();
    assert_eq!(
        reported,
        [
            ("0.0.0.0/0".into(), v4_default.via),
            ("::/0".into(), v6_default.via)
        ]
    );
    assert!(matches!(
        plan_for(u2o, serde_json::json!({})),
        Err(PlanError::Subnet(SubnetPlanError::U2oIpMissing(_)))
    ));
}

#[test]
fn the_early_port_is_the_plans_port_without_what_the_annotations_give() {
    let req = request("eth0");
    let early = early_port(&req);
    let plan = ready(&annotations(&ROUTED), &req, None);
    assert_eq!(
        (&early.iface_id, &early.host_nic, &early.ifname),
        (&plan.iface_id, &plan.host_nic, &plan.ifname)
    );
    let mut completed = early.external_ids.clone();
    completed.insert("ip".into(), "10.16.0.5,fd00:10:16::5".into());
    completed.insert("attached-mac".into(), "0a:00:00:10:00:05".into());
    assert_eq!(completed, plan.external_ids);
}

#[test]
fn annotated_routes_replace_the_default_of_their_family() {
    let mut ann = annotations(&ROUTED);
    ann.insert(
        "ovn.kubernetes.io/routes".into(),
        r#"[{"gw":"10.16.0.254"},{"dst":"192.168.0.0/16","gw":"10.16.0.1"}]"#.into(),
    );
    let plan = ready(&ann, &request("eth0"), None);
    let v4: Vec<_> = plan
        .routes
        .iter()
        .filter(|r| r.dst.addr().is_ipv4())
        .map(|r| (r.dst.to_string(), r.via))
        .collect();
    assert_eq!(
        v4,
        [
            ("0.0.0.0/0".into(), Some("10.16.0.254".parse().unwrap())),
            ("192.168.0.0/16".into(), Some("10.16.0.1".parse().unwrap()))
        ]
    );
    assert_eq!(plan.reported_routes.len(), 2);
}

#[test]
fn providers_read_their_own_keys() {
    let mut req = request("net1");
    req.provider = "attach.shop.ovn".into();
    let ann: BTreeMap<String, String> = ROUTED
        .iter()
        .map(|(k, v)| {
            (
                k.replace("ovn.kubernetes.io/", "attach.shop.ovn.kubernetes.io/"),
                (*v).to_owned(),
            )
        })
        .collect();
    let plan = ready(&ann, &req, None);
    assert_eq!(plan.iface_id, "web.shop.attach.shop.ovn");
    assert!(plan.gateways.is_empty(), "net1 carries no default route");
    assert!(plan.routes.is_empty());
}

#[test]
fn malformed_annotations_name_the_key() {
    let req = request("eth0");
    let inputs = PlanInputs {
        request: &req,
        subnet: None,
        provider_network: None,
        node_labels: None,
        default_mtu: 1400,
    };
    for (key, value) in [
        ("ovn.kubernetes.io/ip_address", "10.16.0.500"),
        ("ovn.kubernetes.io/mac_address", "0a:00"),
        ("ovn.kubernetes.io/routes", "[{"),
        ("ovn.kubernetes.io/egress_rate", "-1"),
        ("ovn.kubernetes.io/ingress_rate", "fast"),
    ] {
        let mut ann = annotations(&ROUTED);
        ann.insert(key.into(), value.into());
        match readiness(Some(&ann), &inputs).unwrap_err() {
            PlanError::Annotation(err) => assert_eq!(err.key, key, "{err}"),
            other @ PlanError::Subnet(_) => panic!("{key}: {other}"),
        }
    }
}

#[test]
fn addresses_are_announced_except_on_a_live_migrations_target() {
    let req = request("eth0");
    assert!(ready(&annotations(&ROUTED), &req, None).announce);
    // A migration's target (or an activation strategy, with the provider's own key): the
    // addresses are still the source VM's; the VM announces itself when it resumes.
    for extra in [
        ("kubevirt.io/migrationJobName", "job-1"),
        ("ovn.kubernetes.io/activation_strategy", "rarp"),
    ] {
        let mut ann = annotations(&ROUTED);
        ann.insert(extra.0.into(), extra.1.into());
        assert!(!ready(&ann, &req, None).announce, "{extra:?}");
    }
    let mut ann = annotations(&ROUTED);
    ann.insert("ovn.kubernetes.io/activation_strategy".into(), String::new());
    assert!(ready(&ann, &req, None).announce, "an empty strategy is none");
}
