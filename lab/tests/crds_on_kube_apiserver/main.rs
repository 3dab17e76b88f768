//! Our CRDs (`deploy/crds/`, written by crdgen) on a real kube-apiserver: applied with the
//! built kubectl and strict server-side field validation they become Established with no
//! warning and are stored as generated; then every example in `examples/` (and `examples/lab/`)
//! and the custom resources of `deploy/` are accepted (`--dry-run=server`, then for real), read
//! back with the server's defaults, and decode into our types; and each object of
//! `examples/invalid/` is refused by the server with an error naming its bad field; and an
//! object of each kind with every field of its schema set is accepted, kept as sent and read
//! back through our types.

// A test of several files (`tests/<name>/main.rs`) reaches the shared helpers by path.
#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
#[path = "../common/mod.rs"]
mod common;
mod sample;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::kubectl::{Kubectl, repo};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube_ovn_lab::kubernetes::fixture::{ApiServer, ApiServerOptions};
use serde_json::Value;

/// Every document of every `*.yaml` in `dir` (not recursive), with its file's path.
fn documents(dir: &Path) -> Vec<(PathBuf, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in
            serde_saphyr::from_multiple::<Value>(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        {
            if !doc.is_null() {
                docs.push((file.clone(), doc));
            }
        }
    }
    docs
}

fn crd_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

fn generated_crds() -> Vec<Value> {
    kube_ovn_api::crds()
        .into_iter()
        .chain(kube_ovn_api::extension_crds())
        .map(|c| serde_json::to_value(c).unwrap())
        .collect()
}

fn condition<'a>(crd: &'a Value, type_: &str) -> Option<&'a str> {
    crd["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?["status"]
        .as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crds_apply_with_strict_validation_become_established_and_are_stored_as_generated() {
    let server = ApiServer::start_with(ApiServerOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubectl = Kubectl::new(&server.admin_kubeconfig(), &dir.path().join("cache"));
    let files = crd_files();
    let generated = generated_crds();
    assert_eq!(
        files.len(),
        generated.len(),
        "deploy/crds holds crdgen's files only: {files:?}"
    );

    let crds = repo().join("deploy/crds");
    let crds = crds.to_str().unwrap();
    kubectl.run(&["apply", "--validate=strict", "--dry-run=server", "-f", crds]);
    let applied = kubectl.run(&["apply", "--validate=strict", "-f", crds]);
    assert_eq!(applied.lines().count(), files.len(), "{applied}");
    kubectl.run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd",
        "--all",
    ]);

    for want in &generated {
        let name = want["metadata"]["name"].as_str().unwrap();
        let got = kubectl.get_json(&["crd", name]);
        assert_eq!(
            condition(&got, "Established"),
            Some("True"),
            "{name}: {}",
            got["status"]
        );
        assert_eq!(
            condition(&got, "NamesAccepted"),
            Some("True"),
            "{name}: {}",
            got["status"]
        );
        // The conditions the server sets when it finds fault with a schema.
        for bad in ["NonStructuralSchema", "KubernetesAPIApprovalPolicyConformant"] {
            assert_eq!(condition(&got, bad), None, "{name}: {bad}: {}", got["status"]);
        }
        // Accepted as asked (the server adds `listKind`, `<Kind>List`).
        assert_eq!(got["status"]["acceptedNames"], got["spec"]["names"], "{name}");
        for (key, value) in want["spec"]["names"].as_object().unwrap() {
            assert_eq!(&got["spec"]["names"][key], value, "{name}: names.{key}");
        }
        // What the server keeps is what crdgen wrote: nothing dropped or rewritten in the
        // versions (compared typed: the server writes `4095` where crdgen writes `4095.0`).
        let stored: CustomResourceDefinition = serde_json::from_value(got.clone()).unwrap();
        let want: CustomResourceDefinition = serde_json::from_value(want.clone()).unwrap();
        assert_eq!(
            stored.spec.versions, want.spec.versions,
            "{name}: the versions changed on the server"
        );
    }

    // Applying again changes nothing.
    let again = kubectl.run(&["apply", "--validate=strict", "-f", crds]);
    for line in again.lines() {
        assert!(line.ends_with(" unchanged"), "{again}");
    }
}

/// Our API groups (custom resources); everything else in the examples is built-in.
fn is_custom(doc: &Value) -> bool {
    let group = doc["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .map(|(g, _)| g);
    group == Some(kube_ovn_api::crd::GROUP) || group == Some(kube_ovn_api::bgp_peer::GROUP)
}

/// `<kind>.<group>`: what `kubectl get` takes for a custom resource.
fn resource(doc: &Value) -> String {
    let group = doc["apiVersion"].as_str().unwrap().split_once('/').unwrap().0;
    format!("{}.{group}", doc["kind"].as_str().unwrap().to_ascii_lowercase())
}

/// The stored object decoded into our type and encoded again (callers compare its `spec` and
/// `status` with the stored ones: nothing the server stores, defaults included, may be lost or
/// invented by our types).
fn round_trip(kind: &str, stored: &Value) -> Result<Value, String> {
    fn through<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Result<Value, String> {
        let typed: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        serde_json::to_value(typed).map_err(|e| e.to_string())
    }
    use kube_ovn_api::crd::*;
    match kind {
        "IP" => through::<Ip>(stored),
        "IPPool" => through::<IPPool>(stored),
        "IptablesDnatRule" => through::<IptablesDnatRule>(stored),
        "IptablesEIP" => through::<IptablesEIP>(stored),
        "IptablesFIPRule" => through::<IptablesFIPRule>(stored),
        "IptablesSnatRule" => through::<IptablesSnatRule>(stored),
        "OvnDnatRule" => through::<OvnDnatRule>(stored),
        "OvnEip" => through::<OvnEip>(stored),
        "OvnFip" => through::<OvnFip>(stored),
        "OvnSnatRule" => through::<OvnSnatRule>(stored),
        "ProviderNetwork" => through::<ProviderNetwork>(stored),
        "Subnet" => through::<Subnet>(stored),
        "Vip" => through::<Vip>(stored),
        "Vlan" => through::<Vlan>(stored),
        "Vpc" => through::<Vpc>(stored),
        "VpcNatGateway" => through::<VpcNatGateway>(stored),
        "BgpPeer" => through::<kube_ovn_api::bgp_peer::BgpPeer>(stored),
        "BgpAdvertisement" => through::<kube_ovn_api::bgp_advertisement::BgpAdvertisement>(stored),
        other => Err(format!("no type for kind {other}")),
    }
}

/// The paths at which `stored` lacks or changed a value `applied` set (a field pruned or
/// rewritten by the server).
fn changed(applied: &Value, stored: &Value, path: &str, out: &mut Vec<String>) {
    match (applied, stored) {
        (Value::Object(a), Value::Object(s)) => {
            for (k, v) in a {
                match s.get(k) {
                    Some(sv) => changed(v, sv, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}: dropped")),
                }
            }
        }
        (Value::Array(a), Value::Array(s)) if a.len() == s.len() => {
            for (i, (av, sv)) in a.iter().zip(s).enumerate() {
                changed(av, sv, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(a), Value::Number(s)) if a.as_f64() == s.as_f64() => {}
        (a, s) if a == s => {}
        (a, s) => out.push(format!("{path}: {a} became {s}")),
    }
}

/// The custom resources in deploy/ (the example overlay's), with their files.
fn deploy_custom_resources() -> Vec<(PathBuf, Value)> {
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(repo().join("deploy/overlays")).unwrap() {
        let dir = entry.unwrap().path();
        docs.extend(
            documents(&dir)
                .into_iter()
                .filter(|(f, d)| is_custom(d) && !f.ends_with("kustomization.yaml")),
        );
    }
    docs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_and_deploy_custom_resource_is_accepted_defaulted_and_read_back() {
    let server = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubectl = Kubectl::new(&server.admin_kubeconfig(), &dir.path().join("cache"));

    let mut docs = documents(&repo().join("examples"));
    docs.extend(documents(&repo().join("examples/lab")));
    docs.extend(deploy_custom_resources());
    // The namespaces the namespaced examples live in, where no example creates them.
    let made: BTreeSet<&str> = docs
        .iter()
        .filter(|(_, d)| d["kind"] == "Namespace")
        .filter_map(|(_, d)| d["metadata"]["name"].as_str())
        .collect();
    let needed: BTreeSet<&str> = docs
        .iter()
        .filter_map(|(_, d)| d["metadata"]["namespace"].as_str())
        .filter(|ns| !made.contains(ns))
        .collect();
    for ns in needed {
        kubectl.run(&["create", "namespace", ns]);
    }
    // Namespaces first, then the rest, each file as it is (one `kubectl apply -f` per file, so
    // a refusal names the file).
    let mut files: Vec<&PathBuf> = docs.iter().map(|(f, _)| f).collect();
    // A file's documents are next to each other.
    files.dedup();
    files.sort_by_key(|f| !f.ends_with("00-namespaces.yaml"));
    for file in files {
        let file = file.to_str().unwrap();
        kubectl.run(&["apply", "--validate=strict", "--dry-run=server", "-f", file]);
        // Server-side apply merges by the schema (structured merge): it must take our CRDs'
        // too.
        kubectl.run(&[
            "apply",
            "--server-side",
            "--validate=strict",
            "--dry-run=server",
            "-f",
            file,
        ]);
        kubectl.run(&["apply", "--validate=strict", "-f", file]);
    }

    let mut kinds = BTreeSet::new();
    for (file, doc) in docs.iter().filter(|(_, d)| is_custom(d)) {
        let kind = doc["kind"].as_str().unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        let what = format!(
            "{}: {kind} {name}",
            file.strip_prefix(repo()).unwrap_or(file).display()
        );
        let stored = kubectl.get_json(&[&resource(doc), name]);
        let mut diffs = Vec::new();
        changed(&doc["spec"], &stored["spec"], "spec", &mut diffs);
        assert!(
            diffs.is_empty(),
            "{what}: the server changed what was applied:\n{}",
            diffs.join("\n")
        );
        let back = round_trip(kind, &stored).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            back["spec"], stored["spec"],
            "{what}: the stored spec does not survive our type"
        );
        kinds.insert(kind.to_owned());
    }
    let all: BTreeSet<String> = kube_ovn_api::crds()
        .into_iter()
        .chain(kube_ovn_api::extension_crds())
        .map(|c| c.spec.names.kind)
        .collect();
    assert_eq!(kinds, all, "every kind has an example");

    // The CRDs' defaults, applied by the server where the example leaves them out.
    let gw = kubectl.get_json(&["vpc-nat-gateways.kubeovn.io", "blue-gw"]);
    assert_eq!(
        gw["spec"]["bfd"],
        serde_json::json!({"enabled": false, "minRX": 1000, "minTX": 1000, "multiplier": 3}),
        "{gw}"
    );
    let dnat = kubectl.get_json(&["iptables-dnat-rules.kubeovn.io", "blue-web-a"]);
    assert_eq!(dnat["spec"]["type"], "share");
    let pool = kubectl.get_json(&["ippools.kubeovn.io", "web-pool"]);
    assert_eq!(pool["spec"]["enableAddressSet"], true);
}

/// (object name in examples/invalid/, files in name order, what the server's refusal must say)
const REFUSALS: &[(&str, &[&str])] = &[
    (
        "peer-bad-family",
        &["spec.families[1]", "Unsupported value: \"ipv4-multicast\""],
    ),
    ("vlan-too-big", &["spec.id", "less than or equal to 4095"]),
    ("dnat-bad-type", &["spec.type", "Unsupported value: \"both\""]),
    ("pool-without-ips", &["spec.ips", "Required value"]),
    (
        "physnet-long",
        &["spec.defaultInterface", "Too long: may not be more than 15 bytes"],
    ),
    ("subnet-bad-mtu", &["spec.mtu", "must be of type integer"]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_invalid_examples_are_refused_by_the_server_naming_the_field() {
    let server = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubectl = Kubectl::new(&server.admin_kubeconfig(), &dir.path().join("cache"));
    let docs = documents(&repo().join("examples/invalid"));
    let names: Vec<&str> = docs
        .iter()
        .map(|(_, d)| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, REFUSALS.iter().map(|(n, _)| *n).collect::<Vec<_>>());
    for ((_, doc), (name, says)) in docs.iter().zip(REFUSALS) {
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, serde_json::to_string(doc).unwrap()).unwrap();
        let file = file.to_str().unwrap();
        for dry_run in [true, false] {
            let mut args = vec!["apply", "--validate=strict", "-f", file];
            if dry_run {
                args.push("--dry-run=server");
            }
            let err = kubectl.fail(&args);
            let kind = doc["kind"].as_str().unwrap();
            assert!(
                err.contains(&format!("The {kind} \"{name}\" is invalid")),
                "{name}: {err}"
            );
            for s in *says {
                assert!(err.contains(s), "{name}: the refusal does not say {s:?}: {err}");
            }
        }
        // Nothing was stored.
        let out = kubectl.fail(&["get", &resource(doc), name]);
        assert!(out.contains("NotFound"), "{name}: {out}");
    }
}

/// A field the schema does not have: refused under strict validation, naming it; pruned (not
/// stored) when validation is off, as the schema is structural and preserves nothing unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_field_is_refused_under_strict_validation_and_pruned_without_it() {
    let server = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubectl = Kubectl::new(&server.admin_kubeconfig(), &dir.path().join("cache"));
    let file = dir.path().join("vlan.yaml");
    std::fs::write(
        &file,
        r#"{"apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": {"name": "v7"},
            "spec": {"id": 7, "provider": "physnet", "zzFuture": {"a": 1}}}"#,
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let err = kubectl.fail(&["apply", "--validate=strict", "-f", file]);
    assert!(err.contains(r#"unknown field "spec.zzFuture""#), "{err}");
    let out = kubectl.output(&["apply", "--validate=false", "-f", file]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stored = kubectl.get_json(&["vlans.kubeovn.io", "v7"]);
    assert_eq!(
        stored["spec"],
        serde_json::json!({"id": 7, "provider": "physnet"})
    );
}

/// Every field of every CRD's schema set at once (see `sample.rs`): the server accepts the
/// object (the status through the status subresource where there is one), stores every value as
/// sent, and the stored object survives our types, spec and status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_of_every_crd_is_accepted_and_read_back_through_our_types() {
    let server = ApiServer::start().await.unwrap();
    let client = server.client().await.unwrap();
    for crd in kube_ovn_api::crds()
        .into_iter()
        .chain(kube_ovn_api::extension_crds())
    {
        let version = &crd.spec.versions[0];
        let kind = crd.spec.names.kind.as_str();
        let schema = serde_json::to_value(
            version
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        let mut spec =
            sample::sample(&schema["properties"]["spec"], "spec").unwrap_or_else(|e| panic!("{kind}: {e}"));
        // A BgpPeer names its peer by `peerAddress` or by `peerInterface`, never both (a CEL rule
        // of the CRD): every field but `peerInterface` here; `speaker/tests/bgppeer_crd.rs`
        // creates the unnumbered form and the refused pair.
        if kind == "BgpPeer" {
            spec.as_object_mut().unwrap().remove("peerInterface");
        }
        let status = schema["properties"]
            .get("status")
            .map(|s| sample::sample(s, "status").unwrap_or_else(|e| panic!("{kind}: {e}")));
        let subresource = version.subresources.as_ref().is_some_and(|s| s.status.is_some());
        let gvk = GroupVersionKind::gvk(&crd.spec.group, &version.name, kind);
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural),
        );
        let name = format!("every-field-{}", kind.to_ascii_lowercase());
        let mut object = serde_json::json!({
            "apiVersion": format!("{}/{}", crd.spec.group, version.name),
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        });
        if let Some(status) = status.as_ref().filter(|_| !subresource) {
            object["status"] = status.clone();
        }
        api.create(&PostParams::default(), &serde_json::from_value(object).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{kind}: creating it with every field: {e}"));
        if let Some(status) = status.as_ref().filter(|_| subresource) {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| panic!("{kind}: writing its status with every field: {e}"));
        }
        let stored = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
        let mut diffs = Vec::new();
        changed(&spec, &stored["spec"], "spec", &mut diffs);
        if let Some(status) = &status {
            changed(status, &stored["status"], "status", &mut diffs);
        }
        assert!(
            diffs.is_empty(),
            "{kind}: the server did not keep what was sent:\n{}",
            diffs.join("\n")
        );
        let back = round_trip(kind, &stored).unwrap_or_else(|e| panic!("{kind}: reading it back: {e}"));
        for part in ["spec", "status"] {
            assert_eq!(
                back[part], stored[part],
                "{kind}: the stored {part} does not survive our type"
            );
        }
    }
}
