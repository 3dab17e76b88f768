//! The lab: the whole system on one machine, on upstream Kubernetes.
//!
//! - [`kubernetes`]: upstream etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//!   kubectl (built from source by `scripts/build-kubernetes.sh`): their PKI, flags and audit log,
//!   the tests' fixture (an API server per test on a shared etcd), and the lab's control plane
//!   ([`kubernetes::lab`]: what `up` and `kube-ovn-lab apiserver` start).
//! - [`agent`]: what a cluster has beyond the control plane and the lab lacks, run by
//!   `kube-ovn-lab agent`: a kubelet stand-in per node in the process mode (`up --install
//!   processes`; Node, Lease and status heartbeats, pod sandboxes) and the LoadBalancer IP
//!   allocator. The default mode (`--install manifests`) runs real kubelets instead
//!   ([`kubernetes::kubelet`], [`cluster::kubelet`]).
//! - [`cni_runtime`]: a container runtime's side of CNI (conflist, plugin runs), used by the
//!   kubelet stand-in and by the CNI tests.
//! - [`netexec`]: the server behind the image `kube-ovn-lab/netexec` (as agnhost's `netexec`).
//! - [`runtime`]: containerd with its CRI plugin and a CRI client, for `up --runtime containerd`
//!   (the kubelet stand-in makes real sandboxes) and the CNI tests.
//! - [`manifests`]: a YAML manifest's objects created through a kube client.
//! - [`cluster`]: `up`, `status`, `down` and the other verbs: network namespaces, daemons, the ToR
//!   and the outside host, recorded in a state file.
//! - [`mounts`]: the mounts under a directory; below both `cluster` and `runtime`, which do not
//!   depend on each other in a cycle (`cluster` uses `runtime`). Programs are run with
//!   `kube_ovn_testkit::run`, the one the tests use.

pub mod agent;
pub mod cluster;
pub mod cni_runtime;
pub mod kubernetes;
pub mod manifests;
pub mod mounts;
pub mod netexec;
pub mod runtime;
