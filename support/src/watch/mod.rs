//! The one watched cache of kube-ovn-rs: a watch of one kind kept in a reflector cache, told to
//! whoever needs it three ways — the cache itself ([`Cache`], with "has it listed once"), a
//! stream of changes with the object before and after, deletions included ([`Changes`]), and a
//! generation counter that ticks on every event so a task can wait for "it changed"
//! ([`Watched::changes`]).
//!
//! ```text
//!   API server ── watch ──▶ Watch<K> task ──▶ Store<K> (Cache<K>), then ──┬─▶ Change { old, new } to every subscriber
//!                                                                         ├─▶ applied objects (optional channel)
//!                                                                         ├─▶ synced ← first list complete
//!                                                                         └─▶ generation tick
//! ```
//!
//! A [`Watch`] is the watch before it starts: subscribe to its changes there, so the first list
//! is not missed; [`Watch::start`] spawns its task and gives the [`Watched`] handle. The task
//! lives as long as a clone of that handle does: dropping the last one aborts it, which closes
//! the watch request (a daemon's shutdown, a controller losing its lease, a lab agent stopping
//! all end their watches). Should it end or panic before, [`Watched::stopped`] says so and the
//! error is logged: the cache would silently stop changing. Views ([`Cache`], [`Changes`]) do
//! not keep it running.
//!
//! A relist (the watch expired and listed again) is turned into the changes it implies,
//! deletions included ([`change`]), so a subscriber never misses that something went.

mod change;
mod changes;
mod own_writes;
#[cfg(test)]
mod tests;

use std::fmt::Debug;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Resource};
use tokio::sync::{broadcast, mpsc, watch};
use tracing::Instrument;

pub use change::Change;
pub use changes::{CAPACITY, Cache, Changes, NotSynced};
pub use own_writes::OwnWrites;

/// A watch of one kind, not started yet: take its cache and subscribe to its changes, then
/// [`Watch::start`] it.
#[must_use = "a Watch does nothing until started"]
pub struct Watch<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    api: Api<K>,
    config: watcher::Config,
    applied: Option<mpsc::UnboundedSender<Arc<K>>>,
    writer: Writer<K>,
    cache: Cache<K>,
    synced: watch::Sender<bool>,
    tick: watch::Sender<u64>,
    changes: broadcast::Sender<Change<K>>,
}

impl<K> Watch<K>
where
    K: Resource + Clone + Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Debug + Unpin + Send + Sync,
{
    /// A watch of every object `api` reaches, listed from the API server's watch cache (any
    /// resource version, as informers do: no quorum read of etcd per relist).
    pub fn new(api: Api<K>) -> Self {
        let writer = Writer::default();
        let (synced, synced_rx) = watch::channel(false);
        let (tick, _) = watch::channel(0u64);
        let (changes, _) = broadcast::channel(CAPACITY);
        Self {
            api,
            config: watcher::Config::default().any_semantic(),
            applied: None,
            cache: Cache {
                store: writer.as_reader(),
                synced: synced_rx,
            },
            writer,
            synced,
            tick,
            changes,
        }
    }

    /// Watches with `config` instead (selectors, list semantics).
    pub fn config(mut self, config: watcher::Config) -> Self {
        self.config = config;
        self
    }

    /// Only the objects `selector` (a field selector) matches.
    pub fn fields(mut self, selector: &str) -> Self {
        self.config = self.config.fields(selector);
        self
    }

    /// Every object a watch event applies (listed or changed, not deleted) is also sent to
    /// `applied`.
    pub fn applied(mut self, applied: mpsc::UnboundedSender<Arc<K>>) -> Self {
        self.applied = Some(applied);
        self
    }

    /// The cache, empty until the watch starts and lists.
    pub fn cache(&self) -> Cache<K> {
        self.cache.clone()
    }

    /// A new subscriber: every change from the first list on.
    pub fn subscribe(&self) -> Changes<K> {
        Changes {
            rx: self.changes.subscribe(),
            store: self.cache.store.clone(),
        }
    }

    /// Starts the watch's task on the current runtime (in the current span); it runs until the
    /// last clone of the returned handle is dropped.
    pub fn start(self) -> Watched<K> {
        let Self {
            api,
            config,
            applied,
            writer,
            cache,
            synced,
            tick,
            changes,
        } = self;
        let generation = tick.subscribe();
        let weak_changes = changes.downgrade();
        let (stopped_tx, stopped) = watch::channel(None);
        let kind = K::kind(&K::DynamicType::default()).into_owned();
        let feed = Feed {
            writer,
            store: cache.store.clone(),
            changes,
            applied,
            synced,
            tick,
        };
        let watching = feed.run(watcher(api, config).default_backoff(), kind.clone());
        let task = tokio::spawn(
            async move {
                let cause = match AssertUnwindSafe(watching).catch_unwind().await {
                    Ok(()) => "ended".to_owned(),
                    Err(panic) => {
                        format!("panicked: {}", crate::supervisor::panic_message(panic.as_ref()))
                    }
                };
                tracing::error!(%kind, %cause, "watch task stopped; the cache no longer changes");
                stopped_tx.send_replace(Some(cause));
            }
            .in_current_span(),
        );
        Watched {
            shared: Arc::new(Shared {
                cache,
                generation,
                changes: weak_changes,
                stopped,
                task,
            }),
        }
    }
}

/// What the watch's task writes to.
struct Feed<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    writer: Writer<K>,
    store: Store<K>,
    changes: broadcast::Sender<Change<K>>,
    applied: Option<mpsc::UnboundedSender<Arc<K>>>,
    synced: watch::Sender<bool>,
    tick: watch::Sender<u64>,
}

impl<K> Feed<K>
where
    K: Resource + Clone + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    /// Applies every event in order: cache first, then the changes it made, the applied object,
    /// the sync signal, and the tick last — so whoever wakes on any of them reads a cache that
    /// already holds the event.
    async fn run(
        mut self,
        events: impl futures::Stream<Item = Result<Event<K>, watcher::Error>>,
        kind: String,
    ) {
        let mut before_relist = None;
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    for change in change::apply(&mut self.writer, &self.store, &mut before_relist, &event) {
                        // No subscriber is fine: nobody listens to this kind's changes.
                        let _ = self.changes.send(change);
                    }
                    if let (Some(tx), Event::Apply(obj) | Event::InitApply(obj)) = (&self.applied, &event) {
                        let _ = tx.send(Arc::new(obj.clone()));
                    }
                    if matches!(event, Event::InitDone) {
                        self.synced.send_replace(true);
                    }
                }
                Err(e) => tracing::warn!(%kind, error = %e, "watch failed; retrying with backoff"),
            }
            self.tick.send_modify(|g| *g += 1);
        }
    }
}

/// What every clone of a [`Watched`] shares; its drop (the last clone's) ends the watch.
struct Shared<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    cache: Cache<K>,
    generation: watch::Receiver<u64>,
    /// Weak: the task holds the only sender, so subscribers' streams end with it.
    changes: broadcast::WeakSender<Change<K>>,
    /// The task's cause of stopping, once it stopped by itself.
    stopped: watch::Receiver<Option<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Resource + 'static> Drop for Shared<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        // Dropping the watch future closes its request: the API server sees the watch end.
        self.task.abort();
    }
}

/// A started watch: its cache, its changes and its counter. Clones share one watch, which
/// stops when the last clone is dropped.
#[must_use = "dropping the last handle stops the watch"]
pub struct Watched<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    shared: Arc<Shared<K>>,
}

impl<K: Resource + 'static> Clone for Watched<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K> Watched<K>
where
    K: Resource + Clone + Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Debug + Unpin + Send + Sync,
{
    /// Starts watching `api` (narrowed by `fields`, a field selector) on the current runtime.
    /// Every object applied is also sent to `applied`, when given. Short for [`Watch::new`],
    /// then [`Watch::start`]. The task runs until the last clone is dropped; should it end or
    /// panic before, that is logged at error level and [`Self::stopped`] says so (a daemon puts
    /// it in `/livez` with [`crate::Supervisor::also_check`]): the cache would silently stop
    /// changing.
    pub fn start(
        api: Api<K>,
        fields: Option<String>,
        applied: Option<mpsc::UnboundedSender<Arc<K>>>,
    ) -> Self {
        let mut watch = Watch::new(api);
        if let Some(fields) = fields {
            watch = watch.fields(&fields);
        }
        if let Some(applied) = applied {
            watch = watch.applied(applied);
        }
        watch.start()
    }

    /// `Some(cause)` once the watch task stopped (`ended`, or `panicked: …`).
    pub fn stopped(&self) -> Option<String> {
        self.shared.stopped.borrow().clone()
    }

    /// Completes when the watch task stops by itself, with the cause (as [`Self::stopped`]).
    pub async fn ended(&self) -> String {
        let mut stopped = self.shared.stopped.clone();
        match stopped.wait_for(Option::is_some).await {
            Ok(cause) => cause.clone().unwrap_or_default(),
            // Not reached: the task is aborted only once no handle is left to wait here.
            Err(_) => "aborted".to_owned(),
        }
    }

    /// Waits until the first list is in the cache (or `timeout` passes; `false` then).
    pub async fn synced(&self, timeout: Duration) -> bool {
        // Our own signal: `Store::wait_until_ready` wakes only its latest waiter.
        tokio::time::timeout(timeout, self.shared.cache.synced())
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The cached object.
    pub fn get(&self, name: &str, namespace: Option<&str>) -> Option<Arc<K>> {
        let mut key = ObjectRef::<K>::new(name);
        if let Some(ns) = namespace {
            key = key.within(ns);
        }
        self.shared.cache.store.get(&key)
    }

    /// Every cached object.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.shared.cache.store.state()
    }

    /// A receiver that is marked changed on every event.
    pub fn changes(&self) -> watch::Receiver<u64> {
        let mut rx = self.shared.generation.clone();
        rx.mark_unchanged();
        rx
    }

    /// The cache with its sync signal (a view: it does not keep the watch running).
    pub fn cache(&self) -> Cache<K> {
        self.shared.cache.clone()
    }

    /// The reflector store itself.
    pub fn store(&self) -> Store<K> {
        self.shared.cache.store.clone()
    }

    /// A new subscriber: every change from now on (subscribe on the [`Watch`] before it starts
    /// not to miss the first list). Ends at once if the watch already stopped.
    pub fn subscribe(&self) -> Changes<K> {
        let rx = match self.shared.changes.upgrade() {
            Some(tx) => tx.subscribe(),
            None => broadcast::channel(1).1,
        };
        Changes {
            rx,
            store: self.shared.cache.store.clone(),
        }
    }
}
