//! One watch per kind, shared: an [`Informer`] keeps a kind's cache and tells every subscriber
//! what changed, with the object before and after, so each decides whether the change matters
//! to it (a status write matters to nobody but the status's readers).
//!
//! ```text
//!   API server ── watch ──▶ Informer<K> ──▶ cache (Store<K>), then ──▶ Change { old, new } ──┬─▶ K's controller
//!                                                                                            ├─▶ other kinds' triggers
//!                                                                                            └─▶ deletion handling
//! ```
//!
//! A change is sent after the cache holds it, so a subscriber that reads the cache sees at
//! least that change. Subscribers each have a bounded queue ([`CAPACITY`]); one that falls behind
//! is told it lagged instead of holding the watch up or growing without bound, and then looks at
//! everything again — a level-triggered controller loses nothing by that. A relist (the watch
//! expired) is turned into the changes it implies, deletions included.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event, watcher};
use tokio::sync::{broadcast, watch};

use crate::error::{Error, Result};

/// Changes queued per subscriber before it is considered lagging.
pub const CAPACITY: usize = 4096;

/// What a kind's object was before a change and is after it (`None`: absent).
pub struct Change<K> {
    pub old: Option<Arc<K>>,
    pub new: Option<Arc<K>>,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        Self {
            old: self.old.clone(),
            new: self.new.clone(),
        }
    }
}

impl<K> Change<K> {
    /// The object was deleted: its last state.
    pub fn deleted(&self) -> Option<&Arc<K>> {
        self.new.is_none().then_some(self.old.as_ref()).flatten()
    }

    /// Whether it appeared, went, or changed in what `differs` compares.
    pub fn matters(&self, differs: impl Fn(&K, &K) -> bool) -> bool {
        match (&self.old, &self.new) {
            (Some(old), Some(new)) => differs(old, new),
            (None, None) => false,
            _ => true,
        }
    }
}

/// A kind's cache and whether it has listed once. Made only by an [`Informer`], so every cache
/// comes with its sync signal.
pub struct Cache<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    synced: watch::Receiver<bool>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Cache<K> {
    /// Waits until the cache holds its first full list.
    pub async fn synced(&self) -> Result<()> {
        let kind = K::kind(&());
        self.synced
            .clone()
            .wait_for(|synced| *synced)
            .await
            .map(|_| ())
            .map_err(|_| Error::NotReady(format!("the {kind} watch stopped before it listed")))
    }

    /// The store, for a controller to read its objects from.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> std::ops::Deref for Cache<K> {
    type Target = Store<K>;

    fn deref(&self) -> &Store<K> {
        &self.store
    }
}

/// One watch of a kind: its cache and its subscribers. Subscribe before [`Informer::run`] starts,
/// or the first list's changes are missed.
pub struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    api: Api<K>,
    writer: Writer<K>,
    cache: Cache<K>,
    synced: watch::Sender<bool>,
    changes: broadcast::Sender<Change<K>>,
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// A watch over every `K` in the cluster (all namespaces).
    pub fn new(kube: &kube::Client) -> Self {
        let api = Api::all(kube.clone());
        let writer = Writer::default();
        let (synced, synced_rx) = watch::channel(false);
        let (changes, _) = broadcast::channel(CAPACITY);
        Self {
            api,
            cache: Cache {
                store: writer.as_reader(),
                synced: synced_rx,
            },
            writer,
            synced,
            changes,
        }
    }

    pub fn cache(&self) -> Cache<K> {
        self.cache.clone()
    }

    /// A new subscriber: every change from now on.
    pub fn changes(&self) -> Changes<K> {
        Changes {
            rx: self.changes.subscribe(),
            store: self.cache.store.clone(),
        }
    }

    /// Watches until the watch ends (it retries with backoff; it ends only when dropped).
    pub fn run(self) -> impl Future<Output = ()> + Send {
        let Self {
            api,
            mut writer,
            cache,
            synced,
            changes,
        } = self;
        let kind = K::kind(&());
        let store = cache.store;
        let mut before_relist: Option<HashMap<ObjectRef<K>, Arc<K>>> = None;
        watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .for_each(move |event| {
                match event {
                    Ok(event) => {
                        for change in apply(&mut writer, &store, &mut before_relist, &event) {
                            // No subscriber is fine: nobody listens to this kind's changes.
                            let _ = changes.send(change);
                        }
                        if matches!(event, Event::InitDone) {
                            synced.send_replace(true);
                        }
                    }
                    Err(e) => tracing::warn!(kind = %kind, error = %e, "watch failed; retrying"),
                }
                std::future::ready(())
            })
    }
}

/// Applies a watch event to the cache and returns the changes it made.
fn apply<K>(
    writer: &mut Writer<K>,
    store: &Store<K>,
    before_relist: &mut Option<HashMap<ObjectRef<K>, Arc<K>>>,
    event: &Event<K>,
) -> Vec<Change<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    match event {
        Event::Apply(obj) => {
            let key = ObjectRef::from_obj(obj);
            let old = store.get(&key);
            writer.apply_watcher_event(event);
            vec![Change {
                old,
                new: store.get(&key),
            }]
        }
        Event::Delete(obj) => {
            writer.apply_watcher_event(event);
            vec![Change {
                old: Some(Arc::new(obj.clone())),
                new: None,
            }]
        }
        Event::Init => {
            // What the cache holds now; compared with the list once it is complete.
            *before_relist = Some(
                store
                    .state()
                    .into_iter()
                    .map(|o| (ObjectRef::from_obj(&*o), o))
                    .collect(),
            );
            writer.apply_watcher_event(event);
            Vec::new()
        }
        Event::InitApply(_) => {
            writer.apply_watcher_event(event);
            Vec::new()
        }
        Event::InitDone => {
            writer.apply_watcher_event(event);
            let mut before = before_relist.take().unwrap_or_default();
            let mut out = Vec::new();
            for new in store.state() {
                let old = before.remove(&ObjectRef::from_obj(&*new));
                let same = old
                    .as_ref()
                    .is_some_and(|o| o.meta().resource_version == new.meta().resource_version);
                if !same {
                    out.push(Change { old, new: Some(new) });
                }
            }
            // Gone while the watch was away.
            out.extend(before.into_values().map(|old| Change {
                old: Some(old),
                new: None,
            }));
            out
        }
    }
}

/// The versions of objects this controller wrote itself, so that the change each write comes back
/// as does not reconcile the object once more: that run would start from exactly the state the
/// write produced and find nothing to do. A change by anyone else has another version and is
/// reconciled as usual.
pub struct OwnWrites<K: Resource<DynamicType = ()> + Clone + 'static> {
    versions: std::sync::Mutex<HashMap<ObjectRef<K>, String>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Default for OwnWrites<K> {
    fn default() -> Self {
        Self {
            versions: std::sync::Mutex::default(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> OwnWrites<K> {
    fn versions(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<K>, String>> {
        self.versions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `obj` is what a write of ours returned.
    pub fn wrote(&self, obj: &K) {
        if let Some(rv) = obj.meta().resource_version.clone() {
            self.versions().insert(ObjectRef::from_obj(obj), rv);
        }
    }

    /// Whether `obj` is exactly what a write of ours produced (then forgotten: it comes once).
    pub fn is_echo(&self, obj: &K) -> bool {
        let key = ObjectRef::from_obj(obj);
        let mut versions = self.versions();
        match (versions.get(&key), &obj.meta().resource_version) {
            (Some(ours), Some(rv)) if ours == rv => {
                versions.remove(&key);
                true
            }
            _ => false,
        }
    }

    /// The object is gone: nothing of it will come back.
    pub fn forget(&self, obj: &K) {
        self.versions().remove(&ObjectRef::from_obj(obj));
    }

    pub fn len(&self) -> usize {
        self.versions().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A subscriber's changes.
pub struct Changes<K: Resource<DynamicType = ()> + Clone + 'static> {
    rx: broadcast::Receiver<Change<K>>,
    store: Store<K>,
}

/// One item of a subscriber's stream.
enum Item<K> {
    Change(Change<K>),
    /// Changes were dropped because the subscriber fell behind.
    Lagged,
}

impl<K> Changes<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// What `each` makes of every change, and what `after_lag` gives once changes were dropped
    /// (what the dropped changes could have asked for: everything).
    pub fn map<T, I, J>(
        self,
        mut each: impl FnMut(&Change<K>) -> I + Send + 'static,
        mut after_lag: impl FnMut() -> J + Send + 'static,
    ) -> impl Stream<Item = T> + Send + 'static
    where
        T: Send + 'static,
        I: IntoIterator<Item = T>,
        J: IntoIterator<Item = T>,
    {
        let items = futures::stream::unfold(self.rx, |mut rx| async move {
            match rx.recv().await {
                Ok(change) => Some((Item::Change(change), rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => Some((Item::Lagged, rx)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        });
        items.flat_map(move |item| {
            let out: Vec<T> = match item {
                Item::Change(c) => each(&c).into_iter().collect(),
                Item::Lagged => after_lag().into_iter().collect(),
            };
            futures::stream::iter(out)
        })
    }

    /// `targets` of every change that matters (by `differs`); after a lag, `after_lag`.
    pub fn when<T: Send + 'static>(
        self,
        differs: fn(&K, &K) -> bool,
        mut targets: impl FnMut(&Change<K>) -> Vec<T> + Send + 'static,
        after_lag: impl FnMut() -> Vec<T> + Send + 'static,
    ) -> impl Stream<Item = T> + Send + 'static {
        self.map(
            move |c| {
                if c.matters(differs) {
                    targets(c)
                } else {
                    Vec::new()
                }
            },
            after_lag,
        )
    }

    /// `all` on every change that matters (by `differs`), and after a lag.
    pub fn when_all<T: Send + 'static>(
        self,
        differs: fn(&K, &K) -> bool,
        all: impl Fn() -> Vec<T> + Clone + Send + 'static,
    ) -> impl Stream<Item = T> + Send + 'static {
        let again = all.clone();
        self.when(differs, move |_| all(), again)
    }

    /// The objects of this kind to reconcile: those that appeared or changed in what `differs`
    /// compares (deleted ones are not reconciled again); after a lag, all.
    pub fn objects(self, differs: fn(&K, &K) -> bool) -> impl Stream<Item = Arc<K>> + Send + 'static {
        self.objects_where(differs, |_| true)
    }

    /// [`Changes::objects`], of those objects only the ones `wanted` accepts.
    pub fn objects_where(
        self,
        differs: fn(&K, &K) -> bool,
        wanted: impl Fn(&K) -> bool + Send + Sync + 'static,
    ) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let store = self.store.clone();
        let wanted = Arc::new(wanted);
        let again = wanted.clone();
        self.map(
            move |c| c.new.clone().filter(|n| c.matters(differs) && wanted(n)),
            move || store.state_filter(|o| again(o)),
        )
    }

    /// [`Changes::objects`] but for the changes `own` wrote; a deletion is forgotten there.
    pub fn objects_not_from(
        self,
        differs: fn(&K, &K) -> bool,
        own: Arc<OwnWrites<K>>,
    ) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let store = self.store.clone();
        self.map(
            move |c| {
                if let Some(gone) = c.deleted() {
                    own.forget(gone);
                }
                c.new.clone().filter(|n| c.matters(differs) && !own.is_echo(n))
            },
            move || store.state(),
        )
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": name, "namespace": "n", "resourceVersion": rv}}),
        )
        .unwrap()
    }

    /// (name, old resourceVersion, new resourceVersion) of each change.
    fn seen(changes: &[Change<ConfigMap>]) -> Vec<(String, Option<String>, Option<String>)> {
        let rv = |o: &Option<Arc<ConfigMap>>| o.as_ref().and_then(|o| o.metadata.resource_version.clone());
        let mut out: Vec<_> = changes
            .iter()
            .map(|c| {
                let name = c
                    .new
                    .as_ref()
                    .or(c.old.as_ref())
                    .unwrap()
                    .metadata
                    .name
                    .clone()
                    .unwrap();
                (name, rv(&c.old), rv(&c.new))
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn changes_carry_before_and_after_and_a_relist_tells_what_it_missed() {
        let mut writer = Writer::<ConfigMap>::default();
        let store = writer.as_reader();
        let mut relist = None;
        let mut run = |e: Event<ConfigMap>| apply(&mut writer, &store, &mut relist, &e);
        let s = |v: &str| Some(v.to_owned());
        assert!(run(Event::Init).is_empty());
        assert!(run(Event::InitApply(cm("a", "1"))).is_empty());
        assert!(run(Event::InitApply(cm("b", "2"))).is_empty());
        assert_eq!(
            seen(&run(Event::InitDone)),
            [("a".into(), None, s("1")), ("b".into(), None, s("2"))]
        );
        assert_eq!(
            seen(&run(Event::Apply(cm("a", "3")))),
            [("a".into(), s("1"), s("3"))]
        );
        assert_eq!(
            seen(&run(Event::Delete(cm("a", "4")))),
            [("a".into(), s("4"), None)]
        );
        // The watch expired; meanwhile b changed, c came, and nothing else.
        assert!(run(Event::Init).is_empty());
        assert!(run(Event::InitApply(cm("b", "5"))).is_empty());
        assert!(run(Event::InitApply(cm("c", "6"))).is_empty());
        assert_eq!(
            seen(&run(Event::InitDone)),
            [("b".into(), s("2"), s("5")), ("c".into(), None, s("6"))]
        );
        // Once more: c is gone, b unchanged (no change sent for it).
        run(Event::Init);
        run(Event::InitApply(cm("b", "5")));
        assert_eq!(seen(&run(Event::InitDone)), [("c".into(), s("6"), None)]);
    }
}

#[cfg(test)]
mod own_writes {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::OwnWrites;

    fn cm(rv: &str) -> ConfigMap {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "a", "namespace": "n", "resourceVersion": rv}}),
        )
        .unwrap()
    }

    #[test]
    fn only_the_version_we_wrote_is_an_echo_and_only_once() {
        let own = OwnWrites::<ConfigMap>::default();
        own.wrote(&cm("5"));
        assert!(!own.is_echo(&cm("4")), "an older version is someone else's");
        assert!(!own.is_echo(&cm("6")), "a later version is someone else's");
        assert!(own.is_echo(&cm("5")));
        assert!(!own.is_echo(&cm("5")), "it comes back once");
        own.wrote(&cm("7"));
        own.forget(&cm("8"));
        assert!(own.is_empty(), "a deleted object is forgotten");
    }
}
