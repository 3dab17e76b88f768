//! The crates of a workspace from its manifests: each member's library and each binary is a crate
//! of its own (Cargo's rules: `[lib] path` or `src/lib.rs`; `[[bin]] path`, `src/main.rs`,
//! `src/bin/*.rs`, `src/bin/*/main.rs`). Only what these manifests use of TOML is read: tables,
//! `key = "string"` and arrays of strings, possibly over several lines.

use anyhow::Context as _;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A crate to check: `kube-ovn-ovsdb`, or `kube-ovn-lab (bin kube-ovn-lab)` for a binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrateRoot {
    pub name: String,
    pub root: PathBuf,
}

/// Each `[table]` / `[[table]]` of a manifest in order, with its `key = value` pairs (a string
/// value as its text, an array as its strings).
pub(crate) fn tables(manifest: &str) -> Vec<(String, BTreeMap<String, Vec<String>>)> {
    let mut out: Vec<(String, BTreeMap<String, Vec<String>>)> = vec![(String::new(), BTreeMap::new())];
    let mut lines = manifest.lines();
    while let Some(line) = lines.next() {
        let line = without_comment(line);
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            out.push((
                trimmed.trim_matches(['[', ']']).trim().to_owned(),
                BTreeMap::new(),
            ));
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            continue;
        };
        let mut value = value.trim().to_owned();
        if value.starts_with('[') {
            while value.matches('[').count() > value.matches(']').count() {
                let Some(more) = lines.next() else { break };
                value.push(' ');
                value.push_str(&without_comment(more));
            }
        }
        out.last_mut()
            .unwrap()
            .1
            .insert(key.trim().to_owned(), strings(&value));
    }
    out
}

/// The line without a `#` comment (a `#` inside a string stays).
fn without_comment(line: &str) -> String {
    let mut quoted = false;
    for (k, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return line[..k].to_owned(),
            _ => {}
        }
    }
    line.to_owned()
}

/// The double-quoted strings in `value`.
fn strings(value: &str) -> Vec<String> {
    value.split('"').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The `[workspace] members` of a root manifest.
pub(crate) fn members(manifest: &str) -> Vec<String> {
    tables(manifest)
        .into_iter()
        .find(|(t, _)| t == "workspace")
        .and_then(|(_, kv)| kv.get("members").cloned())
        .unwrap_or_default()
}

/// Every crate of the workspace whose root manifest is `workspace/Cargo.toml`.
pub fn workspace_crates(workspace: &Path) -> anyhow::Result<Vec<CrateRoot>> {
    let manifest = workspace.join("Cargo.toml");
    let text =
        std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let mut out = Vec::new();
    for member in members(&text) {
        let dirs = if let Some(parent) = member.strip_suffix("/*") {
            let mut dirs: Vec<PathBuf> = std::fs::read_dir(workspace.join(parent))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.join("Cargo.toml").is_file())
                .collect();
            dirs.sort();
            dirs
        } else {
            vec![workspace.join(&member)]
        };
        for dir in dirs {
            out.extend(package_crates(&dir)?);
        }
    }
    Ok(out)
}

/// The library and binaries of the package in `dir`.
pub fn package_crates(dir: &Path) -> anyhow::Result<Vec<CrateRoot>> {
    let manifest = dir.join("Cargo.toml");
    let text =
        std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let tables = tables(&text);
    let first = |table: &str, key: &str| {
        tables
            .iter()
            .find(|(t, _)| t == table)
            .and_then(|(_, kv)| kv.get(key)?.first().cloned())
    };
    let package =
        first("package", "name").with_context(|| format!("{}: no [package] name", manifest.display()))?;
    let mut out = Vec::new();
    let lib = first("lib", "path").map_or_else(|| dir.join("src/lib.rs"), |p| dir.join(p));
    if lib.is_file() {
        out.push(CrateRoot {
            name: package.clone(),
            root: lib,
        });
    }
    let mut bins: Vec<(String, PathBuf)> = Vec::new();
    for (_, kv) in tables.iter().filter(|(t, _)| t == "bin") {
        let Some(name) = kv.get("name").and_then(|v| v.first()) else {
            continue;
        };
        let path = kv.get("path").and_then(|v| v.first()).map(|p| dir.join(p));
        let path = path.unwrap_or_else(|| {
            let flat = dir.join("src/bin").join(format!("{name}.rs"));
            if flat.is_file() {
                flat
            } else {
                dir.join("src/bin").join(name).join("main.rs")
            }
        });
        bins.push((name.clone(), path));
    }
    if first("package", "autobins").as_deref() != Some("false") {
        if dir.join("src/main.rs").is_file() {
            bins.push((package.clone(), dir.join("src/main.rs")));
        }
        if let Ok(entries) = std::fs::read_dir(dir.join("src/bin")) {
            let mut found: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            found.sort();
            for p in found {
                let stem = p
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if p.extension().is_some_and(|e| e == "rs") {
                    bins.push((stem, p));
                } else if p.join("main.rs").is_file() {
                    bins.push((stem, p.join("main.rs")));
                }
            }
        }
    }
    let mut seen = Vec::new();
    for (name, root) in bins {
        if root.is_file() && !seen.contains(&root) {
            seen.push(root.clone());
            out.push(CrateRoot {
                name: format!("{package} (bin {name})"),
                root,
            });
        }
    }
    Ok(out)
}
