//! kube-ovn-pinger: network-quality probes from every node (the other pingers' pods, the nodes,
//! external addresses, internal and external DNS, the API server, `--target-ip-ports`, OVS and
//! ovn-controller liveness and port-binding consistency) with Kube-OVN's flags and metric names.
//!
//! - [`config`]: the flags and their checks (pure).
//! - [`icmp`]: the echo codec (pure) and an async ping over IPv4 and IPv6.
//! - [`metrics`]: Kube-OVN's series.
//! - [`ovs`]: daemon liveness over unixctl, port-binding comparison.
//! - [`probes`]: DNS, TCP, UDP, the API server, the conn-check answerers.
//! - [`round`]: one round of every probe, and the job's exit code.

pub mod config;
pub mod icmp;
pub mod metrics;
pub mod ovs;
pub mod probes;
pub mod round;
