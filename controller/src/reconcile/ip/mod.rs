//! Addresses as Kubernetes records them: the IP CRs the pod and node reconcilers write
//! ([`record`]) and the reconciler of the ones users create ([`cr`]), IP pools ([`pool`]), and
//! the IPAM state rebuilt at start from those records and the northbound ports
//! ([`ipam_rebuild`]). The allocator itself is [`crate::ipam`].

pub mod cr;
pub mod ipam_rebuild;
pub mod pool;
pub mod record;
