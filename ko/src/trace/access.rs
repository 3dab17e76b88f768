//! The cluster's OVN and OVS as `trace` and `diagnose` reach them: commands in the ovn-central
//! pod (its databases' sockets under `/var/run/ovn`, as `deploy/image/start-ovn-central.sh`
//! makes them) and in a node's ovs-ovn pod (container `openvswitch`; ovs-vswitchd's control
//! socket is `/run/openvswitch/ovs-vswitchd.ctl`, given explicitly by `start-ovs.sh`, so
//! `ovs-appctl` must be told it: the default lookup by PID file finds no socket there).

use serde_json::Value;

use crate::kubectl;

/// ovn-central's container (Kube-OVN's name too).
pub const CENTRAL_CONTAINER: &str = "ovn-central";
/// The ovs-ovn pod's container.
pub const OVS_CONTAINER: &str = "openvswitch";
/// ovs-vswitchd's control socket in the ovs-ovn pod.
pub const VSWITCHD_CTL: &str = "/run/openvswitch/ovs-vswitchd.ctl";
/// ovsdb-server's (the node's Open_vSwitch database) control socket.
pub const OVSDB_CTL: &str = "/run/openvswitch/ovsdb-server.ctl";
/// The southbound database's socket in ovn-central, for ovn-trace.
pub const SB_SOCKET: &str = "unix:/var/run/ovn/ovnsb_db.sock";

/// Runs `command` in a ready ovn-central pod (any member: reads need no leader).
pub fn central(command: &[&str]) -> anyhow::Result<String> {
    let pod = kubectl::ready_pod("ovn-central", None)?;
    kubectl::exec(&pod.name, CENTRAL_CONTAINER, command)
}

/// `ovn-nbctl --no-leader-only --format=json <args>` in ovn-central.
pub fn nbctl_json(args: &[&str]) -> anyhow::Result<String> {
    let mut all = vec!["ovn-nbctl", "--no-leader-only", "--format=json"];
    all.extend_from_slice(args);
    central(&all)
}

/// Runs `command` in the ready ovs-ovn pod of `node`.
pub fn ovs(node: &str, command: &[&str]) -> anyhow::Result<String> {
    let pod = kubectl::ready_pod("ovs", Some(node))?;
    kubectl::exec(&pod.name, OVS_CONTAINER, command)
}

/// An annotation of an object's JSON, empty when absent.
pub fn annotation<'a>(object: &'a Value, key: &str) -> &'a str {
    object["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_default()
}
