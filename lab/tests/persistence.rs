//! The `kube-ovn-lab apiserver` binary with `--state`: objects (a CRD and its custom resource
//! included), their resourceVersions and the CRD's kind survive a stop by SIGTERM, a SIGKILL, and
//! a torn last line; after a restart resourceVersions keep growing and watches from before it get
//! 410 Expired.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use common::{LabProcess, install_crds};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::discovery::Discovery;
use kube_ovn_api::crd::Subnet;
use serde_json::{Value, json};

fn start(dir: &Path) -> LabProcess {
    let state = dir.join("state.jsonl").display().to_string();
    LabProcess::start(dir, &["--state".into(), state]).unwrap()
}

/// Every object the test cares about, as the server returns it.
async fn snapshot(client: &kube::Client) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for s in Api::<Subnet>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.insert(
            format!("subnet/{}", s.metadata.name.clone().unwrap()),
            serde_json::to_value(s).unwrap(),
        );
    }
    for c in Api::<ConfigMap>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        let key = format!(
            "cm/{}/{}",
            c.metadata.namespace.clone().unwrap(),
            c.metadata.name.clone().unwrap()
        );
        out.insert(key, serde_json::to_value(c).unwrap());
    }
    for n in Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.insert(
            format!("ns/{}", n.metadata.name.clone().unwrap()),
            serde_json::to_value(n).unwrap(),
        );
    }
    out
}

/// Creates a CRD set, a custom resource with status, namespaced objects, and a deletion.
async fn populate(client: &kube::Client) {
    install_crds(client).await.unwrap();
    let subnets: Api<Subnet> = Api::all(client.clone());
    let sn: Subnet = serde_json::from_value(json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": "kept", "labels": {"a": "b"}}, "spec": {"cidrBlock": "10.5.0.0/16", "protocol": "IPv4"}}))
    .unwrap();
    subnets.create(&PostParams::default(), &sn).await.unwrap();
    subnets
        .patch_status(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"v4availableIPs": 65533}})),
        )
        .await
        .unwrap();
    subnets
        .patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mtu": 1400}})),
        )
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "lab"}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "lab");
    for name in ["one", "two", "doomed"] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": name}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    cms.delete("doomed", &DeleteParams::default()).await.unwrap();
}

async fn current_rv(client: &kube::Client) -> u64 {
    let list = Api::<ConfigMap>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    list.metadata.resource_version.unwrap().parse().unwrap()
}

/// After a restart: the same objects, the CRDs' kinds served, resourceVersions still growing,
/// and a watch from before the restart answered 410.
async fn check_restored(lab: &LabProcess, before: &BTreeMap<String, Value>, rv_before: u64) {
    let client = lab.client();
    let after = snapshot(&client).await;
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "the same objects after the restart; log:\n{}",
        lab.log()
    );
    for (key, obj) in before {
        assert_eq!(&after[key], obj, "{key} changed across the restart");
    }
    assert!(!after.contains_key("cm/lab/doomed"));
    let crds = Api::<CustomResourceDefinition>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(crds.items.len(), kube_ovn_api::crds().len());
    // Discovery serves the restored kinds, with their scope and short names.
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let (subnet_resource, caps) = discovery
        .get("kubeovn.io")
        .expect("the kubeovn.io group is served again")
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.kind == "Subnet")
        .expect("Subnet is served again");
    assert_eq!(subnet_resource.plural, "subnets");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);

    assert_eq!(
        current_rv(&client).await,
        rv_before,
        "the resourceVersion survives"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "lab");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "after"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    let rv: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    assert!(
        rv > rv_before,
        "resourceVersions keep growing: {rv} after {rv_before}"
    );
    // History is not persisted: a watch from before the restart must relist.
    let mut stale = cms
        .watch(&WatchParams::default(), &(rv_before - 1).to_string())
        .await
        .unwrap()
        .boxed();
    match common::next_within(&mut stale, "event of a watch from before the restart").await {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("a watch from before the restart got {other:?}, not 410"),
    }
    cms.delete("after", &DeleteParams::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut lab = start(dir.path());
    populate(&lab.client()).await;
    let before = snapshot(&lab.client()).await;
    let rv = current_rv(&lab.client()).await;
    lab.terminate().unwrap();
    assert!(
        lab.log().contains("terminated; stopping"),
        "SIGTERM is handled: {}",
        lab.log()
    );

    let lab = start(dir.path());
    check_restored(&lab, &before, rv).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_sigkill_and_a_torn_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.jsonl");
    let mut lab = start(dir.path());
    populate(&lab.client()).await;
    let before = snapshot(&lab.client()).await;
    let rv = current_rv(&lab.client()).await;
    lab.kill();

    let mut lab = start(dir.path());
    check_restored(&lab, &before, rv).await;
    // check_restored wrote and deleted one object: two more versions.
    let rv = rv + 2;
    lab.kill();

    // A crash in the middle of writing the next change leaves half a line.
    let mut f = std::fs::OpenOptions::new().append(true).open(&state).unwrap();
    f.write_all(br#"{"rv":999999,"group":"","plural":"configmaps","namespace":"lab","name":"torn","obj"#)
        .unwrap();
    drop(f);
    let mut lab = start(dir.path());
    check_restored(&lab, &before, rv).await;
    // The restart rewrote the file whole: no torn line remains to trip the next one.
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(!text.contains("torn"), "the torn line was dropped");
    assert!(text.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()));
    lab.terminate().unwrap();
    let lab = start(dir.path());
    check_restored(&lab, &before, rv + 2).await;
}
