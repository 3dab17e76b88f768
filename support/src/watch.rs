//! Views of the API: a cache per kind, fed by a watch, with a generation counter
//! that ticks on every event so ADD can wait for "the pod changed" instead of polling.

use std::fmt::Debug;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
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
    /// Why the watch task stopped, if it did (it should run as long as the process).
    stopped: Arc<Mutex<Option<String>>>,
}

impl<K> Watched<K>
where
    K: Resource + Clone + Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Debug + Unpin,
{
    /// Starts watching `api` (narrowed by `fields`, a field selector) on the current runtime.
    /// Every object applied is also sent to `applied`, when given. The task runs until the
    /// runtime stops; should it end or panic before, that is logged at error level and
    /// [`Self::stopped`] says so (a daemon puts it in `/livez` with
    /// [`crate::Supervisor::also_check`]): the cache would silently stop changing.
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
        let stopped = Arc::new(Mutex::new(None));
        let kind = K::kind(&K::DynamicType::default()).into_owned();
        let task = async move {
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
        };
        let record = stopped.clone();
        tokio::spawn(async move {
            let cause = match AssertUnwindSafe(task).catch_unwind().await {
                Ok(()) => "ended".to_owned(),
                Err(panic) => format!("panicked: {}", crate::supervisor::panic_message(panic.as_ref())),
            };
            tracing::error!(%kind, %cause, "watch task stopped; the cache no longer changes");
            *record.lock().unwrap_or_else(PoisonError::into_inner) = Some(cause);
        });
        Self {
            store: reader,
            generation,
            synced,
            stopped,
        }
    }

    /// `Some(cause)` once the watch task stopped (`ended`, or `panicked: …`).
    pub fn stopped(&self) -> Option<String> {
        self.stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::{Request, Response};
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    #[tokio::test]
    async fn a_watch_task_that_panics_says_so() {
        // An API client whose every response panics; kube's client polls the response future
        // in the caller, so the panic happens inside the watch task.
        async fn broken(
            _: Request<kube::client::Body>,
        ) -> Result<Response<axum::body::Body>, std::convert::Infallible> {
            panic!("the API client broke")
        }
        let service = tower::service_fn(broken);
        let client = kube::Client::new(service, "default");
        let pods: Watched<Pod> = Watched::start(Api::all(client), None, None);
        let cause = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Some(cause) = pods.stopped() {
                    return cause;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the watch task reported its end within 5 s");
        assert_eq!(cause, "panicked: the API client broke");
        let supervisor = crate::Supervisor::new();
        supervisor.also_check("pods-watch", move || pods.stopped());
        assert_eq!(
            supervisor.check().unwrap_err(),
            "background tasks stopped: task pods-watch panicked: the API client broke"
        );
    }
}
