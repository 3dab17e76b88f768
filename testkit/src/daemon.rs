//! A daemon run as our child process: we hold its PID, stop it with SIGTERM (then SIGKILL) and
//! reap it, so no zombie or stray process outlives a test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use crate::process::{self, Lifetime};

/// How long [`Daemon::stop`] gives a daemon after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(5);

pub struct Daemon {
    name: String,
    child: Option<Child>,
    /// With the PID, what names the process for [`process::stop`].
    start_time: u64,
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
        let mut cmd = Command::new(program);
        cmd.args(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        // If the test process dies without dropping the fixture (killed, aborted), the kernel
        // kills the daemon too, so nothing outlives a test run.
        let mut child = process::spawn_logged(name, cmd, log, Lifetime::ThisProcess)?;
        // Our own child is not reaped until we wait for it, so its stat is there to read.
        let start_time = match process::start_time(child.id()) {
            Ok(start_time) => start_time,
            Err(reason) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(process::ProcessError::Proc {
                    component: name.to_owned(),
                    pid: child.id(),
                    reason,
                }
                .into());
            }
        };
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
            start_time,
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
        process::log_tail(&self.log, n)
    }

    /// Fails with the log tail if the daemon has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            Ok(())
        } else {
            anyhow::bail!("{} exited; log:\n{}", self.name, self.log_tail(20))
        }
    }

    /// Waits up to `timeout` for the daemon to exit by itself and reaps it; false if it is
    /// still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while self.is_running() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.child.take();
        true
    }

    /// SIGTERM, wait up to 5 s, then SIGKILL; reaps the process either way.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::stop(child.id(), self.start_time, STOP_GRACE);
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits up to `timeout` for the daemon to exit by itself and returns how it
    /// exited; if it has not, SIGKILL and an error. Either way the process is reaped.
    pub fn terminate(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            anyhow::bail!("{} was already stopped", self.name);
        };
        let killed = process::stop(child.id(), self.start_time, timeout);
        let status = child.wait()?;
        if killed {
            anyhow::bail!("{} did not exit within {timeout:?} of SIGTERM; killed", self.name);
        }
        Ok(status)
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
