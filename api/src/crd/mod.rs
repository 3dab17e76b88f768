//! The `kubeovn.io/v1` custom resources: one module per kind (or family of kinds), the shared
//! [`Condition`], and [`crds`], the single source of truth for the CustomResourceDefinitions we
//! install (the `crdgen` binary writes them to `deploy/crds/`; the tests check them).
//!
//! 16 of Kube-OVN's 25 kinds: Vpc, Subnet, IP, IPPool, Vlan, ProviderNetwork, Vip,
//! VpcNatGateway, OvnEip, OvnFip, OvnSnatRule, OvnDnatRule, IptablesEIP, IptablesFIPRule,
//! IptablesSnatRule and IptablesDnatRule. Kube-OVN's QoSPolicy, SecurityGroup, SwitchLBRule,
//! RouterLBRule, VpcDns, VpcEgressGateway, BgpConf, EvpnConf and DNSNameResolver are not defined
//! here. Our own BgpPeer is in another group ([`crate::bgp_peer`], [`crate::extension_crds`]).
//!
//! Every kind is cluster-scoped, as in Kube-OVN. Field names, types, defaults, short names,
//! plurals, printer columns and status subresources follow Kube-OVN's CRDs exactly. On the Rust
//! side every spec and status field is an `Option` (or `Option<Vec<_>>`), so reading an object
//! never fails on a missing field and writing it back never invents one, and every spec, status
//! and nested object keeps the members it does not know in an `extra` map (see
//! [`schema::ExtraFields`]), so objects from a newer Kube-OVN survive a read-modify-write.
//!
//! Use [`crds`] (or [`crd_for`]) rather than the derived `Kind::crd()`: the derived CRD still
//! needs the post-processing in [`schema`] to match Kube-OVN's.

pub mod condition;
pub mod ip;
pub mod ippool;
pub mod iptables_nat;
pub mod ovn_nat;
pub mod provider_network;
pub mod schema;
pub mod subnet;
pub mod vip;
pub mod vlan;
pub mod vpc;
pub mod vpc_nat_gateway;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_core::CustomResourceExt;

pub use condition::{Condition, ConditionStatus, ProviderNetworkCondition};
pub use ip::{Ip, IpSpec};
pub use ippool::{IPPool, IPPoolSpec, IPPoolStatus};
pub use iptables_nat::{
    DnatType, IptablesDnatRule, IptablesDnatRuleSpec, IptablesDnatRuleStatus, IptablesEIP, IptablesEIPSpec,
    IptablesEIPStatus, IptablesFIPRule, IptablesFIPRuleSpec, IptablesFIPRuleStatus, IptablesSnatRule,
    IptablesSnatRuleSpec, IptablesSnatRuleStatus,
};
pub use ovn_nat::{
    FipType, IpType, NatKind, OvnDnatRule, OvnDnatRuleSpec, OvnDnatRuleStatus, OvnEip, OvnEipSpec,
    OvnEipStatus, OvnEipType, OvnFip, OvnFipSpec, OvnFipStatus, OvnSnatRule, OvnSnatRuleSpec,
    OvnSnatRuleStatus, UnknownValue,
};
pub use provider_network::{CustomInterface, ProviderNetwork, ProviderNetworkSpec, ProviderNetworkStatus};
pub use schema::{ExtraFields, IpCount};
pub use subnet::{
    Acl, NatOutgoingPolicyMatch, NatOutgoingPolicyRule, NatOutgoingPolicyRuleStatus, Subnet, SubnetSpec,
    SubnetStatus, U2oFeatures,
};
pub use vip::{Vip, VipSpec, VipStatus};
pub use vlan::{Vlan, VlanSpec, VlanStatus};
pub use vpc::{BfdPort, BfdPortStatus, PolicyRoute, StaticRoute, Vpc, VpcPeering, VpcSpec, VpcStatus};
pub use vpc_nat_gateway::{
    VpcBfd, VpcBgpSpeaker, VpcNatGateway, VpcNatGatewayRoute, VpcNatGatewaySpec, VpcNatGatewayStatus,
    VpcNatGatewayWorkload,
};

/// API group of every kind here.
pub const GROUP: &str = "kubeovn.io";
/// The only served and stored version.
pub const VERSION: &str = "v1";
/// `apiVersion` of every kind here.
pub const API_VERSION: &str = "kubeovn.io/v1";
/// Finalizer the controller puts on Subnets, IPs, IPPools, EIPs and NAT rules.
pub const FINALIZER: &str = "kubeovn.io/kube-ovn-controller";

/// The CRD of `K`, post-processed into Kube-OVN's shape.
///
/// Only Vip has a status without the status subresource; [`crds`] knows that, this function
/// takes it from the caller.
pub fn crd_for<K: CustomResourceExt>(status_subresource: bool) -> CustomResourceDefinition {
    schema::normalize(K::crd(), status_subresource)
}

/// Every CRD this crate defines, sorted by name (`<plural>.kubeovn.io`).
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut all = vec![
        crd_for::<Ip>(false),
        crd_for::<IPPool>(true),
        crd_for::<IptablesDnatRule>(true),
        crd_for::<IptablesEIP>(true),
        crd_for::<IptablesFIPRule>(true),
        crd_for::<IptablesSnatRule>(true),
        crd_for::<OvnDnatRule>(true),
        crd_for::<OvnEip>(true),
        crd_for::<OvnFip>(true),
        crd_for::<OvnSnatRule>(true),
        crd_for::<ProviderNetwork>(true),
        crd_for::<Subnet>(true),
        // Kube-OVN's Vip CRD has a status field but no status subresource.
        crd_for::<Vip>(false),
        crd_for::<Vlan>(true),
        crd_for::<Vpc>(true),
        crd_for::<VpcNatGateway>(true),
    ];
    all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    all
}
