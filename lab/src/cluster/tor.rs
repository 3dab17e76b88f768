//! The top-of-rack router: the nodes' underlay router and every speaker's BGP peer. BIRD 2 or
//! FRR, configured from the topology: one eBGP session per node (ToR AS 65001, nodes AS 65000),
//! everything the nodes announce imported and installed in the ToR's kernel with ECMP (so the
//! outside host reaches pod addresses through it), nothing announced back.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::process::{Enter, Launch};
use super::topology::{CLUSTER_AS, TOR_AS, Topology, TorKind};

/// BIRD 2's configuration for the lab's ToR.
pub fn bird_config(topology: &Topology, log: &Path) -> String {
    let mut text = format!(
        "# kube-ovn-lab {name}: the ToR (BIRD). Written by `kube-ovn-lab up`.\n\
         log \"{log}\" all;\n\
         router id {tor};\n\
         protocol device {{ scan time 10; }}\n\
         protocol direct {{ ipv4; }}\n\
         # Routes learnt from the speakers go to the kernel, several next hops as ECMP.\n\
         protocol kernel {{\n  ipv4 {{ export filter {{ if source = RTS_BGP then accept; reject; }}; }};\n  merge paths on;\n}}\n\
         template bgp speaker {{\n  local {tor} as {TOR_AS};\n  ipv4 {{ import all; export none; }};\n  \
         graceful restart on;\n  connect delay time 1;\n  connect retry time 2;\n  error wait time 1, 10;\n}}\n",
        name = topology.name,
        log = log.display(),
        tor = Topology::tor_ip(),
    );
    for node in &topology.nodes {
        let _ = writeln!(
            text,
            "protocol bgp {} from speaker {{ neighbor {} as {CLUSTER_AS}; }}",
            node.name, node.ip
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
    }
    text.push_str(" address-family ipv4 unicast\n  maximum-paths 64\n");
    for node in &topology.nodes {
        let _ = writeln!(text, "  neighbor {} activate", node.ip);
        // Learn from the speakers, announce nothing to them (BIRD's `export none`).
        let _ = writeln!(text, "  neighbor {} route-map ANNOUNCE-NOTHING out", node.ip);
    }
    text.push_str(" exit-address-family\n!\nroute-map ANNOUNCE-NOTHING deny 10\n!\n");
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

/// The ToR's view of each node's BGP session: `(node, established)`, from the routing daemon's
/// own CLI output (`birdc show protocols` or `vtysh -c 'show bgp summary json'`).
pub fn sessions(kind: TorKind, topology: &Topology, cli_output: &str) -> Vec<(String, bool)> {
    match kind {
        TorKind::Bird => topology
            .nodes
            .iter()
            .map(|n| {
                let up = cli_output.lines().any(|l| {
                    let mut f = l.split_whitespace();
                    f.next() == Some(n.name.as_str()) && l.contains("Established")
                });
                (n.name.clone(), up)
            })
            .collect(),
        TorKind::Frr => {
            let json: serde_json::Value = serde_json::from_str(cli_output).unwrap_or_default();
            topology
                .nodes
                .iter()
                .map(|n| {
                    let state = &json["ipv4Unicast"]["peers"][n.ip.to_string()]["state"];
                    (n.name.clone(), state.as_str() == Some("Established"))
                })
                .collect()
        }
    }
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

/// The command that prints the routes the ToR learnt.
pub fn routes_command(kind: TorKind) -> Vec<String> {
    match kind {
        TorKind::Bird => vec!["birdc".into(), "show route where source = RTS_BGP".into()],
        TorKind::Frr => vec!["vtysh".into(), "-c".into(), "show ip route bgp".into()],
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
    }

    #[test]
    fn frr_peers_with_every_node_and_allows_ecmp() {
        let t = topo(TorKind::Frr);
        let text = frr_bgpd_config(&t);
        assert!(text.contains(" neighbor 172.30.0.11 remote-as 65000\n"));
        assert!(text.contains("  neighbor 172.30.0.12 activate\n"));
        assert!(text.contains("maximum-paths"));
        let (files, launches) = plan(&t);
        assert_eq!(files.len(), 2);
        assert_eq!(launches.len(), 2);
    }

    #[test]
    fn sessions_are_read_from_either_cli() {
        let t = topo(TorKind::Bird);
        let bird = "Name       Proto      Table      State  Since         Info\n\
                    node1      BGP        ---        up     10:00:00.000  Established\n\
                    node2      BGP        ---        start  10:00:00.000  Active        Socket: Connection refused\n";
        assert_eq!(
            sessions(TorKind::Bird, &t, bird),
            vec![("node1".into(), true), ("node2".into(), false)]
        );
        let frr = r#"{"ipv4Unicast":{"peers":{"172.30.0.11":{"state":"Established"},"172.30.0.12":{"state":"Connect"}}}}"#;
        assert_eq!(
            sessions(TorKind::Frr, &t, frr),
            vec![("node1".into(), true), ("node2".into(), false)]
        );
        assert_eq!(
            sessions(TorKind::Frr, &t, "not json"),
            vec![("node1".into(), false), ("node2".into(), false)]
        );
    }
}
