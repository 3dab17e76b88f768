//! Aggregation: an advertisement with `aggregationLengthV4: L` (`V6` likewise) announces, for
//! each selected prefix longer than L, its covering prefix of length L instead; a prefix already
//! L or shorter goes out as it is. The aggregate must lie inside the allocation that holds its
//! member (the pod's or EIP's subnet CIDR, the subnet CIDR itself, the
//! `--service-external-ip-cidrs` entry): a shorter one would also cover addresses that are not
//! the cluster's, and draw their traffic here.
//!
//! An advertisement whose aggregate would leave its allocation for any member it selects is
//! refused whole, as an invalid spec is: it announces nothing (neither that member nor the
//! others, aggregated or not) until the spec or the allocation changes, and is reported in
//! [`super::Evaluation::refused`] with the field `spec.aggregationLengthV4` (`V6`) and its
//! smallest such member. Announcing the members unaggregated instead would send every /32 the
//! platform meant to hide behind one prefix (the table a ToR may not hold), and announcing a
//! part would be a policy nobody wrote; so the peers keep what they had without it (the issue:
//! "the peer keeps its previous policy"). The annotation path and other advertisements are
//! unaffected. So a subnet CIDR with L shorter than the CIDR, or a pod /32 with L shorter than
//! its subnet's CIDR, refuses the advertisement. ClusterIPs and LoadBalancer IPs have no
//! allocation the speaker knows: validation refuses aggregation for them up front
//! ([`super::validate`]).

use ipnet::IpNet;

use super::ValidatedAdvertisement;
use super::candidates::Candidate;
use crate::announce::refusal::prefix_problem;
use crate::crd::CrdError;

/// Where one advertisement puts one candidate.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// As it is.
    Same,
    /// As this covering prefix.
    Aggregate(IpNet),
    /// Nowhere: the aggregate would leave the allocation (the error names the field); the
    /// advertisement is not applied.
    Refused(CrdError),
}

/// Where `ad` puts `c`.
pub fn target(ad: &ValidatedAdvertisement, c: &Candidate) -> Target {
    let (length, field) = match c.prefix {
        IpNet::V4(_) => (ad.aggregation_length_v4, "spec.aggregationLengthV4"),
        IpNet::V6(_) => (ad.aggregation_length_v6, "spec.aggregationLengthV6"),
    };
    let Some(length) = length.filter(|l| *l < c.prefix.prefix_len()) else {
        return Target::Same;
    };
    let Ok(aggregate) = IpNet::new(c.prefix.network(), length).map(|n| n.trunc()) else {
        return Target::Same;
    };
    let refuse = |why: String| {
        Target::Refused(CrdError::new(
            field,
            format!(
                "{length} would announce {aggregate} for {} {} ({}), {why}: advertisement not applied",
                c.kind.as_str(),
                c.prefix,
                origin_text(c),
            ),
        ))
    };
    match c.allocation {
        None => refuse("whose allocation the speaker does not know".into()),
        Some(allocation) if !(allocation.prefix_len() <= length && allocation.contains(&aggregate)) => {
            refuse(format!("beyond its allocation {allocation}"))
        }
        Some(_) => match prefix_problem(aggregate) {
            Some(problem) => refuse(format!("which is {problem}")),
            None => Target::Aggregate(aggregate),
        },
    }
}

fn origin_text(c: &Candidate) -> String {
    use crate::announce::Origin;
    match c.origin.as_ref() {
        Origin::Subnet(n) => format!("Subnet {n}"),
        Origin::Pod(n) => format!("Pod {n}"),
        Origin::Service(n) => format!("Service {n}"),
        Origin::Eip(n) => format!("IptablesEIP {n}"),
        Origin::OvnEip(n) => format!("OvnEip {n}"),
    }
}
