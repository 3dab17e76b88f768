//! Deletion and what follows it: finalizers, propagation policies, owner-reference garbage
//! collection, namespace termination, and a CRD's deletion taking its objects with it.

use std::sync::Arc;

use serde_json::{Value, json};

use super::write::{DeleteOptions, Propagation};
use super::{Inner, ObjectKey};
use crate::apiserver::errors::ApiError;
use crate::apiserver::meta;
use crate::apiserver::registry::Resource;

const FOREGROUND: &str = "foregroundDeletion";

impl Inner {
    pub(super) fn delete(
        &mut self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        let key = ObjectKey::new(res, namespace, name);
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(res, name))?;
        if let Some(uid) = &opts.precondition_uid
            && Some(uid.as_str()) != meta::uid(&old)
        {
            return Err(ApiError::conflict(
                res,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta::uid(&old).unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && Some(rv.as_str()) != meta::resource_version(&old)
        {
            return Err(ApiError::conflict(
                res,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta::resource_version(&old).unwrap_or("")
                ),
            ));
        }
        if opts.dry_run {
            return Ok(old);
        }
        let uid = meta::uid(&old).unwrap_or_default().to_owned();
        if res.group.is_empty() && res.plural == "namespaces" {
            return Ok(self.terminate_namespace(&key, &old));
        }
        let mut finalizers = meta::finalizers(&old);
        match opts.propagation {
            Propagation::Orphan => self.orphan_dependents(&uid),
            Propagation::Foreground
                if !self.dependents(&uid).is_empty() && !finalizers.iter().any(|f| f == FOREGROUND) =>
            {
                finalizers.push(FOREGROUND.into());
            }
            _ => {}
        }
        if finalizers.is_empty() {
            let gone = self.commit(key.clone(), None, Some(old));
            self.after_removal(&key, &gone);
            return Ok(gone);
        }
        // Finalizers keep the object, marked for deletion, until their owners remove them.
        let mut marked = (*old).clone();
        meta::set_finalizers(&mut marked, &finalizers);
        let m = meta::metadata_mut(&mut marked);
        if m.get("deletionTimestamp").is_none_or(Value::is_null) {
            m.insert("deletionTimestamp".into(), json!(meta::now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            // markAsDeleting: being marked for deletion bumps a kept generation, which is how
            // generation-filtered controllers (kube's `predicates::generation`) see a delete.
            if let Some(generation) = m.get("generation").and_then(Value::as_i64).filter(|g| *g > 0) {
                m.insert("generation".into(), json!(generation + 1));
            }
        }
        let result = if meta::comparable(&marked) == meta::comparable(&old) {
            old
        } else {
            self.commit(key, Some(marked), Some(old))
        };
        if finalizers.iter().any(|f| f == FOREGROUND) {
            for dep in self.dependents(&uid) {
                self.delete_key(&dep, Propagation::Background);
            }
            self.finish_foreground();
        }
        Ok(result)
    }

    /// Deletes a stored object by key (garbage collection, cascades), honouring its finalizers.
    fn delete_key(&mut self, key: &ObjectKey, propagation: Propagation) {
        let Some(res) = self
            .registry
            .all()
            .find(|r| r.group == key.group && r.plural == key.plural)
            .cloned()
        else {
            // Its kind is no longer served (a deleted CRD): remove it outright.
            if let Some(old) = self.objects.get(key).cloned() {
                let gone = self.commit(key.clone(), None, Some(old));
                self.after_removal(key, &gone);
            }
            return;
        };
        let ns = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
        let opts = DeleteOptions {
            propagation,
            ..DeleteOptions::default()
        };
        if let Err(e) = self.delete(&res, ns, &key.name, &opts)
            && e.code != 404
        {
            tracing::warn!(object = ?key, error = %e, "cascading delete failed");
        }
    }

    /// Keys of the objects `uid` owns.
    fn dependents(&self, uid: &str) -> Vec<ObjectKey> {
        if uid.is_empty() {
            return Vec::new();
        }
        self.objects
            .iter()
            .filter(|(_, o)| meta::owner_uids(o).iter().any(|u| u == uid))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn uid_exists(&self, uid: &str) -> bool {
        self.objects.values().any(|o| meta::uid(o) == Some(uid))
    }

    fn orphan_dependents(&mut self, uid: &str) {
        for key in self.dependents(uid) {
            self.remove_owner_ref(&key, uid);
        }
    }

    /// Drops the dependent's reference to the owner `uid` (a change, with its own event).
    fn remove_owner_ref(&mut self, key: &ObjectKey, uid: &str) {
        let Some(old) = self.objects.get(key).cloned() else {
            return;
        };
        let mut new = (*old).clone();
        if let Some(refs) = new
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
            if refs.is_empty() {
                meta::metadata_mut(&mut new).remove("ownerReferences");
            }
        }
        self.commit(key.clone(), Some(new), Some(old));
    }

    /// After an object is gone: collect dependents left without any owner, complete foreground
    /// deletions whose dependents are gone, finish terminating namespaces, and drop a deleted
    /// CRD's kind and objects.
    pub(super) fn after_removal(&mut self, key: &ObjectKey, gone: &Value) {
        if let Some(uid) = meta::uid(gone) {
            for dep in self.dependents(uid) {
                let orphaned = self
                    .objects
                    .get(&dep)
                    .is_some_and(|o| meta::owner_uids(o).iter().all(|u| !self.uid_exists(u)));
                if orphaned {
                    self.delete_key(&dep, Propagation::Background);
                } else {
                    // Another owner lives: the garbage collector keeps the dependent and patches
                    // the dangling reference away (attemptToDeleteItem, "solid" owners case).
                    self.remove_owner_ref(&dep, uid);
                }
            }
        }
        self.finish_foreground();
        if key.group == "apiextensions.k8s.io" && key.plural == "customresourcedefinitions" {
            let group = gone
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let plural = gone
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            self.registry.remove_crd(gone);
            let doomed: Vec<ObjectKey> = self
                .objects
                .keys()
                .filter(|k| k.group == group && k.plural == plural)
                .cloned()
                .collect();
            for k in doomed {
                self.delete_key(&k, Propagation::Background);
            }
        }
        if !key.namespace.is_empty() {
            self.finish_namespace(&key.namespace);
        }
    }

    /// Objects waiting in foreground deletion whose dependents are all gone lose that finalizer.
    fn finish_foreground(&mut self) {
        let waiting: Vec<ObjectKey> = self
            .objects
            .iter()
            .filter(|(_, o)| meta::is_deleting(o) && meta::finalizers(o).iter().any(|f| f == FOREGROUND))
            .filter(|(_, o)| self.dependents(meta::uid(o).unwrap_or_default()).is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for key in waiting {
            let Some(old) = self.objects.get(&key).cloned() else {
                continue;
            };
            let mut new = (*old).clone();
            let rest: Vec<String> = meta::finalizers(&old)
                .into_iter()
                .filter(|f| f != FOREGROUND)
                .collect();
            meta::set_finalizers(&mut new, &rest);
            if rest.is_empty() {
                let gone = self.commit(key.clone(), None, Some(old));
                self.after_removal(&key, &gone);
            } else {
                self.commit(key, Some(new), Some(old));
            }
        }
    }

    /// Namespace deletion: mark it Terminating, delete everything in it, and remove it once empty.
    fn terminate_namespace(&mut self, key: &ObjectKey, old: &Arc<Value>) -> Arc<Value> {
        let ns = key.name.clone();
        let result = if meta::is_deleting(old) {
            old.clone()
        } else {
            let mut marked = (**old).clone();
            let m = meta::metadata_mut(&mut marked);
            m.insert("deletionTimestamp".into(), json!(meta::now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            marked["status"] = json!({"phase": "Terminating"});
            self.commit(key.clone(), Some(marked), Some(old.clone()))
        };
        let contents: Vec<ObjectKey> = self
            .objects
            .keys()
            .filter(|k| k.namespace == ns)
            .cloned()
            .collect();
        for k in contents {
            self.delete_key(&k, Propagation::Background);
        }
        self.finish_namespace(&ns);
        self.objects.get(key).cloned().unwrap_or(result)
    }

    fn finish_namespace(&mut self, ns: &str) {
        let Some(ns_res) = self.registry.lookup("", "v1", "namespaces") else {
            return;
        };
        let key = ObjectKey::new(&ns_res, None, ns);
        let Some(obj) = self.objects.get(&key).cloned() else {
            return;
        };
        if !meta::is_deleting(&obj)
            || self.objects.keys().any(|k| k.namespace == ns)
            || !meta::finalizers(&obj).is_empty()
        {
            return;
        }
        let gone = self.commit(key.clone(), None, Some(obj));
        self.after_removal(&key, &gone);
    }
}
