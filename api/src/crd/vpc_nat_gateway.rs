//! `VpcNatGateway` (`vpc-nat-gateways.kubeovn.io`): the pod(s) that do iptables NAT for a custom
//! VPC, with one NIC in the VPC (`lanIp`) and one on the external network.
//!
//! One replica runs as a StatefulSet; more run as a Deployment with anti-affinity, and
//! `bfd.enabled` lets the VPC router fail over between them. `selector` entries are
//! `"key: value"` strings (a node selector), not a LabelSelector. The CRD defaults `replicas` to
//! 1 and `bfd` to disabled with 1000 ms intervals and multiplier 3; `namespace`, `vpc`, `subnet`
//! and `lanIp` are immutable.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Toleration};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::{ExtraFields, int32, spec_absent_is_default};

/// Desired state of a VpcNatGateway.
// Each `printcolumn(...)` repeats keys such as `type_ = "string"`, which clippy takes for a
// duplicated attribute.
#[allow(
    clippy::duplicated_attributes,
    reason = "kube-derive printcolumn arguments repeat by design"
)]
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kubeovn.io",
    version = "v1",
    kind = "VpcNatGateway",
    singular = "vpc-nat-gateway",
    plural = "vpc-nat-gateways",
    shortname = "vpc-nat-gw",
    status = "VpcNatGatewayStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN VPC NAT gateway: pods doing iptables NAT between a VPC and an external network.",
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.namespace"),
    printcolumn(name = "Vpc", type_ = "string", json_path = ".spec.vpc"),
    printcolumn(name = "Subnet", type_ = "string", json_path = ".spec.subnet"),
    printcolumn(name = "IPs", type_ = "string", json_path = ".status.lanIp"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready"),
    printcolumn(name = "BFD", type_ = "boolean", json_path = ".spec.bfd.enabled"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct VpcNatGatewaySpec {
    /// Pod affinity of the gateway workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Extra pod-template annotations (applied at creation only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// BFD between the VPC router and the gateway replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd: Option<VpcBfd>,
    /// BGP speaker sidecar announcing the gateway's EIPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp_speaker: Option<VpcBgpSpeaker>,
    /// External subnets (`ovn-vpc-external-network` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_subnets: Option<Vec<String>>,
    /// Internal CIDRs whose default route points into the gateway.
    #[serde(rename = "internalCIDRs", default, skip_serializing_if = "Option::is_none")]
    pub internal_cidrs: Option<Vec<String>>,
    /// Internal subnets whose default route points into the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_subnets: Option<Vec<String>>,
    /// The gateway's address in the VPC subnet (single replica only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lan_ip: Option<String>,
    /// Namespace of the gateway workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Do not allocate a default EIP.
    #[serde(rename = "noDefaultEIP", default, skip_serializing_if = "Option::is_none")]
    pub no_default_eip: Option<bool>,
    /// QoSPolicy for the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_policy: Option<String>,
    /// Number of gateway pods (CRD default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub replicas: Option<i32>,
    /// Extra routes inside the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes: Option<Vec<VpcNatGatewayRoute>>,
    /// Node selector as `"key: value"` strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<Vec<String>>,
    /// VPC subnet the gateway's LAN NIC is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    /// Tolerations of the gateway pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// VPC served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(VpcNatGatewaySpec);

/// BFD settings between the VPC router and the gateway.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VpcBfd {
    /// Run BFD (CRD default `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,
    /// Minimum receive interval in ms (CRD default 1000).
    #[serde(rename = "minRX", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1000))]
    pub min_rx: Option<i32>,
    /// Minimum transmit interval in ms (CRD default 1000).
    #[serde(rename = "minTX", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1000))]
    pub min_tx: Option<i32>,
    /// Detection multiplier (CRD default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 3))]
    pub multiplier: Option<i32>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// The gateway's BGP speaker sidecar (runs our speaker in EIP-only mode).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VpcBgpSpeaker {
    /// Local ASN (required when enabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int32")]
    pub asn: Option<u32>,
    /// BGP graceful restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_graceful_restart: Option<bool>,
    /// Run the sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Extra speaker arguments, appended verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<Vec<String>>,
    /// Hold time as a Go duration (`90s`, `1m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_time: Option<String>,
    /// Peer addresses (IPv4 and IPv6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbors: Option<Vec<String>>,
    /// TCP-MD5 password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Peer ASN (required when enabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int32")]
    pub remote_asn: Option<u32>,
    /// BGP router ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_id: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// A route inside the gateway.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct VpcNatGatewayRoute {
    /// Destination prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    /// Next hop.
    #[serde(rename = "nextHopIP", default, skip_serializing_if = "Option::is_none")]
    pub next_hop_ip: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Observed state of a VpcNatGateway (no conditions in Kube-OVN's schema).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VpcNatGatewayStatus {
    /// Affinity in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// External subnets in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_subnets: Option<Vec<String>>,
    /// Internal CIDRs in effect.
    #[serde(rename = "internalCIDRs", default, skip_serializing_if = "Option::is_none")]
    pub internal_cidrs: Option<Vec<String>>,
    /// Internal subnets in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_subnets: Option<Vec<String>>,
    /// LAN address(es), comma-separated with several replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lan_ip: Option<String>,
    /// QoSPolicy in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_policy: Option<String>,
    /// Every replica is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Replicas in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Selector in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<Vec<String>>,
    /// Tolerations in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// The workload running the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<VpcNatGatewayWorkload>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Reference to the gateway's StatefulSet or Deployment and the nodes it runs on.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VpcNatGatewayWorkload {
    /// `apps/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `StatefulSet` or `Deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Workload name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Nodes running replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
