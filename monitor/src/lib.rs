//! kube-ovn-monitor: OVN NB/SB/northd status and RAFT metrics with Kube-OVN's names, a sidecar of
//! ovn-central. Every `--ovs.poll-interval` it asks each database's control socket for
//! `cluster/status` and its storage status, ovn-northd for its status, measures the database and
//! log files, and reads logical switches, ports and chassis from NB and SB replicas; `/metrics`
//! serves the last collection on `--metrics-port` (10661), with `/livez`, `/readyz`, `/healthz`.
//!
//! - [`cluster_status`], [`inventory`], [`metrics`]: pure parsing, joining and gauges.
//! - [`appctl`], [`collect`]: the I/O (ovn-appctl, files, OVSDB clients).

pub mod appctl;
pub mod cluster_status;
pub mod collect;
pub mod flags;
pub mod inventory;
pub mod metrics;
