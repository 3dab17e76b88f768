//! What every reconciler shares: clients, the IPAM state, the object caches, metrics.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::runtime::events::{Recorder, Reporter};

use k8s_openapi::api::core::v1::Pod;

use kube_ovn_support::KeyLocks;

use crate::config::Config;
use crate::informer::OwnWrites;
use crate::ipam::Ipam;
use crate::metrics::Metrics;
use crate::ovn::Nb;
use crate::sb::Sb;
use crate::stores::Stores;

pub struct Context {
    pub config: Config,
    pub kube: kube::Client,
    pub nb: Nb,
    /// The southbound replica (gateway ports' chassis); [`Sb::disabled`] unless
    /// [`Context::with_sb`] gave one.
    pub sb: Sb,
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
    /// `ipam` is what the durable records say (see [`crate::reconcile::ip::ipam_rebuild`]), rebuilt
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
            sb: Sb::disabled(),
            ipam: Mutex::new(ipam),
            metrics,
            stores,
            recorder,
            pod_locks: KeyLocks::default(),
            pod_writes,
        }
    }

    /// With the southbound replica `sb` (the controller's own, started with the NB client).
    #[must_use]
    pub fn with_sb(mut self, sb: Sb) -> Self {
        self.sb = sb;
        self
    }

    /// The IPAM state. Held only for pure IPAM calls, never across an await.
    pub fn ipam(&self) -> MutexGuard<'_, Ipam> {
        self.ipam.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
