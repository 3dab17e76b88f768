//! kube-ovn-speaker: announces pod, subnet, Service and EIP prefixes to top-of-rack routers over
//! BGP. This crate is, for now, the pure BGP core ([`bgp`]); the tokio driver and the Kubernetes
//! side come later.

pub mod announce;
pub mod bfd;
pub mod bgp;
pub mod config;
#[doc(hidden)]
pub mod fuzzing;
