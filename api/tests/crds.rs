//! The generated CRDs against Kube-OVN's: names, group, scope, short names, plurals, printer
//! columns, status subresources and every spec/status field with its type, format, default,
//! enum, required flag and pattern.
//!
//! `data/kube-ovn-crd-fields.txt` is the slice of the reference field listing
//! (`shared/reference/kube-ovn-crd-fields.txt`) for the 16 kinds we define, verbatim. The test
//! renders our CRDs in the same format and compares the text, so any drift shows as a line diff.

use std::fmt::Write as _;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_ovn_api::crds;
use serde_json::Value;

const EXPECTED: &str = include_str!("data/kube-ovn-crd-fields.txt");

/// Fields of ours (kube-ovn-rs extensions, not in Kube-OVN's CRDs): kind, `spec`/`status`, field,
/// JSON type. Left out of the comparison with Kube-OVN's listing and checked on their own.
const OURS: &[(&str, &str, &str, &str)] = &[("OvnEip", "status", "activateGateway", "string")];

/// Nesting depth the reference listing goes down to (top-level spec fields are depth 1).
const MAX_DEPTH: usize = 3;

fn py_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("[{}]", quoted.join(", "))
}

fn render_field(out: &mut String, name: &str, schema: &Value, required: bool, depth: usize) {
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let shown_ty = if ty == "array" {
        let item_ty = schema
            .pointer("/items/type")
            .and_then(Value::as_str)
            .unwrap_or("");
        format!("[]{item_ty}")
    } else {
        ty.to_owned()
    };
    let mut extras = Vec::new();
    if let Some(default) = schema.get("default") {
        extras.push(format!("default={default}"));
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        extras.push(format!("fmt={format}"));
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        let values: Vec<String> = values
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .collect();
        extras.push(format!("enum={}", py_list(&values)));
    }
    if required {
        extras.push("REQ".to_owned());
    }
    if schema.get("x-kubernetes-validations").is_some() {
        extras.push("CEL".to_owned());
    }
    if schema.get("pattern").is_some() {
        extras.push("pattern".to_owned());
    }
    writeln!(
        out,
        "{}{name}: {shown_ty} {}",
        "  ".repeat(depth),
        extras.join(" ")
    )
    .unwrap();
    if depth < MAX_DEPTH {
        let object = if ty == "array" {
            schema.get("items").unwrap_or(&Value::Null)
        } else {
            schema
        };
        render_properties(out, object, depth + 1);
    }
}

fn render_properties(out: &mut String, object: &Value, depth: usize) {
    let Some(Value::Object(props)) = object.get("properties") else {
        return;
    };
    let required: Vec<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = props.keys().collect();
    names.sort();
    for name in names {
        render_field(out, name, &props[name], required.contains(&name.as_str()), depth);
    }
}

fn render(crd: &CustomResourceDefinition) -> String {
    let mut out = String::new();
    let names = &crd.spec.names;
    let short = names
        .short_names
        .as_ref()
        .map_or_else(|| "None".to_owned(), |s| py_list(s));
    writeln!(
        out,
        "===== {} {} scope {} short {} plural {}",
        names.kind,
        crd.metadata.name.as_deref().unwrap(),
        crd.spec.scope,
        short,
        names.plural
    )
    .unwrap();
    for version in &crd.spec.versions {
        let py_bool = |b: bool| if b { "True" } else { "False" };
        let mut subresources = Vec::new();
        if let Some(sub) = &version.subresources {
            if sub.scale.is_some() {
                subresources.push("scale".to_owned());
            }
            if sub.status.is_some() {
                subresources.push("status".to_owned());
            }
        }
        writeln!(
            out,
            " version {} served {} storage {} subresources {}",
            version.name,
            py_bool(version.served),
            py_bool(version.storage),
            py_list(&subresources)
        )
        .unwrap();
        for col in version.additional_printer_columns.iter().flatten() {
            writeln!(out, "  col {} {} {}", col.name, col.type_, col.json_path).unwrap();
        }
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
        for part in ["spec", "status"] {
            if let Some(sub) = schema.pointer(&format!("/properties/{part}")) {
                writeln!(out, "[{part}]").unwrap();
                // Our extensions are not in Kube-OVN's listing; `our_extension_fields` checks them.
                let mut sub = sub.clone();
                for (kind, _, field, _) in OURS.iter().filter(|o| o.0 == names.kind && o.1 == part) {
                    let removed = sub
                        .pointer_mut("/properties")
                        .and_then(Value::as_object_mut)
                        .and_then(|p| p.remove(*field));
                    assert!(removed.is_some(), "{kind} {part}.{field} is generated");
                }
                render_properties(&mut out, &sub, 1);
            }
        }
    }
    out
}

#[test]
fn crds_match_kube_ovn_field_listing() {
    let actual: String = crds().iter().map(render).collect();
    if actual != EXPECTED {
        let mut report = String::new();
        for (i, (a, e)) in actual.lines().zip(EXPECTED.lines()).enumerate() {
            if a != e {
                writeln!(report, "line {}:\n  ours:      {a:?}\n  kube-ovn:  {e:?}", i + 1).unwrap();
            }
        }
        let (na, ne) = (actual.lines().count(), EXPECTED.lines().count());
        panic!(
            "generated CRDs differ from Kube-OVN's ({na} vs {ne} lines)\n{report}\n--- ours ---\n{actual}"
        );
    }
}

#[test]
fn our_extension_fields() {
    for (kind, part, field, ty) in OURS {
        let crd = crds()
            .into_iter()
            .find(|c| c.spec.names.kind == *kind)
            .unwrap_or_else(|| panic!("{kind} is generated"));
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let got = schema.pointer(&format!(
            "/openAPIV3Schema/properties/{part}/properties/{field}/type"
        ));
        assert_eq!(got, Some(&Value::from(*ty)), "{kind} {part}.{field}");
    }
}

#[test]
fn crds_are_sorted_unique_and_in_the_kubeovn_group() {
    let all = crds();
    assert_eq!(all.len(), 16);
    let names: Vec<_> = all.iter().map(|c| c.metadata.name.clone().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names, sorted);
    for crd in &all {
        let name = crd.metadata.name.as_deref().unwrap();
        assert_eq!(crd.spec.group, "kubeovn.io");
        assert_eq!(name, format!("{}.kubeovn.io", crd.spec.names.plural));
        assert_eq!(crd.spec.scope, "Cluster", "{name}");
        assert_eq!(crd.spec.versions.len(), 1, "{name}");
        assert!(
            crd.spec.versions[0].served && crd.spec.versions[0].storage,
            "{name}"
        );
    }
}

/// Every kind as a table written from the reference: CRD name, kind, singular, short names,
/// status subresource. (Columns and fields are covered by the listing comparison above.)
#[test]
fn names_short_names_and_subresources() {
    let table: &[(&str, &str, &str, &[&str], bool)] = &[
        ("ippools.kubeovn.io", "IPPool", "ippool", &["ippool"], true),
        ("ips.kubeovn.io", "IP", "ip", &["ip"], false),
        (
            "iptables-dnat-rules.kubeovn.io",
            "IptablesDnatRule",
            "iptables-dnat-rule",
            &["dnat"],
            true,
        ),
        (
            "iptables-eips.kubeovn.io",
            "IptablesEIP",
            "iptables-eip",
            &["eip"],
            true,
        ),
        (
            "iptables-fip-rules.kubeovn.io",
            "IptablesFIPRule",
            "iptables-fip-rule",
            &["fip"],
            true,
        ),
        (
            "iptables-snat-rules.kubeovn.io",
            "IptablesSnatRule",
            "iptables-snat-rule",
            &["snat"],
            true,
        ),
        (
            "ovn-dnat-rules.kubeovn.io",
            "OvnDnatRule",
            "ovn-dnat-rule",
            &["odnat"],
            true,
        ),
        ("ovn-eips.kubeovn.io", "OvnEip", "ovn-eip", &["oeip"], true),
        ("ovn-fips.kubeovn.io", "OvnFip", "ovn-fip", &["ofip"], true),
        (
            "ovn-snat-rules.kubeovn.io",
            "OvnSnatRule",
            "ovn-snat-rule",
            &["osnat"],
            true,
        ),
        (
            "provider-networks.kubeovn.io",
            "ProviderNetwork",
            "provider-network",
            &["pn"],
            true,
        ),
        ("subnets.kubeovn.io", "Subnet", "subnet", &["subnet"], true),
        ("vips.kubeovn.io", "Vip", "vip", &["vip"], false),
        ("vlans.kubeovn.io", "Vlan", "vlan", &["vlan"], true),
        (
            "vpc-nat-gateways.kubeovn.io",
            "VpcNatGateway",
            "vpc-nat-gateway",
            &["vpc-nat-gw"],
            true,
        ),
        ("vpcs.kubeovn.io", "Vpc", "vpc", &["vpc"], true),
    ];
    let all = crds();
    assert_eq!(all.len(), table.len());
    for (crd, (name, kind, singular, short, status)) in all.iter().zip(table) {
        assert_eq!(crd.metadata.name.as_deref(), Some(*name));
        assert_eq!(crd.spec.names.kind, *kind, "{name}");
        assert_eq!(crd.spec.names.singular.as_deref(), Some(*singular), "{name}");
        let shorts: Vec<&str> = crd
            .spec
            .names
            .short_names
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        assert_eq!(shorts, *short, "{name}");
        let version = &crd.spec.versions[0];
        let has_status = version.subresources.as_ref().is_some_and(|s| s.status.is_some());
        assert_eq!(has_status, *status, "{name}: status subresource");
        assert!(
            version.subresources.as_ref().is_none_or(|s| s.scale.is_none()),
            "{name}: no scale"
        );
    }
    // IP has no status at all; Vip has a status field without the subresource.
    let schema_of = |n: &str| {
        let crd = all
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(n))
            .unwrap();
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
    };
    assert!(
        schema_of("ips.kubeovn.io")
            .pointer("/properties/status")
            .is_none()
    );
    assert!(
        schema_of("vips.kubeovn.io")
            .pointer("/properties/status/properties/v4ip")
            .is_some()
    );
}

/// Kubernetes only accepts structural schemas: every node typed (or explicitly int-or-string /
/// preserve-unknown), no `$ref`, no `nullable`, `additionalProperties` never beside
/// `properties`, and nothing of our forward-compatibility `extra` maps leaking in.
#[test]
fn schemas_are_structural_and_hide_the_extra_maps() {
    fn walk(path: &str, node: &Value, errors: &mut Vec<String>) {
        let Value::Object(map) = node else { return };
        let typed = map.contains_key("type")
            || map.contains_key("x-kubernetes-int-or-string")
            || map.contains_key("x-kubernetes-preserve-unknown-fields");
        if !typed {
            errors.push(format!("{path}: no type"));
        }
        for banned in [
            "$ref",
            "nullable",
            "definitions",
            "$defs",
            "title",
            "x-kubernetes-preserve-unknown-fields",
        ] {
            if map.contains_key(banned) {
                errors.push(format!("{path}: has {banned}"));
            }
        }
        for combinator in ["anyOf", "oneOf", "allOf"] {
            if map.contains_key(combinator) {
                errors.push(format!("{path}: has {combinator}"));
            }
        }
        if map.contains_key("properties") && map.contains_key("additionalProperties") {
            errors.push(format!("{path}: additionalProperties beside properties"));
        }
        if let Some(Value::Object(props)) = map.get("properties") {
            if props.contains_key("extra") {
                errors.push(format!("{path}: the extra map leaked into the schema"));
            }
            for (k, v) in props {
                walk(&format!("{path}.{k}"), v, errors);
            }
        }
        if let Some(items) = map.get("items") {
            if !items.is_object() {
                errors.push(format!("{path}: items is not a single schema"));
            }
            walk(&format!("{path}[]"), items, errors);
        }
        if let Some(additional) = map.get("additionalProperties").filter(|a| a.is_object()) {
            walk(&format!("{path}{{}}"), additional, errors);
        }
    }
    let mut errors = Vec::new();
    for crd in crds() {
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        walk(crd.metadata.name.as_deref().unwrap(), &schema, &mut errors);
        assert!(
            schema.get("required").is_none(),
            "spec must stay optional at the root, as in Kube-OVN"
        );
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
