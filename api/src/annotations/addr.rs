//! Address values: dual-stack address and CIDR pairs, MACs, address ranges, IP families.
//!
//! Dual-stack order: Kube-OVN writes `v4,v6` (IPv4 first) and so do we. Parsing also accepts
//! `v6,v4`: Kube-OVN's own readers classify each comma element by family rather than by
//! position, so a user-written static `ip_address: fd00::5,10.0.0.5` works there and must work
//! here; it is normalised to `10.0.0.5,fd00::5` when formatted. Two elements of the same family,
//! more than two elements, empty elements and surrounding whitespace are errors.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::{AnnotationValue, Problem, check_element};

/// An IP family. Formats as `ipv4` / `ipv6`, the values of the `ip_family` annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpFamily {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// The family of an address.
    pub fn of(addr: &IpAddr) -> Self {
        if addr.is_ipv4() { Self::V4 } else { Self::V6 }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V4 => "ipv4",
            Self::V6 => "ipv6",
        })
    }
}

impl AnnotationValue for IpFamily {
    const EXPECTED: &'static str = "`ipv4` or `ipv6`";

    /// Exactly `ipv4` or `ipv6` (lower case), as Kube-OVN validates it.
    fn parse_value(value: &str) -> Result<Self, Problem> {
        match value {
            "ipv4" => Ok(Self::V4),
            "ipv6" => Ok(Self::V6),
            other => Err(Problem::UnknownKeyword(other.to_owned())),
        }
    }
}

/// Splits a comma-separated dual-stack value into at most one element per family.
fn parse_pair<A, B>(
    value: &str,
    mut parse_one: impl FnMut(&str) -> Result<Result<A, B>, Problem>,
) -> Result<(Option<A>, Option<B>), Problem> {
    let elements: Vec<&str> = value.split(',').collect();
    if elements.len() > 2 {
        return Err(Problem::TooMany {
            found: elements.len(),
            max: 2,
        });
    }
    let (mut v4, mut v6) = (None, None);
    for element in elements {
        match parse_one(check_element(element)?)? {
            Ok(a) if v4.is_none() => v4 = Some(a),
            Ok(_) => return Err(Problem::DuplicateFamily(IpFamily::V4)),
            Err(b) if v6.is_none() => v6 = Some(b),
            Err(_) => return Err(Problem::DuplicateFamily(IpFamily::V6)),
        }
    }
    Ok((v4, v6))
}

fn fmt_pair<A: fmt::Display, B: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    v4: Option<&A>,
    v6: Option<&B>,
) -> fmt::Result {
    match (v4, v6) {
        (Some(a), Some(b)) => write!(f, "{a},{b}"),
        (Some(a), None) => write!(f, "{a}"),
        (None, Some(b)) => write!(f, "{b}"),
        (None, None) => Ok(()),
    }
}

/// One address per family: the `ip_address` and `gateway` annotations (`v4`, `v6` or `v4,v6`).
///
/// Parsing never yields a pair with neither address; one built by hand formats as `""`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IpPair {
    /// The IPv4 address, if any.
    pub v4: Option<Ipv4Addr>,
    /// The IPv6 address, if any.
    pub v6: Option<Ipv6Addr>,
}

impl IpPair {
    /// A pair holding one address of either family.
    pub fn single(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(a) => Self {
                v4: Some(a),
                v6: None,
            },
            IpAddr::V6(b) => Self {
                v4: None,
                v6: Some(b),
            },
        }
    }

    /// The addresses, IPv4 first.
    pub fn addrs(&self) -> impl Iterator<Item = IpAddr> {
        self.v4.map(IpAddr::V4).into_iter().chain(self.v6.map(IpAddr::V6))
    }

    /// Whether both families are present.
    pub fn is_dual(&self) -> bool {
        self.v4.is_some() && self.v6.is_some()
    }
}

impl fmt::Display for IpPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_pair(f, self.v4.as_ref(), self.v6.as_ref())
    }
}

impl AnnotationValue for IpPair {
    const EXPECTED: &'static str = "an IPv4 address, an IPv6 address, or `v4,v6`";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        let (v4, v6) = parse_pair(value, |s| match IpAddr::from_str(s) {
            Ok(IpAddr::V4(a)) => Ok(Ok(a)),
            Ok(IpAddr::V6(b)) => Ok(Err(b)),
            Err(_) => Err(Problem::BadIp(s.to_owned())),
        })?;
        Ok(Self { v4, v6 })
    }
}

/// One CIDR per family: a subnet's `cidrBlock` and the pod/node `cidr` annotation.
///
/// The address part is kept as written (`10.16.0.5/16` stays so); Kube-OVN normalises
/// `cidrBlock` to the network address before it is copied into annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CidrPair {
    /// The IPv4 CIDR, if any.
    pub v4: Option<Ipv4Net>,
    /// The IPv6 CIDR, if any.
    pub v6: Option<Ipv6Net>,
}

impl CidrPair {
    /// The CIDRs, IPv4 first.
    pub fn nets(&self) -> impl Iterator<Item = IpNet> {
        self.v4.map(IpNet::V4).into_iter().chain(self.v6.map(IpNet::V6))
    }

    /// Whether some CIDR of the pair contains `addr`.
    pub fn contains(&self, addr: &IpAddr) -> bool {
        self.nets().any(|n| n.contains(addr))
    }
}

impl fmt::Display for CidrPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_pair(f, self.v4.as_ref(), self.v6.as_ref())
    }
}

impl AnnotationValue for CidrPair {
    const EXPECTED: &'static str = "an IPv4 CIDR, an IPv6 CIDR, or `v4cidr,v6cidr`";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        let (v4, v6) = parse_pair(value, |s| match IpNet::from_str(s) {
            Ok(IpNet::V4(a)) => Ok(Ok(a)),
            Ok(IpNet::V6(b)) => Ok(Err(b)),
            Err(_) => Err(Problem::BadCidr(s.to_owned())),
        })?;
        Ok(Self { v4, v6 })
    }
}

/// A 6-byte MAC address.
///
/// Parsing accepts upper or lower case hex with `:` or `-` separators (older Kube-OVN releases
/// wrote upper-case MACs); equality is on the bytes, so comparison is case-insensitive.
/// Formatting is lower-case with colons, as Kube-OVN writes today.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl AnnotationValue for MacAddr {
    const EXPECTED: &'static str = "a MAC address like `0a:1b:2c:3d:4e:5f`";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        let bad = || Problem::BadMac(value.to_owned());
        let sep = if value.contains('-') { '-' } else { ':' };
        let mut bytes = [0u8; 6];
        let mut parts = value.split(sep);
        for byte in &mut bytes {
            let part = parts.next().ok_or_else(bad)?;
            if part.len() != 2 || !part.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Self(bytes))
    }
}

/// An element of `excludeIps`, of the namespace `exclude_ips` annotation, or of an IPPool's
/// `ips`: one address, an inclusive `a..b` range, or a CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRange {
    /// A single address.
    Single(IpAddr),
    /// `start..end`, both included, same family, `start <= end`.
    Range(IpAddr, IpAddr),
    /// Every address of a CIDR.
    Cidr(IpNet),
}

impl IpRange {
    /// Whether `addr` falls in this element.
    pub fn contains(&self, addr: &IpAddr) -> bool {
        match self {
            Self::Single(a) => a == addr,
            Self::Range(start, end) => {
                IpFamily::of(start) == IpFamily::of(addr) && start <= addr && addr <= end
            }
            Self::Cidr(net) => net.contains(addr),
        }
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Single(a) => write!(f, "{a}"),
            Self::Range(a, b) => write!(f, "{a}..{b}"),
            Self::Cidr(n) => write!(f, "{n}"),
        }
    }
}

impl AnnotationValue for IpRange {
    const EXPECTED: &'static str = "an IP address, a CIDR, or a range `first..last`";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        let value = check_element(value)?;
        let ip = |s: &str| IpAddr::from_str(s).map_err(|_| Problem::BadIp(s.to_owned()));
        if let Some((start, end)) = value.split_once("..") {
            let (start, end) = (ip(start)?, ip(end)?);
            if IpFamily::of(&start) != IpFamily::of(&end) {
                return Err(Problem::MixedFamilies(value.to_owned()));
            }
            if start > end {
                return Err(Problem::ReversedRange(value.to_owned()));
            }
            Ok(Self::Range(start, end))
        } else if value.contains('/') {
            IpNet::from_str(value)
                .map(Self::Cidr)
                .map_err(|_| Problem::BadCidr(value.to_owned()))
        } else {
            ip(value).map(Self::Single)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn ip_pair_accepts_either_order_and_formats_v4_first() {
        let p: IpPair = parse("k", "fd00::5,10.0.0.5").unwrap();
        assert_eq!(p.to_string(), "10.0.0.5,fd00::5");
        assert!(p.is_dual());
        assert_eq!(p.addrs().count(), 2);
        let p: IpPair = parse("k", "fd00::5").unwrap();
        assert_eq!(
            (p.v4, p.v6.map(|a| a.to_string())),
            (None, Some("fd00::5".to_owned()))
        );
    }

    #[test]
    fn mac_compares_case_insensitively_and_formats_lower() {
        let upper: MacAddr = parse("k", "00:00:00:AB:CD:EF").unwrap();
        let lower: MacAddr = parse("k", "00:00:00:ab:cd:ef").unwrap();
        let dashed: MacAddr = parse("k", "00-00-00-ab-cd-ef").unwrap();
        assert_eq!(upper, lower);
        assert_eq!(upper, dashed);
        assert_eq!(upper.to_string(), "00:00:00:ab:cd:ef");
    }

    #[test]
    fn ranges() {
        let r: IpRange = parse("k", "10.0.0.1..10.0.0.9").unwrap();
        assert!(r.contains(&"10.0.0.5".parse().unwrap()));
        assert!(!r.contains(&"10.0.0.10".parse().unwrap()));
        assert!(!r.contains(&"::1".parse().unwrap()));
        let c: IpRange = parse("k", "10.1.0.0/24").unwrap();
        assert!(c.contains(&"10.1.0.200".parse().unwrap()));
        let cidrs: CidrPair = parse("k", "10.16.0.0/16,fd00:10:16::/64").unwrap();
        assert!(cidrs.contains(&"fd00:10:16::9".parse().unwrap()));
        assert!(!cidrs.contains(&"10.17.0.1".parse().unwrap()));
    }
}
