//! `ovsdb-server` fixtures: one server, or a 3-member RAFT cluster, in a temporary directory.

use crate::free_port;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::daemon::Daemon;
use crate::run;
use crate::wait::wait_until;

/// Debian's `ovn-common` / `openvswitch-common` schema files.
pub const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";
pub const SB_SCHEMA: &str = "/usr/share/ovn/ovn-sb.ovsschema";
pub const VSWITCH_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

const START_TIMEOUT: Duration = Duration::from_secs(20);

fn schema_name(schema: &Path) -> anyhow::Result<String> {
    Ok(run("ovsdb-tool", &["schema-name", &schema.to_string_lossy()])?
        .trim()
        .to_owned())
}

fn require(path: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        Path::new(path).exists(),
        "{path} is missing: run scripts/install-deps.sh"
    );
    Ok(())
}

/// One `ovsdb-server` serving one database on a unix socket (and optionally TCP on 127.0.0.1).
pub struct OvsdbServer {
    dir: TempDir,
    pub database: String,
    db_file: PathBuf,
    tcp_port: Option<u16>,
    /// Extra `--remote` arguments, such as a second socket.
    extra_remotes: Vec<String>,
    daemon: Option<Daemon>,
}

impl OvsdbServer {
    /// A standalone OVN_Northbound database.
    pub fn nb() -> anyhow::Result<Self> {
        Self::standalone(NB_SCHEMA)
    }

    /// OVN_Northbound as a one-member RAFT cluster: what production runs, and what gives real
    /// transaction ids to `monitor_cond_since` (a standalone database reports all zeros).
    pub fn nb_clustered() -> anyhow::Result<Self> {
        Self::clustered(NB_SCHEMA)
    }

    /// A standalone Open_vSwitch database.
    pub fn vswitch() -> anyhow::Result<Self> {
        Self::standalone(VSWITCH_SCHEMA)
    }

    pub fn standalone(schema: impl AsRef<Path>) -> anyhow::Result<Self> {
        let schema = schema.as_ref();
        require(&schema.to_string_lossy())?;
        let mut server = Self::prepare(schema)?;
        run(
            "ovsdb-tool",
            &[
                "create",
                &server.db_file.to_string_lossy(),
                &schema.to_string_lossy(),
            ],
        )?;
        server.start()?;
        Ok(server)
    }

    pub fn clustered(schema: impl AsRef<Path>) -> anyhow::Result<Self> {
        let schema = schema.as_ref();
        require(&schema.to_string_lossy())?;
        let mut server = Self::prepare(schema)?;
        let raft = format!("unix:{}", server.dir.path().join("raft.sock").display());
        run(
            "ovsdb-tool",
            &[
                "create-cluster",
                &server.db_file.to_string_lossy(),
                &schema.to_string_lossy(),
                &raft,
            ],
        )?;
        server.start()?;
        Ok(server)
    }

    fn prepare(schema: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("kovn-ovsdb-").tempdir()?;
        let db_file = dir.path().join("db");
        Ok(Self {
            database: schema_name(schema)?,
            db_file,
            dir,
            tcp_port: None,
            extra_remotes: Vec::new(),
            daemon: None,
        })
    }

    /// Also listens on TCP 127.0.0.1 from the next start on.
    pub fn with_tcp(mut self) -> anyhow::Result<Self> {
        self.tcp_port = Some(free_port()?);
        self.restart()?;
        Ok(self)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("db.sock")
    }

    /// The client remote: `unix:<dir>/db.sock`.
    pub fn remote(&self) -> String {
        format!("unix:{}", self.socket().display())
    }

    pub fn tcp_remote(&self) -> Option<String> {
        self.tcp_port.map(|p| format!("tcp:127.0.0.1:{p}"))
    }

    fn unixctl(&self) -> PathBuf {
        self.dir.path().join("ctl")
    }

    /// How many monitors clients hold on the server (`memory/show`'s `monitors:N`): a client
    /// that keeps a replica (a controller) has one from when it connected.
    pub fn monitors(&self) -> anyhow::Result<u64> {
        let ctl = self.unixctl().display().to_string();
        let out = run("ovs-appctl", &["-t", &ctl, "memory/show"])?;
        out.split_whitespace()
            .find_map(|w| w.strip_prefix("monitors:")?.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no monitors:N in memory/show: {out:?}"))
    }

    /// Listen on an additional remote (`punix:PATH`) from the next start on.
    pub fn add_remote(&mut self, remote: impl Into<String>) {
        self.extra_remotes.push(remote.into());
    }

    /// Forget the extra remotes from the next start on.
    pub fn clear_extra_remotes(&mut self) {
        self.extra_remotes.clear();
    }

    /// Starts the server and waits until its socket accepts connections.
    pub fn start(&mut self) -> anyhow::Result<()> {
        self.start_with(true)
    }

    /// Starts the server listening only on the extra remotes (not the usual socket), so clients
    /// that know only the usual socket cannot see what happens meanwhile.
    pub fn start_hidden(&mut self) -> anyhow::Result<()> {
        self.start_with(false)
    }

    fn start_with(&mut self, main_socket: bool) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.daemon.is_none(),
            "ovsdb-server for {} is already running",
            self.database
        );
        let mut args = Vec::new();
        if main_socket {
            args.push(format!("--remote=punix:{}", self.socket().display()));
            if let Some(port) = self.tcp_port {
                args.push(format!("--remote=ptcp:{port}:127.0.0.1"));
            }
        }
        args.extend(self.extra_remotes.iter().map(|r| format!("--remote={r}")));
        args.push(format!("--unixctl={}", self.unixctl().display()));
        args.push(format!("--pidfile={}", self.dir.path().join("pid").display()));
        args.push("-vconsole:info".into());
        args.push(self.db_file.to_string_lossy().into_owned());
        let dir = self.dir.path().to_owned();
        let envs = [
            ("OVS_RUNDIR", dir.as_path()),
            ("OVS_DBDIR", dir.as_path()),
            ("OVS_LOGDIR", dir.as_path()),
        ];
        let mut daemon = Daemon::spawn(
            &format!("ovsdb-server {}", self.database),
            "ovsdb-server",
            &args,
            &self.dir.path().join("ovsdb-server.log"),
            &envs,
        )?;
        let mut sockets: Vec<PathBuf> = self
            .extra_remotes
            .iter()
            .filter_map(|r| r.strip_prefix("punix:"))
            .map(PathBuf::from)
            .collect();
        if main_socket {
            sockets.push(self.socket());
        }
        let tcp = if main_socket { self.tcp_port } else { None };
        let ctl = self.unixctl();
        wait_until(
            &format!("ovsdb-server {} to listen", self.database),
            START_TIMEOUT,
            || {
                daemon.check_alive()?;
                let unix_ok = sockets.iter().all(|p| UnixStream::connect(p).is_ok());
                let tcp_ok = tcp.is_none_or(|p| std::net::TcpStream::connect(("127.0.0.1", p)).is_ok());
                Ok(unix_ok && tcp_ok && ctl.exists())
            },
        )?;
        self.daemon = Some(daemon);
        Ok(())
    }

    /// Graceful stop (SIGTERM).
    pub fn stop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            d.stop();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// Crash (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            d.kill();
        }
        // The server did not get to remove its socket file; a restart replaces it.
        let _ = std::fs::remove_file(self.socket());
    }

    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        self.start()
    }

    pub fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().and_then(Daemon::pid)
    }

    pub fn log(&self) -> String {
        self.daemon.as_ref().map(Daemon::log).unwrap_or_default()
    }

    /// `ovn-nbctl` against this server.
    pub fn nbctl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.nbctl_at(&self.remote(), args)
    }

    /// `ovn-nbctl` against another remote of this server (see [`OvsdbServer::add_remote`]).
    pub fn nbctl_at(&self, remote: &str, args: &[&str]) -> anyhow::Result<String> {
        let db = format!("--db={remote}");
        let mut full = vec![db.as_str(), "--no-leader-only", "--timeout=20"];
        full.extend_from_slice(args);
        Ok(run("ovn-nbctl", &full)?)
    }

    /// `ovs-vsctl --no-wait` against this server.
    pub fn vsctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let db = format!("--db={}", self.remote());
        let mut full = vec![db.as_str(), "--no-wait", "--timeout=20"];
        full.extend_from_slice(args);
        Ok(run("ovs-vsctl", &full)?)
    }

    /// `ovs-appctl` to this server's control socket.
    pub fn appctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let ctl = self.unixctl().to_string_lossy().into_owned();
        let mut full = vec!["-t", ctl.as_str()];
        full.extend_from_slice(args);
        Ok(run("ovs-appctl", &full)?)
    }
}

impl Drop for OvsdbServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three `ovsdb-server`s forming one RAFT cluster over unix sockets, as Kube-OVN's ovn-central
/// runs NB.
pub struct RaftCluster {
    dir: TempDir,
    pub database: String,
    pub members: Vec<RaftMember>,
}

pub struct RaftMember {
    pub name: String,
    dir: PathBuf,
    db_file: PathBuf,
    daemon: Option<Daemon>,
}

impl RaftMember {
    pub fn socket(&self) -> PathBuf {
        self.dir.join(format!("{}.sock", self.name))
    }

    pub fn remote(&self) -> String {
        format!("unix:{}", self.socket().display())
    }

    fn unixctl(&self) -> PathBuf {
        self.dir.join(format!("{}.ctl", self.name))
    }

    fn raft_address(&self) -> String {
        format!("unix:{}", self.dir.join(format!("{}.raft", self.name)).display())
    }

    fn start(&mut self) -> anyhow::Result<()> {
        let args = vec![
            format!("--remote=punix:{}", self.socket().display()),
            format!("--unixctl={}", self.unixctl().display()),
            format!(
                "--pidfile={}",
                self.dir.join(format!("{}.pid", self.name)).display()
            ),
            "-vconsole:info".into(),
            self.db_file.to_string_lossy().into_owned(),
        ];
        let dir = self.dir.clone();
        let envs = [
            ("OVS_RUNDIR", dir.as_path()),
            ("OVS_DBDIR", dir.as_path()),
            ("OVS_LOGDIR", dir.as_path()),
        ];
        let log = self.dir.join(format!("{}.log", self.name));
        self.daemon = Some(Daemon::spawn(
            &format!("ovsdb-server {}", self.name),
            "ovsdb-server",
            &args,
            &log,
            &envs,
        )?);
        Ok(())
    }

    pub fn is_running(&self) -> bool {
        self.daemon.is_some()
    }

    /// Crash the member (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            d.kill();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    fn cluster_status(&self, database: &str, field: &str) -> anyhow::Result<String> {
        let ctl = self.unixctl().to_string_lossy().into_owned();
        let status = run("ovs-appctl", &["-t", &ctl, "cluster/status", database])?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .map(|r| r.trim().to_owned())
            .ok_or_else(|| anyhow::anyhow!("no {field} in cluster/status of {}: {status}", self.name))
    }

    /// `Role: leader|follower|candidate` from `cluster/status`.
    pub fn role(&self, database: &str) -> anyhow::Result<String> {
        self.cluster_status(database, "Role: ")
    }

    /// Whether the member has finished joining (`Status: cluster member`).
    pub fn is_member(&self, database: &str) -> anyhow::Result<bool> {
        Ok(self.cluster_status(database, "Status: ")? == "cluster member")
    }
}

impl RaftCluster {
    /// Creates and starts a 3-member cluster of `schema` and waits for a leader.
    pub fn start(schema: &str) -> anyhow::Result<Self> {
        require(schema)?;
        let dir = tempfile::Builder::new().prefix("kovn-raft-").tempdir()?;
        let database = schema_name(Path::new(schema))?;
        let mut members: Vec<RaftMember> = ["m1", "m2", "m3"]
            .iter()
            .map(|n| RaftMember {
                name: (*n).to_owned(),
                dir: dir.path().to_owned(),
                db_file: dir.path().join(format!("{n}.db")),
                daemon: None,
            })
            .collect();
        let first = members[0].raft_address();
        run(
            "ovsdb-tool",
            &[
                "create-cluster",
                &members[0].db_file.to_string_lossy(),
                schema,
                &first,
            ],
        )?;
        for m in &members[1..] {
            run(
                "ovsdb-tool",
                &[
                    "join-cluster",
                    &m.db_file.to_string_lossy(),
                    &database,
                    &m.raft_address(),
                    &first,
                ],
            )?;
        }
        for m in &mut members {
            m.start()?;
        }
        let cluster = Self {
            dir,
            database,
            members,
        };
        // A member that has not finished joining does not count toward a majority: wait for all
        // three, or killing the leader could leave no quorum.
        wait_until(
            &format!("all {} cluster members to join", cluster.database),
            START_TIMEOUT,
            || {
                for m in &cluster.members {
                    if !m.is_member(&cluster.database)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            },
        )?;
        cluster.wait_for_leader(START_TIMEOUT)?;
        Ok(cluster)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Every member's remote, comma-separated, as `--ovn-nb-addr` takes them.
    pub fn remotes(&self) -> String {
        self.members
            .iter()
            .map(RaftMember::remote)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the running member that says it is the leader.
    pub fn leader(&self) -> anyhow::Result<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if m.is_running() && m.role(&self.database)? == "leader" {
                return Ok(i);
            }
        }
        anyhow::bail!("no running member of the {} cluster is leader", self.database)
    }

    pub fn wait_for_leader(&self, timeout: Duration) -> anyhow::Result<usize> {
        let mut found = 0;
        wait_until(
            &format!("a {} cluster leader", self.database),
            timeout,
            || match self.leader() {
                Ok(i) => {
                    found = i;
                    Ok(true)
                }
                Err(e) => Err(e),
            },
        )?;
        Ok(found)
    }

    /// `ovn-nbctl` against the members still running (leader-only, as its default).
    pub fn nbctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let remotes: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.is_running())
            .map(RaftMember::remote)
            .collect();
        let db = format!("--db={}", remotes.join(","));
        let mut full = vec![db.as_str(), "--timeout=20"];
        full.extend_from_slice(args);
        Ok(run("ovn-nbctl", &full)?)
    }
}
