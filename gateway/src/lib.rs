//! A node's egress, planned: from the cluster's subnets, the node and its pods to
//!
//! - one nftables table per family (`ip kube-ovn`, `ip6 kube-ovn`) holding Kube-OVN's sets by
//!   their names (`ovn40subnets`, `ovn40subnets-nat`, …, `ovn60…`) and its NAT, mangle and filter
//!   chains in its rule order ([`plan`]), as a script that replaces both tables in one
//!   transaction ([`Ruleset::script`]) or, when only set contents changed, as element updates
//!   ([`Ruleset::updates_from`]);
//! - the `ip rule`s and routes of `externalEgressGateway` ([`routing`]), and of ingress to the
//!   Services' ports on LoadBalancer IPs ([`ingress`]).
//!
//! Everything here is a function from values to values: no I/O, no async. The node daemon
//! (`cni`) feeds it from its caches and applies the result through `dataplane`, the one crate
//! that talks to the kernel. [`listing`] reads the kernel's table back for the daemon's
//! drift check.
//!
//! Input it refuses (an unparsable `gatewayNode` entry, a policy rule with a bad CIDR) is a
//! [`PlanError`] naming subnet and field; that subnet keeps its previous plan.

mod error;
pub mod ingress;
pub mod ingress_local;
mod input;
pub mod listing;
mod plan;
pub mod routing;
mod ruleset;
mod subnet;

pub use error::PlanError;
pub use ingress::{IngressPort, LB_INGRESS_MARK, LB_INGRESS_PRIORITY, LB_INGRESS_TABLE, Protocol};
pub use ingress_local::LocalIngress;
pub use input::{GatewayInput, LocalPod, NodeFacts};
pub use plan::{GatewayPlan, LastGood, Planned, plan};
pub use routing::PolicyRouting;
pub use ruleset::{
    BaseChain, Chain, Element, Family, Ruleset, Set, SetKind, SetUpdate, TABLE, Table, element_text,
};
pub use subnet::{
    ExternalEgress, Gateway, PolicyAction, PolicyRule, SubnetView, concerns_gateway, is_validated,
};
