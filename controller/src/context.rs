//! What every reconciler shares: clients, the IPAM state, the object caches, metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::runtime::events::{Recorder, Reporter};

use k8s_openapi::api::core::v1::Pod;

use crate::config::Config;
use crate::informer::OwnWrites;
use crate::ipam::Ipam;
use crate::metrics::Metrics;
use crate::ovn::Nb;
use crate::stores::Stores;

/// Per-key mutual exclusion (Kube-OVN's `podKeyMutex`): the reconciler and the deletion path of
/// one NIC key (`<pod>.<ns>`) never interleave, so a release cannot undo a successor's fresh
/// allocation halfway through. Entries are removed when the last holder or waiter is done.
#[derive(Debug, Default)]
pub struct KeyLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

pub struct KeyGuard<'a> {
    locks: &'a KeyLocks,
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl KeyLocks {
    pub async fn lock(&self, key: &str) -> KeyGuard<'_> {
        let m = self
            .locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default()
            .clone();
        KeyGuard {
            locks: self,
            key: key.to_owned(),
            guard: Some(m.lock_owned().await),
        }
    }

    /// Keys currently held or awaited (for tests of the clean-up).
    pub fn len(&self) -> usize {
        self.locks.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.locks.lock().unwrap_or_else(PoisonError::into_inner);
        // Only the map holds it now: nobody waits, so the entry can go.
        if map.get(&self.key).is_some_and(|m| Arc::strong_count(m) == 1) {
            map.remove(&self.key);
        }
    }
}

pub struct Context {
    pub config: Config,
    pub kube: kube::Client,
    pub nb: Nb,
    pub ipam: Mutex<Ipam>,
    pub metrics: Metrics,
    pub stores: Stores,
    pub recorder: Recorder,
    /// Pod NIC keys being reconciled or released.
    pub pod_locks: KeyLocks,
    /// The pod versions our own patches produced (their watch events reconcile nothing).
    pub pod_writes: Arc<OwnWrites<Pod>>,
}

impl Context {
    /// `ipam` is what the durable records say (see [`crate::reconcile::ipam_rebuild`]), rebuilt
    /// from `stores` once they have listed: a context exists only once both are true.
    pub fn new(
        config: Config,
        kube: kube::Client,
        nb: Nb,
        metrics: Metrics,
        stores: Stores,
        ipam: Ipam,
        pod_writes: Arc<OwnWrites<Pod>>,
    ) -> Self {
        let reporter = Reporter {
            controller: "kube-ovn-controller".into(),
            instance: Some(config.identity.clone()),
        };
        let recorder = Recorder::new(kube.clone(), reporter);
        Self {
            config,
            kube,
            nb,
            ipam: Mutex::new(ipam),
            metrics,
            stores,
            recorder,
            pod_locks: KeyLocks::default(),
            pod_writes,
        }
    }

    /// The IPAM state. Held only for pure IPAM calls, never across an await.
    pub fn ipam(&self) -> MutexGuard<'_, Ipam> {
        self.ipam.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
