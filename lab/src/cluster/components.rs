//! What runs where, with which flags: a pure plan from the topology to [`Launch`]es. The flags
//! are the binaries' own (Kube-OVN's names), spelled as an operator would on a real cluster.

use std::path::{Path, PathBuf};

use super::process::{Enter, Launch};
use super::topology::{
    CLUSTER_AS, CONTROLLER_METRICS_PORT, DAEMON_METRICS_PORT, EXTERNAL_IP_CIDR, JOIN_CIDR,
    MONITOR_METRICS_PORT, NB_PORT, NodePlan, OUTSIDE_PORT, SB_PORT, SERVICE_CIDR, SPEAKER_METRICS_PORT,
    TOR_AS, Topology,
};

pub const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";
pub const SB_SCHEMA: &str = "/usr/share/ovn/ovn-sb.ovsschema";
pub const VSWITCH_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// The lab's binaries (ours): where `up` found them.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub dir: PathBuf,
}

impl Binaries {
    pub const NAMES: [&str; 7] = [
        "kube-ovn-lab",
        "kube-ovn-controller",
        "kube-ovn-daemon",
        "kube-ovn",
        "kube-ovn-speaker",
        "kube-ovn-pinger",
        "kube-ovn-monitor",
    ];

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The names missing from the directory.
    pub fn missing(&self) -> Vec<&'static str> {
        Self::NAMES
            .into_iter()
            .filter(|n| !self.path(n).is_file())
            .collect()
    }
}

/// OVS/OVN daemons log to stderr (captured in the lab's log file), never to syslog.
fn ovs_logging() -> [String; 2] {
    ["-vconsole:info".into(), "-vsyslog:off".into()]
}

/// `OVS_RUNDIR` and friends pointing at `dir`: the daemons put their sockets and PID files
/// there, and `ovs-vsctl`, `ovs-appctl -t ovs-vswitchd`, `ovn-nbctl` find them there by default
/// (the `node` and `cp` verbs set the same variables).
pub fn ovs_env(dir: &Path) -> Vec<(String, String)> {
    let d = dir.to_string_lossy().into_owned();
    [
        "OVS_RUNDIR",
        "OVS_DBDIR",
        "OVS_LOGDIR",
        "OVN_RUNDIR",
        "OVN_DBDIR",
        "OVN_LOGDIR",
    ]
    .into_iter()
    .map(|k| (k.to_owned(), d.clone()))
    .collect()
}

fn ovs_launch(
    t: &Topology,
    component: &str,
    netns: &str,
    dir: &Path,
    program: &str,
    args: Vec<String>,
) -> Launch {
    let mut args = args;
    args.extend(ovs_logging());
    Launch {
        component: component.into(),
        enter: Enter::Netns(netns.into()),
        program: program.into(),
        args,
        env: ovs_env(dir),
        log: t.log(component),
    }
}

/// NB and SB ovsdb-servers, reachable over TCP on the fabric (nodes' ovn-controllers) and over
/// unix sockets in the control plane's directory (the controller, `ovn-nbctl` in `cp -- …`).
pub fn ovn_databases(t: &Topology) -> Vec<Launch> {
    let dir = t.cp_dir();
    [("nb", "ovnnb_db", NB_PORT), ("sb", "ovnsb_db", SB_PORT)]
        .into_iter()
        .map(|(component, file, port)| {
            let d = |ext: &str| dir.join(format!("{file}.{ext}")).to_string_lossy().into_owned();
            ovs_launch(
                t,
                component,
                &t.cp_netns(),
                &dir,
                "ovsdb-server",
                vec![
                    d("db"),
                    format!("--remote=punix:{}", d("sock")),
                    format!("--remote=ptcp:{port}:{}", Topology::cp_ip()),
                    format!("--pidfile={}", d("pid")),
                    format!("--unixctl={}", d("ctl")),
                ],
            )
        })
        .collect()
}

pub fn northd(t: &Topology) -> Launch {
    let dir = t.cp_dir();
    ovs_launch(
        t,
        "northd",
        &t.cp_netns(),
        &dir,
        "ovn-northd",
        vec![
            format!("--ovnnb-db=unix:{}", dir.join("ovnnb_db.sock").display()),
            format!("--ovnsb-db=unix:{}", dir.join("ovnsb_db.sock").display()),
            format!("--pidfile={}", dir.join("ovn-northd.pid").display()),
        ],
    )
}

/// kube-ovn-monitor beside OVN central, as `deploy/`'s ovn-central sidecar: the control sockets,
/// database files and pidfile of the control plane's directory, the logs the lab keeps.
pub fn monitor(t: &Topology, bins: &Binaries) -> Launch {
    let dir = t.cp_dir();
    let d = |file: &str| dir.join(file).to_string_lossy().into_owned();
    let log = |component: &str| t.log(component).to_string_lossy().into_owned();
    let mut args = vec![
        format!("--metrics-port={MONITOR_METRICS_PORT}"),
        "--node-name=cp".into(),
    ];
    for (db, file, component) in [("northbound", "ovnnb_db", "nb"), ("southbound", "ovnsb_db", "sb")] {
        args.extend([
            format!(
                "--database.{db}.socket.remote=unix:{}",
                d(&format!("{file}.sock"))
            ),
            format!(
                "--database.{db}.socket.control=unix:{}",
                d(&format!("{file}.ctl"))
            ),
            format!("--database.{db}.file.data.path={}", d(&format!("{file}.db"))),
            format!("--database.{db}.file.log.path={}", log(component)),
        ]);
    }
    args.push(format!(
        "--service.ovn.northd.file.pid.path={}",
        d("ovn-northd.pid")
    ));
    args.push(format!("--service.ovn.northd.file.log.path={}", log("northd")));
    Launch {
        component: "monitor".into(),
        enter: Enter::Netns(t.cp_netns()),
        program: bins.path("kube-ovn-monitor"),
        args,
        env: vec![],
        log: t.log("monitor"),
    }
}

/// The Kubernetes control plane, in start order: etcd, kube-apiserver, kube-controller-manager,
/// kube-scheduler (upstream's binaries from [`crate::kubernetes::bin_dir`]), in the control
/// plane's namespace. `extra` are more kube-apiserver flags.
pub fn kubernetes(t: &Topology, extra: &[String]) -> Vec<Launch> {
    let cp = t.control_plane();
    [
        ("etcd", cp.etcd_args()),
        ("kube-apiserver", cp.apiserver_args(extra)),
        ("kube-controller-manager", cp.controller_manager_args()),
        ("kube-scheduler", cp.scheduler_args()),
    ]
    .into_iter()
    .map(|(component, args)| Launch {
        component: component.into(),
        enter: Enter::Netns(t.cp_netns()),
        program: crate::kubernetes::bin_dir().join(component),
        args,
        env: vec![],
        log: t.log(component),
    })
    .collect()
}

pub fn controller(t: &Topology, bins: &Binaries) -> Launch {
    Launch {
        component: "controller".into(),
        enter: Enter::Netns(t.cp_netns()),
        program: bins.path("kube-ovn-controller"),
        args: vec![
            format!("--kubeconfig={}", t.kubeconfig("controller").display()),
            format!("--ovn-nb-addr={}", Topology::nb_remote()),
            format!("--ovn-sb-addr={}", Topology::sb_remote()),
            format!("--pod-name=kube-ovn-controller-{}", t.name),
            "--lease-namespace=kube-system".into(),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            format!("--service-external-ip-cidrs={EXTERNAL_IP_CIDR}"),
            // Dual stack, so the nodes route IPv6 pod subnets (the dual-stack example's).
            format!("--node-switch-cidr={JOIN_CIDR}"),
            format!("--pprof-port={CONTROLLER_METRICS_PORT}"),
        ],
        env: vec![],
        log: t.log("controller"),
    }
}

/// The lab's agent (the kubelet stand-ins, the LoadBalancer IP allocator), with its client
/// certificate. Only the network namespace is entered: the pod namespaces it makes must be visible to all.
pub fn agent(t: &Topology, bins: &Binaries, run_dir: &Path) -> Launch {
    Launch {
        component: "agent".into(),
        enter: Enter::NetOnly(t.cp_netns()),
        program: bins.path("kube-ovn-lab"),
        args: vec![
            "agent".into(),
            format!("--name={}", t.name),
            format!("--labs-dir={}", run_dir.display()),
            format!("--kubeconfig={}", t.control_plane().kubeconfig("agent").display()),
        ],
        env: vec![],
        log: t.log("agent"),
    }
}

/// A node's ovsdb-server and ovs-vswitchd (userspace datapath: there is no kernel module).
pub fn node_ovs(t: &Topology, node: &NodePlan) -> Vec<Launch> {
    let dir = t.node_dir(&node.name);
    let db = format!("unix:{}", dir.join("db.sock").display());
    vec![
        ovs_launch(
            t,
            &format!("{}-ovsdb-server", node.name),
            &node.netns,
            &dir,
            "ovsdb-server",
            vec![
                dir.join("conf.db").to_string_lossy().into_owned(),
                format!("--remote=punix:{}", dir.join("db.sock").display()),
                "--remote=db:Open_vSwitch,Open_vSwitch,manager_options".into(),
                format!("--pidfile={}", dir.join("ovsdb-server.pid").display()),
            ],
        ),
        ovs_launch(
            t,
            &format!("{}-ovs-vswitchd", node.name),
            &node.netns,
            &dir,
            "ovs-vswitchd",
            vec![
                db,
                // No openvswitch.ko: without this vswitchd tries the kernel datapath per bridge.
                "--disable-system".into(),
                format!("--pidfile={}", dir.join("ovs-vswitchd.pid").display()),
            ],
        ),
    ]
}

pub fn node_ovn_controller(t: &Topology, node: &NodePlan) -> Launch {
    let dir = t.node_dir(&node.name);
    ovs_launch(
        t,
        &format!("{}-ovn-controller", node.name),
        &node.netns,
        &dir,
        "ovn-controller",
        vec![
            format!("unix:{}", dir.join("db.sock").display()),
            format!("--pidfile={}", dir.join("ovn-controller.pid").display()),
        ],
    )
}

/// The node daemon's CNI socket.
pub fn daemon_socket(t: &Topology, node: &str) -> PathBuf {
    t.node_dir(node).join("kube-ovn-daemon.sock")
}

pub fn node_daemon(t: &Topology, bins: &Binaries, node: &NodePlan) -> Launch {
    let dir = t.node_dir(&node.name);
    Launch {
        component: format!("{}-daemon", node.name),
        enter: Enter::Netns(node.netns.clone()),
        program: bins.path("kube-ovn-daemon"),
        args: vec![
            format!("--node-name={}", node.name),
            format!("--kubeconfig={}", t.kubeconfig("daemon").display()),
            format!("--ovs-db=unix:{}", dir.join("db.sock").display()),
            format!("--ovn-sb-addr={}", Topology::sb_remote()),
            format!("--encap-ip={}", node.ip),
            "--ovs-datapath-type=netdev".into(),
            "--mtu=1400".into(),
            format!("--bind-socket={}", daemon_socket(t, &node.name).display()),
            "--install-cni-config=true".into(),
            format!("--cni-conf-dir={}", dir.join("net.d").display()),
            format!("--cni-bin-dir={}", dir.join("bin").display()),
            format!("--cni-bin={}", bins.path("kube-ovn").display()),
            format!("--system-id-file={}", dir.join("system-id.conf").display()),
            // Service traffic keeps its addresses through the egress NAT (Kube-OVN's flag).
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            format!("--service-external-ip-cidrs={EXTERNAL_IP_CIDR}"),
            format!("--pprof-port={DAEMON_METRICS_PORT}"),
        ],
        env: vec![],
        log: t.log(&format!("{}-daemon", node.name)),
    }
}

/// A node's speaker: an IPv4 and an IPv6 session with the ToR; the node with
/// [`NodePlan::extended_nexthop`] also offers RFC 8950 on both (Kube-OVN's `--extended-nexthop`),
/// so its IPv4 routes go over its IPv6 session too.
pub fn node_speaker(t: &Topology, bins: &Binaries, node: &NodePlan) -> Launch {
    let dir = t.node_dir(&node.name);
    let mut args = vec![
        format!("--kubeconfig={}", t.kubeconfig("speaker").display()),
        format!("--node-name={}", node.name),
        format!("--cluster-as={CLUSTER_AS}"),
        format!("--neighbor-as={TOR_AS}"),
        format!("--neighbor-address={}", Topology::tor_ip()),
        format!("--neighbor-ipv6-address={}", Topology::tor_ip6()),
        format!("--router-id={}", node.ip),
        format!("--node-ips={},{}", node.ip, node.ip6),
        "--graceful-restart=true".into(),
        format!("--state-dir={}", dir.join("speaker").display()),
        format!("--service-external-ip-cidrs={EXTERNAL_IP_CIDR}"),
        format!("--pprof-port={SPEAKER_METRICS_PORT}"),
    ];
    if node.extended_nexthop {
        args.push("--extended-nexthop=true".into());
    }
    Launch {
        component: format!("{}-speaker", node.name),
        enter: Enter::Netns(node.netns.clone()),
        program: bins.path("kube-ovn-speaker"),
        args,
        env: vec![],
        log: t.log(&format!("{}-speaker", node.name)),
    }
}

/// The outside host's netexec server: what it saw tells whether traffic from pods was NATed.
pub fn outside_server(t: &Topology, bins: &Binaries) -> Launch {
    Launch {
        component: "outside-netexec".into(),
        enter: Enter::Netns(t.outside_netns()),
        program: bins.path("kube-ovn-lab"),
        args: vec![
            "netexec".into(),
            "--hostname=outside".into(),
            format!("--http-port={OUTSIDE_PORT}"),
            format!("--udp-port={OUTSIDE_PORT}"),
        ],
        env: vec![],
        log: t.log("outside-netexec"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::topology::TorKind;
    use super::*;

    #[test]
    fn every_component_has_its_own_log_and_node_flags_name_the_node() {
        let t = Topology::new("t", 2, TorKind::Bird, Path::new("/var/lib/kube-ovn-lab")).unwrap();
        let bins = Binaries { dir: "/b".into() };
        let mut launches = ovn_databases(&t);
        launches.extend(kubernetes(&t, &[]));
        launches.extend([
            northd(&t),
            monitor(&t, &bins),
            controller(&t, &bins),
            agent(&t, &bins, Path::new("/var/lib/kube-ovn-lab")),
            outside_server(&t, &bins),
        ]);
        for n in &t.nodes {
            launches.extend(node_ovs(&t, n));
            launches.extend([
                node_ovn_controller(&t, n),
                node_daemon(&t, &bins, n),
                node_speaker(&t, &bins, n),
            ]);
        }
        let mut logs: Vec<_> = launches.iter().map(|l| l.log.clone()).collect();
        logs.sort();
        logs.dedup();
        assert_eq!(logs.len(), launches.len(), "a log per component");
        let daemon = node_daemon(&t, &bins, &t.nodes[1]);
        assert!(daemon.args.contains(&"--node-name=node2".to_owned()));
        assert!(daemon.args.contains(&"--encap-ip=172.30.0.12".to_owned()));
        let kubernetes = kubernetes(&t, &[]);
        let names: Vec<&str> = kubernetes.iter().map(|l| l.component.as_str()).collect();
        assert_eq!(
            names,
            [
                "etcd",
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler"
            ]
        );
        assert!(
            kubernetes
                .iter()
                .all(|l| matches!(&l.enter, Enter::Netns(ns) if *ns == t.cp_netns()))
        );
        assert!(
            kubernetes[1]
                .args
                .contains(&"--bind-address=172.30.0.2".to_owned())
        );
        let speaker = node_speaker(&t, &bins, &t.nodes[0]);
        assert!(speaker.args.contains(&"--neighbor-address=172.30.0.1".to_owned()));
        assert!(
            speaker
                .args
                .contains(&"--neighbor-ipv6-address=fd00:172:30::1".to_owned())
        );
        assert!(!speaker.args.iter().any(|a| a.starts_with("--extended-nexthop")));
        let last = node_speaker(&t, &bins, t.nodes.last().unwrap());
        assert!(last.args.contains(&"--extended-nexthop=true".to_owned()));
        assert!(
            controller(&t, &bins)
                .args
                .contains(&"--node-switch-cidr=100.64.0.0/16,fd00:100:64::/112".to_owned())
        );
    }
}
