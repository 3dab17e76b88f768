//! What every reconciler shares: clients, the IPAM state, the object caches, metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::runtime::events::{Recorder, Reporter};

use crate::config::Config;
use crate::error::Result;
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
    /// Set once IPAM has been rebuilt from the filled caches (see [`Context::ready`]).
    ipam_rebuilt: tokio::sync::OnceCell<()>,
    pub metrics: Metrics,
    pub stores: Stores,
    pub recorder: Recorder,
    /// Pod NIC keys being reconciled or released.
    pub pod_locks: KeyLocks,
}

impl Context {
    pub fn new(config: Config, kube: kube::Client, nb: Nb, metrics: Metrics, stores: Stores) -> Self {
        let reporter = Reporter {
            controller: "kube-ovn-controller".into(),
            instance: Some(config.identity.clone()),
        };
        let recorder = Recorder::new(kube.clone(), reporter);
        Self {
            config,
            kube,
            nb,
            ipam: Mutex::new(Ipam::new()),
            ipam_rebuilt: tokio::sync::OnceCell::new(),
            metrics,
            stores,
            recorder,
            pod_locks: KeyLocks::default(),
        }
    }

    /// Waits until every cache is filled, then (once, for whoever asks first) rebuilds IPAM from
    /// them — the IP CRs, the northbound ports, the pods' and nodes' annotations — before anyone
    /// allocates or releases. Every reconciler, the collector and the deletion watches call this
    /// first. Reading the caches rather than listing again saves two lists of every pod and IP CR
    /// at start-up.
    pub async fn ready(&self) -> Result<()> {
        self.stores.ready().await?;
        self.ipam_rebuilt
            .get_or_init(|| async {
                let (ipam, _) =
                    crate::reconcile::ipam_rebuild::rebuild_ipam(&self.config, &self.stores, &self.nb);
                *self.ipam() = ipam;
            })
            .await;
        Ok(())
    }

    /// The IPAM state. Held only for pure IPAM calls, never across an await.
    pub fn ipam(&self) -> MutexGuard<'_, Ipam> {
        self.ipam.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
