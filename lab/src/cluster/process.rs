//! The lab's processes: started detached (own process group, output to a log file) so they
//! outlive `up`, identified by PID and start time, stopped by PID.
//!
//! How a process enters its network namespace matters:
//! - [`Enter::Netns`]: `ip netns exec`, as for a host's daemons: it also gives the process the
//!   namespace's own `/sys` (ovs-vswitchd and the node daemon read devices there).
//! - [`Enter::NetOnly`]: `nsenter --net`: the network namespace alone, the host's mounts kept.
//!   The agent needs this: the pod namespaces it creates under `/run/netns` must be visible to
//!   everyone, and `ip netns exec` would give it a mount namespace of its own (a slave, whose new
//!   mounts do not propagate back).
//! - [`Enter::Machine`]: a node's machine (`super::machine`): the node's mounts, hostname and
//!   network namespace, for its containerd and kubelet.
//! - [`Enter::NetnsPrivateRun`]: `ip netns exec`, then a private mount namespace in which `/run`
//!   is a directory of the lab: the ToR's BIRD or FRR use their default socket paths
//!   (`/run/bird/bird.ctl`, `/run/frr/*.vty`), so plain `birdc` and `vtysh` work in `tor -- …`,
//!   and the host's `/run/bird` is never touched.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How a process gets into its namespace (see the module doc).
#[derive(Debug, Clone)]
pub enum Enter {
    Netns(String),
    NetOnly(String),
    NetnsPrivateRun {
        netns: String,
        run_dir: PathBuf,
    },
    /// `nsenter` into a node's machine (`cluster::machine`): its mount, UTS and network
    /// namespaces; the arguments up to the program.
    Machine(Vec<String>),
}

/// A lab process to start.
#[derive(Debug, Clone)]
pub struct Launch {
    pub component: String,
    pub enter: Enter,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub log: PathBuf,
}

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
    #[error("{component} (pid {pid}) exited at once; its log {log} ends:\n{tail}")]
    Exited {
        component: String,
        pid: u32,
        log: PathBuf,
        tail: String,
    },
    #[error("cannot read /proc/{pid}/stat of {component}: {reason}")]
    Proc {
        component: String,
        pid: u32,
        reason: String,
    },
}

/// The command line that runs `launch` in its namespace.
pub fn command_line(launch: &Launch) -> (String, Vec<String>) {
    let program = launch.program.to_string_lossy().into_owned();
    match &launch.enter {
        Enter::Netns(ns) => {
            let mut args = vec!["netns".into(), "exec".into(), ns.clone(), program];
            args.extend(launch.args.iter().cloned());
            ("ip".into(), args)
        }
        Enter::NetOnly(ns) => {
            let mut args = vec![format!("--net=/run/netns/{ns}"), "--".into(), program];
            args.extend(launch.args.iter().cloned());
            ("nsenter".into(), args)
        }
        Enter::Machine(enter) => {
            let mut args = enter.clone();
            args.push(program);
            args.extend(launch.args.iter().cloned());
            ("nsenter".into(), args)
        }
        Enter::NetnsPrivateRun { netns, run_dir } => {
            let mut args = private_run_prefix(netns, run_dir);
            args.push(program);
            args.extend(launch.args.iter().cloned());
            ("ip".into(), args)
        }
    }
}

/// `ip` arguments up to the program, for [`Enter::NetnsPrivateRun`]: the shell binds the lab's
/// directory over `/run` in a mount namespace nobody else shares, then execs the program (so
/// the PID stays the program's).
pub fn private_run_prefix(netns: &str, run_dir: &Path) -> Vec<String> {
    vec![
        "netns".into(),
        "exec".into(),
        netns.into(),
        "unshare".into(),
        "--mount".into(),
        "--propagation".into(),
        "private".into(),
        "sh".into(),
        "-c".into(),
        "mount --bind \"$0\" /run && exec \"$@\"".into(),
        run_dir.to_string_lossy().into_owned(),
    ]
}

/// Starts `launch` detached and returns its PID and start time. Fails if it is gone within
/// the first instant (a bad flag, a missing library), with its log's tail.
pub fn spawn(launch: &Launch) -> Result<(u32, u64), ProcessError> {
    let log_err = |source| ProcessError::Log {
        component: launch.component.clone(),
        log: launch.log.clone(),
        source,
    };
    if let Some(dir) = launch.log.parent() {
        std::fs::create_dir_all(dir).map_err(log_err)?;
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&launch.log)
        .map_err(log_err)?;
    let err = out.try_clone().map_err(log_err)?;
    let (program, args) = command_line(launch);
    let mut cmd = Command::new(&program);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: a Ctrl-C to `up` does not reach the lab's daemons.
        .process_group(0);
    // The binaries' `anyhow` errors print without a backtrace (a panic still has one), so the
    // log's last lines, which `status` shows, say what went wrong.
    cmd.env("RUST_LIB_BACKTRACE", "0");
    for (k, v) in &launch.env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().map_err(|source| ProcessError::Spawn {
        component: launch.component.clone(),
        program: program.clone(),
        source,
    })?;
    let pid = child.id();
    // The child is not waited for: it outlives `up`, and once `up` exits it is reaped by init.
    drop(child);
    let start_time = start_time(pid).map_err(|reason| ProcessError::Proc {
        component: launch.component.clone(),
        pid,
        reason,
    })?;
    Ok((pid, start_time))
}

/// Field 22 of `/proc/<pid>/stat` (start time in clock ticks since boot) and the state letter.
fn stat(pid: u32) -> Result<(char, u64), String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    let rest = text.rsplit_once(')').map(|(_, r)| r).ok_or("no ')' in stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first().and_then(|s| s.chars().next()).ok_or("no state")?;
    // After ')' the fields start at number 3, so field 22 is index 19.
    let start = fields
        .get(19)
        .and_then(|s| s.parse().ok())
        .ok_or("no start time")?;
    Ok((state, start))
}

pub fn start_time(pid: u32) -> Result<u64, String> {
    stat(pid).map(|(_, start)| start)
}

/// Whether the process recorded as (`pid`, `start_time`) still runs. A zombie counts as gone
/// (init here reaps orphans only every few seconds), and so does another process that got
/// the same PID later.
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
        std::thread::sleep(Duration::from_millis(10));
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
    fn command_lines_enter_the_namespace_as_documented() {
        let mut launch = Launch {
            component: "x".into(),
            enter: Enter::Netns("ns1".into()),
            program: "/bin/prog".into(),
            args: vec!["-a".into()],
            env: vec![],
            log: "/tmp/x.log".into(),
        };
        assert_eq!(
            command_line(&launch),
            (
                "ip".into(),
                vec![
                    "netns".into(),
                    "exec".into(),
                    "ns1".into(),
                    "/bin/prog".into(),
                    "-a".into()
                ]
            )
        );
        launch.enter = Enter::NetOnly("ns1".into());
        assert_eq!(command_line(&launch).0, "nsenter");
        assert_eq!(command_line(&launch).1[0], "--net=/run/netns/ns1");
        launch.enter = Enter::NetnsPrivateRun {
            netns: "ns1".into(),
            run_dir: "/lab/run".into(),
        };
        let (program, args) = command_line(&launch);
        assert_eq!(program, "ip");
        assert!(args.contains(&"/lab/run".to_owned()));
        assert_eq!(args.last().unwrap(), "-a");
    }

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
}
