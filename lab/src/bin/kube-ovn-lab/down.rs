//! `kube-ovn-lab down`: everything the lab made goes, and nothing else.
//!
//! 0. with containerd as the runtime: the agent and the kubelets, then every sandbox through the CRI while the
//!    node daemons still answer CNI DEL (`containerd::remove_sandboxes`);
//! 1. the recorded processes, newest first, by PID (SIGTERM to all, etcd SIGKILL at once, then
//!    SIGKILL to those still there after 5 s); a PID whose start time differs belongs to someone else and is left alone;
//! 2. any other process still inside one of the lab's namespaces (started by `exec`/`node`/… or
//!    by a component), found by comparing `/proc/<pid>/ns/net` with the namespaces' inodes;
//! 3. the TCP sockets left in them destroyed (`close_sockets_in`), then the namespaces: pods'
//!    (the prefix `kl_<lab>_p`, owned by this lab alone), then the lab's;
//!    their veths go with them;
//! 4. everything mounted under the lab's directory (containerd's sandboxes' namespaces, the
//!    kubelets' volumes, the shared bind mount), the nodes' machines' namespace files, the
//!    kubelets' cgroups (what is left in them killed), then the directory (state, logs,
//!    sockets).
//!
//! It works from the state file, so a lab whose `up` crashed halfway comes down the same way.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use kube_ovn_lab::cluster::net;
use kube_ovn_lab::cluster::process;
use kube_ovn_lab::cluster::state::Made;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long processes get after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// etcd's graceful stop waits for its clients' watch streams, which kube-apiserver (stopping
/// at the same moment, draining its own requests) holds for longer than [`GRACE`]; the lab's
/// etcd data is deleted with the lab, so nothing is lost by SIGKILL.
fn stop_signal(component: &str) -> Signal {
    if component == "etcd" {
        Signal::SIGKILL
    } else {
        Signal::SIGTERM
    }
}

pub fn down(name: &str, run_dir: &Path) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(nix::unistd::geteuid().is_root(), "down must run as root");
    let (t, state) = super::verbs::lab(name, run_dir)?;
    let started = Instant::now();
    let sandboxes = super::containerd::remove_sandboxes(&t, &state, GRACE)?;
    if sandboxes > 0 {
        println!("{sandboxes} sandboxes stopped and removed through containerd");
    }

    let recorded: Vec<(String, u32, u64)> = state
        .processes()
        .map(|(c, pid, start)| (c.to_owned(), pid, start))
        .rev()
        .collect();
    let mut stopped = 0;
    for (component, pid, start) in &recorded {
        if process::alive(*pid, *start) {
            let _ = kill(Pid::from_raw(i32::try_from(*pid)?), stop_signal(component));
            stopped += 1;
        }
    }
    let deadline = Instant::now() + GRACE;
    for (component, pid, start) in &recorded {
        let left = deadline.saturating_duration_since(Instant::now());
        if process::stop(*pid, *start, left) {
            println!("{component} (pid {pid}) did not stop within {GRACE:?} of SIGTERM: killed");
        }
    }

    let mut namespaces: Vec<String> = list_netns(&t.netns_prefix())?;
    // The lab's own first in the list only for the message; all are deleted.
    for made in &state.made {
        if let Made::Netns { name } = made
            && !namespaces.contains(name)
            && net::netns_exists(name)
        {
            namespaces.push(name.clone());
        }
    }
    let mut netns_files: Vec<PathBuf> = namespaces
        .iter()
        .map(|ns| Path::new("/run/netns").join(ns))
        .collect();
    netns_files.extend(super::containerd::sandbox_namespaces(&t));
    let strays = stop_processes_in(&netns_files)?;
    close_sockets_in(&netns_files);
    for ns in &namespaces {
        net::del_netns(ns).with_context(|| format!("deleting namespace {ns}"))?;
    }
    super::containerd::unmount(&t)?;
    // Nodes' machines (`up --install manifests`): their namespace files, then the kubelets'
    // cgroups with anything left in them.
    kube_ovn_lab::cluster::machine::release(&t);
    let cgroups = kube_ovn_lab::cluster::machine::remove_cgroups(&t);
    if cgroups > 0 {
        println!("{cgroups} cgroups of the kubelets removed");
    }
    if t.dir.exists() {
        std::fs::remove_dir_all(&t.dir).with_context(|| format!("removing {}", t.dir.display()))?;
    }
    println!(
        "lab {name} is down in {:.1}s: {stopped} processes stopped{}, {} namespaces deleted, {} removed",
        started.elapsed().as_secs_f64(),
        if strays > 0 {
            format!(" (and {strays} others found in its namespaces)")
        } else {
            String::new()
        },
        namespaces.len(),
        t.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Destroys the TCP sockets left in the lab's namespaces (`ss -K`: SOCK_DESTROY). Their processes
/// are gone, but a connection they closed toward a peer that was killed too stays in FIN-WAIT,
/// retransmitting into links about to go, for `tcp_orphan_retries` (about 100 s), and holds its
/// namespace until then: the namespace, its veths and its conntrack were destroyed a minute and
/// a half after `down`, in the middle of whatever ran next (34 such sockets after a manifests
/// lab's `down`; in a CI run, an earlier test's lab went while `lab_manifests` measured its
/// traffic). Best effort: without the kernel's INET_DIAG_DESTROY they expire as before.
fn close_sockets_in(namespaces: &[PathBuf]) {
    for ns in namespaces {
        let _ = net::run(
            "nsenter",
            &[&format!("--net={}", ns.display()), "ss", "-K", "-t", "-a"],
        );
    }
}

/// Namespaces under `/run/netns` whose name starts with `prefix`.
pub fn list_netns(prefix: &str) -> anyhow::Result<Vec<String>> {
    let dir = Path::new("/run/netns");
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    Ok(names)
}

/// Stops, by PID, every process whose network namespace is one of `namespaces` (their files);
/// returns how many there were.
fn stop_processes_in(namespaces: &[PathBuf]) -> anyhow::Result<usize> {
    let inodes: Vec<u64> = namespaces
        .iter()
        .filter_map(|ns| std::fs::metadata(ns).ok())
        .map(|m| m.ino())
        .collect();
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry
            .ok()
            .and_then(|e| e.file_name().to_str()?.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(meta) = std::fs::metadata(format!("/proc/{pid}/ns/net")) else {
            continue;
        };
        if inodes.contains(&meta.ino())
            && let Ok(start) = process::start_time(pid)
        {
            found.push((pid, start));
        }
    }
    let count = found
        .iter()
        .filter(|(pid, start)| process::alive(*pid, *start))
        .count();
    for (pid, start) in &found {
        process::stop(*pid, *start, GRACE);
    }
    Ok(count)
}
