//! The YAML objects in `examples/`: each one deserializes into our types, validates against the
//! `openAPIV3Schema` of its generated CRD with a JSON-schema validator, and round-trips
//! (YAML → type → JSON equals the JSON of the YAML: nothing lost, nothing invented). The pod
//! example's annotations parse with the typed parsers. Everything in `examples/invalid/` fails
//! schema validation, with an error that names the offending field. The custom resources in
//! `deploy/` (the example overlay's Subnet and BgpPeer) pass the same checks.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use kube_ovn_api::annotations::{self, BgpPolicy, BgpScope, IpPair, MacAddr, Mbit, Mbps, Routes, keys};
use kube_ovn_api::bgp_peer::BgpPeer;
use kube_ovn_api::crd::{
    IPPool, Ip, IptablesDnatRule, IptablesEIP, IptablesFIPRule, IptablesSnatRule, OvnDnatRule, OvnEip,
    OvnFip, OvnSnatRule, ProviderNetwork, Subnet, Vip, Vlan, Vpc, VpcNatGateway,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Every YAML document in `dir` (not recursive), with the file it came from.
fn documents(dir: &Path) -> Result<Vec<(String, Value)>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for doc in serde_saphyr::from_multiple::<Value>(&text).with_context(|| format!("parsing {name}"))? {
            docs.push((name.clone(), doc));
        }
    }
    Ok(docs)
}

/// The generated CRD schema for `kind` (ours: `kubeovn.io` and BgpPeer).
fn schema_for(kind: &str) -> Value {
    let crd = kube_ovn_api::crds()
        .into_iter()
        .chain(kube_ovn_api::extension_crds())
        .find(|c| c.spec.names.kind == kind)
        .expect("a CRD for the kind");
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// Schema-validation errors of `doc`, as `"<instance path>: <message>"`.
fn schema_errors(kind: &str, doc: &Value) -> Vec<String> {
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .should_validate_formats(true)
        .build(&schema_for(kind))
        .expect("the generated schema compiles");
    validator
        .iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// Deserialize into `T`, serialize back, and demand the same JSON.
fn round_trip<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<()> {
    let typed: T = serde_json::from_value(doc.clone())?;
    let back = serde_json::to_value(&typed)?;
    if back != *doc {
        bail!("round trip changed the object:\n  in:  {doc}\n  out: {back}");
    }
    Ok(())
}

fn round_trip_kind(kind: &str, doc: &Value) -> Result<()> {
    match kind {
        "IP" => round_trip::<Ip>(doc),
        "IPPool" => round_trip::<IPPool>(doc),
        "IptablesDnatRule" => round_trip::<IptablesDnatRule>(doc),
        "IptablesEIP" => round_trip::<IptablesEIP>(doc),
        "IptablesFIPRule" => round_trip::<IptablesFIPRule>(doc),
        "IptablesSnatRule" => round_trip::<IptablesSnatRule>(doc),
        "OvnDnatRule" => round_trip::<OvnDnatRule>(doc),
        "OvnEip" => round_trip::<OvnEip>(doc),
        "OvnFip" => round_trip::<OvnFip>(doc),
        "OvnSnatRule" => round_trip::<OvnSnatRule>(doc),
        "ProviderNetwork" => round_trip::<ProviderNetwork>(doc),
        "Subnet" => round_trip::<Subnet>(doc),
        "Vip" => round_trip::<Vip>(doc),
        "Vlan" => round_trip::<Vlan>(doc),
        "Vpc" => round_trip::<Vpc>(doc),
        "VpcNatGateway" => round_trip::<VpcNatGateway>(doc),
        "BgpPeer" => round_trip::<BgpPeer>(doc),
        other => bail!("no type for kind {other}"),
    }
}

fn kind_of(doc: &Value) -> &str {
    doc["kind"].as_str().expect("every example has a kind")
}

#[test]
fn kubeovn_examples_deserialize_validate_and_round_trip() -> Result<()> {
    let mut kinds = BTreeSet::new();
    for (file, doc) in documents(&examples_dir())? {
        if doc["apiVersion"] != "kubeovn.io/v1" {
            continue;
        }
        let kind = kind_of(&doc);
        let errors = schema_errors(kind, &doc);
        assert!(
            errors.is_empty(),
            "{file}: {kind} fails its CRD schema:\n{}",
            errors.join("\n")
        );
        round_trip_kind(kind, &doc).with_context(|| format!("{file}: {kind}"))?;
        kinds.insert(kind.to_owned());
    }
    let all: BTreeSet<String> = kube_ovn_api::crds()
        .into_iter()
        .map(|c| c.spec.names.kind)
        .collect();
    assert_eq!(kinds, all, "every kind has an example");
    Ok(())
}

/// Every YAML file under `dir`, recursively, but kustomize's own files.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            yaml_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml")
            && path.file_name().is_some_and(|n| n != "kustomization.yaml")
        {
            out.push(path);
        }
    }
    Ok(())
}

#[test]
fn deploy_custom_resources_validate_and_round_trip() -> Result<()> {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let groups: BTreeSet<String> = kube_ovn_api::crds()
        .into_iter()
        .chain(kube_ovn_api::extension_crds())
        .map(|c| c.spec.group)
        .collect();
    let mut files = Vec::new();
    // deploy/crds holds the definitions themselves (checked by crdgen --check).
    for sub in std::fs::read_dir(&deploy)? {
        let sub = sub?.path();
        if sub.is_dir() && !sub.ends_with("crds") {
            yaml_files(&sub, &mut files)?;
        }
    }
    files.sort();
    let mut kinds = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let name = file.strip_prefix(&deploy).unwrap_or(&file).display().to_string();
        for doc in serde_saphyr::from_multiple::<Value>(&text).with_context(|| format!("parsing {name}"))? {
            let group = doc["apiVersion"]
                .as_str()
                .and_then(|v| v.split_once('/'))
                .map(|(g, _)| g);
            if !group.is_some_and(|g| groups.contains(g)) {
                continue;
            }
            let kind = kind_of(&doc);
            let errors = schema_errors(kind, &doc);
            assert!(
                errors.is_empty(),
                "deploy/{name}: {kind} fails its CRD schema:\n{}",
                errors.join("\n")
            );
            round_trip_kind(kind, &doc).with_context(|| format!("deploy/{name}: {kind}"))?;
            kinds.insert(kind.to_owned());
        }
    }
    // The example overlay shows a BGP-announced subnet and a BgpPeer: if they move, this test
    // must move with them rather than pass on nothing.
    assert_eq!(kinds, BTreeSet::from(["BgpPeer".to_owned(), "Subnet".to_owned()]));
    Ok(())
}

#[test]
fn pod_example_annotations_parse() -> Result<()> {
    let docs = documents(&examples_dir())?;
    let (_, doc) = docs
        .iter()
        .find(|(_, d)| d["kind"] == "Pod")
        .context("a Pod example")?;
    let pod: Pod = serde_json::from_value(doc.clone())?;
    assert_eq!(
        &serde_json::to_value(&pod)?,
        doc,
        "the pod round-trips through k8s-openapi"
    );
    let a = pod.metadata.annotations.as_ref();

    let ips: IpPair = annotations::get(a, keys::IP_ADDRESS)?.context("ip_address")?;
    assert_eq!(ips.to_string(), "10.66.0.20,fd00:10:66::20");
    let mac: MacAddr = annotations::get(a, keys::MAC_ADDRESS)?.context("mac_address")?;
    assert_eq!(mac.to_string(), "0a:58:0a:42:00:14");
    assert_eq!(annotations::get::<Mbps>(a, keys::INGRESS_RATE)?, Some(Mbps(100)));
    assert_eq!(annotations::get::<Mbps>(a, keys::EGRESS_RATE)?, Some(Mbps(50)));
    assert_eq!(annotations::get::<Mbit>(a, keys::EGRESS_BURST)?, Some(Mbit(10)));
    assert_eq!(annotations::get::<Mbit>(a, keys::INGRESS_BURST)?, None);
    let bgp: BgpPolicy = annotations::get(a, keys::BGP)?.context("bgp")?;
    assert_eq!(bgp.scope(), BgpScope::Cluster);
    let routes: Routes = annotations::get(a, keys::ROUTES)?.context("routes")?;
    assert_eq!(routes.0.len(), 1);
    assert_eq!(routes.0[0].gw, Some("10.66.0.1".parse()?));

    // The subnet the pod pins exists among the examples and holds its addresses.
    let subnet_name = a
        .and_then(|a| a.get(keys::LOGICAL_SWITCH))
        .context("logical_switch")?;
    let (_, subnet) = docs
        .iter()
        .find(|(_, d)| d["kind"] == "Subnet" && d["metadata"]["name"] == subnet_name.as_str())
        .context("the pinned subnet")?;
    let subnet: Subnet = serde_json::from_value(subnet.clone())?;
    let cidrs: annotations::CidrPair = annotations::parse(
        "spec.cidrBlock",
        subnet.spec.cidr_block.as_deref().unwrap_or_default(),
    )?;
    assert!(ips.addrs().all(|ip| cidrs.contains(&ip)));
    Ok(())
}

#[test]
fn invalid_examples_are_rejected_naming_the_field() -> Result<()> {
    // (object name, the field the first error must name)
    // The files in name order: bgppeer.yaml, invalid.yaml.
    let expected = [
        ("peer-bad-family", "/spec/families/1"),
        ("vlan-too-big", "/spec/id"),
        ("dnat-bad-type", "/spec/type"),
        ("pool-without-ips", "ips"),
        ("physnet-long", "/spec/defaultInterface"),
        ("subnet-bad-mtu", "/spec/mtu"),
    ];
    let docs = documents(&examples_dir().join("invalid"))?;
    assert_eq!(docs.len(), expected.len());
    for ((_, doc), (name, field)) in docs.iter().zip(expected) {
        assert_eq!(doc["metadata"]["name"], name);
        let errors = schema_errors(kind_of(doc), doc);
        assert!(!errors.is_empty(), "{name} passed schema validation");
        assert!(
            errors.iter().any(|e| e.contains(field)),
            "{name}: no error names {field}: {errors:?}"
        );
    }
    Ok(())
}

/// Objects carrying fields we do not model (as a newer Kube-OVN would write them) survive a
/// read-modify-write: unknown members in spec, status and nested objects come back unchanged.
#[test]
fn unknown_fields_round_trip() -> Result<()> {
    let subnet = serde_json::json!({
        "apiVersion": "kubeovn.io/v1",
        "kind": "Subnet",
        "metadata": {"name": "future"},
        "spec": {
            "cidrBlock": "10.80.0.0/16",
            "futureSpecField": {"nested": [1, 2, 3]},
            "acls": [{"action": "drop", "priority": 1000, "futureAclField": true}],
            "natOutgoingPolicyRules": [{"action": "nat", "match": {"srcIPs": "10.80.0.0/24", "futureMatch": "x"}}]
        },
        "status": {
            "v4availableIPs": 65533,
            "v6availableIPs": 18_446_744_073_709_551_614_u64,
            "futureCounter": 7,
            "conditions": [{"type": "Ready", "status": "True", "futureConditionField": "y"}]
        }
    });
    round_trip::<Subnet>(&subnet)?;
    let typed: Subnet = serde_json::from_value(subnet)?;
    assert!(typed.spec.extra.contains_key("futureSpecField"));
    assert!(typed.status.as_ref().unwrap().extra.contains_key("futureCounter"));

    // One unknown spec member on every kind.
    for crd in kube_ovn_api::crds() {
        let kind = crd.spec.names.kind;
        let doc = serde_json::json!({
            "apiVersion": "kubeovn.io/v1",
            "kind": kind,
            "metadata": {"name": "x"},
            "spec": {"zzNotInKubeOvnYet": {"a": 1}}
        });
        round_trip_kind(&kind, &doc).with_context(|| kind.clone())?;
    }

    // A provider network condition keeps both its node and unknown members.
    let pn = serde_json::json!({
        "apiVersion": "kubeovn.io/v1",
        "kind": "ProviderNetwork",
        "metadata": {"name": "physnet"},
        "spec": {"defaultInterface": "eth1"},
        "status": {"ready": true, "conditions": [{"type": "Ready", "status": "True", "node": "n1", "zz": 1}]}
    });
    round_trip::<ProviderNetwork>(&pn)
}

/// Kube-OVN does not require `spec`: an object without one reads as an empty spec instead of
/// failing (and so cannot break a whole list or watch).
#[test]
fn missing_spec_reads_as_default() -> Result<()> {
    let vpc: Vpc = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": "bare"}
    }))?;
    assert_eq!(vpc.spec, kube_ovn_api::crd::VpcSpec::default());
    let vpc: Vpc = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": "bare"}, "spec": null
    }))?;
    assert_eq!(vpc.spec, kube_ovn_api::crd::VpcSpec::default());
    // And the schema accepts it, as Kube-OVN's does.
    assert!(
        schema_errors(
            "Vpc",
            &serde_json::json!({"apiVersion": "kubeovn.io/v1", "kind": "Vpc"})
        )
        .is_empty()
    );
    Ok(())
}
