use serde_json::json;

use super::*;

fn service(selector: &serde_json::Value, ports: &serde_json::Value, families: &[&str]) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "a", "uid": "svc-uid"},
        "spec": {"selector": selector, "ports": ports, "ipFamilies": families,
                 "clusterIP": "10.96.0.10"},
    }))
    .unwrap()
}

fn pod(name: &str, labels: &serde_json::Value, ips: &[&str], ready: bool, ports: &serde_json::Value) -> Pod {
    let ips: Vec<_> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "a", "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x", "ports": ports}]},
        "status": {"phase": "Running", "podIPs": ips, "podIP": ips.first().map(|i| i["ip"].clone()),
                   "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
    }))
    .unwrap()
}

fn addresses(slice: &EndpointSlice) -> Vec<(String, bool)> {
    slice
        .endpoints
        .iter()
        .map(|e| {
            (
                e.addresses[0].clone(),
                e.conditions.as_ref().unwrap().ready.unwrap(),
            )
        })
        .collect()
}

#[test]
fn matching_pods_with_addresses_are_endpoints_with_their_readiness() {
    let svc = service(
        &json!({"app": "web"}),
        &json!([{"port": 80, "targetPort": 8080}]),
        &["IPv4"],
    );
    let a = pod("a", &json!({"app": "web"}), &["10.16.0.2"], true, &json!([]));
    let b = pod("b", &json!({"app": "web"}), &["10.16.0.3"], false, &json!([]));
    let other = pod("c", &json!({"app": "db"}), &["10.16.0.4"], true, &json!([]));
    let pending = pod("d", &json!({"app": "web"}), &[], true, &json!([]));
    let slices = desired_slices(&svc, &[&b, &a, &other, &pending]);
    assert_eq!(slices.len(), 1);
    let s = &slices[0];
    assert_eq!(s.address_type, "IPv4");
    assert_eq!(
        addresses(s),
        [("10.16.0.2".into(), true), ("10.16.0.3".into(), false)]
    );
    assert_eq!(s.ports.as_ref().unwrap()[0].port, Some(8080));
    assert_eq!(s.endpoints[0].node_name.as_deref(), Some("node1"));
    assert_eq!(
        s.endpoints[0].target_ref.as_ref().unwrap().name.as_deref(),
        Some("a")
    );
    let labels = s.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[SERVICE_NAME_LABEL], "web");
    assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
    let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Service", "svc-uid"));
    assert!(s.metadata.name.as_ref().unwrap().starts_with("web-ipv4-"));
}

#[test]
fn terminating_pods_are_serving_but_not_ready() {
    let svc = service(&json!({"app": "web"}), &json!([{"port": 80}]), &["IPv4"]);
    let mut a = pod("a", &json!({"app": "web"}), &["10.16.0.2"], true, &json!([]));
    a.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::UNIX_EPOCH,
    ));
    let s = &desired_slices(&svc, &[&a])[0];
    let c = s.endpoints[0].conditions.clone().unwrap();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(false), Some(true), Some(true))
    );
}

#[test]
fn named_ports_resolve_per_pod_into_separate_slices_and_pods_without_them_are_left_out() {
    let svc = service(
        &json!({"app": "web"}),
        &json!([{"name": "http", "port": 80, "targetPort": "web"}, {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "dns"}]),
        &["IPv4"],
    );
    let named = |port: i32| json!([{"name": "web", "containerPort": port}, {"name": "dns", "containerPort": 5353, "protocol": "UDP"}]);
    let a = pod("a", &json!({"app": "web"}), &["10.16.0.2"], true, &named(8080));
    let b = pod("b", &json!({"app": "web"}), &["10.16.0.3"], true, &named(9090));
    let c = pod("c", &json!({"app": "web"}), &["10.16.0.4"], true, &named(8080));
    // "dns" only over TCP: no UDP port of that name, so it is left out.
    let d = pod(
        "d",
        &json!({"app": "web"}),
        &["10.16.0.5"],
        true,
        &json!([{"name": "web", "containerPort": 8080}, {"name": "dns", "containerPort": 53}]),
    );
    let slices = desired_slices(&svc, &[&a, &b, &c, &d]);
    let mut got: Vec<(Vec<Option<i32>>, Vec<String>)> = slices
        .iter()
        .map(|s| {
            (
                s.ports.as_ref().unwrap().iter().map(|p| p.port).collect(),
                s.endpoints.iter().map(|e| e.addresses[0].clone()).collect(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (
                vec![Some(8080), Some(5353)],
                vec!["10.16.0.2".into(), "10.16.0.4".into()]
            ),
            (vec![Some(9090), Some(5353)], vec!["10.16.0.3".into()]),
        ]
    );
    assert_ne!(slices[0].metadata.name, slices[1].metadata.name);
}

#[test]
fn each_family_has_its_slices_and_empty_ones_stay_as_placeholders() {
    let svc = service(&json!({"app": "web"}), &json!([{"port": 80}]), &["IPv4", "IPv6"]);
    let a = pod(
        "a",
        &json!({"app": "web"}),
        &["10.16.0.2", "fd00::2"],
        true,
        &json!([]),
    );
    let slices = desired_slices(&svc, &[&a]);
    let families: Vec<(&str, Vec<(String, bool)>)> = slices
        .iter()
        .map(|s| (s.address_type.as_str(), addresses(s)))
        .collect();
    assert_eq!(
        families,
        [
            ("IPv4", vec![("10.16.0.2".into(), true)]),
            ("IPv6", vec![("fd00::2".into(), true)])
        ]
    );
    let empty = desired_slices(&svc, &[]);
    assert_eq!(empty.len(), 2);
    assert!(empty.iter().all(|s| s.endpoints.is_empty()));
    // No selector: not ours to manage.
    let manual = service(&json!({}), &json!([{"port": 80}]), &["IPv4"]);
    assert!(desired_slices(&manual, &[&a]).is_empty());
}

#[test]
fn more_than_a_slice_full_is_split() {
    let svc = service(&json!({"app": "web"}), &json!([{"port": 80}]), &["IPv4"]);
    let pods: Vec<Pod> = (0..250)
        .map(|i| {
            pod(
                &format!("p{i:03}"),
                &json!({"app": "web"}),
                &[&format!("10.16.{}.{}", i / 200, i % 200 + 1)],
                true,
                &json!([]),
            )
        })
        .collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    let slices = desired_slices(&svc, &refs);
    let sizes: Vec<usize> = slices.iter().map(|s| s.endpoints.len()).collect();
    assert_eq!(sizes, [100, 100, 50]);
    let mut names: Vec<_> = slices.iter().map(ResourceExt::name_any).collect();
    names.dedup();
    assert_eq!(names.len(), 3);
}
