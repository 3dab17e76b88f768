//! A crate's modules, found by following `mod` declarations from its root file, and the edges
//! between them: module `a` depends on `b` when `a`'s code names an item of `b`, through a path
//! (`crate::`, `self::`, `super::`, a child module's name, or a name `a` imported) or a `use`.
//! A path through a re-export is followed to the module that defines the item, so
//! `crate::Error` re-exported at the root from `error` is an edge to `error`; the re-export
//! itself is an edge of the re-exporting module too (its public face needs the item).

use super::lex::tokens;
use super::parse::{Import, Scope, scopes};
use anyhow::{Context as _, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A module's path below the crate root (empty for the root).
pub type Module = Vec<String>;

/// Where an edge is written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Site {
    pub file: PathBuf,
    pub line: usize,
}

/// One crate's modules and the dependencies among them.
#[derive(Debug, Default)]
pub struct Graph {
    pub(crate) modules: BTreeMap<Module, Held>,
    /// from → to → where.
    pub edges: BTreeMap<Module, BTreeMap<Module, Vec<Site>>>,
}

/// A module's contents and the file holding it.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    file: PathBuf,
    scope: Scope,
}

/// How many imports a name may be forwarded through before the reader gives up (a forwarding
/// loop does not compile; this only bounds the reader on files that do not).
const MAX_FORWARDS: usize = 32;

/// The module graph of the crate whose root file (`src/lib.rs`, `src/main.rs`, a binary's file)
/// is `root`, reading files with `read`.
pub fn crate_graph_with(
    root: &Path,
    read: &dyn Fn(&Path) -> std::io::Result<String>,
) -> anyhow::Result<Graph> {
    let mut graph = Graph::default();
    let root_dir = root.parent().unwrap_or(Path::new("")).to_path_buf();
    // (module, file, directory its `mod x;` children live in)
    let mut todo = vec![(Module::new(), root.to_path_buf(), root_dir)];
    while let Some((module, file, child_dir)) = todo.pop() {
        let src = read(&file).with_context(|| format!("reading {}", file.display()))?;
        for scope in scopes(&tokens(&src)) {
            let mut at = module.clone();
            at.extend(scope.inline.iter().cloned());
            let dir = scope.inline.iter().fold(child_dir.clone(), |d, m| d.join(m));
            for decl in &scope.file_modules {
                let mut child = at.clone();
                child.push(decl.name.clone());
                let (child_file, grandchildren) = if let Some(p) = &decl.path {
                    let f = file.parent().unwrap_or(Path::new("")).join(p);
                    let d = f.parent().unwrap_or(Path::new("")).to_path_buf();
                    (f, d)
                } else {
                    let flat = dir.join(format!("{}.rs", decl.name));
                    let nested = dir.join(&decl.name).join("mod.rs");
                    if read(&flat).is_ok() {
                        (flat, dir.join(&decl.name))
                    } else if read(&nested).is_ok() {
                        (nested, dir.join(&decl.name))
                    } else {
                        bail!(
                            "{}:{}: module `{}` is in neither {} nor {}",
                            file.display(),
                            decl.line,
                            name(&child),
                            flat.display(),
                            nested.display()
                        );
                    }
                };
                todo.push((child, child_file, grandchildren));
            }
            graph.modules.insert(
                at,
                Held {
                    file: file.clone(),
                    scope,
                },
            );
        }
    }
    graph.edges = edges(&graph.modules);
    Ok(graph)
}

/// The module graph of the crate rooted at `root`, read from disk.
pub fn crate_graph(root: &Path) -> anyhow::Result<Graph> {
    crate_graph_with(root, &|p| std::fs::read_to_string(p))
}

/// `crate` for the root, `a::b` otherwise.
pub fn name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".to_owned()
    } else {
        m.join("::")
    }
}

fn edges(modules: &BTreeMap<Module, Held>) -> BTreeMap<Module, BTreeMap<Module, Vec<Site>>> {
    let r = Resolver { modules };
    let mut out: BTreeMap<Module, BTreeMap<Module, Vec<Site>>> = BTreeMap::new();
    for (at, held) in modules {
        let mut add = |target: Option<Module>, line: usize| {
            if let Some(t) = target
                && &t != at
            {
                let sites = out.entry(at.clone()).or_default().entry(t).or_default();
                sites.push(Site {
                    file: held.file.clone(),
                    line,
                });
            }
        };
        let s = &held.scope;
        for import in &s.imports {
            add(
                r.absolute(at, &import.path, 0).and_then(|p| r.definer(&p, 0)),
                import.line,
            );
        }
        for glob in &s.globs {
            let target = r.absolute(at, &glob.path, 0).filter(|p| modules.contains_key(p));
            add(target, glob.line);
        }
        for reference in &s.references {
            add(
                r.absolute(at, &reference.path, 0).and_then(|p| r.definer(&p, 0)),
                reference.line,
            );
        }
        out.entry(at.clone()).or_default();
    }
    for sites in out.values_mut().flat_map(BTreeMap::values_mut) {
        sites.sort();
        sites.dedup();
    }
    out
}

struct Resolver<'a> {
    modules: &'a BTreeMap<Module, Held>,
}

impl Resolver<'_> {
    fn scope(&self, m: &Module) -> Option<&Scope> {
        self.modules.get(m).map(|h| &h.scope)
    }

    fn import(&self, m: &Module, name: &str) -> Option<&Import> {
        self.scope(m)?.imports.iter().find(|i| i.name == name)
    }

    /// `path`, as written in module `at`, from the crate root; `None` when it leaves the crate
    /// (another crate, a type's associated item, a local name).
    fn absolute(&self, at: &Module, path: &[String], hops: usize) -> Option<Module> {
        if hops > MAX_FORWARDS {
            return None;
        }
        let (first, rest) = path.split_first()?;
        let mut base = match first.as_str() {
            "crate" => Module::new(),
            "self" => at.clone(),
            "super" => {
                let mut b = at.clone();
                b.pop()?;
                let mut rest = rest;
                while rest.first().is_some_and(|s| s == "super") {
                    b.pop()?;
                    rest = &rest[1..];
                }
                b.extend(rest.iter().cloned());
                return Some(b);
            }
            _ => {
                let mut child = at.clone();
                child.push(first.clone());
                if self.modules.contains_key(&child) {
                    child
                } else if let Some(import) = self.import(at, first) {
                    let mut p = self.absolute(at, &import.path, hops + 1)?;
                    p.extend(rest.iter().cloned());
                    return Some(p);
                } else {
                    // A module brought in by a glob (`use super::*;` then `sibling::f()`).
                    let scope = self.scope(at)?;
                    return scope.globs.iter().find_map(|g| {
                        let mut p = self.absolute(at, &g.path, hops + 1)?;
                        p.push(first.clone());
                        self.modules.contains_key(&p).then(|| {
                            p.extend(rest.iter().cloned());
                            p
                        })
                    });
                }
            }
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module defining the item `path` (from the crate root) names, following re-exports;
    /// `None` when a re-export leads out of the crate.
    fn definer(&self, path: &Module, hops: usize) -> Option<Module> {
        if hops > MAX_FORWARDS {
            return None;
        }
        let n = (0..=path.len())
            .rev()
            .find(|n| self.modules.contains_key(&path[..*n]))?;
        let (module, rest) = (path[..n].to_vec(), &path[n..]);
        let Some((item, below)) = rest.split_first() else {
            return Some(module);
        };
        let scope = self.scope(&module)?;
        if scope.defines.contains(item) {
            return Some(module);
        }
        if let Some(import) = self.import(&module, item) {
            let mut p = self.absolute(&module, &import.path, hops + 1)?;
            p.extend(below.iter().cloned());
            return self.definer(&p, hops + 1);
        }
        let mut leaves_crate = false;
        for glob in &scope.globs {
            let Some(g) = self.absolute(&module, &glob.path, hops + 1) else {
                leaves_crate = true;
                continue;
            };
            let Some(gs) = self.scope(&g) else { continue };
            let has = gs.defines.contains(item)
                || gs.imports.iter().any(|i| &i.name == item)
                || gs.inline_modules.contains(item)
                || gs.file_modules.iter().any(|m| &m.name == item);
            if has {
                let mut p = g;
                p.extend(rest.iter().cloned());
                return self.definer(&p, hops + 1);
            }
        }
        // Not found here: from another crate's glob if there is one, else made here by a macro.
        (!leaves_crate).then_some(module)
    }
}
