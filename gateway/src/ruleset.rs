//! nftables rulesets as data: the tables the project owns, their named sets and chains, the
//! script that replaces them in one transaction, and the element changes that get from one
//! ruleset to another when only set contents differ.
//!
//! One table per family, `ip kube-ovn` and `ip6 kube-ovn`: no other table is ever named in a
//! script, so the host's other rules (kube-proxy's, Docker's, an operator's) are never touched.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;

use ipnet::IpNet;

/// A set element: a prefix, with the address it maps to in a map.
pub type Element = (IpNet, Option<IpAddr>);

/// The name of our table in each family.
pub const TABLE: &str = "kube-ovn";

/// An address family, which is also the nftables table family (`ip` / `ip6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub const ALL: [Self; 2] = [Self::V4, Self::V6];

    /// The nftables family keyword, and the protocol in matches (`ip saddr`, `ip6 saddr`).
    pub fn nft(self) -> &'static str {
        match self {
            Self::V4 => "ip",
            Self::V6 => "ip6",
        }
    }

    /// Kube-OVN's set-name prefix for the family.
    pub fn set_prefix(self) -> &'static str {
        match self {
            Self::V4 => "ovn40",
            Self::V6 => "ovn60",
        }
    }

    /// The nftables type of the family's addresses.
    pub fn addr_type(self) -> &'static str {
        match self {
            Self::V4 => "ipv4_addr",
            Self::V6 => "ipv6_addr",
        }
    }

    pub fn of(ip: &IpAddr) -> Self {
        if ip.is_ipv4() { Self::V4 } else { Self::V6 }
    }

    pub fn of_net(net: &IpNet) -> Self {
        Self::of(&net.addr())
    }
}

/// What a named set holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetKind {
    /// Addresses and prefixes (`flags interval`), as Kube-OVN's `hash:net` ipsets.
    Addresses,
    /// Prefix → address of the same family (`snat to ip saddr map @…`).
    AddressMap,
}

/// A named set: its kind and its elements, keys normalized (host bits cleared, no key
/// inside another: nftables refuses overlapping intervals where an ipset would take them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub kind: SetKind,
    elements: BTreeMap<IpNet, Option<IpAddr>>,
}

impl Set {
    /// A set of addresses and prefixes.
    pub fn addresses(nets: impl IntoIterator<Item = IpNet>) -> Self {
        Self::build(SetKind::Addresses, nets.into_iter().map(|n| (n, None)))
    }

    /// A map from prefixes to addresses.
    pub fn address_map(pairs: impl IntoIterator<Item = (IpNet, IpAddr)>) -> Self {
        Self::build(SetKind::AddressMap, pairs.into_iter().map(|(n, a)| (n, Some(a))))
    }

    fn build(kind: SetKind, items: impl Iterator<Item = (IpNet, Option<IpAddr>)>) -> Self {
        let mut sorted: Vec<(IpNet, Option<IpAddr>)> = items.map(|(n, v)| (n.trunc(), v)).collect();
        // By network address, wider first: a prefix that holds the next one comes before it, and
        // CIDR blocks either nest or are disjoint, so one pass keeps the outermost of each nest.
        sorted.sort_by_key(|(n, _)| (n.network(), n.prefix_len()));
        let mut elements = BTreeMap::new();
        let mut cover: Option<IpNet> = None;
        for (net, value) in sorted {
            if cover.is_some_and(|c| c.contains(&net)) {
                continue;
            }
            cover = Some(net);
            elements.insert(net, value);
        }
        Self { kind, elements }
    }

    /// The elements, keys ascending; values only for maps.
    pub fn elements(&self) -> &BTreeMap<IpNet, Option<IpAddr>> {
        &self.elements
    }
}

/// The hook a base chain is attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseChain {
    /// `nat` or `filter`.
    pub kind: &'static str,
    /// `prerouting`, `postrouting`, `input`, `forward`, `output`.
    pub hook: &'static str,
    /// nftables' priority expression (`srcnat - 1`).
    pub priority: &'static str,
}

/// A chain: attached to a hook, or a jump target; its rules in nft syntax, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub base: Option<BaseChain>,
    pub rules: Vec<String>,
}

/// One family's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub family: Family,
    pub sets: BTreeMap<String, Set>,
    /// In declaration order: jump targets before the chains that jump to them.
    pub chains: Vec<Chain>,
}

/// Both families' tables (a family absent here has its table deleted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ruleset {
    pub tables: BTreeMap<Family, Table>,
}

/// Element changes of one set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetUpdate {
    pub family: Family,
    pub set: String,
    /// Removed first (a map key whose value changed is removed, then added).
    pub delete: Vec<Element>,
    pub add: Vec<Element>,
}

/// `10.0.0.1` for a host, `10.0.0.0/24` otherwise, as nft lists them.
pub fn element_text(net: &IpNet) -> String {
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

impl Table {
    /// The table as an nft `table … { … }` block.
    pub fn render(&self) -> String {
        let mut out = format!("table {} {TABLE} {{\n", self.family.nft());
        for (name, set) in &self.sets {
            let keyword = match set.kind {
                SetKind::Addresses => "set",
                SetKind::AddressMap => "map",
            };
            let _ = writeln!(out, "\t{keyword} {name} {{");
            let ty = self.family.addr_type();
            match set.kind {
                SetKind::Addresses => {
                    let _ = writeln!(out, "\t\ttype {ty}");
                }
                SetKind::AddressMap => {
                    let _ = writeln!(out, "\t\ttype {ty} : {ty}");
                }
            }
            out.push_str("\t\tflags interval\n");
            if !set.elements.is_empty() {
                let items: Vec<String> = set
                    .elements
                    .iter()
                    .map(|(k, v)| match v {
                        Some(v) => format!("{} : {v}", element_text(k)),
                        None => element_text(k),
                    })
                    .collect();
                let _ = writeln!(out, "\t\telements = {{ {} }}", items.join(", "));
            }
            out.push_str("\t}\n");
        }
        for chain in &self.chains {
            let _ = writeln!(out, "\tchain {} {{", chain.name);
            if let Some(base) = chain.base {
                let _ = writeln!(
                    out,
                    "\t\ttype {} hook {} priority {}; policy accept;",
                    base.kind, base.hook, base.priority
                );
            }
            for rule in &chain.rules {
                let _ = writeln!(out, "\t\t{rule}");
            }
            out.push_str("\t}\n");
        }
        out.push_str("}\n");
        out
    }

    /// Everything but the set elements, to tell an element update from a rebuild.
    fn same_shape(&self, other: &Self) -> bool {
        self.family == other.family
            && self.chains == other.chains
            && self.sets.len() == other.sets.len()
            && self
                .sets
                .iter()
                .zip(&other.sets)
                .all(|((a, sa), (b, sb))| a == b && sa.kind == sb.kind)
    }
}

impl Ruleset {
    /// The nft script that replaces both of our tables in one transaction: each table is
    /// created if missing (so the delete cannot fail), deleted with everything in it, and made
    /// again from the plan. Rules of other tables are not named, so they stay.
    pub fn script(&self) -> String {
        let mut out = String::new();
        for family in Family::ALL {
            let _ = writeln!(out, "table {} {TABLE}", family.nft());
            let _ = writeln!(out, "delete table {} {TABLE}", family.nft());
            if let Some(table) = self.tables.get(&family) {
                out.push_str(&table.render());
            }
        }
        out
    }

    /// The element changes that turn `previous` into `self`, or `None` when anything but set
    /// contents differs (tables, sets, chains or rules): then the whole ruleset is replaced.
    pub fn updates_from(&self, previous: &Self) -> Option<Vec<SetUpdate>> {
        if self.tables.len() != previous.tables.len() {
            return None;
        }
        let mut updates = Vec::new();
        for ((_, new), (_, old)) in self.tables.iter().zip(&previous.tables) {
            if !new.same_shape(old) {
                return None;
            }
            for ((name, new_set), (_, old_set)) in new.sets.iter().zip(&old.sets) {
                let delete: Vec<_> = old_set
                    .elements
                    .iter()
                    .filter(|(k, v)| new_set.elements.get(k) != Some(v))
                    .map(|(k, v)| (*k, *v))
                    .collect();
                let add: Vec<_> = new_set
                    .elements
                    .iter()
                    .filter(|(k, v)| old_set.elements.get(k) != Some(v))
                    .map(|(k, v)| (*k, *v))
                    .collect();
                if !delete.is_empty() || !add.is_empty() {
                    updates.push(SetUpdate {
                        family: new.family,
                        set: name.clone(),
                        delete,
                        add,
                    });
                }
            }
        }
        Some(updates)
    }

    /// Every set's elements, by family and name (what a listing of the kernel is compared with).
    pub fn elements(&self) -> BTreeMap<(Family, String), BTreeSet<Element>> {
        self.tables
            .values()
            .flat_map(|t| {
                t.sets.iter().map(move |(name, set)| {
                    (
                        (t.family, name.clone()),
                        set.elements.iter().map(|(k, v)| (*k, *v)).collect(),
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn sets_drop_nested_prefixes_and_host_bits() {
        let set = Set::addresses(
            [
                "10.16.5.0/24",
                "10.0.0.0/8",
                "10.16.0.1/16",
                "192.168.1.7/32",
                "192.168.1.7/32",
            ]
            .map(net),
        );
        let keys: Vec<String> = set.elements().keys().map(element_text).collect();
        assert_eq!(keys, ["10.0.0.0/8", "192.168.1.7"]);
        let v6 = Set::addresses(["fd00::/64", "fd00::5/128", "fd01::/64"].map(net));
        assert_eq!(v6.elements().len(), 2);
    }

    fn table(family: Family, sets: &[(&str, Set)], rules: &[&str]) -> Table {
        Table {
            family,
            sets: sets.iter().map(|(n, s)| ((*n).to_owned(), s.clone())).collect(),
            chains: vec![Chain {
                name: "OVN-POSTROUTING".into(),
                base: Some(BaseChain {
                    kind: "nat",
                    hook: "postrouting",
                    priority: "srcnat - 1",
                }),
                rules: rules.iter().map(|r| (*r).to_owned()).collect(),
            }],
        }
    }

    #[test]
    fn script_replaces_both_tables_and_renders_sets_and_maps() {
        let t = table(
            Family::V4,
            &[
                ("ovn40subnets", Set::addresses([net("10.16.0.0/16")])),
                ("ovn40other-node", Set::addresses([])),
                (
                    "ovn40subnets-snat-ip",
                    Set::address_map([(net("10.20.0.0/16"), "172.30.0.50".parse().unwrap())]),
                ),
            ],
            &["ip saddr @ovn40subnets masquerade"],
        );
        let rs = Ruleset {
            tables: [(Family::V4, t)].into(),
        };
        let script = rs.script();
        assert!(script.starts_with("table ip kube-ovn\ndelete table ip kube-ovn\ntable ip kube-ovn {\n"));
        assert!(
            script.ends_with("}\ntable ip6 kube-ovn\ndelete table ip6 kube-ovn\n"),
            "{script}"
        );
        assert!(script.contains("\tmap ovn40subnets-snat-ip {\n\t\ttype ipv4_addr : ipv4_addr\n\t\tflags interval\n\t\telements = { 10.20.0.0/16 : 172.30.0.50 }\n"));
        assert!(script.contains("\tset ovn40other-node {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t}\n"));
        assert!(script.contains("\t\ttype nat hook postrouting priority srcnat - 1; policy accept;\n"));
    }

    #[test]
    fn element_changes_are_updates_anything_else_a_rebuild() {
        let subnets = |cidrs: &[&str]| Set::addresses(cidrs.iter().map(|c| net(c)));
        let rs = |cidrs: &[&str], rule: &str| Ruleset {
            tables: [(
                Family::V4,
                table(Family::V4, &[("ovn40subnets", subnets(cidrs))], &[rule]),
            )]
            .into(),
        };
        let old = rs(&["10.16.0.0/16", "10.17.0.0/16"], "masquerade");
        let new = rs(&["10.16.0.0/16", "10.18.0.0/16"], "masquerade");
        assert_eq!(
            new.updates_from(&old),
            Some(vec![SetUpdate {
                family: Family::V4,
                set: "ovn40subnets".into(),
                delete: vec![(net("10.17.0.0/16"), None)],
                add: vec![(net("10.18.0.0/16"), None)],
            }])
        );
        assert_eq!(new.updates_from(&new), Some(vec![]));
        assert_eq!(
            rs(&["10.16.0.0/16"], "accept").updates_from(&old),
            None,
            "a rule changed"
        );
        assert_eq!(Ruleset::default().updates_from(&old), None, "a table went");
        // A map key whose value changed: out with the old pair, in with the new.
        let map = |ip: &str| Ruleset {
            tables: [(
                Family::V4,
                table(
                    Family::V4,
                    &[(
                        "m",
                        Set::address_map([(net("10.20.0.0/16"), ip.parse().unwrap())]),
                    )],
                    &[],
                ),
            )]
            .into(),
        };
        let update = map("172.30.0.51").updates_from(&map("172.30.0.50")).unwrap();
        assert_eq!(
            update[0].delete,
            vec![(net("10.20.0.0/16"), Some("172.30.0.50".parse().unwrap()))]
        );
        assert_eq!(
            update[0].add,
            vec![(net("10.20.0.0/16"), Some("172.30.0.51".parse().unwrap()))]
        );
    }
}
