//! Aggregation: an advertisement with `aggregationLengthV4: L` (`V6` likewise) announces, for
//! each selected prefix longer than L, its covering prefix of length L instead; a prefix already
//! L or shorter goes out as it is. The aggregate must lie inside the allocation that holds its
//! member (the pod's or EIP's subnet CIDR, the subnet CIDR itself, the
//! `--service-external-ip-cidrs` entry): a shorter one would also cover addresses that are not
//! the cluster's, and draw their traffic here.
//!
//! An aggregate that would leave its allocation is refused for that member only: the member is
//! announced by that advertisement as it is (unaggregated, with the advertisement's attributes:
//! a more specific route of our own is always correct), and the advertisement is reported with
//! the field `spec.aggregationLengthV4` (`V6`) and one example, smallest prefix first, in
//! [`super::Evaluation::refused`]. So a subnet CIDR with L shorter than the CIDR is never
//! aggregated (that would reach beyond the subnet), a pod /32 with L shorter than its subnet's
//! CIDR neither. ClusterIPs and LoadBalancer IPs have no allocation the speaker knows: validation
//! refuses aggregation for them up front ([`super::validate`]).

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
    /// As it is, because the aggregate is refused (the error names the field).
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
                "{length} would announce {aggregate} for {} {} ({}), {why}: announced unaggregated",
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
