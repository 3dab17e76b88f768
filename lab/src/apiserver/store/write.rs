//! Create, update and delete with the real API server's rules.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Inner, ObjectKey};
use crate::apiserver::errors::ApiError;
use crate::apiserver::registry::Resource;
use crate::apiserver::{managed, meta, schema, strategy};

/// Options of a create, update or patch.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: run every check, store nothing.
    pub dry_run: bool,
    /// `fieldManager`: who owns the fields this write sets (managedFields).
    pub field_manager: Option<String>,
    /// Set by server-side apply, which records its own managedFields.
    pub managed_by_apply: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Delete the object now, its dependents after (the default).
    #[default]
    Background,
    /// Delete the dependents first; the object waits with the `foregroundDeletion` finalizer.
    Foreground,
    /// Keep the dependents, removing their owner reference.
    Orphan,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub propagation: Propagation,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

/// Metadata only the server sets; a client's values are ignored.
const SERVER_FIELDS: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
];

fn check_type(res: &Resource, obj: &mut Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON or YAML object",
        ));
    }
    let want = res.api_version();
    if let Some(got) = obj.get("apiVersion").and_then(Value::as_str)
        && got != want
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({got}) does not match the expected API version ({want})"
        )));
    }
    if let Some(got) = obj.get("kind").and_then(Value::as_str)
        && got != res.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({got}) does not match the expected kind ({})",
            res.kind
        )));
    }
    obj["apiVersion"] = json!(want);
    obj["kind"] = json!(res.kind);
    Ok(())
}

impl Inner {
    pub(super) fn namespace_usable(&self, ns: &str) -> Result<(), ApiError> {
        let ns_res = self
            .registry
            .lookup("", "v1", "namespaces")
            .expect("namespaces are built in");
        match self.objects.get(&ObjectKey::new(&ns_res, None, ns)) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(n) if meta::is_deleting(n) => Err(ApiError::new(
                403,
                "Forbidden",
                format!("unable to create new content in namespace {ns} because it is being terminated"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// CRD schema admission, and for CRDs themselves, registration of the kind they define.
    fn admit(&mut self, res: &Resource, name: &str, obj: &mut Value, dry_run: bool) -> Result<(), ApiError> {
        if let Some(s) = &res.schema {
            schema::admit(s, obj).map_err(|errors| ApiError::invalid(res, name, &errors))?;
        }
        if res.group == "apiextensions.k8s.io" && res.plural == "customresourcedefinitions" {
            let accepted = if dry_run {
                crate::apiserver::registry::Registry::default().sync_crd(obj)
            } else {
                self.registry.sync_crd(obj)
            }
            .map_err(|why| ApiError::invalid_field(res, name, "spec", why))?;
            let now = meta::now();
            let cond = |t: &str, reason: &str| json!({"type": t, "status": "True", "reason": reason, "message": "", "lastTransitionTime": now});
            obj["status"] = json!({"acceptedNames": accepted, "storedVersions": [obj.pointer("/spec/versions/0/name")],
                                    "conditions": [cond("NamesAccepted", "NoConflicts"), cond("Established", "InitialNamesAccepted")]});
        }
        Ok(())
    }

    pub(super) fn create(
        &mut self,
        res: &Resource,
        namespace: Option<&str>,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        check_type(res, &mut obj)?;
        let ns = if res.namespaced {
            let url_ns =
                namespace.ok_or_else(|| ApiError::bad_request(format!("{} is namespaced", res.plural)))?;
            if let Some(body_ns) = meta::namespace(&obj)
                && body_ns != url_ns
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            self.namespace_usable(url_ns)?;
            Some(url_ns.to_owned())
        } else {
            None
        };
        let name = match meta::name(&obj) {
            Some(n) => n.to_owned(),
            None => match meta::str_field(&obj, "generateName").filter(|g| !g.is_empty()) {
                Some(prefix) => format!("{prefix}{}", meta::name_suffix()),
                None => {
                    return Err(ApiError::invalid_field(
                        res,
                        "",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    ));
                }
            },
        };
        meta::valid_name_for(res, &name)
            .map_err(|why| ApiError::invalid_field(res, &name, "metadata.name", why))?;
        let key = ObjectKey::new(res, ns.as_deref(), &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(res, &name));
        }
        {
            let m = meta::metadata_mut(&mut obj);
            for f in SERVER_FIELDS {
                m.remove(*f);
            }
            m.remove("resourceVersion");
            m.insert("name".into(), json!(name));
            match &ns {
                Some(ns) => m.insert("namespace".into(), json!(ns)),
                None => m.remove("namespace"),
            };
            m.insert("uid".into(), json!(meta::new_uid()));
            m.insert("creationTimestamp".into(), json!(meta::now()));
            if res.tracks_generation {
                m.insert("generation".into(), json!(1));
            }
        }
        // With a status subresource, status is not the creator's to set (CRD behaviour).
        if res.from_crd && res.status_subresource {
            obj.as_object_mut().expect("checked").remove("status");
        }
        strategy::prepare_for_create(res, &mut obj);
        strategy::default_on_every_write(res, &mut obj);
        self.admit(res, &name, &mut obj, opts.dry_run)?;
        if !opts.managed_by_apply {
            managed::record_update(res, None, &mut obj, &manager(opts), None, &meta::now());
        }
        if opts.dry_run {
            return Ok(Arc::new(obj));
        }
        Ok(self.commit(key, Some(obj), None))
    }

    /// Update from `compute(current)`, for PUT and PATCH, on the object or its status.
    pub(super) fn update_with(
        &mut self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        status: bool,
        opts: &WriteOptions,
        compute: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        if res.namespaced && namespace.is_none() {
            return Err(ApiError::bad_request(format!("{} is namespaced", res.plural)));
        }
        let key = ObjectKey::new(res, namespace, name);
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(res, name))?;
        let mut new = compute(&old)?;
        check_type(res, &mut new)?;
        if let Some(body_name) = meta::name(&new)
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta::resource_version(&new)
            && Some(rv) != meta::resource_version(&old)
        {
            return Err(ApiError::stale(res, name));
        }
        let mut result = if status {
            // A status write changes status and nothing else.
            let mut r = (*old).clone();
            match new.get("status") {
                Some(s) => r["status"] = s.clone(),
                None => {
                    r.as_object_mut()
                        .expect("stored objects are objects")
                        .remove("status");
                }
            }
            if opts.managed_by_apply {
                // Apply omits managedFields when no entry is left; so must the stored object, or
                // a status apply that changes nothing would store `[]` and count as a change.
                let m = meta::metadata_mut(&mut r);
                match new.pointer("/metadata/managedFields") {
                    Some(v) => m.insert("managedFields".into(), v.clone()),
                    None => m.remove("managedFields"),
                };
            }
            r
        } else {
            if res.status_subresource {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        new.as_object_mut().expect("checked").remove("status");
                    }
                }
            }
            new
        };
        {
            let old_meta = meta::metadata(&old).cloned().unwrap_or_default();
            let m = meta::metadata_mut(&mut result);
            for f in SERVER_FIELDS.iter().chain(&["name", "namespace"]) {
                match old_meta.get(*f) {
                    Some(v) => m.insert((*f).to_owned(), v.clone()),
                    None => m.remove(*f),
                };
            }
        }
        if meta::is_deleting(&old) {
            let before = meta::finalizers(&old);
            if let Some(added) = meta::finalizers(&result).iter().find(|f| !before.contains(f)) {
                return Err(ApiError::invalid_field(
                    res,
                    name,
                    "metadata.finalizers",
                    format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [{added}]"
                    ),
                ));
            }
        }
        strategy::default_on_every_write(res, &mut result);
        self.admit(res, name, &mut result, opts.dry_run)?;
        // Custom resources (and the built-ins that keep a generation) count every change outside
        // metadata, and outside status when status is a subresource (apiextensions'
        // customResourceStrategy.PrepareForUpdate).
        if res.tracks_generation
            && meta::spec_part(&result, res.status_subresource)
                != meta::spec_part(&old, res.status_subresource)
        {
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta::metadata_mut(&mut result).insert("generation".into(), json!(generation + 1));
        }
        if !opts.managed_by_apply {
            let sub = status.then_some("status");
            managed::record_update(res, Some(&old), &mut result, &manager(opts), sub, &meta::now());
        }
        // A write that changes nothing stores nothing and tells no watcher.
        if meta::comparable(&result) == meta::comparable(&old)
            && result.pointer("/metadata/managedFields") == old.pointer("/metadata/managedFields")
        {
            return Ok(old);
        }
        if opts.dry_run {
            return Ok(Arc::new(result));
        }
        if meta::is_deleting(&result) && meta::finalizers(&result).is_empty() {
            let gone = self.commit(key.clone(), None, Some(old));
            self.after_removal(&key, &gone);
            return Ok(gone);
        }
        Ok(self.commit(key, Some(result), Some(old)))
    }
}

fn manager(opts: &WriteOptions) -> String {
    opts.field_manager.clone().unwrap_or_else(|| "unknown".into())
}
