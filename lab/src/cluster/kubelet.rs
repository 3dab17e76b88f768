//! A node's real kubelet (`up --install manifests`): its plan from the topology, run in the
//! node's machine ([`super::machine`]) beside the node's containerd, as `<node>-kubelet`.

use super::machine;
use super::process::Launch;
use super::topology::{NodePlan, Topology};
use crate::kubernetes::kubelet::{KubeletSpec, identity};

/// The label that puts `ovn-central` on a node (Kube-OVN's install labels its masters so).
pub const MASTER_LABEL: (&str, &str) = ("kube-ovn/role", "master");
/// The label that puts a speaker on a node (`deploy/base/speaker.yaml`'s nodeSelector).
pub const BGP_LABEL: (&str, &str) = ("ovn.kubernetes.io/bgp", "true");

/// The node that runs `ovn-central` (labelled [`MASTER_LABEL`]): the first.
pub fn master(t: &Topology) -> &NodePlan {
    &t.nodes[0]
}

pub fn component(node: &str) -> String {
    format!("{node}-kubelet")
}

/// The node whose kubelet `component` is.
pub fn node_of(component: &str) -> Option<&str> {
    component.strip_suffix("-kubelet")
}

pub fn spec(t: &Topology, node: &NodePlan) -> KubeletSpec {
    KubeletSpec {
        node_name: node.name.clone(),
        node_ip: node.ip.into(),
        config_file: t.node_dir(&node.name).join("kubelet.yaml"),
        kubeconfig: t.control_plane().kubeconfig(&identity(&node.name).stem),
        client_ca: t.control_plane().pki().ca_cert(),
        runtime_socket: super::containerd::instance(t, node).socket(),
        cgroup_root: machine::cgroup_root(t, &node.name),
        // A kubelet may not set labels under kubernetes.io itself (NodeRestriction): the lab
        // labels the nodes through the API, as an administrator does.
        labels: vec![],
    }
}

pub fn launch(t: &Topology, node: &NodePlan) -> Launch {
    machine::launch(
        t,
        node,
        component(&node.name),
        crate::kubernetes::bin_dir().join("kubelet"),
        spec(t, node).args(),
    )
}
