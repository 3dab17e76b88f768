//! The real `kube-ovn-controller` binary as a child process of the test: it reaches the test's
//! kube-apiserver through the administrator's kubeconfig file and OVN central through its NB/SB remotes, and is stopped by
//! PID — SIGTERM for a clean stop, SIGKILL for a crash.

use std::net::SocketAddr;
use std::path::PathBuf;

use kube_ovn_testkit::{Daemon, wait_until_async};

use super::{Env, WAIT};

/// Where controller processes of one test come from: the API server's kubeconfig, and the flags
/// every process gets.
pub struct Binary {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    flags: Vec<String>,
    spawned: usize,
}

/// One controller process.
pub struct Process {
    pub name: String,
    pub metrics_addr: SocketAddr,
    daemon: Daemon,
}

impl Binary {
    /// Processes that reach `env`'s API server as the administrator (its kubeconfig); every
    /// process gets the harness's flags for `env` (OVN remotes, endpoints on 127.0.0.1, no leader
    /// election unless `flags` asks for it) and then `flags`.
    pub fn new(env: &Env, flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = env.server.admin_kubeconfig();
        let mut all = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--ovn-nb-addr={}", env.ovn.nb_remote()),
            format!("--ovn-sb-addr={}", env.ovn.sb_remote()),
            "--bind-address=127.0.0.1".to_owned(),
            "--pprof-port=0".to_owned(),
            "--leader-elect=false".to_owned(),
        ];
        let given: Vec<String> = env
            .extra_flags
            .iter()
            .cloned()
            .chain(flags.iter().map(|s| (*s).to_owned()))
            .collect();
        // A flag given by the environment or the test replaces the default above.
        all.retain(|a| {
            let flag = a.split('=').next().unwrap_or_default();
            !given.iter().any(|g| g.split('=').next() == Some(flag))
        });
        all.extend(given);
        Self {
            dir,
            kubeconfig,
            flags: all,
            spawned: 0,
        }
    }

    pub fn kubeconfig(&self) -> &std::path::Path {
        &self.kubeconfig
    }

    /// Starts a controller process named `name` (its Lease identity, `--pod-name`) with `extra`
    /// flags, and waits until it serves its endpoints.
    pub async fn spawn(&mut self, name: &str, extra: &[&str]) -> Process {
        self.spawn_with_env(name, extra, &[]).await
    }

    /// [`Binary::spawn`] with environment variables set for the process (e.g. the crash drill's
    /// `KUBE_OVN_CRASH_AT`).
    pub async fn spawn_with_env(&mut self, name: &str, extra: &[&str], envs: &[(&str, &str)]) -> Process {
        self.spawned += 1;
        let log = self.dir.path().join(format!("{name}-{}.log", self.spawned));
        let mut args = self.flags.clone();
        args.push(format!("--pod-name={name}"));
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let envs: Vec<(&str, &std::path::Path)> =
            envs.iter().map(|(k, v)| (*k, std::path::Path::new(*v))).collect();
        let mut daemon = Daemon::spawn(
            name,
            env!("CARGO_BIN_EXE_kube-ovn-controller"),
            &args,
            &log,
            &envs,
        )
        .unwrap();
        let mut addr = None;
        let waited = wait_until_async(
            &format!("controller process {name} to serve /metrics"),
            WAIT,
            || {
                addr = endpoint_in(&daemon.log());
                // An exited process ends the wait too, and fails below.
                std::future::ready(Ok(addr.is_some() || !daemon.is_running()))
            },
        )
        .await;
        if let Err(e) = waited.and_then(|()| daemon.check_alive()) {
            panic!("{e}; its log:\n{}", daemon.log_tail(30));
        }
        Process {
            name: name.to_owned(),
            metrics_addr: addr.unwrap(),
            daemon,
        }
    }
}

/// The address in the controller's JSON log line announcing its endpoints.
fn endpoint_in(log: &str) -> Option<SocketAddr> {
    log.lines()
        .filter(|l| l.contains("metrics and health endpoints"))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["addr"].as_str()?.parse().ok())
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.daemon.pid().expect("the process was stopped")
    }

    /// SIGKILL by PID: a crash, nothing is cleaned up. Fails (with the log) if the process had
    /// already exited by itself. Says whether the controller had got past its start-up (it
    /// logs `kube-ovn-controller running` once its caches are filled and it reconciles).
    pub fn kill(mut self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        const SIGKILL: i32 = 9;
        let running = self.daemon.log().contains("kube-ovn-controller running");
        let status = self.daemon.kill();
        let killed = status.and_then(|s| s.signal()) == Some(SIGKILL);
        assert!(
            killed,
            "{} had exited by itself ({status:?}) before it was killed; log:\n{}",
            self.name,
            self.log_tail(30)
        );
        running
    }

    /// SIGKILL for a process armed with a crash point (see [`Process::crashed_at`]), which may
    /// have reached it just before: `true` if it died at `point` by itself, `false` if the
    /// SIGKILL ended it, an error if it ended any other way.
    pub fn kill_armed(mut self, point: &str) -> anyhow::Result<bool> {
        use std::os::unix::process::ExitStatusExt;
        const SIGKILL: i32 = 9;
        let status = self.daemon.kill();
        if status.and_then(|s| s.signal()) == Some(SIGKILL) {
            return Ok(false);
        }
        self.aborted_at(status, point).map(|()| true)
    }

    /// Whether the process has exited by itself.
    pub fn has_exited(&mut self) -> bool {
        !self.daemon.is_running()
    }

    /// Reaps a process that exited by itself, and checks that it died at `point` of the crash
    /// drill (aborted: SIGABRT, after saying so).
    pub fn crashed_at(mut self, point: &str) -> anyhow::Result<()> {
        let status = self.daemon.kill();
        self.aborted_at(status, point)
    }

    fn aborted_at(&self, status: Option<std::process::ExitStatus>, point: &str) -> anyhow::Result<()> {
        use std::os::unix::process::ExitStatusExt;
        const SIGABRT: i32 = 6;
        anyhow::ensure!(
            status.and_then(|s| s.signal()) == Some(SIGABRT)
                && self
                    .daemon
                    .log()
                    .contains(&format!("crash point {point} reached")),
            "{} ended ({status:?}) without aborting at {point}; log:\n{}",
            self.name,
            self.log_tail(30)
        );
        Ok(())
    }

    /// SIGTERM by PID: a clean stop. Fails (with the log) unless the process exits by itself,
    /// successfully, within `timeout`.
    pub fn stop(mut self, timeout: std::time::Duration) {
        match self.daemon.terminate(timeout) {
            Ok(status) if status.success() => {}
            Ok(status) => panic!("{} exited with {status}; log:\n{}", self.name, self.log_tail(30)),
            Err(e) => panic!("{e}; log:\n{}", self.log_tail(30)),
        }
    }

    pub fn is_running(&mut self) -> bool {
        self.daemon.is_running()
    }

    pub fn log_tail(&self, n: usize) -> String {
        self.daemon.log_tail(n)
    }
}
