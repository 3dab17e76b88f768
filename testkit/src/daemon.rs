//! A daemon run as our child process: we hold its PID, stop it with SIGTERM (then SIGKILL) and
//! reap it, so no zombie or stray process outlives a test.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Forks `cmd` on the keeper thread (see [`Daemon::spawn`]).
fn spawn_on_keeper(cmd: Command) -> std::io::Result<Child> {
    static KEEPER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("daemon-keeper".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("cannot start the daemon keeper thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    keeper
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("the daemon keeper thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("the daemon keeper thread is gone"))?
}

pub struct Daemon {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    /// Starts `program` with `args`; its stdout and stderr go to `log`.
    pub fn spawn(
        name: &str,
        program: &str,
        args: &[String],
        log: &Path,
        envs: &[(&str, &Path)],
    ) -> anyhow::Result<Self> {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        // If the test process dies without dropping the fixture (killed, aborted), the kernel kills
        // the daemon too, so nothing outlives a test run. The signal follows the spawning *thread*,
        // so the fork happens on a keeper thread that lives as long as the process: a fixture made
        // on a short-lived thread (tokio's blocking pool retires idle threads after 10 s) would
        // otherwise lose its daemons mid-test.
        #[allow(
            unsafe_code,
            reason = "pre_exec runs between fork and exec; prctl is async-signal-safe"
        )]
        // SAFETY: the closure only calls prctl(2), which allocates nothing and takes no locks.
        unsafe {
            cmd.pre_exec(|| nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from));
        }
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = spawn_on_keeper(cmd).map_err(|e| {
            anyhow::anyhow!("{name}: cannot start {program}: {e} (run scripts/install-deps.sh)")
        })?;
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
            log: log.to_owned(),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The daemon's output so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Fails with the log tail if the daemon has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            Ok(())
        } else {
            anyhow::bail!("{} exited; log:\n{}", self.name, self.log_tail(20))
        }
    }

    /// SIGTERM, wait up to 5 s, then SIGKILL; reaps the process either way.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
            let _ = kill(pid, Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits up to `timeout` for the daemon to exit by itself and returns how it
    /// exited; if it has not, SIGKILL and an error. Either way the process is reaped.
    pub fn terminate(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            anyhow::bail!("{} was already stopped", self.name);
        };
        let pid = Pid::from_raw(i32::try_from(child.id())?);
        kill(pid, Signal::SIGTERM)?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
        anyhow::bail!("{} did not exit within {timeout:?} of SIGTERM; killed", self.name)
    }

    /// SIGKILL by PID: the daemon gets no chance to clean up, as in a crash. Returns how it
    /// ended (killed by signal 9, unless it had exited by itself before), once reaped.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        child.wait().ok()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}
