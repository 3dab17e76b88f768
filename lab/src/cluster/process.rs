//! The lab's processes: started detached (own process group, output to a log file) so they
//! outlive `up`, identified by PID and start time, stopped by PID. Starting, watching and
//! stopping by PID is `kube_ovn_testkit::process`, shared with the tests' daemons; this module
//! says how a lab process enters its namespaces.
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

use std::path::{Path, PathBuf};
use std::process::Command;

use kube_ovn_testkit::process::Lifetime;
pub use kube_ovn_testkit::process::{ProcessError, alive, log_tail, nice, start_time, stop};

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

/// Starts `launch` detached and returns its PID and start time.
pub fn spawn(launch: &Launch) -> Result<(u32, u64), ProcessError> {
    let (program, args) = command_line(launch);
    let mut cmd = Command::new(&program);
    cmd.args(&args);
    // The binaries' `anyhow` errors print without a backtrace (a panic still has one), so the
    // log's last lines, which `status` shows, say what went wrong.
    cmd.env("RUST_LIB_BACKTRACE", "0");
    for (k, v) in &launch.env {
        cmd.env(k, v);
    }
    // Its own process group: a Ctrl-C to `up` does not reach the lab's daemons.
    let child =
        kube_ovn_testkit::process::spawn_logged(&launch.component, cmd, &launch.log, Lifetime::Detached)?;
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
}
