//! A node as a machine of its own (`up --install manifests`): besides its network namespace, a
//! mount namespace and a UTS namespace (hostname `node1`, …), kept alive by bind mounts of their
//! `/proc/<pid>/ns` files, so the node's containerd and kubelet — and every container they run
//! with host paths — see the node's own copies of the paths a real node has:
//!
//! | in the machine      | on the host (under `nodes/<node>/`) | who uses it |
//! |---------------------|-------------------------------------|-------------|
//! | `/run`              | `root/run`                          | `/run/openvswitch`, `/run/ovn`, the speaker's state, xtables' lock |
//! | `/etc/origin`       | `root/etc/origin`                   | OVS's and OVN's databases (hostPath in `deploy/`) |
//! | `/var/log`          | `root/var/log`                      | OVS/OVN logs, the kubelet's `/var/log/pods` |
//! | `/var/lib/kubelet`  | `root/var/lib/kubelet`              | the kubelet's root dir (volumes, pod dirs) |
//! | `/etc/cni/net.d`    | `net.d`                             | the conflist `kube-ovn-cni` installs; containerd reads it |
//! | `/opt/cni/bin`      | `bin`                               | the `kube-ovn` shim it installs, and `loopback` |
//!
//! So the DaemonSets of `deploy/` run unchanged on several nodes of one host: each writes its
//! node's `/run/openvswitch`. The host directories are under the lab's directory, a shared
//! mount, and the machine's copies of them are peers: what the kubelet mounts under
//! `/var/lib/kubelet` and containerd under its state dir is seen from the host too (the lab's
//! verbs open pods' network namespaces there), and `down` unmounts it all. Every other mount is
//! made a slave in the machine, so nothing mounted there reaches the host's own paths.
//!
//! Inside, every mount is shared (as systemd makes them on a real host), in peer groups of the
//! machine's own except the lab's directory's.
//!
//! `/sys` is mounted again inside (the node's network devices, as `ip netns exec` gives), with
//! the host's cgroup hierarchies moved under it: the kubelet needs them.
//!
//! Each kubelet has its own cgroup root, `/kube-ovn-lab/<lab>/<node>` in every hierarchy
//! ([`cgroup_root`]); `down` kills what is left there and removes it ([`remove_cgroups`]).

use std::path::{Path, PathBuf};

use super::net::{CommandError, run};
use super::topology::{NodePlan, Topology};

/// Where the machine's private paths come from on the host, and where they appear inside.
pub fn binds(t: &Topology, node: &NodePlan) -> Vec<(PathBuf, &'static str)> {
    let dir = t.node_dir(&node.name);
    let root = dir.join("root");
    vec![
        (root.join("run"), "/run"),
        (root.join("etc/origin"), "/etc/origin"),
        (root.join("var/log"), "/var/log"),
        (root.join("var/lib/kubelet"), "/var/lib/kubelet"),
        (dir.join("net.d"), "/etc/cni/net.d"),
        (dir.join("bin"), "/opt/cni/bin"),
    ]
}

/// Where a path of the machine is on the host (`/run/ovn` → `nodes/<node>/root/run/ovn`),
/// for paths under one of its [`binds`]; other paths are the host's own.
pub fn host_path(t: &Topology, node: &NodePlan, inside: &str) -> PathBuf {
    // Debian's /var/run is a link to /run (and the machine binds /run over it where not).
    let inside = match inside.strip_prefix("/var/run/") {
        Some(rest) => format!("/run/{rest}"),
        None => inside.to_owned(),
    };
    let inside = inside.as_str();
    binds(t, node)
        .into_iter()
        .filter_map(|(host, at)| {
            let rest = Path::new(inside).strip_prefix(at).ok()?;
            Some((at.len(), host.join(rest)))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| PathBuf::from(inside), |(_, p)| p)
}

/// The directory holding the namespace files (a private mount: a namespace file can only be
/// bound onto a mount that does not propagate).
pub fn ns_dir(t: &Topology, node: &str) -> PathBuf {
    t.node_dir(node).join("ns")
}

pub fn mount_ns(t: &Topology, node: &str) -> PathBuf {
    ns_dir(t, node).join("mnt")
}

pub fn uts_ns(t: &Topology, node: &str) -> PathBuf {
    ns_dir(t, node).join("uts")
}

/// `nsenter` arguments (up to the program) that enter the machine: its mounts, its hostname,
/// its network namespace.
pub fn enter_args(t: &Topology, node: &NodePlan) -> Vec<String> {
    vec![
        format!("--mount={}", mount_ns(t, &node.name).display()),
        format!("--uts={}", uts_ns(t, &node.name).display()),
        format!("--net=/run/netns/{}", node.netns),
        "--".into(),
    ]
}

/// A node service run in the node's machine (containerd, the kubelet, kube-proxy), logging to
/// the lab's log of `component`.
pub fn launch(
    t: &Topology,
    node: &NodePlan,
    component: String,
    program: PathBuf,
    args: Vec<String>,
) -> super::process::Launch {
    super::process::Launch {
        log: t.log(&component),
        component,
        enter: super::process::Enter::Machine(enter_args(t, node)),
        program,
        args,
        env: vec![],
    }
}

/// The kubelet's cgroup root: one per node of one lab.
pub fn cgroup_root(t: &Topology, node: &str) -> String {
    format!("/kube-ovn-lab/{}/{node}", t.name)
}

/// The shell script run inside the new namespaces that makes the machine (see the module doc).
/// `$1` is the hostname, `$2` the lab's directory; the binds follow as pairs.
pub fn setup_script() -> &'static str {
    r#"set -eu
hostname "$1"
lab=$2
shift 2
# Every mount but the lab's directory (and what is under it) stops propagating to the host.
awk '{print $5}' /proc/self/mountinfo | while read -r m; do
  m=$(printf '%b' "$m")
  case "$m" in "$lab"|"$lab"/*) ;; *) mount --make-slave "$m" 2>/dev/null || true ;; esac
done
# The node's own /sys (its network devices), keeping the host's cgroup hierarchies.
cg=$(mktemp -d)
mount --rbind /sys/fs/cgroup "$cg"
umount -l /sys
mount -t sysfs sysfs /sys
mount --move "$cg" /sys/fs/cgroup
rmdir "$cg"
while [ $# -ge 2 ]; do
  mkdir -p "$1" "$2"
  mount --bind "$1" "$2"
  shift 2
done
# Where /var/run is a directory rather than Debian's link to /run, it is the node's /run too
# (runtimes check the propagation of /var/run/netns where it is).
[ -L /var/run ] || mount --bind /run /var/run
# Shared, as on a systemd host, for the containers' mount propagation (containerd requires it
# for Bidirectional mounts, and checks `/var/run/netns` without following the link to /run).
# What was made a slave above stays one: new peer groups, within this machine only.
mount --make-rshared /
"#
}

/// Makes the machine of `node`: the namespace files, then the mounts inside. The lab's
/// directory must already be a shared mount (`containerd::share_lab_dir`).
pub fn create(t: &Topology, node: &NodePlan) -> Result<(), CommandError> {
    let ns = ns_dir(t, &node.name);
    std::fs::create_dir_all(&ns).map_err(|e| io_error(&ns, &e))?;
    let ns_text = ns.display().to_string();
    run("mount", &["--bind", &ns_text, &ns_text])?;
    run("mount", &["--make-private", &ns_text])?;
    for file in [mount_ns(t, &node.name), uts_ns(t, &node.name)] {
        std::fs::write(&file, b"").map_err(|e| io_error(&file, &e))?;
    }
    run(
        "unshare",
        &[
            &format!("--mount={}", mount_ns(t, &node.name).display()),
            &format!("--uts={}", uts_ns(t, &node.name).display()),
            "--propagation",
            "unchanged",
            "true",
        ],
    )?;
    let mut args: Vec<String> = enter_args(t, node);
    args.extend([
        "sh".into(),
        "-c".into(),
        setup_script().into(),
        "machine-setup".into(),
        node.name.clone(),
        t.dir.display().to_string(),
    ]);
    for (host, inside) in binds(t, node) {
        args.push(host.display().to_string());
        args.push(inside.into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run("nsenter", &args).map(drop)
}

fn io_error(path: &Path, e: &std::io::Error) -> CommandError {
    CommandError {
        command: format!("creating {}", path.display()),
        message: e.to_string(),
    }
}

/// The cgroup hierarchies mounted under `/sys/fs/cgroup` (v1: one per controller set).
fn hierarchies() -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .map(|dir| dir.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default()
}

/// The CPU weight (`cpu.shares`, 1024 by default) of `/kube-ovn-lab`, the cgroup that holds
/// every lab node's pods. The lab's own processes (API server, kubelets, containerd, `ctr`
/// importing images, the tests) run in the host's root cgroup, where every session is an
/// autogroup of weight 1024; at the default weight all the nodes' pods together weigh as much
/// as one busy session. In a lab the pods include ovs-vswitchd, whose userspace datapath
/// forwards every packet of a node from its main thread — what a real node does in the
/// kernel, ahead of any process. Measured on 2 CPUs while a second lab came up beside one
/// with traffic: at 1024 that thread waited up to 2.5 s for a CPU (OVS logged "Unreasonably
/// long 2474ms poll interval"; TCP SYNs answered a second late, twice in a row a connect
/// timeout), at 10240 no wait over 50 ms and no slow connect (docs/testing.md).
pub const PODS_CPU_SHARES: u32 = 10240;

/// Makes the kubelet's cgroup root in every hierarchy (the kubelet refuses to start without
/// it). cgroup v1's cpuset starts a new cgroup with no CPUs and no memory nodes: each level
/// made gets its parent's. `/kube-ovn-lab` gets [`PODS_CPU_SHARES`] in the cpu hierarchy.
pub fn create_cgroups(t: &Topology, node: &str) -> Result<(), CommandError> {
    let root = cgroup_root(t, node);
    for hierarchy in hierarchies() {
        let mut dir = hierarchy.clone();
        for part in root.trim_start_matches('/').split('/') {
            let parent = dir.clone();
            dir.push(part);
            if dir.is_dir() {
                continue;
            }
            std::fs::create_dir(&dir).map_err(|e| io_error(&dir, &e))?;
            for file in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(value) = std::fs::read_to_string(parent.join(file)) {
                    std::fs::write(dir.join(file), value.trim())
                        .map_err(|e| io_error(&dir.join(file), &e))?;
                }
            }
        }
        // The first level of the root, made above; only the cpu hierarchy has the file.
        let shares = hierarchy.join("kube-ovn-lab").join("cpu.shares");
        if shares.is_file() {
            std::fs::write(&shares, PODS_CPU_SHARES.to_string()).map_err(|e| io_error(&shares, &e))?;
        }
    }
    Ok(())
}

/// Kills every process left in the lab's cgroups (`/kube-ovn-lab/<lab>` in any hierarchy) and
/// removes them, deepest first. How many cgroups were removed.
pub fn remove_cgroups(t: &Topology) -> usize {
    let mut removed = 0;
    for hierarchy in hierarchies() {
        let top = hierarchy.join("kube-ovn-lab").join(&t.name);
        if !top.is_dir() {
            continue;
        }
        let mut dirs = Vec::new();
        collect_dirs(&top, &mut dirs);
        // Deepest first: a cgroup with children cannot be removed.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in &dirs {
            kill_all_in(dir);
        }
        for dir in &dirs {
            if remove_when_empty(dir) {
                removed += 1;
            }
        }
        // `/kube-ovn-lab` itself stays when another lab uses it.
        let _ = std::fs::remove_dir(hierarchy.join("kube-ovn-lab"));
    }
    removed
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_owned());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

fn kill_all_in(dir: &Path) {
    let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

/// `rmdir`, retried while the killed processes are still being reaped (bounded: 5 s).
fn remove_when_empty(dir: &Path) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
            Err(_) if std::time::Instant::now() < deadline => {
                kill_all_in(dir);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(_) => return false,
        }
    }
}

/// Releases the namespace files of every node's machine (the namespaces go once no process is
/// left in them). Run after the processes are stopped and the lab's mounts unmounted.
pub fn release(t: &Topology) {
    for node in &t.nodes {
        let ns = ns_dir(t, &node.name);
        for file in [mount_ns(t, &node.name), uts_ns(t, &node.name)] {
            let _ = run("umount", &[&file.display().to_string()]);
        }
        let _ = run("umount", &[&ns.display().to_string()]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::topology::TorKind;
    use super::*;

    #[test]
    fn a_machine_has_its_own_copies_of_the_node_paths_under_its_directory() {
        let t = Topology::new("t", 2, TorKind::Bird, Path::new("/var/lib/kube-ovn-lab")).unwrap();
        let node = &t.nodes[1];
        let binds = binds(&t, node);
        let inside: Vec<&str> = binds.iter().map(|(_, i)| *i).collect();
        for path in [
            "/run",
            "/etc/origin",
            "/var/lib/kubelet",
            "/etc/cni/net.d",
            "/opt/cni/bin",
        ] {
            assert!(inside.contains(&path), "{path} in {inside:?}");
        }
        assert!(
            binds
                .iter()
                .all(|(host, _)| host.starts_with("/var/lib/kube-ovn-lab/t/nodes/node2"))
        );
        assert_eq!(
            enter_args(&t, node),
            [
                "--mount=/var/lib/kube-ovn-lab/t/nodes/node2/ns/mnt",
                "--uts=/var/lib/kube-ovn-lab/t/nodes/node2/ns/uts",
                "--net=/run/netns/kl_t_node2",
                "--"
            ]
        );
        assert_eq!(cgroup_root(&t, "node2"), "/kube-ovn-lab/t/node2");
        assert_eq!(
            host_path(&t, node, "/run/ovn/ovnnb_db.sock"),
            Path::new("/var/lib/kube-ovn-lab/t/nodes/node2/root/run/ovn/ovnnb_db.sock")
        );
        assert_eq!(
            host_path(&t, node, "/opt/cni/bin/kube-ovn"),
            Path::new("/var/lib/kube-ovn-lab/t/nodes/node2/bin/kube-ovn")
        );
        assert_eq!(host_path(&t, node, "/usr/bin/ls"), Path::new("/usr/bin/ls"));
        assert_eq!(
            host_path(&t, node, "/var/run/netns/cni-1"),
            Path::new("/var/lib/kube-ovn-lab/t/nodes/node2/root/run/netns/cni-1")
        );
    }
}
