//! The EndpointSlice controller against the emulator: slices follow pod readiness, labels and
//! named ports, are put back when deleted, leave Services without selectors alone, and go with
//! their Service's selector.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::collections::BTreeMap;

use common::agent::{eventually, pod, set_ready, spawn};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_ovn_lab::agent::endpointslices::{self, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::json;

/// The Service's slices as (target port of the first port → [(pod, ready)]), sorted.
type View = BTreeMap<i32, Vec<(String, bool)>>;

async fn view(api: &Api<EndpointSlice>, service: &str) -> Result<View, String> {
    let list = api
        .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={service}")))
        .await
        .map_err(|e| e.to_string())?;
    let mut out = View::new();
    for s in list.items {
        let port = s
            .ports
            .as_ref()
            .and_then(|p| p.first())
            .and_then(|p| p.port)
            .unwrap_or(0);
        let entry = out.entry(port).or_default();
        for e in &s.endpoints {
            let pod = e
                .target_ref
                .as_ref()
                .and_then(|t| t.name.clone())
                .unwrap_or_default();
            entry.push((pod, e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false)));
        }
        entry.sort();
    }
    Ok(out)
}

async fn until(api: &Api<EndpointSlice>, service: &str, want: &[(i32, &[(&str, bool)])]) {
    let want: View = want
        .iter()
        .map(|(port, pods)| (*port, pods.iter().map(|(p, r)| ((*p).to_owned(), *r)).collect()))
        .collect();
    eventually(&format!("slices of {service} to be {want:?}"), || async {
        let got = view(api, service).await?;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn slices_follow_readiness_labels_named_ports_and_selectors() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    let _controller = spawn("endpointslices", endpointslices::run(client.clone()));
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let web: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.0.10", "ipFamilies": ["IPv4"],
                 "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &web).await.unwrap();
    // No pods yet: one empty slice.
    until(&slices, "web", &[(0, &[])]).await;

    let named = |port: i32| {
        json!({"containers": [{"name": "c", "image": "kube-ovn-lab/netexec",
                                                    "ports": [{"name": "http", "containerPort": port}]}]})
    };
    let pods = [
        ("a", "web", named(8080), "10.16.0.2"),
        ("b", "web", named(8080), "10.16.0.3"),
        ("c", "web", named(9090), "10.16.0.4"),
        ("d", "web", json!({}), "10.16.0.5"),
        ("e", "db", named(8080), "10.16.0.6"),
    ];
    for (name, app, spec, ip) in &pods {
        pod(&client, "default", name, json!({"app": app}), spec.clone()).await;
        set_ready(&client, "default", name, true, Some(ip)).await;
    }
    // `d` lacks the named port, `e` does not match; `c` resolves it differently.
    until(
        &slices,
        "web",
        &[(8080, &[("a", true), ("b", true)]), (9090, &[("c", true)])],
    )
    .await;
    let one = slices
        .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}=web")))
        .await
        .unwrap()
        .items
        .remove(0);
    assert_eq!(one.labels()[MANAGED_BY_LABEL], MANAGED_BY);
    assert_eq!(one.owner_references()[0].name, "web");
    assert_eq!(one.address_type, "IPv4");

    // Readiness, labels, deletion.
    set_ready(&client, "default", "b", false, None).await;
    until(
        &slices,
        "web",
        &[(8080, &[("a", true), ("b", false)]), (9090, &[("c", true)])],
    )
    .await;
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    pod_api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
        )
        .await
        .unwrap();
    pod_api
        .patch(
            "e",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
        )
        .await
        .unwrap();
    until(
        &slices,
        "web",
        &[(8080, &[("b", false), ("e", true)]), (9090, &[("c", true)])],
    )
    .await;
    pod_api.delete("c", &DeleteParams::default()).await.unwrap();
    until(&slices, "web", &[(8080, &[("b", false), ("e", true)])]).await;

    // A slice of ours deleted by hand comes back.
    for s in slices.list(&ListParams::default()).await.unwrap().items {
        slices
            .delete(&s.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    }
    until(&slices, "web", &[(8080, &[("b", false), ("e", true)])]).await;

    // A Service without a selector: its user's slice is left alone, none of ours is made.
    let manual: Service = serde_json::from_value(json!({
        "metadata": {"name": "manual"}, "spec": {"ports": [{"port": 80}]}}))
    .unwrap();
    services.create(&PostParams::default(), &manual).await.unwrap();
    let user_slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "manual-1", "labels": {SERVICE_NAME_LABEL: "manual", MANAGED_BY_LABEL: "someone"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.0.2.1"]}],
        "ports": [{"port": 80}],
    }))
    .unwrap();
    slices.create(&PostParams::default(), &user_slice).await.unwrap();
    // The selector goes from `web`: its slices go; `manual` keeps only the user's.
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"selector": null}})),
        )
        .await
        .unwrap();
    until(&slices, "web", &[]).await;
    let manual_slices = view(&slices, "manual").await.unwrap();
    assert_eq!(manual_slices.len(), 1, "{manual_slices:?}");
    assert!(slices.get("manual-1").await.is_ok());
}
