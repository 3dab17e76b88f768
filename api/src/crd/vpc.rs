//! `Vpc` (`vpcs.kubeovn.io`): an OVN logical router with its subnets, routes and peerings.
//!
//! The controller creates the default VPC `ovn-cluster` itself (status `default` and `standby`
//! true, router `ovn-cluster`, default logical switch `ovn-default`). For custom VPCs Kube-OVN
//! owns the whole router: `staticRoutes` and `policyRoutes` are the complete desired set.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::condition::Condition;
use super::schema::{ExtraFields, integer, spec_absent_is_default};

/// Desired state of a Vpc.
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
    kind = "Vpc",
    singular = "vpc",
    plural = "vpcs",
    shortname = "vpc",
    status = "VpcStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN VPC: an OVN logical router with its subnets, routes and peerings.",
    printcolumn(
        name = "EnableExternal",
        type_ = "boolean",
        json_path = ".status.enableExternal"
    ),
    printcolumn(name = "EnableBfd", type_ = "boolean", json_path = ".status.enableBfd"),
    printcolumn(name = "Standby", type_ = "boolean", json_path = ".status.standby"),
    printcolumn(name = "Subnets", type_ = "string", json_path = ".status.subnets"),
    printcolumn(
        name = "ExtraExternalSubnets",
        type_ = "string",
        json_path = ".status.extraExternalSubnets"
    ),
    printcolumn(name = "Namespaces", type_ = "string", json_path = ".spec.namespaces"),
    printcolumn(
        name = "DefaultSubnet",
        type_ = "string",
        json_path = ".status.defaultLogicalSwitch"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct VpcSpec {
    /// A dedicated router port for BFD with the external gateways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd_port: Option<BfdPort>,
    /// Subnet pods of the VPC's namespaces land in by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_subnet: Option<String>,
    /// Use OVN BFD (with ECMP) towards the external gateways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_bfd: Option<bool>,
    /// Connect the router to the external network (OVN gateway router port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_external: Option<bool>,
    /// Further external subnets to connect (immutable once set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_external_subnets: Option<Vec<String>>,
    /// Namespaces bound to the VPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    /// Logical router policies (the complete set for a custom VPC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_routes: Option<Vec<PolicyRoute>>,
    /// Static routes (the complete set for a custom VPC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_routes: Option<Vec<StaticRoute>>,
    /// Peerings with other VPCs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_peerings: Option<Vec<VpcPeering>>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(VpcSpec);

/// The VPC's dedicated BFD port.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BfdPort {
    /// Create the port (CRD default `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,
    /// Port address (CIDR form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// Nodes that host the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// An OVN logical router policy.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRoute {
    /// `allow`, `drop` or `reroute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// OVN match expression.
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub match_: Option<String>,
    /// Next hop(s) for `reroute`.
    #[serde(rename = "nextHopIP", default, skip_serializing_if = "Option::is_none")]
    pub next_hop_ip: Option<String>,
    /// 0-32767; higher wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "integer")]
    pub priority: Option<i32>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// An OVN logical router static route.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StaticRoute {
    /// UUID of the OVN BFD row guarding the route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd_id: Option<String>,
    /// Destination (or source, with `policySrc`) prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    /// ECMP mode, e.g. `ecmp_symmetric_reply`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecmp_mode: Option<String>,
    /// Next hop address.
    #[serde(rename = "nextHopIP", default, skip_serializing_if = "Option::is_none")]
    pub next_hop_ip: Option<String>,
    /// `policyDst` (default) or `policySrc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Route table name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_table: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// A peering with another VPC over a point-to-point router port.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VpcPeering {
    /// Local address of the peering port, in CIDR form.
    #[serde(rename = "localConnectIP", default, skip_serializing_if = "Option::is_none")]
    pub local_connect_ip: Option<String>,
    /// The VPC on the other side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_vpc: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// Observed state of a Vpc.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VpcStatus {
    /// The realised BFD port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd_port: Option<BfdPortStatus>,
    /// `Ready`, `Validated`, `Error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// True for the cluster's default VPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
    /// Name of the default subnet's logical switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_logical_switch: Option<String>,
    /// Whether BFD is in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_bfd: Option<bool>,
    /// Whether the external connection is in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_external: Option<bool>,
    /// Extra external subnets connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_external_subnets: Option<Vec<String>>,
    /// OVN logical router name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<String>,
    /// OVN load balancer for SCTP Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sctp_load_balancer: Option<String>,
    /// OVN load balancer for SCTP Services with session affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sctp_session_load_balancer: Option<String>,
    /// Set once the router and its load balancers exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<bool>,
    /// Subnets of the VPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnets: Option<Vec<String>>,
    /// OVN load balancer for TCP Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_load_balancer: Option<String>,
    /// OVN load balancer for TCP Services with session affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_session_load_balancer: Option<String>,
    /// OVN load balancer for UDP Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_load_balancer: Option<String>,
    /// OVN load balancer for UDP Services with session affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_session_load_balancer: Option<String>,
    /// Peered VPCs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_peerings: Option<Vec<String>>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// The realised BFD port.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct BfdPortStatus {
    /// Port address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// Router port name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Nodes hosting the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
