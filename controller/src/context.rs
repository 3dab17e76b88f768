//! What every reconciler shares: clients, the IPAM state, the object caches, metrics.

use std::sync::{Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube_ovn_api::crd::{IPPool, Ip, Subnet, Vpc};

use crate::config::Config;
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
}

pub struct Context {
    pub config: Config,
    pub kube: kube::Client,
    pub nb: Nb,
    pub ipam: Mutex<Ipam>,
    pub metrics: Metrics,
    pub stores: Stores,
    pub recorder: Recorder,
}

impl Context {
    pub fn new(
        config: Config,
        kube: kube::Client,
        nb: Nb,
        ipam: Ipam,
        metrics: Metrics,
        stores: Stores,
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
        }
    }

    /// The IPAM state. Held only for pure IPAM calls, never across an await.
    pub fn ipam(&self) -> MutexGuard<'_, Ipam> {
        self.ipam.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
