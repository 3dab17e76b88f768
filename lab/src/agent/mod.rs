//! The lab's stand-ins for the Kubernetes components the emulator lacks. `kube-ovn-lab agent`
//! runs them all in one process in the control-plane namespace (where the API is reachable).

pub mod deployments;
pub mod endpointslices;
pub mod events;
mod informer;
pub mod kubelet;
pub mod names;
pub mod scheduler;
pub mod services;
