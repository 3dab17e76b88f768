//! Which `spec.externalIPs` of a Service the platform allows.
//!
//! `externalIPs` is written by whoever may write the Service — a tenant. Acting on it means routing
//! the address into `ovn0` on every node, masquerading it, and announcing it to the datacenter over
//! BGP: a tenant naming the API server's, a node's or the ToR's address would take that address away
//! from the cluster (CVE-2020-8554 is the kube-proxy form of this). Kubernetes answers with the
//! `DenyServiceExternalIPs` admission plugin; we answer the same way in every component that acts on
//! the field: an address is honoured only inside CIDRs the operator lists (the controller's, the
//! daemon's and the speaker's `--service-external-ip-cidrs`), and the list is empty by default, so
//! by default no external IP is honoured at all.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// The CIDRs inside which a Service's `spec.externalIPs` are honoured. Empty: none are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExternalIpCidrs(Vec<IpNet>);

/// A CIDR in the list that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a CIDR (address/prefix length)")]
pub struct BadExternalIpCidr(pub String);

impl ExternalIpCidrs {
    /// The list as given (each truncated to its network).
    pub fn new(cidrs: impl IntoIterator<Item = IpNet>) -> Self {
        Self(cidrs.into_iter().map(|c| c.trunc()).collect())
    }

    /// Whether `ip` lies inside one of the allowed CIDRs.
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(&ip))
    }

    /// Whether nothing is allowed (the default).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The allowed CIDRs.
    pub fn cidrs(&self) -> &[IpNet] {
        &self.0
    }
}

/// Parses a comma-separated list (`""` is the empty list), as the flag and its env var give it.
impl FromStr for ExternalIpCidrs {
    type Err = BadExternalIpCidr;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut cidrs = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let cidr = item
                .parse::<IpNet>()
                .map_err(|_| BadExternalIpCidr(item.to_owned()))?;
            cidrs.push(cidr.trunc());
        }
        Ok(Self(cidrs))
    }
}

impl fmt::Display for ExternalIpCidrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for cidr in &self.0 {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{cidr}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_allows_nothing() {
        let none: ExternalIpCidrs = "".parse().unwrap();
        assert!(none.is_empty());
        assert!(!none.allows("203.0.113.7".parse().unwrap()));
        assert!(!ExternalIpCidrs::default().allows("::1".parse().unwrap()));
    }

    #[test]
    fn allows_inside_the_listed_cidrs_only() {
        let list: ExternalIpCidrs = "203.0.113.0/24, 2001:db8:5::/64".parse().unwrap();
        assert!(list.allows("203.0.113.200".parse().unwrap()));
        assert!(!list.allows("203.0.114.1".parse().unwrap()));
        assert!(list.allows("2001:db8:5::9".parse().unwrap()));
        assert!(!list.allows("2001:db8:6::9".parse().unwrap()));
        assert_eq!(list.to_string(), "203.0.113.0/24,2001:db8:5::/64");
    }

    #[test]
    fn host_bits_are_dropped_and_garbage_named() {
        let list: ExternalIpCidrs = "203.0.113.9/24".parse().unwrap();
        assert_eq!(list.cidrs(), &["203.0.113.0/24".parse::<IpNet>().unwrap()]);
        let err = "203.0.113.0/24,8.8.8.8".parse::<ExternalIpCidrs>().unwrap_err();
        assert_eq!(err, BadExternalIpCidr("8.8.8.8".to_owned()));
        assert!(err.to_string().contains("\"8.8.8.8\""));
    }
}
