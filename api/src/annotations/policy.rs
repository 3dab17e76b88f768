//! Policy-like values: the BGP announcement policy, the literal `"true"` flags, and the QoS
//! (bandwidth and netem) knobs.
//!
//! QoS numbers are non-negative decimal integers, as Kube-OVN validates them (`strconv.Atoi`
//! and a sign check): `100` is valid, `1.5`, `-1`, `+5` and `100M` are not. Only netem `loss`
//! is a decimal percentage. Rates are Mbit/s and bursts Mbit; `0` means "no limit".

use std::fmt;

use super::{AnnotationValue, Problem};

/// The `bgp` annotation on pods, subnets, Services and IptablesEIPs.
///
/// `true` and `cluster` both mean "announce from every speaker"; `local` means "announce only
/// from the speaker on the pod's node" (subnet CIDRs are then not announced at all). The
/// spelling is kept because it matters in one place: Kube-OVN's speaker honours only the
/// literal `true` on Services and EIPs. Anything else (other case included) is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BgpPolicy {
    /// `true`.
    True,
    /// `cluster`.
    Cluster,
    /// `local`.
    Local,
}

/// Where a [`BgpPolicy`] announces from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BgpScope {
    /// Every speaker.
    Cluster,
    /// Only the speaker on the pod's node.
    Local,
}

impl BgpPolicy {
    /// Where the prefixes are announced from.
    pub fn scope(self) -> BgpScope {
        match self {
            Self::True | Self::Cluster => BgpScope::Cluster,
            Self::Local => BgpScope::Local,
        }
    }
}

impl fmt::Display for BgpPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::True => "true",
            Self::Cluster => "cluster",
            Self::Local => "local",
        })
    }
}

impl AnnotationValue for BgpPolicy {
    const EXPECTED: &'static str = "`true`, `cluster` or `local`";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        match value {
            "true" => Ok(Self::True),
            "cluster" => Ok(Self::Cluster),
            "local" => Ok(Self::Local),
            other => Err(Problem::UnknownKeyword(other.to_owned())),
        }
    }
}

/// A flag whose only meaningful value is the literal `"true"` (`allocated`, `routed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrueFlag;

impl fmt::Display for TrueFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("true")
    }
}

impl AnnotationValue for TrueFlag {
    const EXPECTED: &'static str = "`true`";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        if value == "true" {
            Ok(Self)
        } else {
            Err(Problem::UnknownKeyword(value.to_owned()))
        }
    }
}

/// The largest rate Kube-OVN accepts: the whole Mbit/s that still fit in an `i64` of bit/s.
pub const MAX_BANDWIDTH_MBPS: u64 = (i64::MAX as u64) / 1_000_000;

/// Parses ASCII decimal digits only, up to `max`.
fn parse_decimal(value: &str, max: u64) -> Result<u64, Problem> {
    if value.is_empty() || !value.bytes().all(|c| c.is_ascii_digit()) {
        return Err(Problem::NotANumber(value.to_owned()));
    }
    match value.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(Problem::OutOfRange(value.to_owned())),
    }
}

macro_rules! integer_value {
    ($(#[$doc:meta])* $name:ident($inner:ty), max = $max:expr, expected = $expected:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl AnnotationValue for $name {
            const EXPECTED: &'static str = $expected;

            fn parse_value(value: &str) -> Result<Self, Problem> {
                let n = parse_decimal(value, u64::from($max))?;
                Ok(Self(<$inner>::try_from(n).map_err(|_| Problem::OutOfRange(value.to_owned()))?))
            }
        }
    };
}

integer_value!(
    /// A rate in Mbit/s: `ingress_rate`, `egress_rate` (pod's view: ingress is traffic into the
    /// pod). `0` removes the limit.
    Mbps(u64), max = MAX_BANDWIDTH_MBPS, expected = "a whole number of Mbit/s, e.g. `100`"
);
integer_value!(
    /// A burst size in Mbit: `ingress_burst`, `egress_burst` (unset = 80 % of the rate).
    Mbit(u64), max = MAX_BANDWIDTH_MBPS, expected = "a whole number of Mbit, e.g. `10`"
);
integer_value!(
    /// A netem delay in milliseconds: `latency`, `jitter`.
    Milliseconds(u32), max = u32::MAX, expected = "a whole number of milliseconds"
);
integer_value!(
    /// A netem queue limit in packets: `limit`.
    Packets(u32), max = u32::MAX, expected = "a whole number of packets"
);

/// Netem packet loss in percent, `0` to `100`, decimals allowed (`loss`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct LossPercent(pub f64);

impl fmt::Display for LossPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Rust prints 10.0 as `10` and 0.5 as `0.5`, the same as Go's `%v` that Kube-OVN uses.
        self.0.fmt(f)
    }
}

impl AnnotationValue for LossPercent {
    const EXPECTED: &'static str = "a percentage from 0 to 100, e.g. `0.5`";

    fn parse_value(value: &str) -> Result<Self, Problem> {
        // Digits and one dot only: no sign, exponent, `inf` or `NaN`, which `f64::from_str` takes.
        let not_a_number = || Problem::NotANumber(value.to_owned());
        if !value.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
            return Err(not_a_number());
        }
        let n: f64 = value.parse().map_err(|_| not_a_number())?;
        if (0.0..=100.0).contains(&n) {
            Ok(Self(n))
        } else {
            Err(Problem::OutOfRange(value.to_owned()))
        }
    }
}

/// A pod NIC's bandwidth annotations, read and validated in one place for the controller (which
/// refuses the pod before allocating when one is malformed) and the node daemon (which applies
/// them): `ingress_rate`, `egress_rate` ([`Mbps`]), `ingress_burst`, `egress_burst` ([`Mbit`]),
/// under `<provider>.kubernetes.io/` (`ovn` for the primary network). Directions are the pod's:
/// ingress is traffic into the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bandwidth {
    /// `ingress_rate`; `None` or `0`: no limit.
    pub ingress_rate: Option<Mbps>,
    /// `egress_rate`; `None` or `0`: no limit.
    pub egress_rate: Option<Mbps>,
    /// `ingress_burst`.
    pub ingress_burst: Option<Mbit>,
    /// `egress_burst`; `None`: 80 % of the rate.
    pub egress_burst: Option<Mbit>,
}

impl Bandwidth {
    /// Reads the four keys of `provider`; a malformed value is an error naming its key.
    pub fn read(
        annotations: Option<&std::collections::BTreeMap<String, String>>,
        provider: &str,
    ) -> Result<Self, super::AnnotationError> {
        let key = |name: &str| {
            super::provider_key(provider, name).unwrap_or_else(|_| format!("{provider}.kubernetes.io/{name}"))
        };
        Ok(Self {
            ingress_rate: super::get(annotations, &key("ingress_rate"))?,
            egress_rate: super::get(annotations, &key("egress_rate"))?,
            ingress_burst: super::get(annotations, &key("ingress_burst"))?,
            egress_burst: super::get(annotations, &key("egress_burst"))?,
        })
    }
}

/// OVS `Interface.ingress_policing_rate` (kbit/s) for a pod's `egress_rate`; `None` when it
/// does not fit an OVSDB integer (never for a parsed [`Mbps`], which is at most
/// [`MAX_BANDWIDTH_MBPS`]).
pub fn policing_rate_kbit(rate: Mbps) -> Option<i64> {
    i64::try_from(rate.0).ok()?.checked_mul(1000)
}

/// OVS `Interface.ingress_policing_burst` (kbit) for a policing rate of `rate` Mbit/s: the
/// explicit burst, or 80 % of the rate with Kube-OVN's integer rounding (computed without
/// overflow at any rate: `rate * 8 / 10` would overflow near the maximum); `0` without a rate.
/// `None` when a value does not fit an OVSDB integer.
pub fn policing_burst_kbit(rate: Mbps, burst: Option<Mbit>) -> Option<i64> {
    let rate_kbit = policing_rate_kbit(rate)?;
    if rate_kbit == 0 {
        return Some(0);
    }
    match burst {
        Some(b) => i64::try_from(b.0).ok()?.checked_mul(1000),
        None => Some(rate_kbit / 10 * 8 + rate_kbit % 10 * 8 / 10),
    }
}

/// `Queue.other_config:max-rate` (bit/s) of the linux-htb queue for a pod's `ingress_rate`.
pub fn htb_max_rate_bps(rate: Mbps) -> Option<i64> {
    i64::try_from(rate.0).ok()?.checked_mul(1_000_000)
}

/// `Queue.other_config:burst` for a pod's `ingress_burst`, in bits, the unit OVS reads it in
/// (`ovs-vswitchd.conf.db(5)`, Queue table, linux-htb). Kube-OVN writes Mbit × 125 000 there,
/// meaning bytes, which OVS takes for bits: its bursts are an eighth of what was asked.
pub fn htb_burst_bits(burst: Mbit) -> Option<i64> {
    i64::try_from(burst.0).ok()?.checked_mul(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn bgp_true_and_cluster_share_a_scope_but_keep_their_spelling() {
        let t: BgpPolicy = parse("k", "true").unwrap();
        let c: BgpPolicy = parse("k", "cluster").unwrap();
        assert_eq!(t.scope(), c.scope());
        assert_eq!(t.to_string(), "true");
        assert_eq!(c.to_string(), "cluster");
        assert_eq!(parse::<BgpPolicy>("k", "local").unwrap().scope(), BgpScope::Local);
    }

    #[test]
    fn bursts_default_to_eighty_percent() {
        assert_eq!(policing_burst_kbit(Mbps(100), None), Some(80_000));
        assert_eq!(policing_burst_kbit(Mbps(100), Some(Mbit(5))), Some(5_000));
        assert_eq!(policing_burst_kbit(Mbps(0), Some(Mbit(5))), Some(0));
        assert_eq!(htb_max_rate_bps(Mbps(100)), Some(100_000_000));
        assert_eq!(htb_burst_bits(Mbit(8)), Some(8_000_000));
    }

    #[test]
    fn the_largest_accepted_rates_and_bursts_fit_without_overflow() {
        let max: Mbps = parse("k", &MAX_BANDWIDTH_MBPS.to_string()).unwrap();
        let max_burst: Mbit = parse("k", &MAX_BANDWIDTH_MBPS.to_string()).unwrap();
        assert_eq!(policing_rate_kbit(max), Some(9_223_372_036_854_000));
        // 80 % of the largest rate, as Kube-OVN rounds it.
        assert_eq!(policing_burst_kbit(max, None), Some(7_378_697_629_483_200));
        assert_eq!(
            policing_burst_kbit(max, Some(max_burst)),
            Some(9_223_372_036_854_000)
        );
        assert_eq!(htb_max_rate_bps(max), Some(9_223_372_036_854_000_000));
        assert_eq!(htb_burst_bits(max_burst), Some(9_223_372_036_854_000_000));
        let over = (MAX_BANDWIDTH_MBPS + 1).to_string();
        assert!(parse::<Mbps>("k", &over).is_err());
        // Built by hand past the bound: no panic, no wrap.
        assert_eq!(htb_max_rate_bps(Mbps(MAX_BANDWIDTH_MBPS + 1)), None);
        assert_eq!(policing_burst_kbit(Mbps(u64::MAX), None), None);
        assert_eq!(policing_burst_kbit(Mbps(1), Some(Mbit(u64::MAX))), None);
    }

    #[test]
    fn bandwidth_reads_the_providers_keys_and_names_a_bad_one() {
        let ann: std::collections::BTreeMap<String, String> = [
            ("ovn.kubernetes.io/ingress_rate", "10"),
            ("ovn.kubernetes.io/egress_rate", "5"),
            ("ovn.kubernetes.io/ingress_burst", "2"),
            ("net1.ns.ovn.kubernetes.io/egress_rate", "2.5"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(
            Bandwidth::read(Some(&ann), "ovn").unwrap(),
            Bandwidth {
                ingress_rate: Some(Mbps(10)),
                egress_rate: Some(Mbps(5)),
                ingress_burst: Some(Mbit(2)),
                egress_burst: None,
            }
        );
        let err = Bandwidth::read(Some(&ann), "net1.ns.ovn").unwrap_err();
        assert_eq!(err.key, "net1.ns.ovn.kubernetes.io/egress_rate");
        assert_eq!(err.value, "2.5");
    }

    #[test]
    fn loss_formats_like_go() {
        assert_eq!(parse::<LossPercent>("k", "10").unwrap().to_string(), "10");
        assert_eq!(parse::<LossPercent>("k", "0.5").unwrap().to_string(), "0.5");
    }
}
