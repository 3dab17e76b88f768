use super::*;

fn pod(name: &str, node: &str, host_ip: &str, ips: &[&str]) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": []},
        "status": {"hostIP": host_ip, "podIPs": ips.iter().map(|ip| serde_json::json!({"ip": ip})).collect::<Vec<_>>()},
    }))
    .unwrap()
}

fn node(name: &str, addresses: &[(&str, &str)]) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "status": {"addresses": addresses.iter().map(|(t, a)| serde_json::json!({"type": t, "address": a})).collect::<Vec<_>>()},
    }))
    .unwrap()
}

#[test]
fn selector_is_sorted_key_value_pairs() {
    let labels: BTreeMap<String, String> = [("component", "network"), ("app", "kube-ovn-pinger")]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
    assert_eq!(selector(&labels), "app=kube-ovn-pinger,component=network");
}

#[test]
fn pods_and_nodes_in_the_pinger_families() {
    let pods = [
        pod("p1", "n1", "172.18.0.2", &["10.16.0.5", "fd00:10:16::5"]),
        pod("p2", "n2", "172.18.0.3", &[]),
    ];
    let v4_only = [false];
    let targets = pod_targets(&pods, &v4_only);
    assert_eq!(
        targets,
        vec![PingTarget {
            name: "p1".into(),
            ip: "10.16.0.5".parse().unwrap(),
            node_name: "n1".into(),
            node_ip: "172.18.0.2".into(),
        }]
    );
    assert_eq!(pod_targets(&pods, &[false, true]).len(), 2);
    assert_eq!(pod_targets(&pods, &[]).len(), 2, "unknown families: all");

    let nodes = [node(
        "n1",
        &[
            ("Hostname", "n1"),
            ("InternalIP", "172.18.0.2"),
            ("InternalIP", "fc00::2"),
            ("ExternalIP", "1.2.3.4"),
        ],
    )];
    let targets = node_targets(&nodes, &[true]);
    assert_eq!(targets.len(), 1);
    assert_eq!(
        (targets[0].name.as_str(), targets[0].node_ip.as_str()),
        ("n1", "fc00::2")
    );
}

#[test]
fn exit_code_follows_kube_ovn() {
    let ok = Report::default();
    let failed = Report {
        failures: vec!["ping pod p1 10.16.0.5: 3 of 3 lost".into()],
    };
    assert_eq!(ok.exit_code(1), 0);
    assert_eq!(failed.exit_code(1), 1);
    // Kube-OVN's default --exit-code=0 reports failures but exits 0.
    assert_eq!(failed.exit_code(0), 0);
}
