//! kube-ovn-speaker: announces pod, subnet, Service and EIP prefixes to top-of-rack routers over
//! BGP. The pure BGP core is [`bgp`] (codec, session state machine, Adj-RIB-Out: no I/O); the
//! tokio [`driver`] owns sockets, timers and a task per peer around it; [`bfd`] watches the
//! path; [`announce`] (pure) turns the cluster's objects into prefixes; [`config`] holds
//! Kube-OVN's flags; [`crd`] is the `BgpPeer` resource (declarative peers); [`metrics`] the
//! Prometheus metrics under Kube-OVN's names; [`run`] is the daemon that ties them to the API.

pub mod announce;
pub mod bfd;
pub mod bgp;
pub mod config;
pub mod crd;
pub mod driver;
#[doc(hidden)]
pub mod fuzzing;
pub mod metrics;
pub mod policy;
pub mod run;
