//! deploy/image/start-ovs.sh, the ovs-ovn container's entry point, run as a process the way the
//! container runs it: inside a node's network namespace, with /run/openvswitch, /etc/openvswitch,
//! /var/log/openvswitch, /run/ovn and /var/log/ovn its own (a private mount namespace binding
//! this test's directories there, as the DaemonSet's hostPaths are per node). The node's uplink
//! is one end of a veth pair whose other end, in a "ToR" namespace, is the gateway.
//!
//! With the userspace datapath and `OVS_NETDEV_UPLINK`, the uplink becomes a port of br-ul and
//! its addresses, routes and MTU move onto br-ul; the node reaches the ToR through OVS. When
//! ovs-vswitchd dies the script exits non-zero (the kubelet restarts the container), having
//! stopped the other daemons; started again, it puts everything back, also when br-ul's tap
//! (and the node's addresses with it) is gone.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_ovn_testkit::{Daemon, Netns, run, wait_until};

const T: Duration = Duration::from_secs(30);
const NODE_V4: &str = "198.18.0.2/24";
const TOR_V4: &str = "198.18.0.1";
const NODE_V6: &str = "fd00:18::2/64";
const TOR_V6: &str = "fd00:18::1";
/// Reached through the uplink's extra (non-default) route.
const BEYOND: &str = "203.0.113.1";
const MTU: &str = "1450";

/// The script's private directories, bound over the paths it uses.
const MOUNTS: [(&str, &str); 5] = [
    ("run-ovs", "/run/openvswitch"),
    ("etc-ovs", "/etc/openvswitch"),
    ("log-ovs", "/var/log/openvswitch"),
    ("run-ovn", "/run/ovn"),
    ("log-ovn", "/var/log/ovn"),
];

struct Lab {
    node: Netns,
    tor: Netns,
    dir: tempfile::TempDir,
    runs: u32,
}

impl Lab {
    fn new() -> Self {
        let node = Netns::create("kol-ovs-node").expect("root: a network namespace");
        let tor = Netns::create("kol-ovs-tor").expect("root: a network namespace");
        let dir = tempfile::tempdir().unwrap();
        for (sub, _) in MOUNTS {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        run(
            "ip",
            &[
                "link",
                "add",
                "up0",
                "netns",
                node.name(),
                "type",
                "veth",
                "peer",
                "name",
                "tor0",
                "netns",
                tor.name(),
            ],
        )
        .unwrap();
        for args in [
            vec!["link", "set", "up0", "mtu", MTU, "up"],
            vec!["addr", "add", NODE_V4, "dev", "up0"],
            vec!["addr", "add", NODE_V6, "dev", "up0", "nodad"],
            vec!["route", "add", "default", "via", TOR_V4],
            vec!["route", "add", "203.0.113.0/24", "via", TOR_V4],
            vec!["-6", "route", "add", "default", "via", TOR_V6],
        ] {
            node.ip(&args).unwrap();
        }
        for args in [
            vec!["link", "set", "tor0", "mtu", MTU, "up"],
            vec!["addr", "add", "198.18.0.1/24", "dev", "tor0"],
            vec!["addr", "add", "fd00:18::1/64", "dev", "tor0", "nodad"],
            vec!["addr", "add", "203.0.113.1/32", "dev", "lo"],
        ] {
            tor.ip(&args).unwrap();
        }
        Self {
            node,
            tor,
            dir,
            runs: 0,
        }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// start-ovs.sh as the container runs it (a clean environment with the ConfigMap's
    /// variables), its output in `start-ovs-<n>.log`.
    fn start(&mut self) -> Daemon {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/image/start-ovs.sh");
        let mut setup = String::new();
        for (sub, target) in MOUNTS {
            let _ = write!(
                setup,
                "mkdir -p {target} && mount --bind {} {target} && ",
                self.path(sub).display()
            );
        }
        let _ = write!(
            setup,
            "exec nsenter --net={} env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
             OVS_DATAPATH_TYPE=netdev OVS_NETDEV_UPLINK=up0 sh {}",
            self.node.path().display(),
            script.display()
        );
        self.runs += 1;
        let log = self.path(&format!("start-ovs-{}.log", self.runs));
        let args: Vec<String> = ["--mount", "--propagation", "private", "sh", "-c", &setup]
            .map(str::to_owned)
            .into();
        Daemon::spawn("start-ovs.sh", "unshare", &args, &log, &[]).unwrap()
    }

    /// The PID a daemon wrote, if its file is there.
    fn pid(&self, file: &str) -> Option<i32> {
        std::fs::read_to_string(self.path(file)).ok()?.trim().parse().ok()
    }

    fn daemon_pids(&self) -> Vec<i32> {
        [
            "run-ovs/ovsdb-server.pid",
            "run-ovs/ovs-vswitchd.pid",
            "run-ovn/ovn-controller.pid",
        ]
        .into_iter()
        .filter_map(|f| self.pid(f))
        .collect()
    }

    /// The node as the script must leave it: the addresses on br-ul (none left on the uplink),
    /// the routes through br-ul, br-ul with the uplink's MTU, and the ToR reachable through OVS
    /// both ways (and beyond it through the extra route).
    fn assert_node_on_bridge(&self, script: &mut Daemon) {
        // The script says when it is done with the uplink (then it starts ovn-controller).
        wait_until("start-ovs.sh to move up0 onto br-ul", T, || {
            script.check_alive()?;
            Ok(script.log().contains("start-ovs: up0 is a port of br-ul"))
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", script.log_tail(30)));
        let v4 = self.node.ip(&["-4", "addr", "show", "dev", "br-ul"]).unwrap();
        assert!(v4.contains(NODE_V4), "br-ul has no {NODE_V4}:\n{v4}");
        let v6 = self.node.ip(&["-6", "addr", "show", "dev", "br-ul"]).unwrap();
        assert!(v6.contains(NODE_V6), "br-ul has no {NODE_V6}:\n{v6}");
        let uplink = self
            .node
            .ip(&["addr", "show", "dev", "up0", "scope", "global"])
            .unwrap();
        assert!(!uplink.contains("inet"), "up0 kept an address:\n{uplink}");
        let routes = self.node.ip(&["-4", "route", "show"]).unwrap();
        for want in [
            format!("default via {TOR_V4} dev br-ul"),
            format!("203.0.113.0/24 via {TOR_V4} dev br-ul"),
        ] {
            assert!(routes.contains(&want), "no {want:?}:\n{routes}");
        }
        let routes = self.node.ip(&["-6", "route", "show", "default"]).unwrap();
        assert!(routes.contains(&format!("via {TOR_V6} dev br-ul")), "{routes}");
        let link = self.node.ip(&["link", "show", "dev", "br-ul"]).unwrap();
        assert!(link.contains(&format!(" mtu {MTU} ")), "{link}");
        let ips: [IpAddr; 3] = [
            TOR_V4.parse().unwrap(),
            BEYOND.parse().unwrap(),
            TOR_V6.parse().unwrap(),
        ];
        for ip in ips {
            self.node
                .wait_ping(ip, T)
                .unwrap_or_else(|e| panic!("node → {ip}: {e}\n{}", script.log_tail(30)));
        }
        let node_ip: IpAddr = NODE_V4.split('/').next().unwrap().parse().unwrap();
        self.tor.wait_ping(node_ip, T).unwrap();
    }

    fn assert_gone(pids: &[i32]) {
        wait_until("the script's daemons to be gone", T, || {
            Ok(pids.iter().all(|pid| !alive(*pid)))
        })
        .unwrap_or_else(|e| panic!("{e}: {pids:?}"));
    }
}

/// Not running (gone, or a zombie waiting for init to reap it).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

impl Drop for Lab {
    /// The daemons detach from the script: whatever a failed test left running is killed here
    /// by the PIDs they wrote.
    fn drop(&mut self) {
        for pid in self.daemon_pids() {
            if alive(pid) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
            }
        }
    }
}

#[test]
fn the_uplink_moves_onto_br_ul_and_comes_back_after_ovs_vswitchd_dies() {
    let mut lab = Lab::new();
    let mut script = lab.start();
    lab.assert_node_on_bridge(&mut script);
    let saved = run(
        "ovs-vsctl",
        &[
            &format!("--db=unix:{}", lab.path("run-ovs/db.sock").display()),
            "get",
            "Bridge",
            "br-ul",
            "external_ids",
        ],
    )
    .unwrap();
    assert!(
        saved.contains("uplink=up0") && saved.contains("uplink-addresses=\"198.18.0.2/24,fd00:18::2/64\""),
        "{saved}"
    );

    // ovs-vswitchd crashes (as Debian 12's OVS 3.1 aborts in its userspace conntrack): the
    // script exits non-zero and takes the other daemons with it; the kubelet starts the
    // container again and the node is back on br-ul. The same when ovsdb-server dies.
    for (daemon, pidfile) in [
        ("ovs-vswitchd", "run-ovs/ovs-vswitchd.pid"),
        ("ovsdb-server", "run-ovs/ovsdb-server.pid"),
    ] {
        let pids = lab.daemon_pids();
        assert_eq!(pids.len(), 3, "{pids:?}");
        let pid = lab.pid(pidfile).unwrap();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).unwrap();
        wait_until(&format!("start-ovs.sh to exit after {daemon} died"), T, || {
            Ok(!script.is_running())
        })
        .unwrap();
        let status = script.kill().expect("the script was running");
        assert_eq!(status.code(), Some(1), "{status:?}\n{}", script.log_tail(20));
        assert!(
            script.log().contains(&format!("{daemon}.pid exited")),
            "{}",
            script.log_tail(20)
        );
        Lab::assert_gone(&pids);
        script = lab.start();
        lab.assert_node_on_bridge(&mut script);
    }

    // A clean stop (SIGTERM, as the kubelet stops a container) exits 0 and stops the daemons.
    let pids = lab.daemon_pids();
    let status = script.terminate(T).unwrap();
    assert!(status.success(), "{status:?}\n{}", script.log_tail(20));
    Lab::assert_gone(&pids);
    // OVS 3.1 keeps br-ul's tap (persistent) when ovs-vswitchd exits, and the node's addresses
    // on it; without the tap (another OVS version, a node whose tap was removed) the addresses
    // and routes are gone with it, and the uplink has none either.
    lab.node.ip(&["link", "del", "br-ul"]).unwrap();
    let uplink = lab
        .node
        .ip(&["addr", "show", "dev", "up0", "scope", "global"])
        .unwrap();
    assert!(!uplink.contains("inet"), "{uplink}");

    // Started again, the script restores them from br-ul's external_ids.
    let mut script = lab.start();
    lab.assert_node_on_bridge(&mut script);
    let pids = lab.daemon_pids();
    assert!(script.terminate(T).unwrap().success());
    Lab::assert_gone(&pids);
}
