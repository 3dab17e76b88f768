//! What every reconciler shares: clients, the IPAM state, the object caches, metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube_ovn_api::crd::{IPPool, Ip, Subnet, Vpc};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::ipam::Ipam;
use crate::metrics::Metrics;
use crate::ovn::Nb;

/// Read-only caches of the watched kinds (kept by the controllers' watches).
#[derive(Clone)]
pub struct Stores {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    /// Nodes as the subnet controller's node trigger saw them: updated before that trigger fires,
    /// so a subnet reconcile never reads an older node than the change that started it (the node
    /// controller's own cache may lag behind it).
    pub subnet_nodes: Store<Node>,
    pub namespaces: Store<Namespace>,
    pub subnets: Store<Subnet>,
    pub vpcs: Store<Vpc>,
    pub ippools: Store<IPPool>,
    pub ips: Store<Ip>,
    /// One signal per cache, `true` once it has listed (see [`crate::reconcile::controller`]).
    pub synced: Vec<tokio::sync::watch::Receiver<bool>>,
}

impl Stores {
    /// Waits until every cache has its first full list. A reconciler that read a cache before
    /// then would take "absent" for "gone": choose the default subnet for a pod whose namespace
    /// is bound to another, or collect a live pod's port.
    pub async fn ready(&self) -> Result<()> {
        for synced in &self.synced {
            let mut s = synced.clone();
            s.wait_for(|ready| *ready)
                .await
                .map_err(|_| Error::NotReady("a cache stopped before it synced".into()))?;
        }
        Ok(())
    }
}

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
                let (ipam, _) = crate::reconcile::startup::rebuild_ipam(&self.config, &self.stores, &self.nb);
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
