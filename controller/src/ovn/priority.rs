//! Kube-OVN's priorities for the rows the controller writes (its `pkg/util/const.go`), in one
//! place: a router policy and an ACL live in different tables with different ranges, and before
//! they were gathered here two different constants shared a name.
//!
//! Router policies on a VPC's router (`Logical_Router_Policy.priority`, 0..32767; higher first):

/// `SubnetRouterPolicyPriority`: allow traffic to a subnet's CIDR, so it is never rerouted.
pub const POLICY_SUBNET_ALLOW: i64 = 31000;
/// `U2OSameSubnetPolicyPriority`: with U2O overlay-only routing, a subnet's traffic to itself is
/// allowed before the physical-gateway reroute below.
pub const POLICY_U2O_SAME_SUBNET: i64 = 30060;
/// `U2OPhysicalGatewayPolicyPriority`: with U2O overlay-only routing, a subnet's traffic goes to
/// its physical gateway above the node policies (30000) and every gateway policy.
pub const POLICY_U2O_PHYSICAL_GATEWAY: i64 = 30050;
/// `NodeRouterPolicyPriority`: traffic for a node's own address goes to its join address.
pub const POLICY_NODE: i64 = 30000;
/// `U2OSubnetPolicyPriority`: in the default VPC, traffic to a U2O underlay subnet is allowed
/// before the gateway reroutes (29000) can send it to a node; also the reroutes of a U2O
/// subnet's Service traffic to its nodes when load balancing is off.
pub const POLICY_U2O_SUBNET: i64 = 29400;
/// `NorthGatewayRoutePolicyPriority`: a default-VPC pod with an `ovn.kubernetes.io/eip` or
/// `ovn.kubernetes.io/snat` annotation leaves through the external gateway, above the subnet
/// gateway reroutes (29000).
pub const POLICY_NORTH_GATEWAY: i64 = 29250;
/// `GatewayRouterPolicyPriority`: a default-VPC subnet's traffic leaving through its gateway.
pub const POLICY_GATEWAY: i64 = 29000;

// ACLs on a subnet's switch (`ACL.priority`, 0..32767; higher first):

/// `DefaultDropPriority`: a private subnet drops what nothing above allows.
pub const ACL_DEFAULT_DROP: i64 = 1000;
/// `SubnetAllowPriority`: a private subnet allows its own and its `allowSubnets` traffic.
pub const ACL_SUBNET_ALLOW: i64 = 1001;
/// `AllowEWTrafficPriority`: `allowEWTraffic` allows traffic within the subnet.
pub const ACL_ALLOW_EAST_WEST: i64 = 1900;
/// `NodeAllowPriority`: a private subnet still lets the nodes (the join subnet) in.
pub const ACL_NODE_ALLOW: i64 = 3000;
/// An underlay switch drops ARP requests from its localnet port for its router port's
/// addresses (Kube-OVN does it in its patched ovn-northd, so it has no priority for it): above
/// every ACL Kube-OVN writes, so a subnet's ACLs cannot let them through by accident.
pub const ACL_LOCALNET_ARP_DROP: i64 = 32700;

// ACLs on a NetworkPolicy's port group (`NetworkPolicy` ingress and egress use the same values):

/// `IngressDefaultDrop` / `EgressDefaultDrop`: what a policy's pods neither receive nor send
/// unless a rule allows it.
pub const ACL_NP_DEFAULT_DROP: i64 = 2000;
/// `IngressAllowPriority` / `EgressAllowPriority`: a policy rule's allow.
pub const ACL_NP_ALLOW: i64 = 2001;
