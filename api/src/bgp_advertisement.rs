//! `BgpAdvertisement` (`bgpadvertisements.bgp.kube-ovn-rs.io/v1alpha1`): what the speakers
//! announce, to which peers, with which path attributes. Ours, beside [`crate::bgp_peer`]; the
//! `ovn.kubernetes.io/bgp` annotations keep working exactly as Kube-OVN's, and an advertisement
//! adds to them: it selects more of what the speaker may announce (only what the controller
//! established: a pod address backed by its IP record, a Ready subnet's CIDR, a Service address
//! within the operator's bounds, a ready EIP), and gives attributes to every prefix it selects,
//! annotated or not.
//!
//! Cluster-scoped and written by the platform (tenants get no RBAC on it): a tenant steers it only
//! through labels on its own Services, which the advertisement's `namespaceSelector` can bound.
//!
//! How one prefix's attributes are found for one peer, when several advertisements select both:
//! communities and large communities are the union (with the peer's own); for LOCAL_PREF, MED and
//! AS-path prepend the most preferred value wins (highest LOCAL_PREF, lowest MED, fewest
//! prepends: RFC 4271 §9.1.2.2's own order), over the peer's defaults; an advertisement whose
//! value lost for some prefix says so in its `Conflict` condition, and the speaker's routes
//! endpoint shows each route's winners.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_core::CustomResourceExt;
use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::crd::Condition;

/// `<plural>.<group>`: the CRD's name, and its file name in `deploy/crds/` (plus `.yaml`).
pub const CRD_NAME: &str = "bgpadvertisements.bgp.kube-ovn-rs.io";
/// The most AS-path prepends one advertisement may ask for.
pub const MAX_AS_PATH_PREPEND: u8 = 10;

/// What an advertisement selects: which kinds of prefixes, from which objects, for which peers,
/// and the path attributes they carry.
#[allow(
    clippy::duplicated_attributes,
    reason = "kube-derive printcolumn arguments repeat by design"
)]
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "bgp.kube-ovn-rs.io",
    version = "v1alpha1",
    kind = "BgpAdvertisement",
    singular = "bgpadvertisement",
    plural = "bgpadvertisements",
    shortname = "bgpadv",
    status = "BgpAdvertisementStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "Prefixes the kube-ovn-rs speakers announce, to which BgpPeers, with which attributes.",
    printcolumn(name = "Advertise", type_ = "string", json_path = ".spec.advertise"),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct BgpAdvertisementSpec {
    /// The kinds of prefixes selected (at least one).
    #[schemars(schema_with = "kinds")]
    pub advertise: Vec<AdvertiseKind>,
    /// Subnets whose CIDRs (`SubnetCIDRs`), pods (`PodIPs`) and EIPs (`EIPs`, by their external
    /// subnet) are selected. Absent: every subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_selector: Option<LabelSelector>,
    /// Namespaces whose pods and Services are selected. Absent: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Services whose addresses are selected (`ClusterIPs`, `ExternalIPs`, `LoadBalancerIPs`).
    /// Absent: every Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_selector: Option<LabelSelector>,
    /// BgpPeers (by their labels) that receive these prefixes. Absent or empty: every peer,
    /// including the `--neighbor-address` peers of the flags, which have no labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_selector: Option<LabelSelector>,
    /// Communities (RFC 1997): `A:B` with A and B in 0-65535, or a well-known name
    /// (`no-export`, `no-advertise`, `no-export-subconfed`, `blackhole` (RFC 7999)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "communities")]
    pub communities: Vec<String>,
    /// Large communities (RFC 8092): `A:B:C`, each 0-4294967295.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "large_communities")]
    pub large_communities: Vec<String>,
    /// LOCAL_PREF (internal peers only, RFC 4271 §5.1.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_u32")]
    pub local_pref: Option<u32>,
    /// MULTI_EXIT_DISC (RFC 4271 §5.1.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_u32")]
    pub med: Option<u32>,
    /// Extra copies of our AS on the AS_PATH to external peers, 0 to 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "prepend")]
    pub as_path_prepend: Option<u8>,
    /// Announce IPv4 prefixes as their covering prefix of this length instead (0-32), within the
    /// allocation that holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "aggregationLengthV4")]
    #[schemars(schema_with = "length_v4")]
    pub aggregation_length_v4: Option<u8>,
    /// The same for IPv6 (0-128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "aggregationLengthV6")]
    #[schemars(schema_with = "length_v6")]
    pub aggregation_length_v6: Option<u8>,
}

/// A kind of prefix the speaker can announce.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AdvertiseKind {
    /// Pods' addresses (/32, /128) that the controller allocated (IP records).
    #[serde(rename = "PodIPs")]
    PodIps,
    /// Ready subnets' CIDRs.
    #[serde(rename = "SubnetCIDRs")]
    SubnetCidrs,
    /// Services' `spec.clusterIPs`.
    #[serde(rename = "ClusterIPs")]
    ClusterIps,
    /// Services' `spec.externalIPs` inside `--service-external-ip-cidrs`.
    #[serde(rename = "ExternalIPs")]
    ExternalIps,
    /// Services' `status.loadBalancer.ingress[].ip`.
    #[serde(rename = "LoadBalancerIPs")]
    LoadBalancerIps,
    /// Ready, in-use OvnEips and IptablesEIPs.
    #[serde(rename = "EIPs")]
    Eips,
}

impl AdvertiseKind {
    /// Every kind, in the order status counts list them.
    pub const ALL: [AdvertiseKind; 6] = [
        AdvertiseKind::PodIps,
        AdvertiseKind::SubnetCidrs,
        AdvertiseKind::ClusterIps,
        AdvertiseKind::ExternalIps,
        AdvertiseKind::LoadBalancerIps,
        AdvertiseKind::Eips,
    ];

    /// The spelling of the API (`PodIPs`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            AdvertiseKind::PodIps => "PodIPs",
            AdvertiseKind::SubnetCidrs => "SubnetCIDRs",
            AdvertiseKind::ClusterIps => "ClusterIPs",
            AdvertiseKind::ExternalIps => "ExternalIPs",
            AdvertiseKind::LoadBalancerIps => "LoadBalancerIPs",
            AdvertiseKind::Eips => "EIPs",
        }
    }
}

/// Observed state, the same from every speaker (validation does not depend on the node).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BgpAdvertisementStatus {
    /// `Accepted`: True when the spec is in effect; False with reason `Invalid` (the spec failed
    /// validation: the last accepted spec stays in effect, the message names the field) or
    /// `AggregationRefused` (an aggregate would announce addresses beyond the allocation holding
    /// its members: the advertisement announces nothing on that node). `Conflict`: True when
    /// another advertisement's value won for some prefix and peer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The CustomResourceDefinition, as `deploy/crds/bgpadvertisements.bgp.kube-ovn-rs.io.yaml` holds
/// it.
pub fn crd() -> CustomResourceDefinition {
    crate::crd::schema::clean(BgpAdvertisement::crd(), |_| {})
}

fn kinds(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "string",
            "enum": ["PodIPs", "SubnetCIDRs", "ClusterIPs", "ExternalIPs", "LoadBalancerIPs", "EIPs"],
        },
    })
}

fn optional_u32(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int64", "minimum": 0, "maximum": 4_294_967_295_u64 })
}

fn prepend(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int32", "minimum": 0, "maximum": MAX_AS_PATH_PREPEND })
}

fn length_v4(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int32", "minimum": 0, "maximum": 32 })
}

fn length_v6(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int32", "minimum": 0, "maximum": 128 })
}

fn communities(g: &mut SchemaGenerator) -> Schema {
    crate::bgp_peer::communities_schema(g)
}

fn large_communities(g: &mut SchemaGenerator) -> Schema {
    crate::bgp_peer::large_communities_schema(g)
}
