//! `BgpPeer` (`bgppeers.bgp.kube-ovn-rs.io/v1alpha1`): declarative BGP peers of the speaker, our
//! own extension beyond Kube-OVN's speaker flags (which remain, and keep working unchanged). Not a
//! Kube-OVN kind, so it lives in its own group, outside [`crate::crd`]; `crdgen` writes and
//! checks its CRD beside Kube-OVN's ([`crate::extension_crds`]).
//!
//! A BgpPeer is cluster-scoped. Its `spec.nodeSelector` picks the speaker nodes that peer with
//! it (empty or absent: every node running a speaker); each of those speakers opens its own
//! session and reports it under `status.nodes.<node name>`, a map so that every speaker can
//! merge-patch its own key (RFC 7386) without reading and without clobbering the others'.
//!
//! The API server checks what a schema can (types, required fields, bounds, the shape of
//! communities); the speaker checks the rest (`kube_ovn_speaker::crd`). Durations are whole
//! seconds (`holdTime: 90`), not Go duration strings, so the schema can bound them.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube_core::CustomResourceExt;
use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// API group of the speaker's own kinds.
pub const GROUP: &str = "bgp.kube-ovn-rs.io";
/// The only served and stored version.
pub const VERSION: &str = "v1alpha1";
/// `<plural>.<group>`: the CRD's name, and its file name in `deploy/crds/` (plus `.yaml`).
pub const CRD_NAME: &str = "bgppeers.bgp.kube-ovn-rs.io";
/// Key in the password Secret when `passwordSecretRef.key` is not given.
pub const DEFAULT_PASSWORD_KEY: &str = "password";

/// Desired state of a BGP peer.
#[allow(
    clippy::duplicated_attributes,
    reason = "kube-derive printcolumn arguments repeat by design"
)]
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "bgp.kube-ovn-rs.io",
    version = "v1alpha1",
    kind = "BgpPeer",
    singular = "bgppeer",
    plural = "bgppeers",
    shortname = "bgpp",
    status = "BgpPeerStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A BGP peer of the kube-ovn-rs speakers on the nodes its nodeSelector picks.",
    printcolumn(name = "Peer", type_ = "string", json_path = ".spec.peerAddress"),
    printcolumn(name = "ASN", type_ = "integer", json_path = ".spec.peerASN"),
    printcolumn(name = "Established", type_ = "string", json_path = ".status.established"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeerSpec {
    /// Speaker nodes that peer with this router (matchLabels and matchExpressions, as in a
    /// Deployment's selector). Empty or absent: every node running a speaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// The peer's IPv4 or IPv6 address.
    pub peer_address: String,
    /// The peer's AS number (4-octet, RFC 6793).
    #[serde(rename = "peerASN")]
    #[schemars(schema_with = "asn")]
    pub peer_asn: u32,
    /// Our AS number toward this peer; default the speaker's `--cluster-as`.
    #[serde(rename = "localASN", default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_asn")]
    pub local_asn: Option<u32>,
    /// The peer's TCP port; default 179.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "port")]
    pub port: Option<u16>,
    /// TCP MD5 key (RFC 2385) from a Secret the speaker can read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeyRef>,
    /// Proposed hold time in seconds: 0 (no keepalives) or 3 to 65535 (RFC 4271 §4.2);
    /// default the speaker's `--holdtime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "seconds")]
    pub hold_time: Option<u16>,
    /// Keepalive interval in seconds, below the hold time; default a third of the negotiated
    /// hold time (RFC 4271 §10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "seconds")]
    pub keepalive_time: Option<u16>,
    /// Wait for the peer to connect; never dial it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub passive: bool,
    /// IP TTL of our packets to an external peer (1 to 255); default 1, a directly connected
    /// neighbour. With `ttlSecurity` it is the number of hops to the peer instead (1 to 254).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "ttl")]
    pub ebgp_multihop: Option<u8>,
    /// GTSM, the Generalized TTL Security Mechanism (RFC 5082): send with TTL (IPv6 hop limit)
    /// 255 and drop every packet of the session that arrives with less than 256 minus the hops
    /// to the peer (`ebgpMultihop`, default 1: 255, a directly connected peer), so nothing from
    /// farther away can reach or reset the session. The peer must enable it too (BIRD
    /// `ttl security on`, FRR `neighbor ... ttl-security hops 1`). Default the speaker's
    /// `--ttl-security`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_security: Option<bool>,
    /// Address families to negotiate: `ipv4-unicast`, `ipv6-unicast`. Default the family of
    /// `peerAddress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "families")]
    pub families: Option<Vec<String>>,
    /// Communities (RFC 1997) on every route sent to this peer: `A:B` with A and B in 0-65535,
    /// or a well-known name: `no-export`, `no-advertise`, `no-export-subconfed` (RFC 1997),
    /// `blackhole` (RFC 7999).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "communities_schema")]
    pub communities: Vec<String>,
    /// Large communities (RFC 8092) on every route sent to this peer: `A:B:C`, each 0-4294967295.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "large_communities_schema")]
    pub large_communities: Vec<String>,
    /// LOCAL_PREF of our routes; internal peers only (localASN = peerASN, RFC 4271 §5.1.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_u32")]
    pub local_pref: Option<u32>,
    /// MULTI_EXIT_DISC of our routes (RFC 4271 §5.1.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_u32")]
    pub med: Option<u32>,
    /// Graceful restart (RFC 4724) as the restarting speaker; default the speaker's
    /// `--graceful-restart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graceful_restart: Option<bool>,
    /// BFD (RFC 5880, single hop) for this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd: Option<BfdSpec>,
}

/// Where the TCP MD5 key is: a key of a Secret.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    pub name: String,
    pub namespace: String,
    /// Key in the Secret's data; default `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// BFD settings of one peer; the defaults are Kube-OVN's `--bfd-*` defaults.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BfdSpec {
    #[serde(default)]
    pub enabled: bool,
    /// Desired Min TX Interval in milliseconds; default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "bfd_interval")]
    pub min_tx_ms: Option<u32>,
    /// Required Min RX Interval in milliseconds; default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "bfd_interval")]
    pub min_rx_ms: Option<u32>,
    /// Detect Mult, 1 to 255; default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "multiplier")]
    pub multiplier: Option<u8>,
}

/// Observed state: one entry per speaker node that peers with this router.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeerStatus {
    /// Keyed by node name; each speaker writes only its own key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nodes: BTreeMap<String, NodeStatus>,
    /// `<established>/<nodes>` as the last speaker to write it counted them; for `kubectl get`.
    // Written by `status_patch_with_summary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub established: Option<String>,
}

/// One speaker's session with the peer.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// RFC 4271 session state: Idle, Connect, Active, OpenSent, OpenConfirm, Established.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// When the current session became Established.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub established_at: Option<Time>,
    /// Prefixes the peer holds from this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "count")]
    pub prefixes_sent: Option<u64>,
    /// Why the last session ended or the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// How many prefixes of each kind this node's export policy gives the peer, by the kinds of
    /// `BgpAdvertisement.spec.advertise` (`PodIPs`, `SubnetCIDRs`, ...); kinds with none are
    /// absent. The routes themselves, with their attributes: `kube-ovn-speaker routes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "advertised")]
    pub advertised: BTreeMap<String, u64>,
    /// When this entry was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
}

impl BgpPeerStatus {
    /// `<established>/<nodes>` over the entries in `nodes`.
    pub fn summary(&self) -> String {
        let up = self
            .nodes
            .values()
            .filter(|n| n.state.as_deref() == Some("Established"))
            .count();
        format!("{up}/{}", self.nodes.len())
    }
}

/// The CustomResourceDefinition, as `deploy/crds/bgppeers.bgp.kube-ovn-rs.io.yaml` holds it: the
/// derived one cleaned as every CRD of ours is ([`crate::crd::schema::clean`]).
pub fn crd() -> CustomResourceDefinition {
    crate::crd::schema::clean(BgpPeer::crd(), |_| {})
}

// Schemas the derive cannot infer: bounds the API server enforces, and plain `integer`s (the
// derive would write Rust-only formats such as `uint32`).

fn asn(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int64", "minimum": 1, "maximum": 4_294_967_295_u64 })
}

fn optional_asn(g: &mut SchemaGenerator) -> Schema {
    asn(g)
}

fn optional_u32(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int64", "minimum": 0, "maximum": 4_294_967_295_u64 })
}

fn count(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int64", "minimum": 0 })
}

fn advertised(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "integer", "format": "int64", "minimum": 0 },
    })
}

fn port(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int32", "minimum": 1, "maximum": 65535 })
}

fn seconds(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int32", "minimum": 0, "maximum": 65535 })
}

fn ttl(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int32", "minimum": 1, "maximum": 255 })
}

fn multiplier(g: &mut SchemaGenerator) -> Schema {
    ttl(g)
}

/// Milliseconds whose microseconds fit the 32-bit fields of RFC 5880 §4.1.
fn bfd_interval(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int64", "minimum": 1, "maximum": 4_294_967 })
}

fn families(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "string", "enum": ["ipv4-unicast", "ipv6-unicast"] },
    })
}

/// Standard or well-known communities (shared with [`crate::bgp_advertisement`]).
pub(crate) fn communities_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "string",
            "pattern": "^([0-9]{1,5}:[0-9]{1,5}|no-export|no-advertise|no-export-subconfed|blackhole)$",
        },
    })
}

/// Large communities (shared with [`crate::bgp_advertisement`]).
pub(crate) fn large_communities_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "string", "pattern": "^[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}$" },
    })
}
