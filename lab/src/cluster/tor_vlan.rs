//! The ToR's VLAN fabric: its own ovsdb-server and ovs-vswitchd (userspace datapath, state in
//! the ToR's directory, started and stopped by PID like the lab's other daemons) and one bridge,
//! [`TOR_VLAN_BRIDGE`], that plays a datacenter's top-of-rack switch for the nodes' second NIC:
//! - every node's `eth1` ends in a trunk port (no `tag`, no `trunks`: OVS passes every VLAN,
//!   tagged on the wire), as an underlay's uplink is cabled;
//! - [`TOR_VLAN_PORT`], an internal port with `tag=100`, is VLAN 100's gateway (`10.100.0.1`),
//!   the physical router of Kube-OVN's underlay guide; the ToR's kernel routes it;
//! - [`TOR_MGMT_PORT`], an internal access port of VLAN 0 (`tag=0`: untagged frames only), holds
//!   `172.31.0.1`, the nodes' management network on `eth1` (their address there is what an
//!   underlay ProviderNetwork moves onto its bridge);
//! - every node's `eth2` ends in an access port of VLAN [`EXTERNAL_VLAN`] (`tag=200`: the node
//!   sends and receives untagged frames, the bridge tags them inside), and
//!   [`TOR_EXTERNAL_PORT`], an internal port of the same VLAN, is the external network's gateway
//!   (`10.200.0.1`), routed by the ToR's kernel as a connected network like VLAN 100. The trunks
//!   carry VLAN 200 too (tagged, as a ToR's trunks carry every VLAN); VLAN 100 never reaches the
//!   access ports.
//!
//! OVS and not the kernel terminates the VLANs: the lab's kernel has no 8021q, and a netdev
//! bridge tags and untags in userspace (`../shared/reference/dataplane.md`).

use super::components::{VSWITCH_SCHEMA, ovs_env};
use super::process::{Enter, Launch};
use super::topology::{
    EXTERNAL_NIC, EXTERNAL_PREFIX, EXTERNAL_VLAN, PROVIDER_NIC, TOR_EXTERNAL_PORT, TOR_MGMT_PORT,
    TOR_VLAN_BRIDGE, TOR_VLAN_PORT, Topology, VLAN_ID,
};

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
    for node in &t.nodes {
        args.extend([
            "--".into(),
            "add-port".into(),
            TOR_VLAN_BRIDGE.into(),
            node.ext_port.clone(),
            format!("tag={EXTERNAL_VLAN}"),
        ]);
    }
    for (port, tag) in [
        (TOR_MGMT_PORT, 0),
        (TOR_VLAN_PORT, VLAN_ID),
        (TOR_EXTERNAL_PORT, EXTERNAL_VLAN),
    ] {
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

/// What the fabric is, in one line (`up`'s step and `status`).
pub fn summary() -> String {
    format!(
        "OVS bridge {TOR_VLAN_BRIDGE}: a trunk to each node's {PROVIDER_NIC}, VLAN {VLAN_ID}'s gateway {}; \
         the external network: VLAN {EXTERNAL_VLAN}, an access port to each node's {EXTERNAL_NIC}, gateway {}/{EXTERNAL_PREFIX} ({TOR_EXTERNAL_PORT})",
        Topology::underlay_gateway(),
        Topology::external_gateway()
    )
}

/// `ip` arguments that show which interface of a node holds `address` (`ip -o -4 addr show to
/// <address>/32`): [`EXTERNAL_NIC`] until a ProviderNetwork moves it onto its bridge.
pub fn holder_args(address: std::net::Ipv4Addr) -> Vec<String> {
    ["-o", "-4", "addr", "show", "to"]
        .into_iter()
        .map(str::to_owned)
        .chain([format!("{address}/32")])
        .collect()
}

/// The interface named by [`holder_args`]'s output (`5: eth2    inet 10.200.0.11/24 …`), if
/// any line has one.
pub fn holder(output: &str) -> Option<&str> {
    output
        .lines()
        .find_map(|l| l.split_whitespace().nth(1))
        .map(|dev| dev.split('@').next().unwrap_or(dev))
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
            args.contains("-- add-port tor-vlan vlan100 tag=100 -- set interface vlan100 type=internal --")
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

    #[test]
    fn every_node_gets_an_access_port_of_the_external_vlan_and_the_tor_its_gateway() {
        let t = Topology::new("t", 2, TorKind::Bird, Path::new("/var/lib/kube-ovn-lab")).unwrap();
        let args = bridge_args(&t).join(" ");
        // Access ports: `tag` alone (untagged on the wire, VLAN 200 inside the bridge).
        assert!(
            args.contains("-- add-port tor-vlan n1-ext tag=200 -- add-port tor-vlan n2-ext tag=200 --"),
            "{args}"
        );
        assert!(
            args.ends_with("-- add-port tor-vlan vlan200 tag=200 -- set interface vlan200 type=internal"),
            "{args}"
        );
        let line = summary();
        assert!(
            line.contains("VLAN 200, an access port to each node's eth2, gateway 10.200.0.1/24 (vlan200)"),
            "{line}"
        );
    }

    #[test]
    fn the_interface_holding_an_address_is_read_from_ip() {
        assert_eq!(
            holder_args("10.200.0.11".parse().unwrap()).join(" "),
            "-o -4 addr show to 10.200.0.11/32"
        );
        let out = "5: eth2    inet 10.200.0.11/24 scope global eth2\\       valid_lft forever preferred_lft forever\n";
        assert_eq!(holder(out), Some("eth2"));
        let moved =
            "9: br-external    inet 10.200.0.11/24 scope global br-external\\       valid_lft forever\n";
        assert_eq!(holder(moved), Some("br-external"));
        assert_eq!(holder(""), None);
    }
}
