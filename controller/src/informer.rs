//! One watch per kind, shared: the controller's view of [`kube_ovn_support::watch`]. An
//! [`Informer`] keeps a kind's cache and tells every subscriber what changed, with the object
//! before and after, so each decides whether the change matters to it (a status write matters
//! to nobody but the status's readers).
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

use std::fmt::Debug;

use kube::Resource;
use kube::api::Api;
use kube_ovn_support::Watch;

pub use kube_ovn_support::watch::{CAPACITY, Cache, Change, Changes, OwnWrites};

/// One watch of a kind: its cache and its subscribers. Subscribe before [`Informer::run`] starts,
/// or the first list's changes are missed.
pub struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    watch: Watch<K>,
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// A watch over every `K` in the cluster (all namespaces).
    pub fn new(kube: &kube::Client) -> Self {
        Self {
            watch: Watch::new(Api::all(kube.clone())),
        }
    }

    /// A watch of one object: `name` in `namespace` (a field selector, so the cache holds that
    /// object only, and the grant needed is list/watch in that namespace).
    pub fn named(kube: &kube::Client, namespace: &str, name: &str) -> Self
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
    {
        Self {
            watch: Watch::new(Api::namespaced(kube.clone(), namespace))
                .fields(&format!("metadata.name={name}")),
        }
    }

    pub fn cache(&self) -> Cache<K> {
        self.watch.cache()
    }

    /// A new subscriber: every change from now on.
    pub fn changes(&self) -> Changes<K> {
        self.watch.subscribe()
    }

    /// Starts the watch when first polled and completes if it stops (it retries with backoff;
    /// it stops only on a panic); dropping the future ends the watch.
    pub async fn run(self) {
        let watched = self.watch.start();
        watched.ended().await;
    }
}
