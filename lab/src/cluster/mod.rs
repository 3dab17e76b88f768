//! The lab as a whole: which namespaces, wires and processes make it ([`topology`], [`net`],
//! [`components`], [`tor`], the ToR's VLAN fabric [`tor_vlan`]), how processes are started and
//! stopped by PID ([`process`]), and the state file that lets `down` undo any `up`, even one
//! that crashed ([`state`]). The verbs themselves (`up`, `down`, `status`, …) are in the
//! `kube-ovn-lab` binary.

pub mod components;
pub mod containerd;
pub mod failover;
pub mod kube_proxy;
pub mod kubelet;
pub mod machine;
pub mod matrix;
pub mod net;
pub mod policy;
pub mod process;
pub mod state;
pub mod topology;
pub mod tor;
pub mod tor_vlan;
pub mod wait;
