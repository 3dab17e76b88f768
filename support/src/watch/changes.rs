//! The views a [`super::Watch`] gives: its cache with the sync signal ([`Cache`]), and a
//! subscriber's stream of changes ([`Changes`]) with the filters the controllers build their
//! triggers from.
//!
//! Subscribers each have a bounded queue ([`CAPACITY`]); one that falls behind is told it lagged
//! instead of holding the watch up or growing without bound, and then looks at everything again
//! — a level-triggered controller loses nothing by that.

use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::Store;
use tokio::sync::{broadcast, watch};

use super::change::Change;
use super::own_writes::OwnWrites;

/// Changes queued per subscriber before it is considered lagging.
pub const CAPACITY: usize = 4096;

/// The watch stopped before its first list was complete: the cache will never be whole.
#[derive(Debug, thiserror::Error)]
#[error("the {kind} watch stopped before it listed")]
pub struct NotSynced {
    /// The watched kind.
    pub kind: String,
}

/// A kind's cache and whether it has listed once. Made only by a [`super::Watch`], so every
/// cache comes with its sync signal. Reading it does not keep the watch running.
pub struct Cache<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub(super) store: Store<K>,
    pub(super) synced: watch::Receiver<bool>,
}

impl<K: Resource + 'static> Clone for Cache<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K: Resource + Clone + 'static> Cache<K>
where
    K::DynamicType: Default + Eq + Hash + Clone,
{
    /// Waits until the cache holds its first full list; an error if the watch stopped first.
    pub async fn synced(&self) -> Result<(), NotSynced> {
        self.synced
            .clone()
            .wait_for(|synced| *synced)
            .await
            .map(|_| ())
            .map_err(|_| NotSynced {
                kind: K::kind(&K::DynamicType::default()).into_owned(),
            })
    }

    /// Whether the first full list is in (without waiting).
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// The store, for a controller to read its objects from.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }
}

impl<K: Resource + 'static> std::ops::Deref for Cache<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    type Target = Store<K>;

    fn deref(&self) -> &Store<K> {
        &self.store
    }
}

/// A subscriber's changes: every change after it subscribed, each sent once the cache holds it.
/// The stream ends when the watch stops.
pub struct Changes<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub(super) rx: broadcast::Receiver<Change<K>>,
    pub(super) store: Store<K>,
}

/// One item of a subscriber's stream.
enum Item<K> {
    Change(Change<K>),
    /// Changes were dropped because the subscriber fell behind.
    Lagged,
}

impl<K> Changes<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
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
    ) -> impl Stream<Item = Arc<K>> + Send + 'static
    where
        K: PartialEq,
        K::DynamicType: Default,
    {
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
