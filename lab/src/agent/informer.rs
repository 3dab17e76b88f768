//! The shape of the agent's controllers (the LoadBalancer IP allocator): caches of the kinds a
//! controller reads (views of [`kube_ovn_support::watch`]), and a *pass* over the whole cached
//! state whenever any of them changed (level-triggered: a pass computes what should be from what
//! is, so a missed event or a restart converges at the next pass). Events arriving while a pass
//! runs are coalesced into one next pass. A pass that could not finish some write asks to be run again, with a backoff, even
//! if nothing changes.
//!
//! The caches lag the controller's own writes; a controller keeps what it wrote until the cache
//! shows it (the allocator's pending addresses), and conflicts (409) from writes based on a stale
//! cache are expected and retried by the next pass.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use kube_ovn_support::{Watch, Watched};
use serde::de::DeserializeOwned;

/// A cache of one kind and a stream yielding `()` per watch event; a view of a
/// [`kube_ovn_support::Watched`], whose watch ends when the stream is dropped.
pub struct Informer<K: Resource + 'static>
where
    K::DynamicType: Hash + Eq + Clone,
{
    pub store: Store<K>,
    pub changes: BoxStream<'static, ()>,
}

/// Starts the watch (its task ends with the returned stream).
pub fn informer<K>(api: Api<K>, config: watcher::Config) -> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let watched = Watch::new(api).config(config).start();
    let store = watched.store();
    let ticks = watched.changes();
    // The stream holds the handle: the watch lives as long as whoever polls it.
    let changes = futures::stream::unfold(
        (watched, ticks),
        |(watched, mut ticks): (Watched<K>, _)| async move {
            ticks.changed().await.ok()?;
            Some(((), (watched, ticks)))
        },
    )
    .boxed();
    Informer { store, changes }
}

/// Whether a cache has had its first complete list.
pub fn ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Hash + Eq + Clone,
{
    store.wait_until_ready().now_or_never().is_some()
}

/// What a pass reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Everything written (or nothing to do).
    Done,
    /// Some write failed: run again after a backoff.
    Retry,
}

const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(10);

/// A controller run by [`run_passes`].
pub trait Passes: Send {
    /// Whether every cache the pass reads has had its first list.
    fn ready(&self) -> bool;
    /// One pass over the cached state.
    fn pass(&mut self) -> impl Future<Output = Pass> + Send;
}

/// Runs a pass after every burst of changes once the controller is ready, and again after a
/// backoff while it asks to retry. Never returns (the watch streams do not end); drop it to stop.
pub async fn run_passes(mut changes: BoxStream<'static, ()>, controller: &mut impl Passes) {
    let mut retry: Option<Duration> = None;
    loop {
        let wait = retry.unwrap_or(Duration::MAX);
        tokio::select! {
            change = changes.next() => {
                if change.is_none() {
                    return;
                }
            }
            () = tokio::time::sleep(wait), if retry.is_some() => {}
        }
        // Coalesce whatever else already arrived into this pass.
        while let Some(Some(())) = changes.next().now_or_never() {}
        if !controller.ready() {
            continue;
        }
        retry = match controller.pass().await {
            Pass::Done => None,
            Pass::Retry => Some(retry.map_or(RETRY_FIRST, |d| (d * 2).min(RETRY_MAX))),
        };
    }
}

/// The cached objects oldest first (then by namespace and name): the order in which competing
/// claims are honoured, as the real controllers do.
pub fn oldest_first<K>(store: &Store<K>) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut objects = store.state();
    objects.sort_by_key(|o| (o.creation_timestamp().map(|t| t.0), o.namespace(), o.name_any()));
    objects
}

/// Warnings already recorded, by object uid and message, so a pass does not repeat them.
#[derive(Debug, Default)]
pub struct WarnedOnce(HashSet<(String, String)>);

impl WarnedOnce {
    /// Forgets the warnings of objects whose uids are not in `live`.
    pub fn keep_only(&mut self, live: &HashSet<&str>) {
        self.0.retain(|(uid, _)| live.contains(uid.as_str()));
    }

    /// Whether `message` about `uid` is news (and remembers it).
    pub fn first_time(&mut self, uid: &str, message: &str) -> bool {
        self.0.insert((uid.to_owned(), message.to_owned()))
    }
}
