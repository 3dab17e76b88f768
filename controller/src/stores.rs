//! The caches of the watched kinds, filled by the controllers' watches and read by every
//! reconciler.

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::runtime::reflector::Store;
use kube_ovn_api::crd::{IPPool, Ip, Subnet, Vpc};

use crate::error::{Error, Result};

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
