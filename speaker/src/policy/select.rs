//! Which candidates and which peers one advertisement selects. Its selectors are matched once
//! per object (each subnet, Namespace, Service and peer), not once per prefix: a candidate then
//! costs a few table look-ups per advertisement, so 100,000 pods of one subnet are selected by
//! one evaluation of `subnetSelector`.
//!
//! Which selector applies to which kind (one that does not apply is ignored for it):
//!
//! | kind | subnetSelector | namespaceSelector | serviceSelector |
//! |---|---|---|---|
//! | PodIPs | the pod's subnet (its IP record's) | the pod's Namespace | - |
//! | SubnetCIDRs | the subnet | - | - |
//! | ClusterIPs, ExternalIPs, LoadBalancerIPs | - | the Service's Namespace | the Service |
//! | EIPs | the external subnet (OvnEip label `ovn.kubernetes.io/subnet`, IptablesEIP `spec.externalSubnet`) | - | - |
//!
//! A Namespace that does not exist (yet, in the speaker's cache) has no labels to match: only a
//! selector selecting everything matches it. An IptablesEIP with no known external subnet is not
//! checked against `subnetSelector` (there is nothing to check; the EIP is still the platform's).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube_ovn_api::bgp_advertisement::AdvertiseKind;
use kube_ovn_api::selector::Selector;

use super::candidates::Candidate;
use super::{PeerView, ValidatedAdvertisement};
use crate::announce::Objects;

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

fn labels(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &BTreeMap<String, String> {
    meta.labels.as_ref().unwrap_or(&NO_LABELS)
}

/// One advertisement's selectors, matched against every object once.
#[derive(Debug, Clone)]
pub struct AdIndex {
    kinds: [bool; 6],
    subnets: Vec<bool>,
    namespaces: Vec<bool>,
    /// Whether the namespace selector selects everything (and so a missing Namespace).
    any_namespace: bool,
    services: Vec<bool>,
    /// Per peer of [`super::PolicyInputs::peers`], in order.
    pub peers: Vec<bool>,
}

fn kind_slot(kind: AdvertiseKind) -> usize {
    AdvertiseKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

fn matched<'a>(selector: &Selector, metas: impl Iterator<Item = &'a BTreeMap<String, String>>) -> Vec<bool> {
    if selector.requirements.is_empty() {
        return metas.map(|_| true).collect();
    }
    metas.map(|l| selector.matches(l)).collect()
}

impl AdIndex {
    pub fn new(
        ad: &ValidatedAdvertisement,
        objects: &Objects<'_>,
        namespaces: &[Arc<Namespace>],
        peers: &[PeerView],
    ) -> Self {
        let mut kinds = [false; 6];
        for kind in &ad.kinds {
            kinds[kind_slot(*kind)] = true;
        }
        let wants = |k: &[AdvertiseKind]| k.iter().any(|k| kinds[kind_slot(*k)]);
        let by_subnet = wants(&[
            AdvertiseKind::PodIps,
            AdvertiseKind::SubnetCidrs,
            AdvertiseKind::Eips,
        ]);
        let by_service = wants(&[
            AdvertiseKind::ClusterIps,
            AdvertiseKind::ExternalIps,
            AdvertiseKind::LoadBalancerIps,
        ]);
        let by_namespace = by_service || wants(&[AdvertiseKind::PodIps]);
        // Tables for kinds the advertisement does not select stay empty: never read.
        let subnets = if by_subnet {
            matched(
                &ad.subnet_selector,
                objects.subnets.iter().map(|s| labels(&s.metadata)),
            )
        } else {
            Vec::new()
        };
        let namespaces = if by_namespace {
            matched(
                &ad.namespace_selector,
                namespaces.iter().map(|n| labels(&n.metadata)),
            )
        } else {
            Vec::new()
        };
        let services = if by_service {
            matched(
                &ad.service_selector,
                objects.services.iter().map(|s| labels(&s.metadata)),
            )
        } else {
            Vec::new()
        };
        AdIndex {
            kinds,
            subnets,
            namespaces,
            any_namespace: ad.namespace_selector.requirements.is_empty(),
            services,
            peers: peers
                .iter()
                .map(|p| ad.peer_selector.matches(&p.labels))
                .collect(),
        }
    }

    fn subnet_ok(&self, c: &Candidate) -> bool {
        c.subnet.is_none_or(|i| self.subnets[i as usize])
    }

    fn namespace_ok(&self, c: &Candidate) -> bool {
        match c.namespace {
            Some(i) => self.namespaces[i as usize],
            None => self.any_namespace,
        }
    }

    fn service_ok(&self, c: &Candidate) -> bool {
        c.service.is_some_and(|i| self.services[i as usize])
    }

    /// Whether the advertisement selects this candidate (for any peer).
    pub fn selects(&self, c: &Candidate) -> bool {
        if !self.kinds[kind_slot(c.kind)] {
            return false;
        }
        match c.kind {
            AdvertiseKind::SubnetCidrs | AdvertiseKind::Eips => self.subnet_ok(c),
            AdvertiseKind::PodIps => self.subnet_ok(c) && self.namespace_ok(c),
            AdvertiseKind::ClusterIps | AdvertiseKind::ExternalIps | AdvertiseKind::LoadBalancerIps => {
                self.namespace_ok(c) && self.service_ok(c)
            }
        }
    }
}
