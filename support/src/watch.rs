//! Views of the API: a cache per kind, fed by a watch, with a generation counter
//! that ticks on every event so ADD can wait for "the pod changed" instead of polling.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Resource};
use tokio::sync::{mpsc, watch};

/// A watched kind: its cache, and a counter that moves on every change.
#[derive(Clone)]
pub struct Watched<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    generation: watch::Receiver<u64>,
    synced: watch::Receiver<bool>,
}

impl<K> Watched<K>
where
    K: Resource + Clone + Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Debug + Unpin,
{
    /// Starts watching `api` (narrowed by `fields`, a field selector) on the current runtime.
    /// Every object applied is also sent to `applied`, when given. The task ends with the
    /// runtime or when the receiver of `applied` is gone.
    pub fn start(
        api: Api<K>,
        fields: Option<String>,
        applied: Option<mpsc::UnboundedSender<Arc<K>>>,
    ) -> Self {
        let (reader, writer) = reflector::store();
        let (synced_tx, synced) = watch::channel(false);
        let (tick, generation) = watch::channel(0u64);
        let mut config = watcher::Config::default().any_semantic();
        if let Some(fields) = fields {
            config = config.fields(&fields);
        }
        let stream = watcher(api, config).default_backoff().reflect(writer);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                        if let Some(tx) = &applied {
                            let _ = tx.send(Arc::new(obj));
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        synced_tx.send_replace(true);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "watch failed; retrying with backoff"),
                }
                tick.send_modify(|g| *g += 1);
            }
        });
        Self {
            store: reader,
            generation,
            synced,
        }
    }

    /// Waits until the first list is in the cache (or `timeout` passes; `false` then).
    pub async fn synced(&self, timeout: Duration) -> bool {
        // Our own signal: `Store::wait_until_ready` wakes only its latest waiter.
        let mut synced = self.synced.clone();
        tokio::time::timeout(timeout, synced.wait_for(|s| *s))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The cached object.
    pub fn get(&self, name: &str, namespace: Option<&str>) -> Option<Arc<K>> {
        let mut key = ObjectRef::<K>::new(name);
        if let Some(ns) = namespace {
            key = key.within(ns);
        }
        self.store.get(&key)
    }

    /// Every cached object.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// A receiver that is marked changed on every event.
    pub fn changes(&self) -> watch::Receiver<u64> {
        let mut rx = self.generation.clone();
        rx.mark_unchanged();
        rx
    }
}
