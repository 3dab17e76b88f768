//! The controller's errors; every one names the object or flag it is about.

use kube_ovn_api::annotations::AnnotationError;

use crate::ipam::IpamError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("OVN northbound: {0}")]
    Ovn(#[from] kube_ovn_ovsdb::Error),
    #[error("OVN northbound row: {0}")]
    Decode(#[from] kube_ovn_ovsdb::DecodeError),
    #[error(transparent)]
    Ipam(#[from] IpamError),
    #[error(transparent)]
    Annotation(#[from] AnnotationError),
    #[error(transparent)]
    Flag(#[from] crate::config::FlagError),
    /// Input that will not work until someone changes it (a bad spec): reported, not retried fast.
    #[error("{0}")]
    Invalid(String),
    /// Something another reconciler or the cluster has not done yet: retried soon.
    #[error("waiting: {0}")]
    NotReady(String),
    #[error("leader election: {0}")]
    Lease(String),
    #[error("metrics and health endpoint {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
