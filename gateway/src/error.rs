//! Input the planner refuses: every error names the subnet, the field and the value.

/// A subnet field the planner cannot use. The subnet's previous plan stays in force (see
/// [`crate::plan`]); the node daemon reports the error as a Warning event on the subnet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `spec.cidrBlock` does not parse.
    #[error("subnet {subnet}: spec.cidrBlock: {value:?} is not a CIDR or a v4,v6 pair of CIDRs")]
    Cidr { subnet: String, value: String },
    /// `spec.gatewayType` is neither `distributed` nor `centralized`.
    #[error("subnet {subnet}: spec.gatewayType: {value:?} is neither distributed nor centralized")]
    GatewayType { subnet: String, value: String },
    /// An entry of `spec.gatewayNode` (or a `gatewayNodeSelectors` selector) is unusable.
    #[error("subnet {subnet}: {field}: {value:?}: {problem}")]
    GatewayNode {
        subnet: String,
        field: String,
        value: String,
        problem: String,
    },
    /// A `natOutgoingPolicyRules` entry is unusable (an address, the action or the rule ID).
    #[error("subnet {subnet}: {field}: {value:?}: {problem}")]
    PolicyRule {
        subnet: String,
        field: String,
        value: String,
        problem: String,
    },
    /// `externalEgressGateway` or its policy-routing priority or table is unusable.
    #[error("subnet {subnet}: {field}: {value:?}: {problem}")]
    ExternalEgress {
        subnet: String,
        field: String,
        value: String,
        problem: String,
    },
}

impl PlanError {
    /// The subnet the error is about.
    pub fn subnet(&self) -> &str {
        match self {
            Self::Cidr { subnet, .. }
            | Self::GatewayType { subnet, .. }
            | Self::GatewayNode { subnet, .. }
            | Self::PolicyRule { subnet, .. }
            | Self::ExternalEgress { subnet, .. } => subnet,
        }
    }

    /// The field, as a path from the object's root.
    pub fn field(&self) -> &str {
        match self {
            Self::Cidr { .. } => "spec.cidrBlock",
            Self::GatewayType { .. } => "spec.gatewayType",
            Self::GatewayNode { field, .. }
            | Self::PolicyRule { field, .. }
            | Self::ExternalEgress { field, .. } => field,
        }
    }
}
