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

use std::path::PathBuf;

pub use crate::mounts::{Mount, mounts_under, parse_mountinfo, unmount_under};

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

#[cfg(test)]
mod tests {
    use std::path::Path;

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
}
