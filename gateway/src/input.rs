//! What the planner reads: the node, the cluster's subnets, the join and Service CIDRs, the
//! other nodes' addresses and the pods on this node. The node daemon fills it from its caches.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use kube_ovn_api::crd::Subnet;

use crate::ingress::IngressPort;
use crate::ingress_local::LocalIngress;

/// This node.
#[derive(Debug, Clone, Copy)]
pub struct NodeFacts<'a> {
    /// The Node's name (gateway lists name it).
    pub name: &'a str,
    /// Its labels (`gatewayNodeSelectors` select on them).
    pub labels: &'a BTreeMap<String, String>,
    /// Its first InternalIP of each family, `(IPv4, IPv6)`: the source of Kube-OVN's
    /// `SNAT --to-source <node ip>` for Service traffic to pods. Absent, that rule is left out.
    pub internal_ips: (Option<IpAddr>, Option<IpAddr>),
}

/// A pod on this node, as its annotations say (`logical_switch`, `ip_address`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPod {
    /// `namespace/name`, for messages.
    pub key: String,
    pub subnet: String,
    pub ips: Vec<IpAddr>,
}

/// Everything the plan depends on.
#[derive(Debug, Clone, Copy)]
pub struct GatewayInput<'a> {
    pub node: NodeFacts<'a>,
    /// Every subnet; those outside the default VPC's overlay are ignored.
    pub subnets: &'a [Arc<Subnet>],
    /// The default VPC's router (`--cluster-router`).
    pub cluster_router: &'a str,
    /// The join subnet's CIDRs (from the Node's annotations), counted as cluster subnets even
    /// before the join Subnet is in the cache.
    pub join_cidrs: &'a [IpNet],
    /// Services' CIDRs (`--service-cluster-ip-range`).
    pub service_cidrs: &'a [IpNet],
    /// The other nodes' InternalIPs (traffic from them is not routed ingress).
    pub other_node_ips: &'a [IpAddr],
    /// Pods on this node (for a distributed `externalEgressGateway`).
    pub local_pods: &'a [LocalPod],
    /// The Service ports on the default VPC's LoadBalancer ingress IPs (and allowed external
    /// IPs), already checked by the daemon's guard: announced over BGP, marked and routed into
    /// `ovn0` by this node, and masqueraded to its join address there, so the reply comes back
    /// through this node (ours; Kube-OVN leaves them to kube-proxy). See [`crate::ingress`].
    pub lb_ingress: &'a [IngressPort],
    /// Of those, the ports of Services with `externalTrafficPolicy: Local`, with this node's
    /// ready endpoints: forwarded traffic to them is DNATed to those, keeping the client's
    /// address, or dropped when there are none. See [`crate::ingress_local`].
    pub lb_local: &'a [LocalIngress],
    /// The join gateways of this node (from its annotations), one per family: the next hop of
    /// the ingress table.
    pub join_gateways: &'a [IpAddr],
}
