//! IP address management, as Kube-OVN's controller does it: pure, in memory, rebuilt at start-up
//! from what is authoritative (IP CRs, northbound ports, pods, and nodes' join annotations).
//!
//! Pure: no I/O, no async. Behaviour kept from Kube-OVN (reference §3.10):
//! - sequential: the lowest free address is handed out, never a random one;
//! - a released address goes to the pool's *released* set and is reused only once the free ones
//!   run out, so a deleted pod's address is not immediately someone else's;
//! - the gateway and `excludeIps` are reserved: never handed out automatically, but a pod may ask
//!   for one statically (and is then counted as using it);
//! - named IP pools carve their addresses out of the subnet's default pool and may not overlap;
//! - dual stack allocates both families or neither;
//! - allocation is idempotent per NIC key: asking again returns what the NIC already has;
//! - MACs are random, locally administered, unicast, unique per subnet and never the gateway's.
//!
//! ```text
//!   Ipam ─┬─ Subnet "ovn-default" ─┬─ v4 family: cidr, gateway, usable, reserved
//!         │                         ├─ v6 family
//!         │                         ├─ pools: "" (default) and named ones, each per family:
//!         │                         │          ips ⊇ using ∪ free ∪ released
//!         │                         └─ nics: key → Allocation; owners: address → key; macs
//!         └─ Subnet "join" …
//! ```

mod mac;
mod range;
mod subnet;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use kube_ovn_api::annotations::{IpRange, MacAddr};

pub use range::RangeSet;
use subnet::Subnet;

/// An address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: &IpAddr) -> Self {
        if ip.is_ipv4() { Self::V4 } else { Self::V6 }
    }

    fn index(self) -> usize {
        match self {
            Self::V4 => 0,
            Self::V6 => 1,
        }
    }

    fn is_v6(self) -> bool {
        self == Self::V6
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpamError {
    #[error("subnet {0} is not known to IPAM")]
    UnknownSubnet(String),
    #[error("subnet {subnet}: invalid CIDR {cidr}: {reason}")]
    InvalidCidr {
        subnet: String,
        cidr: String,
        reason: String,
    },
    #[error("subnet {subnet}: {ip} is out of range of {cidr}")]
    OutOfRange {
        subnet: String,
        ip: IpAddr,
        cidr: String,
    },
    #[error("subnet {subnet}: {what} is already in use by {holder}")]
    Conflict {
        subnet: String,
        what: String,
        holder: String,
    },
    #[error("subnet {subnet}: no {family} address left in pool {pool:?}")]
    Exhausted {
        subnet: String,
        pool: String,
        family: Family,
    },
    #[error("subnet {subnet} has no {family} CIDR")]
    WrongFamily { subnet: String, family: Family },
    #[error("subnet {subnet}: IP pool {pool} is not known")]
    UnknownPool { subnet: String, pool: String },
    #[error("subnet {subnet}: IP pool {pool} overlaps IP pool {other}")]
    PoolOverlap {
        subnet: String,
        pool: String,
        other: String,
    },
}

/// What one NIC holds in one subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub v4: Option<Ipv4Addr>,
    pub v6: Option<Ipv6Addr>,
    pub mac: MacAddr,
    /// The pool the addresses came from (`""`: the subnet's default pool).
    pub pool: String,
}

impl Allocation {
    pub fn addrs(&self) -> impl Iterator<Item = IpAddr> {
        self.v4.map(IpAddr::V4).into_iter().chain(self.v6.map(IpAddr::V6))
    }
}

/// What a NIC asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// One family of a dual-stack subnet (the `ip_family` annotation); `None`: every family the
    /// subnet has.
    pub family: Option<Family>,
    /// A named IP pool; `None`: the subnet's default pool.
    pub pool: Option<String>,
    /// Static addresses (`ip_address`, a pool entry for a StatefulSet ordinal, a restored IP CR).
    pub v4: Option<Ipv4Addr>,
    pub v6: Option<Ipv6Addr>,
    /// A static MAC (`mac_address`).
    pub mac: Option<MacAddr>,
    /// Addresses never to hand out automatically (the nodes' own addresses).
    pub skip: Vec<IpAddr>,
}

impl Request {
    /// Exactly these addresses (the last of each family counts) and, if given, this MAC: what a
    /// recorded allocation asks for again.
    pub fn pinned(addrs: impl IntoIterator<Item = IpAddr>, mac: Option<MacAddr>) -> Self {
        let mut r = Self {
            mac,
            ..Self::default()
        };
        for ip in addrs {
            match ip {
                IpAddr::V4(v) => r.v4 = Some(v),
                IpAddr::V6(v) => r.v6 = Some(v),
            }
        }
        r
    }
}

/// A subnet as IPAM needs it, from the Subnet CR after Kube-OVN's defaulting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetConfig {
    /// One CIDR per family.
    pub cidrs: Vec<IpNet>,
    /// The gateway per family; a missing one defaults to the family's first usable address.
    pub gateways: Vec<IpAddr>,
    pub exclude_ips: Vec<IpRange>,
}

/// Counts and ranges for a Subnet's or IPPool's status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub v4_available: u128,
    pub v4_using: u128,
    pub v6_available: u128,
    pub v6_using: u128,
    pub v4_available_range: String,
    pub v4_using_range: String,
    pub v6_available_range: String,
    pub v6_using_range: String,
}

/// Every subnet's address state.
#[derive(Debug)]
pub struct Ipam {
    subnets: BTreeMap<String, Subnet>,
    macs: mac::MacSource,
}

impl Default for Ipam {
    fn default() -> Self {
        Self::new()
    }
}

impl Ipam {
    pub fn new() -> Self {
        Self {
            subnets: BTreeMap::new(),
            macs: mac::MacSource::random(),
        }
    }

    /// Deterministic MACs, for tests and benchmarks.
    pub fn with_seed(seed: u64) -> Self {
        Self {
            subnets: BTreeMap::new(),
            macs: mac::MacSource::seeded(seed),
        }
    }

    /// Adds a subnet, or applies a change of CIDR, gateway or excludes: allocations outside the
    /// new CIDR are dropped, released addresses become free again (as in Kube-OVN).
    pub fn add_or_update_subnet(&mut self, name: &str, config: &SubnetConfig) -> Result<(), IpamError> {
        if let Some(s) = self.subnets.get_mut(name) {
            return s.update(config);
        }
        let s = Subnet::new(name, config)?;
        self.subnets.insert(name.to_owned(), s);
        Ok(())
    }

    pub fn delete_subnet(&mut self, name: &str) {
        self.subnets.remove(name);
    }

    pub fn has_subnet(&self, name: &str) -> bool {
        self.subnets.contains_key(name)
    }

    /// The router port's MAC, which no pod may get.
    pub fn set_gateway_mac(&mut self, subnet: &str, mac: MacAddr) -> Result<(), IpamError> {
        self.subnet_mut(subnet)?.gateway_mac = Some(mac);
        Ok(())
    }

    fn subnet_mut(&mut self, name: &str) -> Result<&mut Subnet, IpamError> {
        self.subnets
            .get_mut(name)
            .ok_or_else(|| IpamError::UnknownSubnet(name.to_owned()))
    }

    fn subnet(&self, name: &str) -> Result<&Subnet, IpamError> {
        self.subnets
            .get(name)
            .ok_or_else(|| IpamError::UnknownSubnet(name.to_owned()))
    }

    /// Adds or changes a named pool (IPPool `spec.ips`); it may not overlap another pool.
    pub fn add_or_update_pool(&mut self, subnet: &str, pool: &str, ips: &[IpRange]) -> Result<(), IpamError> {
        self.subnet_mut(subnet)?.set_pool(pool, ips)
    }

    /// Removes a named pool; its addresses return to the default pool.
    pub fn remove_pool(&mut self, subnet: &str, pool: &str) {
        if let Some(s) = self.subnets.get_mut(subnet) {
            s.remove_pool(pool);
        }
    }

    /// Gives `key` (a NIC: `<pod>.<ns>[.<provider>]`, `node-<node>`, …) its addresses and MAC.
    /// Validates everything before changing anything: on error the state is as before.
    pub fn allocate(&mut self, subnet: &str, key: &str, request: &Request) -> Result<Allocation, IpamError> {
        let macs = &mut self.macs;
        let s = self
            .subnets
            .get_mut(subnet)
            .ok_or_else(|| IpamError::UnknownSubnet(subnet.to_owned()))?;
        s.allocate(key, request, macs)
    }

    /// Releases what `key` holds in `subnet`; released addresses are reused last.
    pub fn release(&mut self, subnet: &str, key: &str) -> Option<Allocation> {
        self.subnets.get_mut(subnet)?.release(key)
    }

    /// Releases `key` in every subnet (a pod whose subnet changed or is unknown).
    pub fn release_everywhere(&mut self, key: &str) -> Vec<(String, Allocation)> {
        self.subnets
            .iter_mut()
            .filter_map(|(name, s)| s.release(key).map(|a| (name.clone(), a)))
            .collect()
    }

    /// Releases `key` in every subnet but `keep` (a NIC that moved to another subnet).
    pub fn release_elsewhere(&mut self, key: &str, keep: &str) -> Vec<(String, Allocation)> {
        self.subnets
            .iter_mut()
            .filter(|(name, _)| name.as_str() != keep)
            .filter_map(|(name, s)| s.release(key).map(|a| (name.clone(), a)))
            .collect()
    }

    pub fn allocation(&self, subnet: &str, key: &str) -> Option<&Allocation> {
        self.subnets.get(subnet)?.nics.get(key)
    }

    /// Who holds `ip` in `subnet`.
    pub fn holder(&self, subnet: &str, ip: IpAddr) -> Option<&str> {
        self.subnets.get(subnet)?.holder(ip)
    }

    /// The subnet whose CIDR contains `ip`, if any.
    pub fn subnet_of(&self, ip: IpAddr) -> Option<&str> {
        self.subnets
            .iter()
            .find(|(_, s)| s.contains(ip))
            .map(|(n, _)| n.as_str())
    }

    /// Every allocation, by subnet and NIC key (what `/debug/ipam` shows).
    pub fn allocations(&self) -> BTreeMap<String, BTreeMap<String, Allocation>> {
        self.subnets
            .iter()
            .map(|(name, s)| {
                let nics = s.nics.iter().map(|(k, a)| (k.clone(), a.clone())).collect();
                (name.clone(), nics)
            })
            .collect()
    }

    /// Every NIC key with an allocation in `subnet`.
    pub fn keys(&self, subnet: &str) -> Vec<String> {
        self.subnets
            .get(subnet)
            .map(|s| s.nics.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether the subnet has an address left; `false` for an unknown subnet.
    pub fn subnet_has_available(&self, subnet: &str) -> bool {
        self.subnet(subnet).is_ok_and(Subnet::has_available)
    }

    pub fn subnet_usage(&self, subnet: &str) -> Result<Usage, IpamError> {
        Ok(self.subnet(subnet)?.usage(None))
    }

    pub fn pool_usage(&self, subnet: &str, pool: &str) -> Result<Usage, IpamError> {
        let s = self.subnet(subnet)?;
        if !s.pools.contains_key(pool) {
            return Err(IpamError::UnknownPool {
                subnet: subnet.to_owned(),
                pool: pool.to_owned(),
            });
        }
        Ok(s.usage(Some(pool)))
    }
}
