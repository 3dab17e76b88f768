//! The lab with containerd as its nodes' runtime (`up --runtime containerd`): where each node's
//! containerd lives and how it runs, and the mounts that come with it.
//!
//! Each node gets its own containerd ([`crate::runtime::containerd::Instance`]) under
//! `nodes/<node>/containerd`, whose CNI dirs are the node daemon's (`nodes/<node>/bin` and
//! `net.d`), run in the node's network namespace so containerd runs the CNI plugins there, as
//! on a real node. It enters the network namespace only ([`Enter::NetOnly`]): the sandboxes'
//! network namespaces it mounts under its state dir must be visible to the agent, `exec` and
//! the matrix, which live in the host's mount namespace.
//!
//! The node daemon runs with a mount namespace of its own (`ip netns exec`, for its own `/sys`)
//! and must open those network namespaces too (the CNI request names them by path). So before
//! anything starts, the lab's directory is made a shared mount ([`share_lab_dir`]): the daemons'
//! copies of it are then slaves, and every mount containerd makes under it appears in them as
//! well. `down` unmounts everything under the lab's directory ([`mounts_under`]).

use std::path::{Path, PathBuf};

use super::net::{CommandError, run};
use super::process::{Enter, Launch};
use super::topology::{NodePlan, Topology};
use crate::runtime::containerd::{CniDirs, Instance};

/// The node's containerd.
pub fn instance(t: &Topology, node: &NodePlan) -> Instance {
    let dir = t.node_dir(&node.name);
    Instance::new(
        dir.join("containerd"),
        CniDirs {
            bin_dir: dir.join("bin"),
            conf_dir: dir.join("net.d"),
        },
    )
}

/// The component name of the node's containerd (its log, its record in the state file).
pub fn component(node: &str) -> String {
    format!("{node}-containerd")
}

/// The node whose containerd `component` is.
pub fn node_of(component: &str) -> Option<&str> {
    component.strip_suffix("-containerd")
}

/// Where the pods' container logs go (`<namespace>_<pod>_<uid>/<container>/<attempt>.log`).
pub fn pod_log_dir(t: &Topology) -> PathBuf {
    t.logs_dir().join("pods")
}

/// Where built images are kept between labs and tests: the machine's cache
/// ([`crate::runtime::images::default_cache_root`]), whatever the labs directory.
pub fn image_cache(_t: &Topology) -> PathBuf {
    crate::runtime::images::default_cache_root()
}

/// The node's containerd, in the node's network namespace with the host's mounts.
pub fn launch(t: &Topology, node: &NodePlan) -> Launch {
    let (program, args) = instance(t, node).command();
    let component = component(&node.name);
    Launch {
        log: t.log(&component),
        component,
        enter: Enter::NetOnly(node.netns.clone()),
        program: program.into(),
        args,
        env: vec![],
    }
}

/// The node's containerd in the node's machine (`up --install manifests`): the overlayfs
/// snapshotter (the component image is hundreds of MB; `native` would copy it per container),
/// sandboxes' network namespaces in the machine's `/var/run/netns`, where `kube-ovn-cni`'s
/// host path shows them to the daemon (the host sees them under the machine's `/run`:
/// `machine::host_path`).
pub fn instance_in_machine(t: &Topology, node: &NodePlan) -> Instance {
    instance(t, node).for_machine()
}

pub fn launch_in_machine(t: &Topology, node: &NodePlan) -> Launch {
    let (program, args) = instance_in_machine(t, node).command();
    super::machine::launch(t, node, component(&node.name), program.into(), args)
}

/// Makes the lab's directory a shared mount (a bind mount onto itself), so mounts made under it
/// later reach the mount namespaces of processes started after this (see the module doc).
pub fn share_lab_dir(t: &Topology) -> Result<(), CommandError> {
    let dir = t.dir.display().to_string();
    if !mounts_under(&t.dir).iter().any(|m| m.path == t.dir) {
        run("mount", &["--bind", &dir, &dir])?;
    }
    run("mount", &["--make-shared", &dir]).map(drop)
}

/// A mount, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub path: PathBuf,
    pub fstype: String,
}

/// The mounts at or under `dir`, deepest first (the order to unmount them in).
pub fn mounts_under(dir: &Path) -> Vec<Mount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<Mount> = parse_mountinfo(&text)
        .into_iter()
        .filter(|m| m.path.starts_with(dir))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.path.components().count()));
    mounts
}

/// Mount points and filesystem types of `/proc/<pid>/mountinfo` lines (field 5, and the first
/// field after ` - `), with the kernel's octal escapes (`\040` for a space) decoded.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let path = head.split(' ').nth(4)?;
            let fstype = tail.split(' ').next()?;
            Some(Mount {
                path: PathBuf::from(unescape(path)),
                fstype: fstype.to_owned(),
            })
        })
        .collect()
}

fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4);
        if let Some(byte) = code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            out.push(char::from(byte));
            rest = &rest[at + 4..];
        } else {
            out.push('\\');
            rest = &rest[at + 1..];
        }
    }
    out.push_str(rest);
    out
}

/// Unmounts everything at or under `dir`, deepest first (lazily: a mount still in use goes once
/// its user does). How many there were.
pub fn unmount_under(dir: &Path) -> Result<usize, CommandError> {
    let mounts = mounts_under(dir);
    for m in &mounts {
        run("umount", &["--lazy", &m.path.display().to_string()])?;
    }
    Ok(mounts.len())
}

#[cfg(test)]
mod tests {
    use super::super::topology::TorKind;
    use super::*;

    #[test]
    fn a_nodes_containerd_uses_the_daemons_cni_dirs_in_the_nodes_namespace() {
        let t = Topology::new("t", 2, TorKind::Bird, Path::new("/var/lib/kube-ovn-lab")).unwrap();
        let node = &t.nodes[1];
        let i = instance(&t, node);
        assert_eq!(
            i.dir,
            PathBuf::from("/var/lib/kube-ovn-lab/t/nodes/node2/containerd")
        );
        assert_eq!(
            i.cni.bin_dir,
            PathBuf::from("/var/lib/kube-ovn-lab/t/nodes/node2/bin")
        );
        assert_eq!(
            i.cni.conf_dir,
            PathBuf::from("/var/lib/kube-ovn-lab/t/nodes/node2/net.d")
        );
        let l = launch(&t, node);
        assert_eq!(l.component, "node2-containerd");
        assert_eq!(node_of(&l.component), Some("node2"));
        assert!(matches!(&l.enter, Enter::NetOnly(ns) if *ns == node.netns));
    }

    #[test]
    fn mountinfo_lines_give_paths_and_types() {
        let text = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw\n\
                    40 36 0:4 net:[4026532] /lab/x/state/netns/cni-1 rw shared:5 - nsfs nsfs rw\n\
                    garbage\n";
        assert_eq!(
            parse_mountinfo(text),
            [
                Mount {
                    path: "/mnt/a b".into(),
                    fstype: "ext3".into()
                },
                Mount {
                    path: "/lab/x/state/netns/cni-1".into(),
                    fstype: "nsfs".into()
                }
            ]
        );
        assert_eq!(unescape("a\\134b\\x"), "a\\b\\x");
    }
}
