//! The lab: the whole system on one machine.
//!
//! - [`apiserver`]: the Kubernetes API emulator that tests and the lab run against (no
//!   kube-apiserver can be installed on our machines).
//! - [`agent`]: the parts of Kubernetes a real cluster has and the emulator lacks, as small
//!   controllers (a scheduler, a kubelet stand-in per node, a ClusterIP allocator, an
//!   EndpointSlice controller, Deployments), run by `kube-ovn-lab agent`.
//! - [`cni_runtime`]: a container runtime's side of CNI (conflist, plugin runs), used by the
//!   kubelet stand-in and by the CNI tests.
//! - [`netexec`]: the server behind the image `kube-ovn-lab/netexec` (as agnhost's `netexec`).
//! - [`runtime`]: containerd with its CRI plugin and a CRI client, for `up --runtime containerd`
//!   (the kubelet stand-in makes real sandboxes) and the CNI tests.
//! - [`manifests`]: a YAML manifest's objects created through a kube client.
//! - [`cluster`]: `up`, `status`, `down` and the other verbs: network namespaces, daemons, the ToR
//!   and the outside host, recorded in a state file.

pub mod agent;
pub mod apiserver;
pub mod cluster;
pub mod cni_runtime;
pub mod kubernetes;
pub mod manifests;
pub mod netexec;
pub mod runtime;
