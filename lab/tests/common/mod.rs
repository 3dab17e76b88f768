//! Helpers shared by the lab's integration tests: bounded waits, the `kube-ovn-lab` binary as a
//! child process (`apiserver`, and whole labs in [`lab`]), and the built kubectl ([`kubectl`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_ovn_testkit::{Daemon, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub mod agent;
pub mod kubectl;
pub mod lab;

/// How long any single condition may take before a test fails. Generous: the machine has two
/// cores and may be running a benchmark at the same time.
pub const WAIT: Duration = Duration::from_secs(30);

/// How long `kube-ovn-lab apiserver` may take to be ready with our CRDs served.
pub const START: Duration = Duration::from_secs(90);

/// `kube-ovn-lab apiserver` (upstream etcd and kube-apiserver, our CRDs served) as a child
/// process on `127.0.0.1:0`; its address comes from the kubeconfig it writes once the API is
/// ready. Stopped by PID (SIGTERM or SIGKILL), never by name.
pub struct LabProcess {
    daemon: Daemon,
    pub addr: SocketAddr,
    pub kubeconfig: PathBuf,
}

impl LabProcess {
    /// Starts the binary with its kubeconfig and log in `dir`, plus `extra` arguments, and waits
    /// until it accepts connections.
    pub fn start(dir: &Path, extra: &[String]) -> anyhow::Result<Self> {
        let kubeconfig = dir.join("kubeconfig");
        // A previous run's kubeconfig names a port that is gone.
        let _ = std::fs::remove_file(&kubeconfig);
        let mut args = vec![
            "apiserver".to_owned(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--kubeconfig-out".into(),
            kubeconfig.display().to_string(),
        ];
        args.extend_from_slice(extra);
        let mut daemon = Daemon::spawn(
            "kube-ovn-lab apiserver",
            env!("CARGO_BIN_EXE_kube-ovn-lab"),
            &args,
            &dir.join("apiserver.log"),
            &[],
        )?;
        let mut addr = None;
        // kube-apiserver's start-up and the CRDs take a few seconds, more on a loaded machine.
        wait_until(
            "kube-apiserver to be ready (the kubeconfig written)",
            START,
            || {
                daemon.check_alive()?;
                let Ok(text) = std::fs::read_to_string(&kubeconfig) else {
                    return Ok(false);
                };
                addr = server_address(&text);
                Ok(addr.is_some())
            },
        )?;
        let addr = addr.expect("awaited above");
        wait_until("kube-apiserver to accept connections", WAIT, || {
            daemon.check_alive()?;
            Ok(std::net::TcpStream::connect(addr).is_ok())
        })?;
        Ok(Self {
            daemon,
            addr,
            kubeconfig,
        })
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// A `kube::Client` as the administrator, from the kubeconfig written.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        Ok(kube_ovn_support::kube_client(Some(&self.kubeconfig)).await?)
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.daemon.pid().expect("running")).expect("a pid"))
    }

    /// SIGTERM by PID, then waits (bounded) for the process to exit.
    pub fn terminate(&mut self) -> anyhow::Result<()> {
        kill(self.pid(), Signal::SIGTERM)?;
        let daemon = &mut self.daemon;
        wait_until("kube-ovn-lab apiserver to exit on SIGTERM", WAIT, || {
            Ok(!daemon.is_running())
        })
    }

    /// SIGKILL by PID, as in a crash; reaps the process.
    pub fn kill(&mut self) {
        self.daemon.kill();
    }

    pub fn log(&self) -> String {
        self.daemon.log()
    }
}

/// The `server:` URL's address in a kubeconfig.
fn server_address(kubeconfig: &str) -> Option<SocketAddr> {
    kubeconfig
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("server: http://")
                .or_else(|| l.strip_prefix("server: https://"))
        })
        .and_then(|a| a.trim().parse().ok())
}
