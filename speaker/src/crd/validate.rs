//! [`ValidateSpec::validate`]: what the schema cannot say, checked once, with errors that name
//! the field (`spec.communities[2]: "65536:1" is not a valid community ...`), so the speaker can
//! put them in the peer's status as they are.

use std::net::IpAddr;
use std::time::Duration;

use kube_ovn_api::selector::{Selector, SelectorError};

use super::{BgpPeerSpec, DEFAULT_PASSWORD_KEY};
use crate::bfd::Timers;
use crate::bgp::wire::{Family, LargeCommunity};
use crate::driver::BGP_PORT;

/// RFC 1997 well-known communities, and BLACKHOLE (RFC 7999 §5).
pub(crate) const WELL_KNOWN: [(&str, u32); 4] = [
    ("no-export", 0xFFFF_FF01),
    ("no-advertise", 0xFFFF_FF02),
    ("no-export-subconfed", 0xFFFF_FF03),
    ("blackhole", 0xFFFF_029A),
];

/// `spec.communities`, each parsed, or the first bad one named by its index (BgpPeer and
/// BgpAdvertisement spell the field alike).
pub fn parse_communities(texts: &[String]) -> Result<Vec<u32>, CrdError> {
    texts
        .iter()
        .enumerate()
        .map(|(i, c)| {
            parse_community(c).ok_or_else(|| {
                CrdError::new(
                    format!("spec.communities[{i}]"),
                    format!(
                        "{c:?} is not a valid community (A:B with A and B in 0-65535, or \
                         no-export, no-advertise, no-export-subconfed, blackhole)"
                    ),
                )
            })
        })
        .collect()
}

/// `spec.largeCommunities`, each parsed, or the first bad one named by its index.
pub fn parse_large_communities(texts: &[String]) -> Result<Vec<LargeCommunity>, CrdError> {
    texts
        .iter()
        .enumerate()
        .map(|(i, c)| {
            parse_large_community(c).ok_or_else(|| {
                CrdError::new(
                    format!("spec.largeCommunities[{i}]"),
                    format!("{c:?} is not a valid large community (A:B:C, each in 0-4294967295)"),
                )
            })
        })
        .collect()
}

/// A spec field that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CrdError {
    /// Path from the object's root: `spec.bfd.minTxMs`, `spec.communities[2]`.
    pub field: String,
    pub message: String,
}

impl CrdError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        CrdError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A spec that passed [`BgpPeerSpec::validate`], in the driver's types. `None` means "the
/// speaker's flag decides" (`--cluster-as`, `--holdtime`, `--graceful-restart`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedPeer {
    pub selector: Selector,
    /// Who the peer is: an address, or the link-local neighbour on an interface.
    pub target: PeerTarget,
    pub port: u16,
    pub peer_asn: u32,
    pub local_asn: Option<u32>,
    pub password: Option<PasswordRef>,
    pub hold_time: Option<u16>,
    pub keepalive_time: Option<u16>,
    pub passive: bool,
    pub ebgp_multihop: Option<u8>,
    /// GTSM (RFC 5082); `None`: the speaker's `--ttl-security`.
    pub ttl_security: Option<bool>,
    /// As the spec lists them; `None`: the family of the address, both with extended next hop.
    pub families: Option<Vec<Family>>,
    /// RFC 8950; `None`: the speaker's `--extended-nexthop`. Always on for an interface peer.
    pub extended_nexthop: Option<bool>,
    /// The device the session's sockets are bound to; `None`: the speaker's `--vrf`.
    pub vrf: Option<String>,
    /// RFC 1997 communities as 32-bit values.
    pub communities: Vec<u32>,
    pub large_communities: Vec<LargeCommunity>,
    pub local_pref: Option<u32>,
    pub med: Option<u32>,
    pub graceful_restart: Option<bool>,
    /// BFD timers when `bfd.enabled`.
    pub bfd: Option<Timers>,
}

/// Who the peer is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerTarget {
    /// `spec.peerAddress`.
    Address(IpAddr),
    /// `spec.peerInterface`: BGP unnumbered, the IPv6 link-local router on that interface.
    Interface(String),
}

impl std::fmt::Display for PeerTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerTarget::Address(a) => write!(f, "{a}"),
            PeerTarget::Interface(i) => write!(f, "interface {i}"),
        }
    }
}

/// Where the TCP MD5 key is, with the key name defaulted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordRef {
    pub namespace: String,
    pub name: String,
    /// Key in the Secret's data (`password` unless the spec names one).
    pub key: String,
}

impl ValidatedPeer {
    /// True when a node with these labels peers with this router.
    pub fn selects(&self, node_labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.selector.matches(node_labels)
    }

    /// Our ASN toward the peer, `cluster_as` (the speaker's `--cluster-as`) unless the spec names
    /// one; an error when that makes the session external and the spec sets `localPref`, which
    /// is never sent to external peers (RFC 4271 §5.1.5).
    pub fn local_asn_or(&self, cluster_as: u32) -> Result<u32, CrdError> {
        let local = self.local_asn.unwrap_or(cluster_as);
        if self.local_pref.is_some() && local != self.peer_asn {
            return Err(CrdError::new(
                "spec.localPref",
                format!(
                    "only sent to internal peers, and AS {local} to AS {} is external",
                    self.peer_asn
                ),
            ));
        }
        Ok(local)
    }
}

impl From<SelectorError> for CrdError {
    fn from(e: SelectorError) -> Self {
        CrdError::new(e.field, e.problem)
    }
}

/// What the speaker checks of a BgpPeer's spec beyond its schema (the kind lives in `api`).
pub trait ValidateSpec {
    /// The spec checked and parsed, or the first field that cannot be used.
    fn validate(&self) -> Result<ValidatedPeer, CrdError>;
}

impl ValidateSpec for BgpPeerSpec {
    fn validate(&self) -> Result<ValidatedPeer, CrdError> {
        Checked(self).validate()
    }
}

/// The spec under check; reads its fields through `Deref`.
struct Checked<'a>(&'a BgpPeerSpec);

impl std::ops::Deref for Checked<'_> {
    type Target = BgpPeerSpec;

    fn deref(&self) -> &BgpPeerSpec {
        self.0
    }
}

impl Checked<'_> {
    /// Checks the spec and parses it; the first problem found is the error.
    pub fn validate(&self) -> Result<ValidatedPeer, CrdError> {
        let selector = Selector::parse(self.node_selector.as_ref(), "spec.nodeSelector")?;
        let target = self.target()?;
        let vrf = self
            .vrf
            .as_deref()
            .map(|v| interface_name(v, "spec.vrf"))
            .transpose()?;
        if self.peer_asn == 0 {
            return Err(CrdError::new("spec.peerASN", "AS 0 is reserved (RFC 7607)"));
        }
        if self.local_asn == Some(0) {
            return Err(CrdError::new("spec.localASN", "AS 0 is reserved (RFC 7607)"));
        }
        if self.port == Some(0) {
            return Err(CrdError::new("spec.port", "must not be 0"));
        }
        let password = self.password_secret_ref.as_ref().map(|r| PasswordRef {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            key: r.key.clone().unwrap_or_else(|| DEFAULT_PASSWORD_KEY.to_owned()),
        });
        if let Some(p) = &password {
            for (value, field) in [(&p.namespace, "namespace"), (&p.name, "name"), (&p.key, "key")] {
                if value.is_empty() {
                    return Err(CrdError::new(
                        format!("spec.passwordSecretRef.{field}"),
                        "must not be empty",
                    ));
                }
            }
        }
        self.check_timers()?;
        if self.ebgp_multihop == Some(0) {
            return Err(CrdError::new(
                "spec.ebgpMultihop",
                "a TTL of 0 is never delivered",
            ));
        }
        if self.ttl_security == Some(true) && self.ebgp_multihop == Some(u8::MAX) {
            return Err(CrdError::new(
                "spec.ebgpMultihop",
                "with ttlSecurity it counts hops (1 to 254); 255 would accept any TTL (RFC 5082 §3)",
            ));
        }
        if let (Some(local), Some(_)) = (self.local_asn, self.local_pref)
            && local != self.peer_asn
        {
            return Err(CrdError::new(
                "spec.localPref",
                "only sent to internal peers (localASN = peerASN, RFC 4271 §5.1.5)",
            ));
        }
        let communities = parse_communities(&self.communities)?;
        let large_communities = parse_large_communities(&self.large_communities)?;
        let extended_nexthop = match (&target, self.extended_nexthop) {
            (PeerTarget::Interface(_), Some(false)) => {
                return Err(CrdError::new(
                    "spec.extendedNexthop",
                    "must not be false with peerInterface: an unnumbered session has no IPv4 \
                     address, so its IPv4 routes need an IPv6 next hop (RFC 8950)",
                ));
            }
            (PeerTarget::Interface(_), _) => Some(true),
            (PeerTarget::Address(_), enh) => enh,
        };
        let bfd = self.bfd_timers()?;
        if bfd.is_some() && matches!(target, PeerTarget::Interface(_)) {
            return Err(CrdError::new(
                "spec.bfd.enabled",
                "BFD is not supported with peerInterface yet (its link-local session needs the interface)",
            ));
        }
        Ok(ValidatedPeer {
            selector,
            families: self.families()?,
            target,
            extended_nexthop,
            vrf,
            port: self.port.unwrap_or(BGP_PORT),
            peer_asn: self.peer_asn,
            local_asn: self.local_asn,
            password,
            hold_time: self.hold_time,
            keepalive_time: self.keepalive_time,
            passive: self.passive,
            ebgp_multihop: self.ebgp_multihop,
            ttl_security: self.ttl_security,
            communities,
            large_communities,
            local_pref: self.local_pref,
            med: self.med,
            graceful_restart: self.graceful_restart,
            bfd,
        })
    }

    fn check_timers(&self) -> Result<(), CrdError> {
        if matches!(self.hold_time, Some(1 | 2)) {
            return Err(CrdError::new(
                "spec.holdTime",
                "must be 0 or at least 3 seconds (RFC 4271 §4.2)",
            ));
        }
        match (self.keepalive_time, self.hold_time) {
            (Some(0), _) => Err(CrdError::new(
                "spec.keepaliveTime",
                "must be at least 1 second (leave it out, or set holdTime to 0, for no keepalives)",
            )),
            (Some(_), Some(0)) => Err(CrdError::new(
                "spec.keepaliveTime",
                "must be absent when holdTime is 0 (no keepalives, RFC 4271 §4.4)",
            )),
            (Some(keepalive), Some(hold)) if keepalive >= hold => Err(CrdError::new(
                "spec.keepaliveTime",
                format!("{keepalive}s must be less than holdTime ({hold}s)"),
            )),
            _ => Ok(()),
        }
    }

    /// `peerAddress` or `peerInterface`, exactly one (the schema's CEL rule says so too; an
    /// API server without CEL, or an object written before, meets this check).
    fn target(&self) -> Result<PeerTarget, CrdError> {
        let address = self.peer_address.trim();
        match (address.is_empty(), &self.peer_interface) {
            (true, None) => Err(CrdError::new(
                "spec.peerAddress",
                "one of peerAddress and peerInterface is required",
            )),
            (false, Some(_)) => Err(CrdError::new(
                "spec.peerInterface",
                "must not be set with peerAddress (an unnumbered peer has no address of its own)",
            )),
            (true, Some(interface)) => Ok(PeerTarget::Interface(interface_name(
                interface,
                "spec.peerInterface",
            )?)),
            (false, None) => {
                let ip: IpAddr = address.parse().map_err(|_| {
                    CrdError::new(
                        "spec.peerAddress",
                        format!("{:?} is not an IP address", self.peer_address),
                    )
                })?;
                if ip.is_unspecified() || ip.is_multicast() || ip == IpAddr::from([255; 4]) {
                    return Err(CrdError::new(
                        "spec.peerAddress",
                        format!("{ip} is not a unicast address"),
                    ));
                }
                if let IpAddr::V6(v6) = ip
                    && v6.is_unicast_link_local()
                {
                    return Err(CrdError::new(
                        "spec.peerAddress",
                        format!("{ip} is link-local: name its interface in peerInterface instead"),
                    ));
                }
                Ok(PeerTarget::Address(ip))
            }
        }
    }

    fn families(&self) -> Result<Option<Vec<Family>>, CrdError> {
        let Some(names) = &self.families else {
            return Ok(None);
        };
        if names.is_empty() {
            return Err(CrdError::new(
                "spec.families",
                "must not be empty (leave it out for the family of peerAddress)",
            ));
        }
        let mut families = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let family = match name.as_str() {
                "ipv4-unicast" => Family::Ipv4Unicast,
                "ipv6-unicast" => Family::Ipv6Unicast,
                other => {
                    return Err(CrdError::new(
                        format!("spec.families[{i}]"),
                        format!("{other:?} is not one of ipv4-unicast, ipv6-unicast"),
                    ));
                }
            };
            if families.contains(&family) {
                return Err(CrdError::new(
                    format!("spec.families[{i}]"),
                    format!("{name:?} is listed twice"),
                ));
            }
            families.push(family);
        }
        Ok(Some(families))
    }

    fn bfd_timers(&self) -> Result<Option<Timers>, CrdError> {
        let Some(bfd) = self.bfd.as_ref().filter(|b| b.enabled) else {
            return Ok(None);
        };
        let defaults = Timers::default();
        let ms =
            |v: Option<u32>, default: Duration| v.map_or(default, |ms| Duration::from_millis(u64::from(ms)));
        let timers = Timers {
            desired_min_tx: ms(bfd.min_tx_ms, defaults.desired_min_tx),
            required_min_rx: ms(bfd.min_rx_ms, defaults.required_min_rx),
            detect_mult: bfd.multiplier.unwrap_or(defaults.detect_mult),
        };
        timers.validate().map_err(|e| {
            let field = match e.field {
                "desired_min_tx" => "minTxMs",
                "required_min_rx" => "minRxMs",
                _ => "multiplier",
            };
            CrdError::new(format!("spec.bfd.{field}"), e.reason)
        })?;
        Ok(Some(timers))
    }
}

/// A Linux interface name as the kernel takes it (`dev_valid_name`): 1 to 15 bytes, not `.` or
/// `..`, no `/`, `:` or whitespace.
fn interface_name(name: &str, field: &str) -> Result<String, CrdError> {
    let valid = !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace());
    if valid {
        Ok(name.to_owned())
    } else {
        Err(CrdError::new(
            field,
            format!("{name:?} is not an interface name (1 to 15 bytes, no '/', ':' or space)"),
        ))
    }
}

/// An RFC 1997 community: `A:B` (A and B 16-bit, the value `A << 16 | B`) or a well-known name
/// (`no-export`, `no-advertise`, `no-export-subconfed`; `blackhole` from RFC 7999).
pub fn parse_community(text: &str) -> Option<u32> {
    let text = text.trim();
    if let Some((_, value)) = WELL_KNOWN
        .iter()
        .find(|(name, _)| text.eq_ignore_ascii_case(name))
    {
        return Some(*value);
    }
    let (high, low) = text.split_once(':')?;
    Some(u32::from(number::<u16>(high)?) << 16 | u32::from(number::<u16>(low)?))
}

/// An RFC 8092 large community, `global:local1:local2`, each part a 32-bit number.
pub fn parse_large_community(text: &str) -> Option<LargeCommunity> {
    let mut parts = text.trim().split(':');
    let community = LargeCommunity {
        global_admin: number(parts.next()?)?,
        local_data1: number(parts.next()?)?,
        local_data2: number(parts.next()?)?,
    };
    parts.next().is_none().then_some(community)
}

/// Decimal digits only (no sign, no spaces), in range.
fn number<T: std::str::FromStr>(text: &str) -> Option<T> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}
