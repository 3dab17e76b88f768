//! A Kubernetes "node" as the CNI daemon's tests need it: a network namespace with its own
//! `ovsdb-server` (Open_vSwitch) and `ovs-vswitchd` on the userspace (`netdev`) datapath, and on
//! demand `ovn-controller`, all run inside the namespace so that every device, route and tunnel
//! packet stays in it (reference/dataplane.md §5.1, §5.3).
//!
//! The fixture deliberately creates no `br-int`: making it is the CNI daemon's job, and a test
//! must see the daemon do it.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tempfile::TempDir;

use crate::command::{CommandError, run};
use crate::daemon::Daemon;
use crate::netns::{Netns, veth_pair};
use crate::ovsdb::VSWITCH_SCHEMA;
use crate::process;
use crate::wait::wait_until;

const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `ovs-vsctl` waits for the database and for ovs-vswitchd to apply a change. Bounded,
/// so a dead ovs-vswitchd fails a test instead of hanging it.
const VSCTL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long ovs-vswitchd gets after SIGTERM before SIGKILL.
const VSWITCHD_STOP_GRACE: Duration = Duration::from_secs(5);

/// The OVS bridge a node's underlay NIC is a port of (see [`add_underlay_bridge`]).
pub const UNDERLAY_BRIDGE: &str = "br-ul";

/// Makes the node's underlay bridge [`UNDERLAY_BRIDGE`] on the userspace (`netdev`) datapath
/// with `nic` moved in as its port, MTU 1500 on the bridge's internal port, through the
/// Open_vSwitch database at `db_remote`. The node's address then goes on the bridge's internal
/// port, where ovs-vswitchd's userspace tunnel code finds the route to the other nodes
/// (dataplane.md §5.4). Without `--no-wait`, so when this returns ovs-vswitchd has applied it:
/// the bridge and its ports exist (or `timeout` passed and this failed). `--may-exist`, so
/// running it again changes nothing.
pub fn add_underlay_bridge(db_remote: &str, timeout: Duration, nic: &str) -> Result<(), CommandError> {
    run(
        "ovs-vsctl",
        &[
            &format!("--db={db_remote}"),
            &format!("--timeout={}", timeout.as_secs()),
            "--may-exist",
            "add-br",
            UNDERLAY_BRIDGE,
            "--",
            "set",
            "Bridge",
            UNDERLAY_BRIDGE,
            "datapath_type=netdev",
            "--",
            "--may-exist",
            "add-port",
            UNDERLAY_BRIDGE,
            nic,
            "--",
            "set",
            "Interface",
            UNDERLAY_BRIDGE,
            "mtu_request=1500",
        ],
    )
    .map(drop)
}

/// Fails with the install hint when `program` is not on PATH. The daemons are started through
/// `ip netns exec`, which would otherwise report a missing program only in a log.
fn require_program(program: &str) -> anyhow::Result<()> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    anyhow::ensure!(
        std::env::split_paths(&path).any(|dir| dir.join(program).is_file()),
        "{program} is not on PATH: run scripts/install-deps.sh"
    );
    Ok(())
}

/// One node: netns, Open_vSwitch database, ovs-vswitchd and optionally ovn-controller.
pub struct OvsNode {
    ovn_controller: Option<Daemon>,
    vswitchd: Option<Daemon>,
    ovsdb: Option<Daemon>,
    // Dropped after the daemons are stopped (see Drop), in this order: the namespace, then the
    // directory holding the sockets and logs.
    netns: Netns,
    dir: TempDir,
}

impl OvsNode {
    /// Brings up a node in a fresh netns named `<name_prefix>-<pid>-<n>`: the database is
    /// created and initialised, and ovs-vswitchd has applied it when this returns.
    pub fn start(name_prefix: &str) -> anyhow::Result<Self> {
        for program in [
            "ovsdb-tool",
            "ovsdb-server",
            "ovs-vswitchd",
            "ovs-vsctl",
            "ovs-appctl",
        ] {
            require_program(program)?;
        }
        anyhow::ensure!(
            Path::new(VSWITCH_SCHEMA).exists(),
            "{VSWITCH_SCHEMA} is missing: run scripts/install-deps.sh"
        );
        let netns = Netns::create(name_prefix)?;
        let dir = tempfile::Builder::new().prefix("kovn-node-").tempdir()?;
        let mut node = Self {
            ovn_controller: None,
            vswitchd: None,
            ovsdb: None,
            netns,
            dir,
        };
        // On any error below, `node` drops and stops what was started.
        let conf = node.dir().join("conf.db");
        run("ovsdb-tool", &["create", &conf.to_string_lossy(), VSWITCH_SCHEMA])?;
        let mut ovsdb = node.spawn(
            "ovsdb-server",
            &[
                conf.to_string_lossy().into_owned(),
                format!("--remote=punix:{}", node.db_socket().display()),
                // As the packaged ovs-ctl runs it: managers set in the database are served too.
                "--remote=db:Open_vSwitch,Open_vSwitch,manager_options".into(),
                format!("--unixctl={}", node.dir().join("ovsdb-server.ctl").display()),
            ],
        )?;
        let socket = node.db_socket();
        let waited = wait_until("ovsdb-server to listen", START_TIMEOUT, || {
            ovsdb.check_alive()?;
            Ok(UnixStream::connect(&socket).is_ok())
        });
        node.ovsdb = Some(ovsdb);
        waited?;
        node.vsctl(&["--no-wait", "init"])?;

        // --disable-system: there is no openvswitch.ko, and without this flag vswitchd tries to
        // create the kernel datapath for every bridge (dataplane.md §5.1).
        // --monitor, as the packaged ovs-ctl runs it on every node: Debian 12's OVS 3.1.0 can
        // abort in its userspace conntrack (`conn_update_state` asserts on an un-NAT entry), and
        // a production node then gets a fresh ovs-vswitchd from the monitor within a second.
        // The PID we hold is the monitor's; the daemon's is in the pidfile (see `stop_vswitchd`).
        let vswitchd = node.spawn(
            "ovs-vswitchd",
            &[
                node.db_remote(),
                "--disable-system".into(),
                "--monitor".into(),
                format!("--pidfile={}", node.vswitchd_pidfile().display()),
                format!("--unixctl={}", node.vswitchd_ctl().display()),
            ],
        )?;
        node.vswitchd = Some(vswitchd);
        let ctl = node.vswitchd_ctl();
        wait_until("ovs-vswitchd to open its control socket", START_TIMEOUT, || {
            node.check_alive()?;
            Ok(UnixStream::connect(&ctl).is_ok())
        })?;
        // A write without --no-wait returns once ovs-vswitchd has applied the database, which
        // proves it is connected to it.
        node.vsctl(&["init"]).map_err(|e| e.context(node.logs_tail(10)))?;
        Ok(node)
    }

    /// Starts `program` inside the netns, logging to `<dir>/<program>.log`. `ip netns exec`
    /// execs the program in place, so the PID we hold is the daemon's own.
    fn spawn(&self, program: &str, args: &[String]) -> anyhow::Result<Daemon> {
        let mut full = vec![
            "netns".into(),
            "exec".into(),
            self.netns.name().to_owned(),
            program.into(),
        ];
        full.extend_from_slice(args);
        // Logs go to our file through stderr; syslog is off so tests do not fill the host's.
        full.extend(["-vconsole:info".into(), "-vsyslog:off".into()]);
        let dir = self.dir();
        // The daemons and the tools find each other's sockets (br-int.mgmt above all, which
        // ovn-controller opens) in these directories.
        let envs = [
            ("OVS_RUNDIR", dir),
            ("OVS_DBDIR", dir),
            ("OVS_LOGDIR", dir),
            ("OVN_RUNDIR", dir),
            ("OVN_DBDIR", dir),
            ("OVN_LOGDIR", dir),
        ];
        Daemon::spawn(
            &format!("{program} of node {}", self.name()),
            "ip",
            &full,
            &self.log_path(program),
            &envs,
        )
    }

    /// The node's name: its netns name, unique per process and call; a good `system-id`.
    pub fn name(&self) -> &str {
        self.netns.name()
    }

    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn db_socket(&self) -> PathBuf {
        self.dir().join("db.sock")
    }

    /// `unix:<dir>/db.sock`, the Open_vSwitch database remote.
    pub fn db_remote(&self) -> String {
        format!("unix:{}", self.db_socket().display())
    }

    fn vswitchd_ctl(&self) -> PathBuf {
        self.dir().join("ovs-vswitchd.ctl")
    }

    fn vswitchd_pidfile(&self) -> PathBuf {
        self.dir().join("ovs-vswitchd.pid")
    }

    /// The running ovs-vswitchd's PID (the monitor restarts it under a new one after a crash).
    pub fn vswitchd_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.vswitchd_pidfile())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Stops ovs-vswitchd, then its monitor. A monitor that is stopped first leaves the daemon
    /// running as an orphan; a daemon stopped by SIGTERM makes its monitor reap it and exit, and
    /// only a monitor that has not within the grace is stopped too.
    fn stop_vswitchd(&mut self) {
        let Some(mut monitor) = self.vswitchd.take() else {
            return;
        };
        if let Some(pid) = self.vswitchd_pid()
            && let Ok(start_time) = process::start_time(pid)
        {
            process::stop(pid, start_time, VSWITCHD_STOP_GRACE);
        }
        if !monitor.wait_exit(VSWITCHD_STOP_GRACE) {
            monitor.stop();
        }
    }

    fn log_path(&self, program: &str) -> PathBuf {
        self.dir().join(format!("{program}.log"))
    }

    /// `ovs-vsctl --db=<this node> --timeout=20 args`. It waits for ovs-vswitchd to apply each
    /// change (so a bridge's devices exist when it returns); put `--no-wait` first in `args` to
    /// only write the database.
    pub fn vsctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let db = format!("--db={}", self.db_remote());
        let timeout = format!("--timeout={}", VSCTL_TIMEOUT.as_secs());
        let mut full = vec![db.as_str(), timeout.as_str()];
        full.extend_from_slice(args);
        Ok(run("ovs-vsctl", &full)?)
    }

    /// `ovs-appctl` to ovs-vswitchd (`dpctl/dump-flows`, `ofproto/trace`, `ovs/route/show`...).
    pub fn appctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let ctl = self.vswitchd_ctl().to_string_lossy().into_owned();
        let mut full = vec!["-t", ctl.as_str()];
        full.extend_from_slice(args);
        Ok(run("ovs-appctl", &full)?)
    }

    /// Fails unless `iface` exists and ovs-vswitchd opened it: `ovs-vsctl` exits 0 even when a
    /// port could not be created, so only `Interface.error` and `ofport` tell (dataplane.md §10).
    pub fn check_interface(&self, iface: &str) -> anyhow::Result<()> {
        let out = self.vsctl(&["--bare", "--columns=ofport,error", "list", "Interface", iface])?;
        let mut fields = out.lines();
        let ofport = fields.next().unwrap_or_default().trim();
        let error = fields.next().unwrap_or_default().trim();
        anyhow::ensure!(
            error.is_empty() && !ofport.is_empty() && ofport != "-1",
            "interface {iface} of node {} failed: ofport={ofport:?} error={error:?}\n{}",
            self.name(),
            self.logs_tail(10)
        );
        Ok(())
    }

    /// Points ovn-controller (when started) at `sb_remote` with this node's name as chassis
    /// name, geneve at `encap_ip`, and `br-int` on the netdev datapath (dataplane.md §5.3).
    /// Probes are off because a loaded 2-core test machine can miss them and reconnect.
    pub fn configure_chassis(&self, sb_remote: &str, encap_ip: Ipv4Addr) -> anyhow::Result<()> {
        self.vsctl(&[
            "set",
            "Open_vSwitch",
            ".",
            &format!("external_ids:system-id={}", self.name()),
            &format!("external_ids:hostname={}", self.name()),
            &format!("external_ids:ovn-remote={sb_remote}"),
            "external_ids:ovn-encap-type=geneve",
            &format!("external_ids:ovn-encap-ip={encap_ip}"),
            "external_ids:ovn-bridge=br-int",
            "external_ids:ovn-bridge-datapath-type=netdev",
            "external_ids:ovn-remote-probe-interval=0",
            "external_ids:ovn-openflow-probe-interval=0",
        ])
        .map(drop)
    }

    /// Starts ovn-controller inside the netns and waits until it answers on its control socket.
    /// It reads its settings from the Open_vSwitch table (see [`OvsNode::configure_chassis`]).
    pub fn start_ovn_controller(&mut self) -> anyhow::Result<()> {
        require_program("ovn-controller")?;
        anyhow::ensure!(
            self.ovn_controller.is_none(),
            "ovn-controller of node {} is already running",
            self.name()
        );
        let daemon = self.spawn("ovn-controller", &[self.db_remote()])?;
        self.ovn_controller = Some(daemon);
        wait_until(
            &format!(
                "ovn-controller of node {} to answer on its control socket",
                self.name()
            ),
            START_TIMEOUT,
            || {
                self.check_alive()?;
                Ok(self.ovn_appctl(&["version"]).is_ok())
            },
        )
    }

    /// ovn-controller's control socket. OVN 23.03's ovn-controller has no --unixctl option; it
    /// names the socket after its PID in $OVN_RUNDIR.
    fn ovn_controller_ctl(&self) -> anyhow::Result<PathBuf> {
        let pid = self
            .ovn_controller_pid()
            .ok_or_else(|| anyhow::anyhow!("ovn-controller of node {} is not running", self.name()))?;
        Ok(self.dir().join(format!("ovn-controller.{pid}.ctl")))
    }

    /// `ovn-appctl` to ovn-controller (`connection-status`, `recompute`...).
    pub fn ovn_appctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let ctl = self.ovn_controller_ctl()?.to_string_lossy().into_owned();
        let mut full = vec!["-t", ctl.as_str()];
        full.extend_from_slice(args);
        Ok(run("ovs-appctl", &full)?)
    }

    /// The node's ovsdb-server (to pause it with SIGSTOP, say).
    pub fn ovsdb_pid(&self) -> Option<u32> {
        self.ovsdb.as_ref().and_then(Daemon::pid)
    }

    pub fn ovn_controller_pid(&self) -> Option<u32> {
        self.ovn_controller.as_ref().and_then(Daemon::pid)
    }

    /// Graceful stop (SIGTERM, SIGKILL after 5 s). The chassis stays in SB, as after a restart.
    pub fn stop_ovn_controller(&mut self) {
        if let Some(mut d) = self.ovn_controller.take() {
            d.stop();
        }
    }

    /// Crash (SIGKILL).
    pub fn kill_ovn_controller(&mut self) {
        if let Some(mut d) = self.ovn_controller.take() {
            d.kill();
        }
    }

    fn log(&self, program: &str) -> String {
        std::fs::read_to_string(self.log_path(program)).unwrap_or_default()
    }

    pub fn ovsdb_log(&self) -> String {
        self.log("ovsdb-server")
    }

    pub fn vswitchd_log(&self) -> String {
        self.log("ovs-vswitchd")
    }

    /// Every run of ovn-controller on this node, appended.
    pub fn ovn_controller_log(&self) -> String {
        self.log("ovn-controller")
    }

    /// The last `n` lines of each daemon's log, headed by its name, for failure messages.
    pub fn logs_tail(&self, n: usize) -> String {
        let mut out = String::new();
        for program in ["ovsdb-server", "ovs-vswitchd", "ovn-controller"] {
            let log = self.log(program);
            if log.is_empty() {
                continue;
            }
            let lines: Vec<&str> = log.lines().collect();
            let _ = writeln!(out, "--- {program} of node {} ---", self.name());
            out.push_str(&lines[lines.len().saturating_sub(n)..].join("\n"));
            out.push('\n');
        }
        out
    }

    /// Fails, with the log tail, if a daemon this node started has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for daemon in [&mut self.ovsdb, &mut self.vswitchd, &mut self.ovn_controller]
            .into_iter()
            .flatten()
        {
            daemon.check_alive()?;
        }
        Ok(())
    }

    /// Joins two nodes with an underlay as the userspace datapath needs it for geneve
    /// (dataplane.md §5.4): a veth pair with one end in each node, each end a port of a netdev
    /// bridge `br-ul`, and the node's address on br-ul's internal port, where ovs-vswitchd's
    /// tunnel code finds the route. MTU 1500 throughout, so pods need MTU 1400 for the 58 bytes
    /// of geneve overhead.
    pub fn connect_underlay(
        a: &OvsNode,
        a_ip: Ipv4Addr,
        b: &OvsNode,
        b_ip: Ipv4Addr,
        prefix_len: u8,
    ) -> anyhow::Result<()> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Interface names are at most 15 bytes: "ul" + PID (7 digits max) + n + side.
        let veth_a = format!("ul{}x{n}a", std::process::id());
        let veth_b = format!("ul{}x{n}b", std::process::id());
        // Both ends are born in their namespaces (where a parallel test cannot hold the names).
        veth_pair(a.name(), &veth_a, b.name(), &veth_b, 1500)?;
        for (node, veth, ip) in [(a, &veth_a, a_ip), (b, &veth_b, b_ip)] {
            add_underlay_bridge(&node.db_remote(), VSCTL_TIMEOUT, veth)?;
            node.check_interface(UNDERLAY_BRIDGE)?;
            node.check_interface(veth)?;
            let ns = node.netns();
            ns.ip(&["link", "set", veth, "up"])?;
            ns.ip(&[
                "addr",
                "replace",
                &format!("{ip}/{prefix_len}"),
                "dev",
                UNDERLAY_BRIDGE,
            ])?;
            ns.ip(&["link", "set", UNDERLAY_BRIDGE, "up"])?;
        }
        Ok(())
    }
}

impl Drop for OvsNode {
    /// Stops the daemons by PID, clients before the database they use, each with SIGTERM and
    /// then SIGKILL after 5 s; then the fields drop: the netns is deleted (nothing runs in it
    /// any more) and the directory removed.
    fn drop(&mut self) {
        if let Some(mut d) = self.ovn_controller.take() {
            d.stop();
        }
        self.stop_vswitchd();
        if let Some(mut d) = self.ovsdb.take() {
            d.stop();
        }
    }
}
