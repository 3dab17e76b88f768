//! The ClusterIP allocator against the emulator: `default/kubernetes` made with the first
//! address; Services get unique addresses from the ranges (dual-stack when asked), headless and
//! ExternalName ones are left alone, user-chosen addresses that are taken or out of range get a
//! Warning Event, freed addresses are handed out again, and a restarted allocator rebuilds its
//! view from the Services (no address given twice).

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::collections::BTreeSet;

use common::agent::{eventually, spawn};
use k8s_openapi::api::core::v1::{Event, Service};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use kube_ovn_lab::agent::services::{self, ServicesConfig};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::json;

fn config() -> ServicesConfig {
    ServicesConfig {
        cluster_ip_ranges: services::parse_ranges("10.96.0.0/28,fd00:96::/124").unwrap(),
        apiserver: Some("172.30.0.2:6443".parse().unwrap()),
    }
}

async fn create(api: &Api<Service>, name: &str, spec: serde_json::Value) {
    let mut spec = spec;
    if spec.get("ports").is_none() {
        spec["ports"] = json!([{"port": 80}]);
    }
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    api.create(&PostParams::default(), &svc)
        .await
        .unwrap_or_else(|e| panic!("creating Service {name}: {e}"));
}

/// The Service's `clusterIPs` once set (fails the test if it never is).
async fn cluster_ips(api: &Api<Service>, name: &str) -> Vec<String> {
    eventually(&format!("Service {name} to get its ClusterIP"), || async {
        let svc = api.get(name).await.map_err(|e| e.to_string())?;
        let spec = svc.spec.unwrap_or_default();
        match spec.cluster_ips {
            Some(ips) if !ips.is_empty() && spec.cluster_ip.as_ref() == ips.first() => Ok(ips),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

async fn warnings(client: &kube::Client, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.message)
        .collect()
}

#[tokio::test]
async fn services_get_unique_addresses_that_are_freed_and_rebuilt() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    // Made before the allocator starts: it must not give this address again.
    create(&api, "early", json!({"clusterIP": "10.96.0.2"})).await;
    let allocator = spawn("services", services::run(client.clone(), config()));

    assert_eq!(cluster_ips(&api, "kubernetes").await, ["10.96.0.1"]);
    let kubernetes = api.get("kubernetes").await.unwrap();
    assert_eq!(kubernetes.spec.unwrap().ports.unwrap()[0].port, 443);
    assert_eq!(cluster_ips(&api, "early").await, ["10.96.0.2"]);
    let early = api.get("early").await.unwrap().spec.unwrap();
    assert_eq!(
        early.ip_families.as_deref(),
        Some(&["IPv4".to_owned()][..]),
        "completed"
    );

    for i in 0..5 {
        create(&api, &format!("s{i}"), json!({})).await;
    }
    create(&api, "dual", json!({"ipFamilyPolicy": "PreferDualStack"})).await;
    create(&api, "headless", json!({"clusterIP": "None"})).await;
    create(
        &api,
        "external",
        json!({"type": "ExternalName", "externalName": "example.com"}),
    )
    .await;
    let mut all = BTreeSet::new();
    for i in 0..5 {
        let ips = cluster_ips(&api, &format!("s{i}")).await;
        assert_eq!(ips.len(), 1);
        assert!(
            ips[0].starts_with("10.96.0.") && ips[0] != "10.96.0.1" && ips[0] != "10.96.0.2",
            "{ips:?}"
        );
        assert!(all.insert(ips[0].clone()), "{} given twice", ips[0]);
        let spec = api.get(&format!("s{i}")).await.unwrap().spec.unwrap();
        assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
    }
    let dual = cluster_ips(&api, "dual").await;
    assert!(dual.len() == 2 && dual[1].starts_with("fd00:96::"), "{dual:?}");
    assert!(all.insert(dual[0].clone()));
    assert_eq!(
        api.get("dual").await.unwrap().spec.unwrap().ip_families.unwrap(),
        ["IPv4", "IPv6"]
    );
    for name in ["headless", "external"] {
        let spec = api.get(name).await.unwrap().spec.unwrap();
        assert!(
            spec.cluster_ips.is_none() && spec.ip_families.is_none(),
            "{name} left alone: {spec:?}"
        );
    }

    // Given addresses: taken, or out of range, get a Warning and stay as given.
    let taken = dual[0].clone();
    create(&api, "dup", json!({"clusterIP": taken})).await;
    create(&api, "outside", json!({"clusterIP": "192.0.2.10"})).await;
    let dup = eventually("a Warning for the duplicate address", || async {
        let w = warnings(&client, "dup").await;
        if w.is_empty() { Err("none".into()) } else { Ok(w) }
    })
    .await;
    assert!(dup[0].contains("already allocated"), "{dup:?}");
    let outside = eventually("a Warning for the address out of range", || async {
        let w = warnings(&client, "outside").await;
        if w.is_empty() { Err("none".into()) } else { Ok(w) }
    })
    .await;
    assert!(outside[0].contains("not in the valid range"), "{outside:?}");
    assert_eq!(
        api.get("dup").await.unwrap().spec.unwrap().cluster_ip.as_deref(),
        Some(taken.as_str())
    );

    // Freed, then handed out again.
    let s2 = api.get("s2").await.unwrap().spec.unwrap().cluster_ip.unwrap();
    api.delete("s2", &DeleteParams::default()).await.unwrap();
    create(&api, "after", json!({})).await;
    assert_eq!(cluster_ips(&api, "after").await, [s2], "the lowest free address");

    // A restart: changes made while it was away are read back, nothing is given twice.
    drop(allocator);
    api.delete("s0", &DeleteParams::default()).await.unwrap();
    create(&api, "while-away", json!({})).await;
    let _allocator = spawn("services", services::run(client.clone(), config()));
    let again = cluster_ips(&api, "while-away").await;
    let list = api.list(&ListParams::default()).await.unwrap();
    let mut seen = BTreeSet::new();
    for svc in &list.items {
        for ip in svc.spec.clone().unwrap().cluster_ips.unwrap_or_default() {
            if ip != "None" && svc.name_any() != "dup" {
                assert!(seen.insert(ip.clone()), "{ip} given twice after the restart");
            }
        }
    }
    assert!(!again[0].is_empty());
}
