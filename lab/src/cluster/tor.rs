//! The top-of-rack router: the nodes' underlay router and every speaker's BGP peer. BIRD 2 or
//! FRR, configured from the topology: two eBGP sessions per node (ToR AS 65001, nodes AS 65000),
//! one over IPv4 carrying IPv4 routes and one over IPv6 carrying IPv6 routes, everything the
//! nodes announce imported and installed in the ToR's kernel with ECMP in both families (so the
//! outside host reaches pod addresses through it), nothing announced back.
//!
//! The IPv6 sessions also accept IPv4 routes with an IPv6 next hop (RFC 8950 extended next hop,
//! BIRD's `extended next hop on`, FRR's `capability extended-nexthop`), as a fabric would: a
//! speaker that offers the capability (the lab's [`NodePlan::extended_nexthop`] node) sends its
//! IPv4 routes there too; one that does not negotiates IPv6 alone. Those IPv4 routes are the
//! backups of the same routes learnt over IPv4 (BIRD: lower preference; FRR: lower LOCAL_PREF),
//! so the kernel's IPv4 routes and their ECMP stay on IPv4 next hops while both sessions are up.
//!
//! [`NodePlan::extended_nexthop`]: super::topology::NodePlan::extended_nexthop

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::process::{Enter, Launch};
use super::topology::{CLUSTER_AS, NodePlan, TOR_AS, Topology, TorKind};

/// BIRD's preference of IPv4 routes learnt over an IPv6 session (BGP's default is 100): below
/// the IPv4 session's, so they are the backup path and not merged into its ECMP route.
const EXTENDED_NEXTHOP_PREFERENCE: u32 = 90;
/// FRR's LOCAL_PREF for the same routes (its default is 100).
const EXTENDED_NEXTHOP_LOCAL_PREF: u32 = 50;

/// The name of a node's IPv6 session: BIRD's protocol name, and how [`sessions`] lists it.
pub fn ipv6_session(node: &NodePlan) -> String {
    format!("{}_v6", node.name)
}

/// BIRD 2's configuration for the lab's ToR.
pub fn bird_config(topology: &Topology, log: &Path) -> String {
    let mut text = format!(
        "# kube-ovn-lab {name}: the ToR (BIRD). Written by `kube-ovn-lab up`.\n\
         log \"{log}\" all;\n\
         router id {tor};\n\
         protocol device {{ scan time 10; }}\n\
         protocol direct {{ ipv4; ipv6; }}\n\
         # Routes learnt from the speakers go to the kernel, several next hops as ECMP.\n\
         protocol kernel {{\n  ipv4 {{ export filter {{ if source = RTS_BGP then accept; reject; }}; }};\n  merge paths on;\n}}\n\
         protocol kernel {{\n  ipv6 {{ export filter {{ if source = RTS_BGP then accept; reject; }}; }};\n  merge paths on;\n}}\n\
         template bgp speaker {{\n  local {tor} as {TOR_AS};\n  ipv4 {{ import all; export none; }};\n  \
         graceful restart on;\n  connect delay time 1;\n  connect retry time 2;\n  error wait time 1, 10;\n}}\n\
         # IPv6 sessions: IPv6 routes, and IPv4 routes with an IPv6 next hop (RFC 8950) as backups.\n\
         template bgp speaker6 {{\n  local {tor6} as {TOR_AS};\n  ipv6 {{ import all; export none; }};\n  \
         ipv4 {{ extended next hop on; preference {EXTENDED_NEXTHOP_PREFERENCE}; import all; export none; }};\n  \
         graceful restart on;\n  connect delay time 1;\n  connect retry time 2;\n  error wait time 1, 10;\n}}\n",
        name = topology.name,
        log = log.display(),
        tor = Topology::tor_ip(),
        tor6 = Topology::tor_ip6(),
    );
    for node in &topology.nodes {
        let _ = writeln!(
            text,
            "protocol bgp {} from speaker {{ neighbor {} as {CLUSTER_AS}; }}",
            node.name, node.ip
        );
        let _ = writeln!(
            text,
            "protocol bgp {} from speaker6 {{ neighbor {} as {CLUSTER_AS}; }}",
            ipv6_session(node),
            node.ip6
        );
    }
    text
}

/// FRR's bgpd configuration for the lab's ToR.
pub fn frr_bgpd_config(topology: &Topology) -> String {
    let mut text = format!(
        "! kube-ovn-lab {name}: the ToR (FRR bgpd). Written by `kube-ovn-lab up`.\n\
         frr defaults datacenter\nhostname tor\nlog stdout informational\n!\n\
         router bgp {TOR_AS}\n bgp router-id {tor}\n no bgp ebgp-requires-policy\n \
         bgp graceful-restart\n",
        name = topology.name,
        tor = Topology::tor_ip(),
    );
    for node in &topology.nodes {
        let _ = writeln!(text, " neighbor {} remote-as {CLUSTER_AS}", node.ip);
        let _ = writeln!(text, " neighbor {} remote-as {CLUSTER_AS}", node.ip6);
        let _ = writeln!(text, " neighbor {} capability extended-nexthop", node.ip6);
    }
    text.push_str(" address-family ipv4 unicast\n  maximum-paths 64\n");
    for node in &topology.nodes {
        let _ = writeln!(text, "  neighbor {} activate", node.ip);
        // Learn from the speakers, announce nothing to them (BIRD's `export none`).
        let _ = writeln!(text, "  neighbor {} route-map ANNOUNCE-NOTHING out", node.ip);
        let _ = writeln!(text, "  neighbor {} activate", node.ip6);
        let _ = writeln!(
            text,
            "  neighbor {} route-map EXTENDED-NEXTHOP-BACKUP in",
            node.ip6
        );
        let _ = writeln!(text, "  neighbor {} route-map ANNOUNCE-NOTHING out", node.ip6);
    }
    text.push_str(" exit-address-family\n address-family ipv6 unicast\n  maximum-paths 64\n");
    for node in &topology.nodes {
        let _ = writeln!(text, "  neighbor {} activate", node.ip6);
        let _ = writeln!(text, "  neighbor {} route-map ANNOUNCE-NOTHING out", node.ip6);
    }
    let _ = write!(
        text,
        " exit-address-family\n!\nroute-map ANNOUNCE-NOTHING deny 10\n!\n\
         route-map EXTENDED-NEXTHOP-BACKUP permit 10\n set local-preference {EXTENDED_NEXTHOP_LOCAL_PREF}\n!\n"
    );
    text
}

/// FRR's zebra configuration (zebra installs bgpd's routes in the kernel).
pub fn frr_zebra_config() -> String {
    "hostname tor\nlog stdout informational\n!\n".to_owned()
}

/// The files to write and the processes to start for the ToR: `(path, contents)` and launches.
pub fn plan(topology: &Topology) -> (Vec<(PathBuf, String)>, Vec<Launch>) {
    let dir = topology.tor_dir();
    let run_dir = topology.tor_run_dir();
    let enter = Enter::NetnsPrivateRun {
        netns: topology.tor_netns(),
        run_dir: run_dir.clone(),
    };
    match topology.tor_kind {
        TorKind::Bird => {
            let conf = dir.join("bird.conf");
            let files = vec![(conf.clone(), bird_config(topology, &topology.log("tor-bird")))];
            let launch = Launch {
                component: "tor-bird".into(),
                enter,
                program: "bird".into(),
                // -f: stay in the foreground (the lab tracks the PID it started); the control
                // socket is BIRD's default, /run/bird/bird.ctl, in the ToR's own /run.
                args: vec!["-f".into(), "-c".into(), conf.to_string_lossy().into_owned()],
                env: vec![],
                log: topology.log("tor-bird.stdout"),
            };
            (files, vec![launch])
        }
        TorKind::Frr => {
            let zebra = dir.join("zebra.conf");
            let bgpd = dir.join("bgpd.conf");
            let files = vec![
                (zebra.clone(), frr_zebra_config()),
                (bgpd.clone(), frr_bgpd_config(topology)),
            ];
            // Default socket and PID paths under /run/frr, which is the ToR's own (`up` gives
            // it to user frr, as the package's runtime directory is); FRR drops to that user,
            // so it logs to stdout, which the lab keeps as the daemon's log.
            let daemon = |component: &str, program: &str, conf: &Path| Launch {
                component: component.into(),
                enter: enter.clone(),
                program: program.into(),
                args: vec!["-f".into(), conf.to_string_lossy().into_owned()],
                env: vec![],
                log: topology.log(component),
            };
            let launches = vec![
                daemon("tor-zebra", "/usr/lib/frr/zebra", &zebra),
                daemon("tor-bgpd", "/usr/lib/frr/bgpd", &bgpd),
            ];
            (files, launches)
        }
    }
}

/// The directories the ToR's `/run` must hold for its daemons.
pub fn run_subdirs(topology: &Topology) -> Vec<PathBuf> {
    let run = topology.tor_run_dir();
    vec![run.join("bird"), run.join("frr"), run.join("netns")]
}

/// The ToR's view of each BGP session: `(session, established)`, from the routing daemon's own
/// CLI output (`birdc show protocols` or `vtysh -c 'show bgp summary json'`); each node has two,
/// its IPv4 one named after the node and its IPv6 one named by [`ipv6_session`].
pub fn sessions(kind: TorKind, topology: &Topology, cli_output: &str) -> Vec<(String, bool)> {
    let json: serde_json::Value = match kind {
        TorKind::Bird => serde_json::Value::Null,
        TorKind::Frr => serde_json::from_str(cli_output).unwrap_or_default(),
    };
    let established = |name: &str, family: &str, address: String| match kind {
        TorKind::Bird => cli_output.lines().any(|l| {
            let mut f = l.split_whitespace();
            f.next() == Some(name) && l.contains("Established")
        }),
        TorKind::Frr => json[family]["peers"][address]["state"].as_str() == Some("Established"),
    };
    topology
        .nodes
        .iter()
        .flat_map(|n| {
            let v6 = ipv6_session(n);
            [
                (
                    n.name.clone(),
                    established(&n.name, "ipv4Unicast", n.ip.to_string()),
                ),
                (v6.clone(), established(&v6, "ipv6Unicast", n.ip6.to_string())),
            ]
        })
        .collect()
}

/// The command (run in the ToR) that lists its BGP sessions, as [`sessions`] reads it.
pub fn sessions_command(kind: TorKind) -> Vec<String> {
    match kind {
        TorKind::Bird => vec!["birdc".into(), "show".into(), "protocols".into()],
        TorKind::Frr => vec!["vtysh".into(), "-c".into(), "show bgp summary json".into()],
    }
}

/// A command as an operator would type it (arguments with spaces quoted).
pub fn shell_words(command: &[String]) -> String {
    command
        .iter()
        .map(|w| {
            if w.contains(' ') {
                format!("'{w}'")
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The command that prints the routes the ToR learnt, both families (BIRD's `show route` lists
/// every table, `master4` and `master6`).
pub fn routes_command(kind: TorKind) -> Vec<String> {
    match kind {
        TorKind::Bird => vec!["birdc".into(), "show route where source = RTS_BGP".into()],
        TorKind::Frr => vec![
            "vtysh".into(),
            "-c".into(),
            "show ip route bgp".into(),
            "-c".into(),
            "show ipv6 route bgp".into(),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(kind: TorKind) -> Topology {
        Topology::new("t", 2, kind, Path::new("/var/lib/kube-ovn-lab")).unwrap()
    }

    #[test]
    fn bird_peers_with_every_node() {
        let t = topo(TorKind::Bird);
        let text = bird_config(&t, Path::new("/l/bird.log"));
        assert!(text.contains("protocol bgp node1 from speaker { neighbor 172.30.0.11 as 65000; }"));
        assert!(text.contains("protocol bgp node2 from speaker { neighbor 172.30.0.12 as 65000; }"));
        assert!(text.contains("local 172.30.0.1 as 65001"));
        assert!(text.contains("merge paths on"));
        // And over IPv6: IPv6 routes to the kernel with ECMP, IPv4 ones with an IPv6 next hop
        // accepted as backups.
        assert!(text.contains("protocol bgp node1_v6 from speaker6 { neighbor fd00:172:30::11 as 65000; }"));
        assert!(text.contains("protocol bgp node2_v6 from speaker6 { neighbor fd00:172:30::12 as 65000; }"));
        assert!(text.contains("local fd00:172:30::1 as 65001"));
        assert!(text.contains("ipv6 { export filter { if source = RTS_BGP then accept; reject; }; }"));
        assert!(text.contains("ipv4 { extended next hop on; preference 90; import all; export none; }"));
        assert_eq!(text.matches("merge paths on").count(), 2);
    }

    #[test]
    fn frr_peers_with_every_node_and_allows_ecmp() {
        let t = topo(TorKind::Frr);
        let text = frr_bgpd_config(&t);
        assert!(text.contains(" neighbor 172.30.0.11 remote-as 65000\n"));
        assert!(text.contains("  neighbor 172.30.0.12 activate\n"));
        assert!(text.contains("maximum-paths"));
        assert!(text.contains(" neighbor fd00:172:30::12 remote-as 65000\n"));
        assert!(text.contains(" neighbor fd00:172:30::12 capability extended-nexthop\n"));
        let v6 = &text[text.find(" address-family ipv6 unicast").unwrap()..];
        assert!(v6.contains("  maximum-paths 64\n  neighbor fd00:172:30::11 activate\n"));
        let v4 = &text
            [text.find(" address-family ipv4 unicast").unwrap()..text.find(" address-family ipv6").unwrap()];
        assert!(v4.contains("  neighbor fd00:172:30::11 route-map EXTENDED-NEXTHOP-BACKUP in\n"));
        assert!(text.contains("route-map EXTENDED-NEXTHOP-BACKUP permit 10\n set local-preference 50\n"));
        let (files, launches) = plan(&t);
        assert_eq!(files.len(), 2);
        assert_eq!(launches.len(), 2);
    }

    #[test]
    fn sessions_are_read_from_either_cli() {
        let t = topo(TorKind::Bird);
        let bird = "Name       Proto      Table      State  Since         Info\n\
                    node1      BGP        ---        up     10:00:00.000  Established\n\
                    node1_v6   BGP        ---        start  10:00:00.000  Active        Socket: Connection refused\n\
                    node2      BGP        ---        start  10:00:00.000  Active        Socket: Connection refused\n\
                    node2_v6   BGP        ---        up     10:00:00.000  Established\n";
        let want = |a: bool, b: bool, c: bool, d: bool| {
            vec![
                ("node1".to_owned(), a),
                ("node1_v6".to_owned(), b),
                ("node2".to_owned(), c),
                ("node2_v6".to_owned(), d),
            ]
        };
        assert_eq!(sessions(TorKind::Bird, &t, bird), want(true, false, false, true));
        let frr = r#"{"ipv4Unicast":{"peers":{"172.30.0.11":{"state":"Established"},"172.30.0.12":{"state":"Connect"},
            "fd00:172:30::12":{"state":"Established"}}},
            "ipv6Unicast":{"peers":{"fd00:172:30::11":{"state":"Connect"},"fd00:172:30::12":{"state":"Established"}}}}"#;
        assert_eq!(sessions(TorKind::Frr, &t, frr), want(true, false, false, true));
        assert_eq!(
            sessions(TorKind::Frr, &t, "not json"),
            want(false, false, false, false)
        );
    }
}
