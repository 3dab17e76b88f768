//! Processes by PID, for the tests' daemons ([`crate::Daemon`]) and the lab's (`kube-ovn-lab
//! up`): started with their output appended to a log file, identified by PID and start time,
//! stopped by PID with SIGTERM and then SIGKILL after a bound. Never by name: other tests and
//! other labs run the same programs on this machine.
//!
//! Two lifetimes ([`Lifetime`]): a test's daemon dies with the test process even if the test
//! is killed before it can clean up; a lab's process is detached (its own process group) so
//! that it outlives `up` and a Ctrl-C to it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("{component}: cannot open its log {log}: {source}")]
    Log {
        component: String,
        log: PathBuf,
        source: std::io::Error,
    },
    #[error("{component}: cannot start {program}: {source} (run scripts/install-deps.sh)")]
    Spawn {
        component: String,
        program: String,
        source: std::io::Error,
    },
    #[error("cannot read /proc/{pid}/stat of {component}: {reason}")]
    Proc {
        component: String,
        pid: u32,
        reason: String,
    },
}

/// How long a started process may live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// Killed by the kernel (SIGKILL) when this process dies, so nothing outlives a test run
    /// whose fixtures were never dropped (killed, aborted).
    ThisProcess,
    /// Its own process group, not tied to us: it outlives this process, and a Ctrl-C to our
    /// terminal does not reach it. Someone stops it later by PID (`down`).
    Detached,
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Forks `cmd` on the keeper thread (see [`spawn_logged`]).
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

/// Starts `cmd` (program, arguments and environment set) as `component`, with stdin from
/// /dev/null and stdout and stderr appended to `log` (its directory is made if missing).
pub fn spawn_logged(
    component: &str,
    mut cmd: Command,
    log: &Path,
    lifetime: Lifetime,
) -> Result<Child, ProcessError> {
    let log_err = |source| ProcessError::Log {
        component: component.to_owned(),
        log: log.to_owned(),
        source,
    };
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(log_err)?;
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(log_err)?;
    let err = out.try_clone().map_err(log_err)?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let program = program_of(&cmd);
    let spawned = match lifetime {
        Lifetime::Detached => cmd.process_group(0).spawn(),
        Lifetime::ThisProcess => {
            // The death signal follows the spawning *thread*, so the fork happens on a keeper
            // thread that lives as long as the process: a fixture made on a short-lived thread
            // (tokio's blocking pool retires idle threads after 10 s) would otherwise lose its
            // daemons mid-test.
            #[allow(
                unsafe_code,
                reason = "pre_exec runs between fork and exec; prctl is async-signal-safe"
            )]
            // SAFETY: the closure only calls prctl(2), which allocates nothing and takes no locks.
            unsafe {
                cmd.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
                });
            }
            spawn_on_keeper(cmd)
        }
    };
    spawned.map_err(|source| ProcessError::Spawn {
        component: component.to_owned(),
        program,
        source,
    })
}

fn program_of(cmd: &Command) -> String {
    cmd.get_program().to_string_lossy().into_owned()
}

/// The fields of `/proc/<pid>/stat` from field 3 (the state) on. The command name (field 2) is
/// in parentheses and may hold spaces: the split is after the last ')'.
fn stat_fields(pid: u32) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    let rest = text.rsplit_once(')').map(|(_, r)| r).ok_or("no ')' in stat")?;
    Ok(rest.split_whitespace().map(str::to_owned).collect())
}

/// Field 22 of `/proc/<pid>/stat` (start time in clock ticks since boot) and the state letter.
fn stat(pid: u32) -> Result<(char, u64), String> {
    let fields = stat_fields(pid)?;
    let state = fields.first().and_then(|s| s.chars().next()).ok_or("no state")?;
    // The fields start at number 3, so field 22 is index 19.
    let start = fields
        .get(19)
        .and_then(|s| s.parse().ok())
        .ok_or("no start time")?;
    Ok((state, start))
}

/// The nice value of process `pid` (field 19 of `/proc/<pid>/stat`).
pub fn nice(pid: u32) -> Result<i32, String> {
    stat_fields(pid)?
        .get(16)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "no nice value in stat".to_owned())
}

/// The start time of process `pid`, which with the PID names it for good: a later process
/// that gets the same PID has another start time.
pub fn start_time(pid: u32) -> Result<u64, String> {
    stat(pid).map(|(_, start)| start)
}

/// Whether the process recorded as (`pid`, `start_time`) still runs. A zombie counts as gone
/// (init here reaps orphans only every few seconds, and a test's own child is a zombie until
/// it is reaped), and so does another process that got the same PID later.
pub fn alive(pid: u32, start_time: u64) -> bool {
    matches!(stat(pid), Ok((state, start)) if start == start_time && state != 'Z' && state != 'X')
}

/// Stops the recorded process: SIGTERM, up to `grace` for it to go, then SIGKILL. Returns
/// whether it had to be killed. A process that is already gone is fine.
pub fn stop(pid: u32, start_time: u64, grace: Duration) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if !alive(pid, start_time) {
        return false;
    }
    let _ = kill(Pid::from_raw(raw), Signal::SIGTERM);
    if wait_gone(pid, start_time, grace) {
        return false;
    }
    // Checked again right before the signal: the PID must still be the one we started.
    if alive(pid, start_time) {
        let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
        wait_gone(pid, start_time, Duration::from_secs(5));
    }
    true
}

fn wait_gone(pid: u32, start_time: u64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !alive(pid, start_time) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The last `n` lines of a log file (empty when there is none).
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = std::process::id();
        let start = start_time(me).unwrap();
        assert!(alive(me, start));
        assert!(!alive(me, start + 1));
        assert!(!alive(u32::MAX - 1, start));
    }

    #[test]
    fn a_process_is_stopped_by_pid_and_its_zombie_counts_as_gone() {
        // Not reaped by us until the end: after SIGTERM it is a zombie, which must read as gone.
        let mut child = Command::new("/bin/sleep")
            .arg("600")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = start_time(pid).unwrap();
        assert!(alive(pid, start));
        assert!(!stop(pid, start, Duration::from_secs(5)), "sleep obeys SIGTERM");
        assert!(!alive(pid, start));
        child.wait().unwrap();
    }

    #[test]
    fn a_process_that_ignores_sigterm_is_killed_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/stubborn.log");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "trap '' TERM; echo started; while :; do sleep 0.01; done"]);
        let mut child = spawn_logged("stubborn", cmd, &log, Lifetime::Detached).unwrap();
        let pid = child.id();
        let start = start_time(pid).unwrap();
        crate::wait_until("the shell to set its trap", Duration::from_secs(5), || {
            Ok(log_tail(&log, 1) == "started")
        })
        .unwrap();
        assert!(stop(pid, start, Duration::from_millis(200)), "SIGKILL was needed");
        assert!(!alive(pid, start));
        child.wait().unwrap();
    }

    #[test]
    fn a_missing_program_is_an_error_naming_component_and_program() {
        let dir = tempfile::tempdir().unwrap();
        let err = spawn_logged(
            "x",
            Command::new("no-such-program-kovn"),
            &dir.path().join("x.log"),
            Lifetime::ThisProcess,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("x: cannot start no-such-program-kovn: "),
            "{err}"
        );
    }
}
