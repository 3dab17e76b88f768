//! Field ownership (`metadata.managedFields`), server-side apply, and strategic merge patch.
//!
//! Pure: no I/O; the store calls in with the object before and after a write.
//!
//! ```text
//!   create / PUT / JSON, merge, strategic patch ──▶ record_update ─┐
//!   PATCH application/apply-patch+yaml ──────────▶ apply ─────────┤ walk (compare, applied_set,
//!   PATCH application/strategic-merge-patch+json ─▶ strategic ─────┤       merge, prune)
//!                                                                  └▶ rules (ListRules) ▶ fieldset
//! ```
//!
//! What the real API server does, and so what this does:
//!
//! - Every write records who set what. An update (any verb but apply) gives the fields it added
//!   or changed to its manager's "Update" entry and takes them from every other entry; fields it
//!   removed leave every entry. Entries left owning nothing are dropped. A write that changes
//!   nothing leaves managedFields exactly as they were.
//! - Apply owns exactly the fields of the applied configuration (an "Apply" entry). Changing a
//!   field another manager owns is a conflict (409) unless forced, which moves the field; setting
//!   it to the value it already has shares it. Fields the applier set last time and omits now are
//!   removed from the object, unless someone else owns them.
//! - Server-set metadata (uid, resourceVersion, generation, timestamps, managedFields) is never
//!   owned. A status write owns only status; a write of the main resource never owns the status
//!   of a resource with a status subresource.
//!
//! Known differences from a real server:
//!
//! - Built-in kinds have no schema here: an applied configuration with a field the kind does not
//!   have is accepted (a custom resource's is refused, as upstream). Lists are known only as far
//!   as the table in `rules` goes; others are atomic.
//! - Fields a built-in kind's create strategy sets (a Namespace's `kubernetes` finalizer) are
//!   owned by the creator; upstream they are set after ownership is recorded.
//! - Appliers' fields are not converted between API versions; Update entries are not capped
//!   (upstream folds the oldest into `ancient-changes` past 10).
//! - An apply that changes only its own entry (a first apply of values already there) stamps the
//!   entry's time, where upstream leaves it unset.

mod entries;
pub mod fieldset;
pub mod rules;
mod strategic;
mod walk;

#[cfg(test)]
mod tests;

use serde_json::{Value, json};

pub use entries::{ManagerId, Operation};
pub use fieldset::{FieldSet, Path, PathElement};
pub use rules::{ListRules, ListType, MapKey, PatchStrategy};
pub use strategic::{StrategicMergeError, strategic_merge, supported as strategic_merge_supported};

use super::errors::ApiError;
use super::registry::Resource;
use entries::{Entry, Managed};
use fieldset::display_path;
use walk::{Comparison, applied_set, compare, merge, prune};

/// Why an apply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// A malformed configuration (400).
    #[error("{0}")]
    BadRequest(String),
    /// A configuration that does not fit the kind's schema: an undeclared field, a list element
    /// without its key, a repeated key. Kubernetes 1.33 answers these with a bare 500 (no
    /// reason), from the failed conversion of the configuration to a typed object.
    #[error("{0}")]
    Typed(String),
    /// Apply to the status of an object that does not exist (apply creates only main resources).
    #[error("the object does not exist")]
    NotFound,
    /// Fields another manager owns would change (409).
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
}

/// A field the applier would change that another manager owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub manager: ManagerId,
    pub path: Path,
}

impl ApplyError {
    pub fn into_api_error(self, res: &Resource, name: &str) -> ApiError {
        match self {
            Self::BadRequest(message) => ApiError::bad_request(message),
            Self::Typed(message) => ApiError::new(500, "", message),
            Self::NotFound => ApiError::not_found(res, name),
            Self::Conflicts(conflicts) => {
                // As the real server's: details carry only the causes, one per field.
                let causes: Vec<Value> = conflicts
                    .iter()
                    .map(|c| {
                        json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", c.manager.describe()),
                               "field": display_path(&c.path)})
                    })
                    .collect();
                ApiError {
                    code: 409,
                    reason: "Conflict",
                    message: conflict_message(&conflicts),
                    details: Some(json!({"causes": causes})),
                }
            }
        }
    }
}

/// `Apply failed with 1 conflict: conflict with "m": .spec.x`, or for several, the fields grouped
/// by manager, as the real server words it.
fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.manager.describe(),
            display_path(&c.path)
        );
    }
    let mut managers: Vec<String> = conflicts.iter().map(|c| c.manager.describe()).collect();
    managers.sort();
    managers.dedup();
    let mut lines = Vec::new();
    for m in managers {
        lines.push(format!("conflicts with {m}:"));
        lines.extend(
            conflicts
                .iter()
                .filter(|c| c.manager.describe() == m)
                .map(|c| format!("- {}", display_path(&c.path))),
        );
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Metadata the server sets, which no manager owns (Kubernetes strips the same paths, plus the
/// deletion fields only the server ever writes).
fn server_owned() -> FieldSet {
    let f = |s: &str| PathElement::Field(s.to_owned());
    let mut set = FieldSet::new();
    set.insert(&[f("apiVersion")]);
    set.insert(&[f("kind")]);
    set.insert(&[f("metadata")]);
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "managedFields",
    ] {
        set.insert(&[f("metadata"), f(field)]);
    }
    set
}

/// What an object looks like before it exists, for the ownership of a create: the real server
/// compares with a zero Go struct, whose non-pointer struct fields (a Pod's `spec`) are present
/// and empty and whose non-omitempty slices are `null`, so a create owns what is inside them but
/// not the containers themselves (no `.` in `f:spec`, `f:containers`). Only containers matter
/// here: a scalar is owned whether it was `null` or absent before. Custom resources start empty.
fn empty_object(res: &Resource) -> Value {
    let mut obj = json!({"apiVersion": res.api_version(), "kind": res.kind, "metadata": {}});
    if res.from_crd {
        return obj;
    }
    let zero = match (res.group.as_str(), res.kind.as_str()) {
        ("", "Pod") => json!({"spec": {"containers": null}, "status": {}}),
        ("", "Node" | "Namespace") => json!({"spec": {}, "status": {}}),
        ("", "Service") => json!({"spec": {}, "status": {"loadBalancer": {}}}),
        ("", "Event") => json!({"involvedObject": {}, "source": {}}),
        ("events.k8s.io", "Event") => json!({"regarding": {}, "deprecatedSource": {}}),
        ("discovery.k8s.io", "EndpointSlice") => json!({"endpoints": null, "ports": null}),
        ("coordination.k8s.io", "Lease") | ("networking.k8s.io", "NetworkPolicy") => json!({"spec": {}}),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            json!({"spec": {"names": {}, "versions": null}, "status": {"acceptedNames": {}, "storedVersions": null}})
        }
        _ => json!({}),
    };
    if let (Some(o), Value::Object(z)) = (obj.as_object_mut(), zero) {
        o.extend(z);
    }
    obj
}

/// The part of an object a write at `subresource` can own.
fn view(res: &Resource, obj: &Value, subresource: Option<&str>) -> Value {
    if subresource.is_some() {
        return match obj.get("status") {
            Some(s) => json!({"status": s}),
            None => json!({}),
        };
    }
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        if res.status_subresource {
            m.remove("status");
        }
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    v
}

/// What changed between two objects, in the part a write at `subresource` can own.
fn changes(res: &Resource, old: &Value, new: &Value, subresource: Option<&str>) -> Comparison {
    let mut cmp = Comparison::default();
    compare(
        &ListRules::for_resource(res),
        Some(&view(res, old, subresource)),
        Some(&view(res, new, subresource)),
        &mut Vec::new(),
        &mut cmp,
    );
    cmp.subtract(&server_owned());
    cmp
}

/// Gives `me` what `cmp` added or changed, takes it from everyone else, and takes what it
/// removed from everyone.
fn take_ownership(managed: &mut Managed, cmp: &Comparison, me: &ManagerId, api_version: &str, time: &str) {
    let changed = cmp.changed();
    let mut touched = changed.clone();
    touched.union(&cmp.removed);
    for e in managed.entries.iter_mut().filter(|e| &e.id != me) {
        e.fields.subtract(&touched);
    }
    match managed.get_mut(me) {
        Some(mine) => {
            mine.fields.subtract(&cmp.removed);
            mine.fields.union(&changed);
            if !changed.is_empty() {
                mine.time = Some(time.to_owned());
                api_version.clone_into(&mut mine.api_version);
            }
        }
        None if !changed.is_empty() => managed.entries.push(Entry {
            id: me.clone(),
            api_version: api_version.to_owned(),
            time: Some(time.to_owned()),
            fields: changed,
        }),
        None => {}
    }
    managed.drop_empty();
}

/// Records a non-apply write (create when `old` is `None`, update, patch) of `new` by `manager`
/// in `new`'s managedFields.
///
/// The managedFields to start from are, as on a real server: the stored ones for a subresource
/// write; none when the request sets them to `[{}]` (the documented way to clear them); the
/// request's when it sets valid non-empty ones; otherwise the stored ones.
pub fn record_update(
    res: &Resource,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    time: &str,
) {
    let stored = old.and_then(|o| o.pointer("/metadata/managedFields"));
    let requested = if subresource.is_some() {
        None
    } else {
        new.pointer("/metadata/managedFields").filter(|v| !v.is_null())
    };
    let mut managed = match requested {
        Some(Value::Array(a)) if a.len() == 1 && a[0].as_object().is_some_and(serde_json::Map::is_empty) => {
            Managed::default()
        }
        Some(list) => match Managed::decode(Some(list)) {
            Ok(m) if !m.entries.is_empty() => m,
            _ => Managed::decode_or_empty(stored),
        },
        None => Managed::decode_or_empty(stored),
    };
    let empty = empty_object(res);
    let before = old.unwrap_or(&empty);
    let cmp = changes(res, before, new, subresource);
    let api_version = res.api_version();
    let me = ManagerId::update(manager, &api_version, subresource);
    take_ownership(&mut managed, &cmp, &me, &api_version, time);
    managed.store(new);
}

/// The manager that existing fields are attributed to when an object without managedFields is
/// first applied to, so that the applier cannot silently take them over.
const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Server-side apply of `applied` (the request body) by `manager` to `live` (`None`: create).
/// Returns the whole object to store, managedFields included.
pub fn apply(
    res: &Resource,
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    time: &str,
) -> Result<Value, ApplyError> {
    let config = check_config(res, applied)?;
    let config = restrict(res, config, subresource);
    let rules = ListRules::for_resource(res);
    let mut fields = FieldSet::new();
    let mut errors = Vec::new();
    applied_set(&rules, &config, &mut Vec::new(), &mut fields, &mut errors);
    if !errors.is_empty() {
        let meta = |k: &str| {
            applied
                .pointer(&format!("/metadata/{k}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let listed = if let [one] = errors.as_slice() {
            one.clone()
        } else {
            format!("errors:\n  {}", errors.join("\n  "))
        };
        return Err(ApplyError::Typed(format!(
            "failed to create typed patch object ({}/{}; {}): {listed}",
            meta("namespace"),
            meta("name"),
            gvk(res),
        )));
    }
    fields.subtract(&server_owned());

    let (base, mut managed) = match live {
        Some(l) => {
            let mut base = l.clone();
            if let Some(m) = base.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("managedFields");
            }
            (
                base,
                Managed::decode_or_empty(l.pointer("/metadata/managedFields")),
            )
        }
        None if subresource.is_some() => return Err(ApplyError::NotFound),
        None => (json!({}), Managed::default()),
    };
    let api_version = res.api_version();
    if live.is_some() && managed.entries.is_empty() && subresource.is_none() {
        let cmp = changes(res, &empty_object(res), &base, None);
        let first = ManagerId::update(BEFORE_FIRST_APPLY, &api_version, None);
        take_ownership(&mut managed, &cmp, &first, &api_version, time);
    }
    let me = ManagerId::apply(manager, subresource);
    let last = managed.get(&me).map(|e| e.fields.clone()).unwrap_or_default();

    let mut merged = merge(&rules, Some(&base), &config);
    // Fields applied last time and not now go, unless someone (this applier included) still
    // owns them.
    let mut keep = fields.clone();
    for e in managed.entries.iter().filter(|e| e.id != me) {
        keep.union(&e.fields);
    }
    let mut gone = last;
    gone.subtract(&keep);
    prune(&rules, &mut merged, &gone, Some(&keep));

    let before = if live.is_some() { base } else { empty_object(res) };
    let cmp = changes(res, &before, &merged, subresource);
    let changed = cmp.changed();
    let conflicts: Vec<Conflict> = managed
        .entries
        .iter()
        .filter(|e| e.id != me)
        .flat_map(|e| {
            e.fields
                .intersection(&changed)
                .paths()
                .into_iter()
                .map(|path| Conflict {
                    manager: e.id.clone(),
                    path,
                })
        })
        .collect();
    if !conflicts.is_empty() && !force {
        return Err(ApplyError::Conflicts(conflicts));
    }
    for e in managed.entries.iter_mut().filter(|e| e.id != me) {
        e.fields.subtract(&changed);
        e.fields.subtract(&cmp.removed);
    }
    match managed.get_mut(&me) {
        Some(mine) => {
            if !cmp.is_empty() || mine.fields != fields {
                mine.time = Some(time.to_owned());
            }
            mine.fields = fields;
            mine.api_version = api_version;
        }
        None => managed.entries.push(Entry {
            id: me,
            api_version,
            time: Some(time.to_owned()),
            fields,
        }),
    }
    managed.drop_empty();
    managed.store(&mut merged);
    Ok(merged)
}

/// `group/version, Kind=kind`, as the API server prints a GroupVersionKind.
fn gvk(res: &Resource) -> String {
    format!("{}/{}, Kind={}", res.group, res.version, res.kind)
}

/// Checks what the real server checks before merging anything.
fn check_config<'v>(
    res: &Resource,
    applied: &'v Value,
) -> Result<&'v serde_json::Map<String, Value>, ApplyError> {
    let config = applied.as_object().ok_or_else(|| {
        ApplyError::BadRequest("error decoding YAML: the apply configuration must be an object".into())
    })?;
    let text = |k: &str| config.get(k).and_then(Value::as_str).unwrap_or_default();
    if text("apiVersion") != res.api_version() || text("kind") != res.kind {
        let (group, version) = text("apiVersion")
            .rsplit_once('/')
            .unwrap_or(("", text("apiVersion")));
        return Err(ApplyError::BadRequest(format!(
            "invalid object type: {group}/{version}, Kind={}",
            text("kind")
        )));
    }
    if config
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApplyError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    Ok(config)
}

/// The configuration limited to what a write at `subresource` can set: a status apply sets status
/// (its metadata only identifies the object), a main-resource apply never sets the status of a
/// resource with a status subresource (the real server resets those fields).
fn restrict(res: &Resource, config: &serde_json::Map<String, Value>, subresource: Option<&str>) -> Value {
    let mut out = config.clone();
    if subresource.is_some() {
        out.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"));
        if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "uid" | "resourceVersion"));
        }
    } else if res.status_subresource {
        out.remove("status");
    }
    Value::Object(out)
}
