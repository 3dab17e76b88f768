//! The ToR's VLAN fabric: its own ovsdb-server and ovs-vswitchd (userspace datapath, state in
//! the ToR's directory, started and stopped by PID like the lab's other daemons) and one bridge,
//! [`TOR_VLAN_BRIDGE`], that plays a datacenter's top-of-rack switch for the nodes' second NIC:
//! - every node's `eth1` ends in a trunk port (no `tag`, no `trunks`: OVS passes every VLAN,
//!   tagged on the wire), as an underlay's uplink is cabled;
//! - [`TOR_VLAN_PORT`], an internal port with `tag=100`, is VLAN 100's gateway (`10.100.0.1`),
//!   the physical router of Kube-OVN's underlay guide; the ToR's kernel routes it;
//! - [`TOR_MGMT_PORT`], an internal access port of VLAN 0 (`tag=0`: untagged frames only), holds
//!   `172.31.0.1`, the nodes' management network on `eth1` (their address there is what an
//!   underlay ProviderNetwork moves onto its bridge).
//!
//! OVS and not the kernel terminates the VLANs: the lab's kernel has no 8021q, and a netdev
//! bridge tags and untags in userspace (`../shared/reference/dataplane.md`).

use super::components::{VSWITCH_SCHEMA, ovs_env};
use super::process::{Enter, Launch};
use super::topology::{TOR_MGMT_PORT, TOR_VLAN_BRIDGE, TOR_VLAN_PORT, Topology, VLAN_ID};

/// The ToR's ovsdb-server, then its ovs-vswitchd, in the ToR's namespace. `OVS_RUNDIR` and
/// friends point at [`Topology::tor_ovs_dir`] (so `ovs-vsctl` and `ovs-appctl` find them
/// there, and nothing of the host's `/run/openvswitch` is used).
pub fn ovs_launches(t: &Topology) -> [Launch; 2] {
    let dir = t.tor_ovs_dir();
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let launch = |component: &str, program: &str, args: Vec<String>| {
        let mut args = args;
        // Logs to stderr, which the lab keeps, never to syslog.
        args.extend(["-vconsole:info".to_owned(), "-vsyslog:off".to_owned()]);
        Launch {
            component: component.into(),
            enter: Enter::Netns(t.tor_netns()),
            program: program.into(),
            args,
            env: ovs_env(&dir),
            log: t.log(component),
        }
    };
    [
        launch(
            "tor-ovsdb-server",
            "ovsdb-server",
            vec![
                path("conf.db"),
                format!("--remote=punix:{}", path("db.sock")),
                format!("--pidfile={}", path("ovsdb-server.pid")),
            ],
        ),
        launch(
            "tor-ovs-vswitchd",
            "ovs-vswitchd",
            vec![
                format!("unix:{}", path("db.sock")),
                // No openvswitch.ko: without this vswitchd tries the kernel datapath.
                "--disable-system".into(),
                format!("--pidfile={}", path("ovs-vswitchd.pid")),
            ],
        ),
    ]
}

/// The database the ToR's ovsdb-server serves: `ovsdb-tool` arguments.
pub fn create_db_args(t: &Topology) -> Vec<String> {
    vec![
        "create".into(),
        t.tor_ovs_dir().join("conf.db").to_string_lossy().into_owned(),
        VSWITCH_SCHEMA.into(),
    ]
}

/// Where the ToR's `ovs-vsctl` connects.
pub fn db_remote(t: &Topology) -> String {
    format!("unix:{}", t.tor_ovs_dir().join("db.sock").display())
}

/// `ovs-vsctl` arguments that make the bridge and its ports in one transaction. Without
/// `--no-wait` it returns once ovs-vswitchd applied it, so the internal ports exist as devices
/// in the ToR's namespace when it returns.
pub fn bridge_args(t: &Topology) -> Vec<String> {
    let mut args: Vec<String> = vec![
        format!("--db={}", db_remote(t)),
        "--timeout=60".into(),
        "--".into(),
        "add-br".into(),
        TOR_VLAN_BRIDGE.into(),
        "--".into(),
        "set".into(),
        "bridge".into(),
        TOR_VLAN_BRIDGE.into(),
        "datapath_type=netdev".into(),
    ];
    for node in &t.nodes {
        args.extend([
            "--".into(),
            "add-port".into(),
            TOR_VLAN_BRIDGE.into(),
            node.trunk_port.clone(),
        ]);
    }
    for (port, tag) in [(TOR_MGMT_PORT, 0), (TOR_VLAN_PORT, VLAN_ID)] {
        args.extend([
            "--".into(),
            "add-port".into(),
            TOR_VLAN_BRIDGE.into(),
            port.into(),
            format!("tag={tag}"),
            "--".into(),
            "set".into(),
            "interface".into(),
            port.into(),
            "type=internal".into(),
        ]);
    }
    args
}

/// `ovs-vsctl` arguments that initialise the fresh database (before ovs-vswitchd starts).
pub fn init_args(t: &Topology) -> Vec<String> {
    vec![
        format!("--db={}", db_remote(t)),
        "--no-wait".into(),
        "init".into(),
    ]
}

/// The directory the ToR's OVS keeps its state in, made if missing.
pub fn make_dir(t: &Topology) -> std::io::Result<()> {
    std::fs::create_dir_all(t.tor_ovs_dir())
}

/// The ToR's OVS database socket: ovsdb-server serves once it accepts connections.
pub fn db_socket(t: &Topology) -> std::path::PathBuf {
    t.tor_ovs_dir().join("db.sock")
}

/// The fabric made on a running ovs-vswitchd: the bridge and ports, then the ToR's addresses
/// on them.
pub fn configure(t: &Topology) -> Result<(), super::net::CommandError> {
    let args = bridge_args(t);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    super::net::run("ovs-vsctl", &args)?;
    super::net::address_tor_vlan(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::topology::TorKind;
    use std::path::Path;

    #[test]
    fn every_node_gets_a_trunk_and_the_gateways_their_vlans() {
        let t = Topology::new("t", 2, TorKind::Bird, Path::new("/var/lib/kube-ovn-lab")).unwrap();
        let args = bridge_args(&t).join(" ");
        assert!(args.starts_with("--db=unix:/var/lib/kube-ovn-lab/t/tor/ovs/db.sock --timeout=60 -- add-br tor-vlan -- set bridge tor-vlan datapath_type=netdev"), "{args}");
        // Trunks: no tag, no trunks column (every VLAN passes, tagged).
        assert!(
            args.contains("-- add-port tor-vlan n1-trunk -- add-port tor-vlan n2-trunk --"),
            "{args}"
        );
        assert!(args.contains("-- add-port tor-vlan mgmt0 tag=0 -- set interface mgmt0 type=internal"));
        assert!(
            args.ends_with("-- add-port tor-vlan vlan100 tag=100 -- set interface vlan100 type=internal")
        );
        let [db, vswitchd] = ovs_launches(&t);
        assert!(matches!(&db.enter, Enter::Netns(ns) if ns == "kl_t_tor"));
        assert!(db.args[0].ends_with("/t/tor/ovs/conf.db"));
        assert!(vswitchd.args.contains(&"--disable-system".to_owned()));
        assert!(vswitchd.env.contains(&(
            "OVS_RUNDIR".to_owned(),
            "/var/lib/kube-ovn-lab/t/tor/ovs".to_owned()
        )));
        assert_ne!(db.log, vswitchd.log);
    }
}
