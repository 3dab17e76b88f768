//! The lab: the whole system on one machine. Today it holds the Kubernetes API emulator that tests
//! and the lab run against (no kube-apiserver can be installed on our machines).

pub mod apiserver;
