//! The resources the emulator serves: the built-in kinds we use, and every kind a stored
//! CustomResourceDefinition defines.
//!
//! Pure: no I/O. Creating, changing or deleting a CRD calls [`Registry::sync_crd`] /
//! [`Registry::remove_crd`]; lookups resolve a URL's group, version and plural (or short name,
//! for kubectl) to a [`Resource`].

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::builtins::BUILTINS;

/// One served resource (a kind at one group/version).
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// `""` for the core group.
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub status_subresource: bool,
    /// Whether `/scale` is served (autoscaling/v1 Scale over `spec.replicas`, `status.replicas`
    /// and `spec.selector`): the built-in workloads; not custom resources (not yet).
    pub scale_subresource: bool,
    /// `openAPIV3Schema` of a custom resource; `None` for built-ins (stored as given).
    pub schema: Option<Value>,
    /// `additionalPrinterColumns` of a custom resource, or the columns we print for a built-in
    /// kind, for `kubectl get`'s table.
    pub printer_columns: Vec<Value>,
    /// Whether `metadata.generation` is kept: custom resources and the built-ins whose strategy
    /// sets it (EndpointSlice, NetworkPolicy, CRD); ConfigMaps, Pods (before 1.34), Namespaces and
    /// the like have none.
    pub tracks_generation: bool,
    /// Field selector keys beyond `metadata.name` / `metadata.namespace`.
    pub extra_field_selectors: &'static [&'static str],
    /// Set for resources a CRD defines.
    pub from_crd: bool,
}

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `subnets.kubeovn.io`, `pods`: how error messages name the resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Every field a field selector may name.
    pub fn field_selectors(&self) -> Vec<&str> {
        let mut f = vec!["metadata.name", "metadata.namespace"];
        f.extend_from_slice(self.extra_field_selectors);
        f
    }
}

type Key = (String, String);

/// Served resources by (group, plural) with the versions each serves.
#[derive(Debug, Default)]
pub struct Registry {
    resources: BTreeMap<Key, BTreeMap<String, Arc<Resource>>>,
}

/// Namespaces that exist from the start, as in any cluster.
pub const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl Registry {
    pub fn with_builtins() -> Self {
        let mut r = Self::default();
        for b in BUILTINS {
            let singular = b.kind.to_ascii_lowercase();
            r.insert(Resource {
                group: b.group.into(),
                version: b.version.into(),
                plural: b.plural.into(),
                singular,
                kind: b.kind.into(),
                namespaced: b.namespaced,
                short_names: b.short.iter().map(|s| (*s).to_owned()).collect(),
                status_subresource: b.status,
                scale_subresource: b.scale,
                schema: None,
                printer_columns: b
                    .columns
                    .iter()
                    .map(|(name, type_, path, priority)| {
                        json!({"name": name, "type": type_, "jsonPath": path, "priority": priority})
                    })
                    .collect(),
                tracks_generation: b.generation,
                extra_field_selectors: b.fields,
                from_crd: false,
            });
        }
        r
    }

    fn insert(&mut self, res: Resource) {
        self.resources
            .entry((res.group.clone(), res.plural.clone()))
            .or_default()
            .insert(res.version.clone(), Arc::new(res));
    }

    /// The resource at `group`/`version` named `name` (plural, singular or short name).
    pub fn lookup(&self, group: &str, version: &str, name: &str) -> Option<Arc<Resource>> {
        if let Some(versions) = self.resources.get(&(group.to_owned(), name.to_owned())) {
            return versions.get(version).cloned();
        }
        self.resources
            .iter()
            .filter(|((g, _), _)| g == group)
            .filter_map(|(_, versions)| versions.get(version))
            .find(|r| r.singular == name || r.short_names.iter().any(|s| s == name))
            .cloned()
    }

    /// Every served resource, ordered by group, plural, version.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.resources.values().flat_map(BTreeMap::values)
    }

    /// Group → versions served, for `/apis`.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in self.all() {
            let versions = out.entry(r.group.clone()).or_default();
            if !versions.contains(&r.version) {
                versions.push(r.version.clone());
            }
        }
        out
    }

    /// Registers (or re-registers) every served version of a CRD. Returns the names it accepted,
    /// for the CRD's `status.acceptedNames`, or why it cannot serve it.
    pub fn sync_crd(&mut self, crd: &Value) -> Result<Value, String> {
        let spec = crd.get("spec").ok_or("spec is required")?;
        let group = spec
            .get("group")
            .and_then(Value::as_str)
            .ok_or("spec.group is required")?;
        let names = spec.get("names").ok_or("spec.names is required")?;
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let plural = text(names, "plural").ok_or("spec.names.plural is required")?;
        let kind = text(names, "kind").ok_or("spec.names.kind is required")?;
        let singular = text(names, "singular").unwrap_or_else(|| kind.to_ascii_lowercase());
        let short_names: Vec<String> = names
            .get("shortNames")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect();
        let namespaced = match spec.get("scope").and_then(Value::as_str) {
            Some("Namespaced") => true,
            Some("Cluster") => false,
            other => return Err(format!("spec.scope must be Namespaced or Cluster, not {other:?}")),
        };
        let expected_name = format!("{plural}.{group}");
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name != expected_name {
            return Err(format!(
                "metadata.name must be spec.names.plural+\".\"+spec.group: {expected_name:?}"
            ));
        }
        let versions = spec
            .get("versions")
            .and_then(Value::as_array)
            .ok_or("spec.versions is required")?;
        let key = (group.to_owned(), plural.clone());
        self.resources.remove(&key);
        for v in versions {
            if v.get("served").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let version = text(v, "name").ok_or("spec.versions[].name is required")?;
            self.insert(Resource {
                group: group.to_owned(),
                version,
                plural: plural.clone(),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced,
                short_names: short_names.clone(),
                status_subresource: v.pointer("/subresources/status").is_some(),
                scale_subresource: false,
                schema: v.pointer("/schema/openAPIV3Schema").cloned(),
                printer_columns: v
                    .get("additionalPrinterColumns")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                tracks_generation: true,
                extra_field_selectors: &[],
                from_crd: true,
            });
        }
        Ok(
            json!({"plural": plural, "singular": singular, "kind": kind, "listKind": format!("{kind}List"),
                  "shortNames": short_names}),
        )
    }

    /// Stops serving a CRD's kind.
    pub fn remove_crd(&mut self, crd: &Value) {
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let plural = crd
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.resources.remove(&(group.to_owned(), plural.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_resolve_by_plural_singular_and_short_name() {
        let r = Registry::with_builtins();
        assert_eq!(r.lookup("", "v1", "pods").unwrap().kind, "Pod");
        assert_eq!(r.lookup("", "v1", "po").unwrap().kind, "Pod");
        assert_eq!(r.lookup("", "v1", "pod").unwrap().kind, "Pod");
        assert!(
            r.lookup("coordination.k8s.io", "v1", "leases")
                .unwrap()
                .namespaced
        );
        assert!(r.lookup("", "v2", "pods").is_none());
        assert!(r.groups().contains_key("events.k8s.io"));
        let sts = r.lookup("apps", "v1", "sts").unwrap();
        assert!(sts.kind == "StatefulSet" && sts.namespaced && sts.tracks_generation);
        let deploy = r.lookup("apps", "v1", "deploy").unwrap();
        assert!(deploy.kind == "Deployment" && deploy.scale_subresource && deploy.status_subresource);
    }

    #[test]
    fn crds_register_and_unregister() {
        let mut r = Registry::with_builtins();
        let crd = json!({"metadata": {"name": "subnets.kubeovn.io"}, "spec": {"group": "kubeovn.io", "scope": "Cluster",
            "names": {"plural": "subnets", "kind": "Subnet", "shortNames": ["subnet"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        let accepted = r.sync_crd(&crd).unwrap();
        assert_eq!(accepted["listKind"], "SubnetList");
        let res = r.lookup("kubeovn.io", "v1", "subnets").unwrap();
        assert!(res.status_subresource && !res.namespaced && res.schema.is_some());
        r.remove_crd(&crd);
        assert!(r.lookup("kubeovn.io", "v1", "subnets").is_none());
        let bad = json!({"metadata": {"name": "wrong"}, "spec": crd["spec"].clone()});
        assert!(r.sync_crd(&bad).unwrap_err().contains("subnets.kubeovn.io"));
    }
}
