//! Kube-OVN's API, in Rust: the `kubeovn.io/v1` custom resources ([`crd`]) and our own BgpPeer
//! ([`bgp_peer`]) and BgpAdvertisement ([`bgp_advertisement`]), the `ovn.kubernetes.io/*` annotation and label keys with typed parsing and
//! formatting of their values ([`annotations`]), the names Kube-OVN gives OVN objects ([`names`]), what a Node says
//! about its machine ([`node`]), the `ovn-external-gw-config` ConfigMap ([`external_gw`]), which Service external IPs the platform allows ([`external_ips`]), Kubernetes label selectors ([`selector`]), and the JSON the CNI
//! shim and the node daemon exchange ([`wire`]).
//!
//! This crate does no I/O and has no async code: every function maps values to values, so the
//! controller, daemon, speaker and CNI shim can share it and test against it directly.

pub mod annotations;
pub mod bgp_advertisement;
pub mod bgp_peer;
pub mod crd;
pub mod external_gw;
pub mod external_ips;
pub mod names;
pub mod node;
pub mod selector;
pub mod service_protocol;
pub mod wire;

pub use crd::crds;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The CRDs of our own kinds, outside Kube-OVN's group: `crdgen` writes and checks them beside
/// [`crds`] in `deploy/crds/`. Here rather than in [`crd`], which is Kube-OVN's group only (and
/// which [`bgp_peer`] uses for the schema clean-up every CRD of ours gets).
pub fn extension_crds() -> Vec<CustomResourceDefinition> {
    vec![bgp_peer::crd(), bgp_advertisement::crd()]
}
