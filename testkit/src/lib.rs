//! Test fixtures that run the real thing: `ovsdb-server` for OVN_Northbound and Open_vSwitch,
//! single or as a 3-member RAFT cluster, each in its own temporary directory with unix sockets,
//! started as child processes and stopped by PID (never by name); OVN central; and "nodes" as
//! network namespaces with their own ovsdb-server, ovs-vswitchd (userspace datapath) and
//! ovn-controller, joined by a veth underlay.
//!
//! A fixture whose program is missing fails loudly with the command that installs it; nothing
//! here skips.
//!
//! The lab (`kube-ovn-lab`) runs the same machinery for real and depends on this crate
//! normally: one [`run`] for commands, one process-by-PID manager ([`process`], under
//! [`Daemon`] here and the lab's detached processes there), one netns runner and one
//! underlay bridge.

mod command;
mod daemon;
pub mod drill;
pub mod fabric;
pub mod kube_ovn_argv;
pub mod module_graph;
pub mod netns;
mod ovn;
mod ovs_node;
mod ovsdb;
mod ports;
pub mod process;
mod spawns;
pub mod wait;

pub use command::{CommandError, run};
pub use daemon::Daemon;
pub use fabric::{Capture, FABRIC_BRIDGE, Frame, VlanRouter};
pub use netns::{Netns, ping_from, tcp_transfer, wait_ping_from};
pub use ovn::{OvnCentral, Trace};
pub use ovs_node::{OvsNode, UNDERLAY_BRIDGE, add_underlay_bridge};
pub use ovsdb::{NB_SCHEMA, OvsdbServer, RaftCluster, SB_SCHEMA, VSWITCH_SCHEMA};
pub use ports::free_port;
pub use spawns::{SpawnAudit, audit_spawns};
pub use wait::{Timeout, wait_for, wait_until, wait_until_async};

/// Logs of the code under test into the test's captured output, filtered by `RUST_LOG`
/// (`RUST_LOG=kube_ovn_ovsdb=debug` shows the OVSDB client's view). Safe to call from every test.
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}
