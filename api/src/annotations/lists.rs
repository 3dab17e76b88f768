//! List values: comma lists of object names, the `;`-joined namespace annotations, the pod
//! `ip_pool` annotation and a subnet's `gatewayNode` list.
//!
//! The namespace `cidr` and `exclude_ips` annotations hold one element per subnet bound to the
//! namespace, in the order of its `logical_switch` list, joined with `;` because each element is
//! itself a comma list (a dual-stack `cidrBlock`, a subnet's `excludeIps`).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use super::addr::{CidrPair, IpFamily, IpPair, IpRange};
use super::{AnnotationValue, Problem, check_element};

/// Whether `name` is a DNS-1123 subdomain, the rule for Kubernetes object names.
fn is_object_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn join<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T], sep: &str) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

/// A comma list of object names: namespace `logical_switch` and `ip_pool`, pod
/// `security_groups`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NameList(pub Vec<String>);

impl fmt::Display for NameList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        join(f, &self.0, ",")
    }
}

impl AnnotationValue for NameList {
    const EXPECTED: &'static str = "a comma list of object names";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        value
            .split(',')
            .map(|name| {
                let name = check_element(name)?;
                if is_object_name(name) {
                    Ok(name.to_owned())
                } else {
                    Err(Problem::BadName(name.to_owned()))
                }
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

/// Namespace `cidr`: the `cidrBlock` of each bound subnet, joined with `;`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CidrBlocks(pub Vec<CidrPair>);

impl fmt::Display for CidrBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        join(f, &self.0, ";")
    }
}

impl AnnotationValue for CidrBlocks {
    const EXPECTED: &'static str = "`;`-joined CIDRs, each `v4cidr`, `v6cidr` or `v4cidr,v6cidr`";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        value
            .split(';')
            .map(|element| CidrPair::parse_value(check_element(element)?))
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

/// Namespace `exclude_ips`: each bound subnet's `excludeIps` as a comma list, joined with `;`.
/// An element may be empty (a subnet with no exclusions).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ExcludeIpLists(pub Vec<Vec<IpRange>>);

impl fmt::Display for ExcludeIpLists {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, list) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            join(f, list, ",")?;
        }
        Ok(())
    }
}

impl AnnotationValue for ExcludeIpLists {
    const EXPECTED: &'static str = "`;`-joined comma lists of IPs, CIDRs or `first..last` ranges";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        value
            .split(';')
            .map(|element| {
                if element.is_empty() {
                    return Ok(Vec::new());
                }
                element
                    .split(',')
                    .map(IpRange::parse_value)
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

/// The pod `ip_pool` annotation: the name of one IPPool, or static addresses to choose from.
///
/// Kube-OVN's reading, which we follow:
/// - with a `;`, each `;` element is one candidate, itself `v4`, `v6` or `v4,v6`;
/// - otherwise a comma list of single addresses, except that exactly two addresses of different
///   families form one dual-stack candidate;
/// - a single element that is not an address is an IPPool name (we reject one made only of
///   digits and dots, such as `10.0.0.300`, as a bad address where Kube-OVN would look up a pool
///   of that name and fail later).
///
/// Elements may carry surrounding spaces (Kube-OVN trims them). StatefulSet pods take the
/// candidate at their ordinal; other pods the first free one. Formatting uses `,` when every
/// candidate is single-stack (and the list does not read as one dual pair), `;` otherwise, so it
/// parses back to the same value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IpPoolAnnotation {
    /// Allocate from this IPPool.
    Pool(String),
    /// Allocate one of these candidates.
    Addresses(Vec<IpPair>),
}

impl fmt::Display for IpPoolAnnotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pool(name) => f.write_str(name),
            Self::Addresses(list) => {
                let reads_as_one_pair = list.len() == 2
                    && list[0].addrs().count() == 1
                    && list[1].addrs().count() == 1
                    && list[0].v4.is_some() != list[1].v4.is_some();
                let sep = if list.iter().all(|p| !p.is_dual()) && !reads_as_one_pair {
                    ","
                } else {
                    ";"
                };
                join(f, list, sep)
            }
        }
    }
}

impl AnnotationValue for IpPoolAnnotation {
    const EXPECTED: &'static str =
        "an IPPool name, a comma list of IPs, or `;`-separated entries each `v4`, `v6` or `v4,v6`";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        let trimmed = value.trim();
        if trimmed.is_empty() {
            return Err(Problem::Empty);
        }
        if !trimmed.contains([',', ';']) && IpAddr::from_str(trimmed).is_err() {
            // Digits and dots only is a mistyped address (`10.0.0.300`), not a pool name.
            return if trimmed.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
                Err(Problem::BadIp(trimmed.to_owned()))
            } else if is_object_name(trimmed) {
                Ok(Self::Pool(trimmed.to_owned()))
            } else {
                Err(Problem::BadName(trimmed.to_owned()))
            };
        }
        let entry = |e: &str| {
            let e = e.trim();
            if e.is_empty() {
                Err(Problem::EmptyElement)
            } else {
                IpPair::parse_value(e)
            }
        };
        let list = if trimmed.contains(';') {
            trimmed.split(';').map(entry).collect::<Result<Vec<_>, _>>()?
        } else {
            let singles = trimmed.split(',').map(entry).collect::<Result<Vec<_>, _>>()?;
            let family = |p: &IpPair| {
                if p.v4.is_some() {
                    IpFamily::V4
                } else {
                    IpFamily::V6
                }
            };
            if singles.len() == 2 && family(&singles[0]) != family(&singles[1]) {
                vec![IpPair {
                    v4: singles[0].v4.or(singles[1].v4),
                    v6: singles[0].v6.or(singles[1].v6),
                }]
            } else {
                singles
            }
        };
        Ok(Self::Addresses(list))
    }
}

/// One entry of a subnet's `gatewayNode`: a node name, optionally with the address its SNAT
/// uses (`node:ip`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GatewayNode {
    /// Node name.
    pub node: String,
    /// Source address for SNAT on that node, if given.
    pub nat_ip: Option<IpAddr>,
}

/// A subnet's `gatewayNode`: comma list of `node` or `node:ip` (the IP may be IPv6: the node
/// name ends at the first `:`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct GatewayNodes(pub Vec<GatewayNode>);

impl fmt::Display for GatewayNodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, gw) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&gw.node)?;
            if let Some(ip) = gw.nat_ip {
                write!(f, ":{ip}")?;
            }
        }
        Ok(())
    }
}

impl AnnotationValue for GatewayNodes {
    const EXPECTED: &'static str = "a comma list of `node` or `node:ip`";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        value
            .split(',')
            .map(|entry| {
                let entry = check_element(entry)?;
                let (node, ip) = match entry.split_once(':') {
                    Some((node, ip)) => (node, Some(ip)),
                    None => (entry, None),
                };
                if !is_object_name(node) {
                    return Err(Problem::BadName(node.to_owned()));
                }
                let nat_ip = ip
                    .map(|ip| IpAddr::from_str(ip).map_err(|_| Problem::BadIp(ip.to_owned())))
                    .transpose()?;
                Ok(GatewayNode {
                    node: node.to_owned(),
                    nat_ip,
                })
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn pool(v: &str) -> IpPoolAnnotation {
        parse("ovn.kubernetes.io/ip_pool", v).unwrap()
    }

    #[test]
    fn ip_pool_forms() {
        assert_eq!(pool("pool-a"), IpPoolAnnotation::Pool("pool-a".into()));
        let IpPoolAnnotation::Addresses(list) = pool("10.16.0.15,10.16.0.16,10.16.0.17") else {
            panic!()
        };
        assert_eq!(list.len(), 3);
        // Two addresses of different families: one dual-stack candidate.
        let IpPoolAnnotation::Addresses(list) = pool("10.16.0.15,fd00::f") else {
            panic!()
        };
        assert_eq!(list.len(), 1);
        assert!(list[0].is_dual());
        let IpPoolAnnotation::Addresses(list) = pool("10.16.0.15,fd00::f;10.16.0.16,fd00::10") else {
            panic!()
        };
        assert_eq!(list.len(), 2);
        // A lone address is a one-candidate list, not a pool name.
        let IpPoolAnnotation::Addresses(list) = pool("10.16.0.15") else {
            panic!()
        };
        assert_eq!(list.len(), 1);
        // Kube-OVN trims spaces around entries.
        assert_eq!(pool(" 10.0.0.1 ; 10.0.0.2 "), pool("10.0.0.1,10.0.0.2"));
    }

    #[test]
    fn ip_pool_formats_back_to_an_equal_value() {
        for text in [
            "pool-a",
            "10.16.0.15,10.16.0.16",
            "10.16.0.15,fd00::f",
            "10.16.0.15,fd00::f;10.16.0.16,fd00::10",
            "10.16.0.15;fd00::f",
            "10.16.0.15;10.16.0.16,fd00::10",
        ] {
            let value = pool(text);
            assert_eq!(value.to_string(), text, "canonical text round-trips");
            assert_eq!(pool(&value.to_string()), value);
        }
    }

    #[test]
    fn gateway_nodes() {
        let gws: GatewayNodes = parse("gatewayNode", "node1,node2:172.18.0.5,node3:fd00::5").unwrap();
        assert_eq!(gws.0.len(), 3);
        assert_eq!(gws.0[1].nat_ip, Some("172.18.0.5".parse().unwrap()));
        assert_eq!(gws.0[2].nat_ip, Some("fd00::5".parse().unwrap()));
        assert_eq!(gws.to_string(), "node1,node2:172.18.0.5,node3:fd00::5");
    }

    #[test]
    fn namespace_lists() {
        let cidrs: CidrBlocks = parse("k", "10.66.0.0/16;10.67.0.0/16,fd00:67::/64").unwrap();
        assert_eq!(cidrs.0.len(), 2);
        assert_eq!(cidrs.to_string(), "10.66.0.0/16;10.67.0.0/16,fd00:67::/64");
        let excl: ExcludeIpLists = parse("k", "10.66.0.1,10.66.0.2..10.66.0.9;;10.67.0.1").unwrap();
        assert_eq!(excl.0.iter().map(Vec::len).collect::<Vec<_>>(), [2, 0, 1]);
        assert_eq!(excl.to_string(), "10.66.0.1,10.66.0.2..10.66.0.9;;10.67.0.1");
        let names: NameList = parse("k", "ovn-default,net1").unwrap();
        assert_eq!(names.0, ["ovn-default", "net1"]);
    }
}
