//! The cycles of a module graph, counted between siblings: a module with everything below it is
//! one unit, and the units under each parent must not depend on each other in a cycle.
//!
//! An edge `x -> y` between two modules neither of which holds the other is a dependency between
//! the two children of their closest common parent that hold them: `crd::ip -> bgp_peer` and
//! `bgp_peer -> crd::schema` make the cycle `crd -> bgp_peer -> crd` (neither `crd/` nor
//! `bgp_peer.rs` can be read or moved without the other). A module and the modules below it
//! are not a cycle: a parent is made of its children (its `mod.rs` is their glue and their
//! shared items), which is also what lets a child name `super::` items.
//!
//! For every edge inside a tangle of units, the shortest cycle through it is reported, so each
//! edge that keeps a tangle together is named once.

use super::graph::{Graph, Module, Site, name};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::Path;

/// One module-level dependency behind a step between units.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Use {
    pub from: Module,
    pub to: Module,
    pub site: Site,
}

/// A cycle `a -> b -> … -> a` of sibling units (the first repeated at the end) and, per step,
/// the dependencies that make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    pub modules: Vec<Module>,
    /// One per step `modules[k] -> modules[k + 1]`.
    pub steps: Vec<Vec<Use>>,
}

/// unit → unit → the dependencies between them.
type Units = BTreeMap<Module, BTreeMap<Module, Vec<Use>>>;

impl Cycle {
    /// `a -> b -> a`.
    pub fn path(&self) -> String {
        self.modules
            .iter()
            .map(|m| name(m))
            .collect::<Vec<_>>()
            .join(" -> ")
    }

    /// `crate: a -> b -> a`, then a line per step with its first sites (files shown below
    /// `base`), each naming the modules when they are below the units.
    pub fn describe(&self, crate_name: &str, base: &Path) -> String {
        const SHOWN: usize = 4;
        let mut out = format!("{crate_name}: {}", self.path());
        for (step, uses) in self.modules.windows(2).zip(&self.steps) {
            let shown: Vec<String> = uses
                .iter()
                .take(SHOWN)
                .map(|u| {
                    let file = u.site.file.strip_prefix(base).unwrap_or(&u.site.file);
                    let at = format!("{}:{}", file.display(), u.site.line);
                    if u.from == step[0] && u.to == step[1] {
                        at
                    } else {
                        format!("{at} ({} -> {})", name(&u.from), name(&u.to))
                    }
                })
                .collect();
            let _ = write!(
                out,
                "\n    {} -> {} at {}",
                name(&step[0]),
                name(&step[1]),
                shown.join(", ")
            );
            if uses.len() > SHOWN {
                let _ = write!(out, " and {} more", uses.len() - SHOWN);
            }
        }
        out
    }
}

impl Graph {
    /// Whether module `from` depends on module `to` (written `a::b`, `crate` for the root).
    pub fn has_edge(&self, from: &str, to: &str) -> bool {
        let split = |s: &str| -> Module {
            if s == "crate" {
                Vec::new()
            } else {
                s.split("::").map(str::to_owned).collect()
            }
        };
        self.edges
            .get(&split(from))
            .is_some_and(|t| t.contains_key(&split(to)))
    }

    /// How many module-to-module dependencies there are.
    pub fn edge_count(&self) -> usize {
        self.edges.values().map(BTreeMap::len).sum()
    }

    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    /// Every cycle between sibling units, each the shortest through one of the edges inside a
    /// tangle, each once.
    pub fn cycles(&self) -> Vec<Cycle> {
        let units = self.units();
        let mut found: BTreeSet<Vec<Module>> = BTreeSet::new();
        for (from, targets) in &units {
            for to in targets.keys() {
                if let Some(back) = shortest(&units, to, from) {
                    // from -> to -> … -> from, rotated to start at its least unit.
                    let mut ring: Vec<Module> = std::iter::once(from.clone()).chain(back).collect();
                    ring.pop();
                    let least = (0..ring.len()).min_by_key(|k| &ring[*k]).unwrap_or(0);
                    ring.rotate_left(least);
                    found.insert(ring);
                }
            }
        }
        found
            .into_iter()
            .map(|mut ring| {
                ring.push(ring[0].clone());
                let steps = ring.windows(2).map(|w| units[&w[0]][&w[1]].clone()).collect();
                Cycle { modules: ring, steps }
            })
            .collect()
    }

    /// The edges lifted to the sibling units that hold their ends.
    fn units(&self) -> Units {
        let mut units = Units::new();
        for (from, targets) in &self.edges {
            for (to, sites) in targets {
                let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    // One holds the other.
                    continue;
                }
                let uses = units
                    .entry(from[..=common].to_vec())
                    .or_default()
                    .entry(to[..=common].to_vec())
                    .or_default();
                uses.extend(sites.iter().map(|site| Use {
                    from: from.clone(),
                    to: to.clone(),
                    site: site.clone(),
                }));
            }
        }
        for uses in units.values_mut().flat_map(BTreeMap::values_mut) {
            uses.sort_by(|a, b| (&a.site, &a.from, &a.to).cmp(&(&b.site, &b.from, &b.to)));
        }
        units
    }
}

/// The shortest path `from` → … → `to` (both included), by breadth-first search.
fn shortest(units: &Units, from: &Module, to: &Module) -> Option<Vec<Module>> {
    let mut came: BTreeMap<&Module, &Module> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = BTreeSet::from([from]);
    while let Some(m) = queue.pop_front() {
        if m == to {
            let mut path = vec![m.clone()];
            let mut at = m;
            while let Some(prev) = came.get(at) {
                path.push((*prev).clone());
                at = prev;
            }
            path.reverse();
            return Some(path);
        }
        for next in units.get(m).into_iter().flat_map(BTreeMap::keys) {
            if seen.insert(next) {
                came.insert(next, m);
                queue.push_back(next);
            }
        }
    }
    None
}
