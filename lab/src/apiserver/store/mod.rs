//! The object store: one global resourceVersion, objects as JSON, a bounded history of changes
//! for watches, and the write rules of the real API server (preconditions, subresources,
//! generation, finalizers, garbage collection, namespace deletion, CRD registration).
//!
//! Every operation takes the store's lock once; commits append to history, notify watchers and
//! persist in that same critical section, so watchers see changes exactly once and in
//! resourceVersion order.

mod lifecycle;
mod persist;
mod watch;
mod write;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::sync::mpsc;

pub use watch::{WatchEvent, WatchRequest, WatchStart, Watcher};
pub use write::{DeleteOptions, Propagation, WriteOptions};

use super::errors::ApiError;
use super::meta;
use super::registry::{INITIAL_NAMESPACES, Registry, Resource};
use super::selectors::{FieldSelector, LabelSelector};

/// Where an object lives: (group, plural, namespace or "", name). Objects are stored once per
/// resource, whatever version they were written at.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub group: String,
    pub plural: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(res: &Resource, namespace: Option<&str>, name: &str) -> Self {
        Self {
            group: res.group.clone(),
            plural: res.plural.clone(),
            namespace: if res.namespaced {
                namespace.unwrap_or_default().to_owned()
            } else {
                String::new()
            },
            name: name.to_owned(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub key: ObjectKey,
    pub kind: EventType,
    /// The object after the change (for a delete: its last state, with the delete's RV).
    pub object: Arc<Value>,
    /// The object before, for updates and deletes.
    pub old: Option<Arc<Value>>,
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Changes kept for watches; a watch from before them gets 410 Expired.
    pub history_limit: usize,
    /// A file to persist the store in, so the lab can stop and start without losing state.
    pub state_file: Option<PathBuf>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            history_limit: 10_000,
            state_file: None,
        }
    }
}

pub(super) struct Inner {
    pub registry: Registry,
    pub objects: BTreeMap<ObjectKey, Arc<Value>>,
    pub rv: u64,
    pub history: VecDeque<Arc<Change>>,
    /// Watches from a resourceVersion below this are answered 410: their history is gone.
    pub compacted_rv: u64,
    pub history_limit: usize,
    pub watchers: Vec<mpsc::UnboundedSender<Arc<Change>>>,
    /// Paged lists in progress: token → (list resourceVersion, the rest of the snapshot), and
    /// the tokens oldest first, so the oldest go when too many are held.
    pub continues: HashMap<String, (u64, Vec<Arc<Value>>)>,
    pub continue_order: VecDeque<String>,
    pub log: Option<persist::Log>,
}

/// The store. Cheap to share behind an `Arc`.
pub struct Store {
    inner: Mutex<Inner>,
}

/// A page of a list.
#[derive(Debug)]
pub struct ListPage {
    pub resource_version: u64,
    pub items: Vec<Arc<Value>>,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

impl Store {
    /// A store with the built-in kinds and the usual namespaces, loading `state_file` if it exists.
    pub fn new(config: &StoreConfig) -> Result<Self, ApiError> {
        let mut inner = Inner {
            registry: Registry::with_builtins(),
            objects: BTreeMap::new(),
            rv: 0,
            history: VecDeque::new(),
            compacted_rv: 0,
            history_limit: config.history_limit.max(1),
            watchers: Vec::new(),
            continues: HashMap::new(),
            continue_order: VecDeque::new(),
            log: None,
        };
        if let Some(path) = &config.state_file {
            let (rv, objects) = persist::load(path).map_err(|e| ApiError::internal(e.to_string()))?;
            inner.rv = rv;
            inner.compacted_rv = rv;
            for obj in objects {
                inner.restore(obj);
            }
            inner.log = Some(
                persist::Log::open(path, rv, &inner.objects)
                    .map_err(|e| ApiError::internal(e.to_string()))?,
            );
        }
        let store = Self {
            inner: Mutex::new(inner),
        };
        {
            let mut inner = store.lock();
            for ns in INITIAL_NAMESPACES {
                let ns_res = inner
                    .registry
                    .lookup("", "v1", "namespaces")
                    .expect("namespaces are built in");
                if !inner.objects.contains_key(&ObjectKey::new(&ns_res, None, ns)) {
                    let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
                                     "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
                    inner.create(&ns_res, None, obj, &WriteOptions::default())?;
                }
            }
        }
        Ok(store)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves a URL's resource.
    pub fn resource(&self, group: &str, version: &str, name: &str) -> Option<Arc<Resource>> {
        self.lock().registry.lookup(group, version, name)
    }

    /// Every served resource.
    pub fn resources(&self) -> Vec<Arc<Resource>> {
        self.lock().registry.all().cloned().collect()
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn get(&self, res: &Resource, namespace: Option<&str>, name: &str) -> Result<Arc<Value>, ApiError> {
        self.lock()
            .objects
            .get(&ObjectKey::new(res, namespace, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(res, name))
    }

    pub fn create(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        self.lock().create(res, namespace, obj, opts)
    }

    /// PUT: replaces the object (or its status, with `subresource` `status`).
    pub fn update(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        obj: Value,
        status: bool,
        opts: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        // Custom resources and CRDs do not allow unconditional updates
        // (AllowUnconditionalUpdate() == false): a PUT must say which version it replaces.
        let mut inner = self.lock();
        if (res.from_crd || res.plural == "customresourcedefinitions")
            && meta::resource_version(&obj).is_none()
        {
            if !inner.objects.contains_key(&ObjectKey::new(res, namespace, name)) {
                return Err(ApiError::not_found(res, name));
            }
            return Err(ApiError::invalid_field(
                res,
                name,
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update",
            ));
        }
        inner.update_with(res, namespace, name, status, opts, |_| Ok(obj))
    }

    /// Any write computed from the current object (a patch); `compute` gets `None` when the
    /// object does not exist, which only server-side apply turns into a create.
    pub fn modify(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        status: bool,
        opts: &WriteOptions,
        compute: impl FnOnce(Option<&Value>) -> Result<Value, ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let key = ObjectKey::new(res, namespace, name);
        if inner.objects.contains_key(&key) {
            inner.update_with(res, namespace, name, status, opts, |old| compute(Some(old)))
        } else {
            let obj = compute(None)?;
            inner.create(res, namespace, obj, opts)
        }
    }

    /// A write computed from the current object, which must exist (JSON, merge and strategic
    /// merge patches).
    pub fn patch(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        status: bool,
        opts: &WriteOptions,
        compute: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        self.lock()
            .update_with(res, namespace, name, status, opts, compute)
    }

    pub fn delete(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        self.lock().delete(res, namespace, name, opts)
    }

    /// Lists a resource (in one namespace, or all), filtered, in pages of `limit`.
    pub fn list(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let mut inner = self.lock();
        let (rv, matching) = if let Some(token) = continue_token {
            // Tokens stay valid for a retried page, like the real server's (which are stateless).
            if uuid::Uuid::parse_str(token).is_err() {
                return Err(ApiError::bad_request(format!(
                    "continue key is not valid: {token:?}"
                )));
            }
            inner.continues.get(token).cloned().ok_or_else(|| {
                ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. \
                     You can start a new list without the continue parameter.",
                )
            })?
        } else {
            let items: Vec<Arc<Value>> = inner
                .objects
                .iter()
                .filter(|(k, _)| k.group == res.group && k.plural == res.plural)
                .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
                .map(|(_, v)| v.clone())
                .filter(|v| labels.matches_object(v) && fields.matches(v))
                .collect();
            (inner.rv, items)
        };
        // A paged list is a snapshot: later pages come from the same moment as the first.
        let Some(limit) = limit.filter(|l| *l > 0 && *l < matching.len()) else {
            return Ok(ListPage {
                resource_version: rv,
                items: matching,
                continue_token: None,
                remaining: None,
            });
        };
        let mut items = matching;
        let rest = items.split_off(limit);
        let token = meta::new_uid();
        let remaining = rest.len() as u64;
        while inner.continue_order.len() >= 1000 {
            if let Some(oldest) = inner.continue_order.pop_front() {
                inner.continues.remove(&oldest);
            }
        }
        inner.continues.insert(token.clone(), (rv, rest));
        inner.continue_order.push_back(token.clone());
        Ok(ListPage {
            resource_version: rv,
            items,
            continue_token: Some(token),
            remaining: Some(remaining),
        })
    }

    /// Starts a watch: the events it must replay first, then a live receiver.
    pub fn watch(&self, request: &WatchRequest) -> Result<Watcher, ApiError> {
        self.lock().watch(request)
    }
}

impl Inner {
    /// Puts a loaded object back (persistence), registering CRDs.
    fn restore(&mut self, obj: Value) {
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version.as_str()));
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let Some(res) = self
            .registry
            .all()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
            .cloned()
        else {
            return;
        };
        if res.plural == "customresourcedefinitions" {
            let _ = self.registry.sync_crd(&obj);
        }
        let key = ObjectKey::new(&res, meta::namespace(&obj), meta::name(&obj).unwrap_or_default());
        self.objects.insert(key, Arc::new(obj));
    }

    /// Records a change: new resourceVersion, history, watchers, persistence. `new` is `None` for
    /// a removal. Returns the stored object (for a removal, the last state with the new RV).
    fn commit(&mut self, key: ObjectKey, new: Option<Value>, old: Option<Arc<Value>>) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        let (kind, object) = if let Some(mut obj) = new {
            meta::metadata_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
            let obj = Arc::new(obj);
            self.objects.insert(key.clone(), obj.clone());
            (
                if old.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                },
                obj,
            )
        } else {
            self.objects.remove(&key);
            let mut last = old.as_deref().cloned().unwrap_or(Value::Null);
            meta::metadata_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
            (EventType::Deleted, Arc::new(last))
        };
        if let Some(log) = &mut self.log
            && let Err(e) = log.append(rv, &key, (kind != EventType::Deleted).then_some(&*object))
        {
            tracing::error!(error = %e, "cannot persist the API emulator's state");
        }
        let change = Arc::new(Change {
            rv,
            key,
            kind,
            object: object.clone(),
            old,
        });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted_rv = dropped.rv;
            }
        }
        self.watchers.retain(|w| w.send(change.clone()).is_ok());
        object
    }

    /// Forgets history up to now, as etcd compaction does: watches from earlier get 410.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted_rv = self.rv;
    }
}

impl Store {
    /// Drops the watch history (tests use it to force 410 Expired).
    pub fn compact(&self) {
        self.lock().compact();
    }

    /// Watches still open (their stream not yet ended or dropped): lets a test know that a
    /// client's watch has timed out on the server side before it changes things behind its back.
    pub fn open_watches(&self) -> usize {
        self.lock().watchers.iter().filter(|w| !w.is_closed()).count()
    }
}
