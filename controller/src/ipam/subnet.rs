//! One subnet's address state: its families, pools and allocations.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use kube_ovn_api::annotations::{IpRange, MacAddr};

use super::mac::MacSource;
use super::range::{RangeSet, to_ip, to_u128};
use super::{Allocation, Family, IpamError, Request, SubnetConfig, Usage};

const FAMILIES: [Family; 2] = [Family::V4, Family::V6];

#[derive(Debug, Clone)]
struct FamilyState {
    cidr: IpNet,
    gateway: u128,
    /// Addresses a NIC may have: the CIDR without network and broadcast (v4), or without the
    /// subnet-router anycast address (v6); /31, /32, /127, /128 keep all of theirs.
    usable: RangeSet,
    /// The gateway and `excludeIps`: never handed out automatically.
    reserved: RangeSet,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Pool {
    /// A named pool's configured addresses (the IPPool's `spec.ips`); empty for the default pool.
    spec: [RangeSet; 2],
    ips: [RangeSet; 2],
    free: [RangeSet; 2],
    released: [RangeSet; 2],
    using: [RangeSet; 2],
}

#[derive(Debug)]
pub(super) struct Subnet {
    name: String,
    families: [Option<FamilyState>; 2],
    pub pools: BTreeMap<String, Pool>,
    pub nics: HashMap<String, Allocation>,
    owners: HashMap<(Family, u128), String>,
    macs: HashMap<MacAddr, String>,
    pub gateway_mac: Option<MacAddr>,
}

fn usable_range(cidr: &IpNet) -> RangeSet {
    let net = to_u128(cidr.network());
    let last = to_u128(cidr.broadcast());
    let small = match cidr {
        IpNet::V4(n) => n.prefix_len() >= 31,
        IpNet::V6(n) => n.prefix_len() >= 127,
    };
    match cidr {
        _ if small => RangeSet::from_range(net, last),
        IpNet::V4(_) => RangeSet::from_range(net + 1, last - 1),
        IpNet::V6(_) => RangeSet::from_range(net + 1, last),
    }
}

fn range_of(r: &IpRange) -> (Family, u128, u128) {
    match r {
        IpRange::Single(ip) => (Family::of(ip), to_u128(*ip), to_u128(*ip)),
        IpRange::Range(a, b) => (Family::of(a), to_u128(*a), to_u128(*b)),
        IpRange::Cidr(n) => (
            Family::of(&n.network()),
            to_u128(n.network()),
            to_u128(n.broadcast()),
        ),
    }
}

impl Subnet {
    pub fn new(name: &str, config: &SubnetConfig) -> Result<Self, IpamError> {
        let mut s = Self {
            name: name.to_owned(),
            families: [None, None],
            pools: BTreeMap::from([(String::new(), Pool::default())]),
            nics: HashMap::new(),
            owners: HashMap::new(),
            macs: HashMap::new(),
            gateway_mac: None,
        };
        s.families = s.families_from(config)?;
        s.rebuild();
        Ok(s)
    }

    fn invalid(&self, cidr: &str, reason: &str) -> IpamError {
        IpamError::InvalidCidr {
            subnet: self.name.clone(),
            cidr: cidr.to_owned(),
            reason: reason.to_owned(),
        }
    }

    fn families_from(&self, config: &SubnetConfig) -> Result<[Option<FamilyState>; 2], IpamError> {
        let mut out: [Option<FamilyState>; 2] = [None, None];
        if config.cidrs.is_empty() {
            return Err(self.invalid("", "no CIDR"));
        }
        for cidr in &config.cidrs {
            let f = Family::of(&cidr.network());
            if out[f.index()].is_some() {
                return Err(self.invalid(&cidr.to_string(), &format!("more than one {f} CIDR")));
            }
            let cidr = cidr.trunc();
            let usable = usable_range(&cidr);
            let gateway = match config.gateways.iter().find(|g| Family::of(g) == f) {
                Some(g) if cidr.contains(g) => to_u128(*g),
                Some(g) => return Err(self.invalid(&cidr.to_string(), &format!("gateway {g} is outside it"))),
                None => usable
                    .first()
                    .ok_or_else(|| self.invalid(&cidr.to_string(), "it has no usable address"))?,
            };
            let mut reserved = RangeSet::new();
            for r in &config.exclude_ips {
                let (rf, a, b) = range_of(r);
                if rf == f {
                    reserved.insert_range(a, b);
                }
            }
            let mut reserved = reserved.intersect(&usable);
            reserved.insert(gateway);
            out[f.index()] = Some(FamilyState {
                cidr,
                gateway,
                usable,
                reserved,
            });
        }
        Ok(out)
    }

    pub fn update(&mut self, config: &SubnetConfig) -> Result<(), IpamError> {
        let families = self.families_from(config)?;
        self.families = families;
        // Addresses outside the new CIDRs are no longer anyone's.
        let stale: Vec<(Family, u128)> = self
            .owners
            .keys()
            .filter(|(f, x)| {
                self.families[f.index()]
                    .as_ref()
                    .is_none_or(|fs| !fs.usable.contains(*x))
            })
            .copied()
            .collect();
        for (f, x) in stale {
            if let Some(key) = self.owners.remove(&(f, x))
                && let Some(a) = self.nics.get_mut(&key)
            {
                match f {
                    Family::V4 => a.v4 = None,
                    Family::V6 => a.v6 = None,
                }
            }
        }
        self.rebuild();
        Ok(())
    }

    /// Recomputes every pool from the families, the named pools' specs and the allocations.
    /// Released sets start over empty (Kube-OVN resets them on a subnet or pool change).
    fn rebuild(&mut self) {
        for f in FAMILIES {
            let i = f.index();
            let Some(fs) = &self.families[i] else {
                for p in self.pools.values_mut() {
                    p.ips[i] = RangeSet::new();
                    p.free[i] = RangeSet::new();
                    p.released[i] = RangeSet::new();
                    p.using[i] = RangeSet::new();
                }
                continue;
            };
            let mut named = RangeSet::new();
            for (name, p) in &mut self.pools {
                if !name.is_empty() {
                    p.ips[i] = p.spec[i].intersect(&fs.usable);
                    named.insert_set(&p.ips[i]);
                }
            }
            let mut in_use = RangeSet::new();
            for (ff, x) in self.owners.keys() {
                if *ff == f {
                    in_use.insert(*x);
                }
            }
            for (name, p) in &mut self.pools {
                if name.is_empty() {
                    p.ips[i] = fs.usable.difference(&named);
                }
                p.using[i] = in_use.intersect(&p.ips[i]);
                p.free[i] = p.ips[i].difference(&fs.reserved).difference(&p.using[i]);
                p.released[i] = RangeSet::new();
            }
        }
    }

    pub fn set_pool(&mut self, name: &str, ips: &[IpRange]) -> Result<(), IpamError> {
        let mut spec: [RangeSet; 2] = Default::default();
        for r in ips {
            let (f, a, b) = range_of(r);
            let fs = self.families[f.index()]
                .as_ref()
                .ok_or_else(|| IpamError::WrongFamily {
                    subnet: self.name.clone(),
                    family: f,
                })?;
            for x in [a, b] {
                let ip = to_ip(x, f.is_v6());
                if !fs.cidr.contains(&ip) {
                    return Err(IpamError::OutOfRange {
                        subnet: self.name.clone(),
                        ip,
                        cidr: fs.cidr.to_string(),
                    });
                }
            }
            spec[f.index()].insert_range(a, b);
        }
        for (other, p) in &self.pools {
            if !other.is_empty() && other != name && (0..2).any(|i| p.spec[i].overlaps(&spec[i])) {
                return Err(IpamError::PoolOverlap {
                    subnet: self.name.clone(),
                    pool: name.to_owned(),
                    other: other.clone(),
                });
            }
        }
        self.pools.entry(name.to_owned()).or_default().spec = spec;
        self.rebuild();
        Ok(())
    }

    pub fn remove_pool(&mut self, name: &str) {
        if !name.is_empty() && self.pools.remove(name).is_some() {
            self.rebuild();
        }
    }

    fn pool_of(&self, f: Family, x: u128) -> Option<&str> {
        self.pools
            .iter()
            .find(|(_, p)| p.ips[f.index()].contains(x))
            .map(|(n, _)| n.as_str())
    }

    pub fn holder(&self, ip: IpAddr) -> Option<&str> {
        self.owners
            .get(&(Family::of(&ip), to_u128(ip)))
            .map(String::as_str)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.families[Family::of(&ip).index()]
            .as_ref()
            .is_some_and(|fs| fs.cidr.contains(&ip))
    }

    fn conflict(&self, what: String, holder: &str) -> IpamError {
        IpamError::Conflict {
            subnet: self.name.clone(),
            what,
            holder: holder.to_owned(),
        }
    }

    /// Checks a static address for `key` without changing anything.
    fn check_static(&self, key: &str, ip: IpAddr) -> Result<u128, IpamError> {
        let f = Family::of(&ip);
        let fs = self.families[f.index()]
            .as_ref()
            .ok_or_else(|| IpamError::WrongFamily {
                subnet: self.name.clone(),
                family: f,
            })?;
        let x = to_u128(ip);
        if !fs.usable.contains(x) {
            return Err(IpamError::OutOfRange {
                subnet: self.name.clone(),
                ip,
                cidr: fs.cidr.to_string(),
            });
        }
        if x == fs.gateway {
            return Err(self.conflict(format!("{ip}"), "the subnet's gateway"));
        }
        match self.owners.get(&(f, x)) {
            Some(holder) if holder != key => Err(self.conflict(format!("{ip}"), holder)),
            _ => Ok(x),
        }
    }

    pub fn allocate(
        &mut self,
        key: &str,
        req: &Request,
        macs: &mut MacSource,
    ) -> Result<Allocation, IpamError> {
        let pool_name = req.pool.clone().unwrap_or_default();
        if !self.pools.contains_key(&pool_name) {
            return Err(IpamError::UnknownPool {
                subnet: self.name.clone(),
                pool: pool_name,
            });
        }
        let statics = [req.v4.map(IpAddr::V4), req.v6.map(IpAddr::V6)];
        let mut wanted: Vec<Family> = match req.family {
            Some(f) => vec![f],
            None => FAMILIES
                .into_iter()
                .filter(|f| self.families[f.index()].is_some())
                .collect(),
        };
        for (i, s) in statics.iter().enumerate() {
            if s.is_some() && !wanted.contains(&FAMILIES[i]) {
                wanted.push(FAMILIES[i]);
            }
        }
        let existing = self.nics.get(key).cloned();
        let mut targets: [Option<u128>; 2] = [None, None];
        for f in &wanted {
            let i = f.index();
            if self.families[i].is_none() {
                return Err(IpamError::WrongFamily {
                    subnet: self.name.clone(),
                    family: *f,
                });
            }
            if let Some(ip) = statics[i] {
                targets[i] = Some(self.check_static(key, ip)?);
                continue;
            }
            let reuse = existing
                .as_ref()
                .and_then(|e| e.addrs().find(|a| Family::of(a) == *f))
                .map(to_u128);
            if let Some(x) = reuse.filter(|x| self.pool_of(*f, *x) == Some(pool_name.as_str())) {
                targets[i] = Some(x);
                continue;
            }
            let mut skip = RangeSet::new();
            for ip in req.skip.iter().filter(|ip| Family::of(ip) == *f) {
                skip.insert(to_u128(*ip));
            }
            let pool = &self.pools[&pool_name];
            let pick = pool.free[i]
                .first_excluding(&skip)
                .or_else(|| pool.released[i].first_excluding(&skip));
            targets[i] = Some(pick.ok_or_else(|| IpamError::Exhausted {
                subnet: self.name.clone(),
                pool: pool_name.clone(),
                family: *f,
            })?);
        }
        let mac = match req.mac {
            Some(m) => {
                if self.gateway_mac == Some(m) {
                    return Err(self.conflict(format!("MAC {m}"), "the subnet's gateway"));
                }
                if let Some(holder) = self.macs.get(&m).filter(|h| *h != key) {
                    return Err(self.conflict(format!("MAC {m}"), holder));
                }
                m
            }
            None => match existing.as_ref().map(|e| e.mac) {
                Some(m) => m,
                None => loop {
                    let m = macs.draw();
                    if !self.macs.contains_key(&m) && self.gateway_mac != Some(m) {
                        break m;
                    }
                },
            },
        };
        // Everything is decided; from here on nothing can fail.
        if let Some(e) = &existing {
            for ip in e.addrs() {
                let f = Family::of(&ip);
                if targets[f.index()] != Some(to_u128(ip)) {
                    self.release_addr(f, to_u128(ip));
                }
            }
            if e.mac != mac {
                self.macs.remove(&e.mac);
            }
        }
        for f in FAMILIES {
            if let Some(x) = targets[f.index()] {
                self.take_addr(f, x, key);
            }
        }
        self.macs.insert(mac, key.to_owned());
        let alloc = Allocation {
            v4: targets[0].map(|x| Ipv4Addr::from(u32::try_from(x).expect("IPv4 targets are 32-bit"))),
            v6: targets[1].map(Ipv6Addr::from),
            mac,
            pool: pool_name,
        };
        self.nics.insert(key.to_owned(), alloc.clone());
        Ok(alloc)
    }

    fn take_addr(&mut self, f: Family, x: u128, key: &str) {
        let i = f.index();
        if let Some(name) = self.pool_of(f, x).map(str::to_owned)
            && let Some(p) = self.pools.get_mut(&name)
        {
            p.free[i].remove(x);
            p.released[i].remove(x);
            p.using[i].insert(x);
        }
        self.owners.insert((f, x), key.to_owned());
    }

    fn release_addr(&mut self, f: Family, x: u128) {
        let i = f.index();
        self.owners.remove(&(f, x));
        let reserved = self.families[i]
            .as_ref()
            .is_some_and(|fs| fs.reserved.contains(x));
        if let Some(name) = self.pool_of(f, x).map(str::to_owned)
            && let Some(p) = self.pools.get_mut(&name)
        {
            p.using[i].remove(x);
            if !reserved {
                p.released[i].insert(x);
            }
        }
    }

    pub fn release(&mut self, key: &str) -> Option<Allocation> {
        let alloc = self.nics.remove(key)?;
        for ip in alloc.addrs() {
            let f = Family::of(&ip);
            if self.owners.get(&(f, to_u128(ip))).is_some_and(|k| k == key) {
                self.release_addr(f, to_u128(ip));
            }
        }
        if self.macs.get(&alloc.mac).is_some_and(|k| k == key) {
            self.macs.remove(&alloc.mac);
        }
        Some(alloc)
    }

    /// Whether any pool has an address left to hand out (free or released): what a pod's subnet
    /// choice asks, without building the range strings of [`Self::usage`].
    pub fn has_available(&self) -> bool {
        self.pools.values().any(|p| {
            FAMILIES
                .iter()
                .any(|f| !p.free[f.index()].is_empty() || !p.released[f.index()].is_empty())
        })
    }

    pub fn usage(&self, pool: Option<&str>) -> Usage {
        let mut u = Usage::default();
        for f in FAMILIES {
            let i = f.index();
            let (mut available, mut using) = (RangeSet::new(), RangeSet::new());
            for (_, p) in self
                .pools
                .iter()
                .filter(|(n, _)| pool.is_none_or(|want| want == n.as_str()))
            {
                available.insert_set(&p.free[i]);
                available.insert_set(&p.released[i]);
                using.insert_set(&p.using[i]);
            }
            let (ac, uc, ar, ur) = (
                available.count(),
                using.count(),
                available.to_range_string(f.is_v6()),
                using.to_range_string(f.is_v6()),
            );
            match f {
                Family::V4 => {
                    (u.v4_available, u.v4_using, u.v4_available_range, u.v4_using_range) = (ac, uc, ar, ur);
                }
                Family::V6 => {
                    (u.v6_available, u.v6_using, u.v6_available_range, u.v6_using_range) = (ac, uc, ar, ur);
                }
            }
        }
        u
    }
}
