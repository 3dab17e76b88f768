//! The controller's modules form no cycle: every `crate::` and `super::` path in `src/` (outside
//! comments, string literals and `#[cfg(test)]` modules) is an edge from the module whose file
//! holds it to the module it names, and the graph is checked to be acyclic.
//!
//! A cycle makes modules that cannot be read, tested or moved alone (the issue's item 11 untangled
//! one among the context and six reconcilers); this keeps a new one from growing back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; `src/lib.rs` is the crate root (empty path).
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // Binaries are crates of their own.
            if path.file_name().is_some_and(|n| n != "bin") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source with comments and the contents of string and char literals replaced by spaces, so
/// that paths and braces found afterwards are code.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    out.push(b' ');
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        out.extend(b"  ");
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        out.extend(b"  ");
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        blank(&mut out, b[i]);
                        i += 1;
                    }
                }
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                // Raw string r#"…"#: ends at a quote followed by as many hashes.
                let mut j = i + 1;
                while b.get(j) == Some(&b'#') {
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    out.push(b[i]);
                    i += 1;
                    continue;
                }
                let hashes = j - i - 1;
                out.resize(out.len() + (j + 1 - i), b' ');
                i = j + 1;
                while i < b.len() {
                    if b[i] == b'"'
                        && b[i + 1..].iter().take(hashes).filter(|c| **c == b'#').count() == hashes
                    {
                        out.resize(out.len() + 1 + hashes, b' ');
                        i += 1 + hashes;
                        break;
                    }
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            b'"' => {
                out.push(b' ');
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        out.push(b' ');
                        i += 1;
                    }
                    if i < b.len() {
                        blank(&mut out, b[i]);
                        i += 1;
                    }
                }
                out.push(b' ');
                i += 1;
            }
            // A char literal ('x', '\n', '\''); a lifetime ('a) has no closing quote after one char.
            b'\'' if b.get(i + 1) == Some(&b'\\') => {
                let end = b[i + 2..]
                    .iter()
                    .position(|c| *c == b'\'')
                    .map_or(b.len(), |p| i + 3 + p);
                out.resize(out.len() + (end - i), b' ');
                i = end;
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') => {
                out.extend(b"   ");
                i += 3;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// Removes `#[cfg(test)] mod … { … }` blocks (test-only imports are not the module's structure).
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_owned();
    while let Some(at) = out.find("#[cfg(test)]") {
        let rest = &out[at..];
        let Some(open) = rest.find('{') else { break };
        let head = &rest[..open];
        if !head.contains("mod ") {
            // `#[cfg(test)]` on something else: blank the attribute only.
            out.replace_range(at..at + "#[cfg(test)]".len(), &" ".repeat("#[cfg(test)]".len()));
            continue;
        }
        let mut depth = 0;
        let mut end = out.len();
        for (k, c) in rest.char_indices().skip(open) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = at + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.replace_range(at..end, "");
    }
    out
}

/// Parses a use-tree or path at `s` (just after `crate::` or `super::`), appending every full path
/// it names (relative to that start) to `out`.
fn paths(s: &[u8], prefix: &Module, out: &mut Vec<Module>) -> usize {
    let mut i = 0;
    let mut path = prefix.clone();
    loop {
        while s.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        match s.get(i) {
            Some(b'{') => {
                i += 1;
                loop {
                    while s.get(i).is_some_and(|c| c.is_ascii_whitespace() || *c == b',') {
                        i += 1;
                    }
                    match s.get(i) {
                        Some(b'}') | None => return i + 1,
                        _ => i += paths(&s[i..], &path, out),
                    }
                }
            }
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {
                let start = i;
                while s.get(i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
                    i += 1;
                }
                let ident = std::str::from_utf8(&s[start..i]).unwrap();
                if ident == "self" {
                    out.push(path.clone());
                } else {
                    path.push(ident.to_owned());
                }
                if s[i..].starts_with(b"::") {
                    i += 2;
                    continue;
                }
                out.push(path);
                return i;
            }
            _ => {
                out.push(path);
                return i;
            }
        }
    }
}

/// The paths `code` (of module `at`) names through `crate::` and `super::`.
fn references(code: &str, at: &Module) -> Vec<Module> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (start, keyword) in ["crate::", "super::"]
        .iter()
        .flat_map(|k| code.match_indices(k).map(move |(i, _)| (i, *k)))
    {
        if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_') {
            continue;
        }
        let base: Module = if keyword == "crate::" {
            Vec::new()
        } else {
            // `super` of `a::b` (file a/b.rs or a/b/mod.rs) is `a`.
            at[..at.len().saturating_sub(1)].to_vec()
        };
        paths(&b[start + keyword.len()..], &base, &mut out);
    }
    out
}

/// The longest prefix of `path` that is a module of the crate.
fn module_named(path: &Module, modules: &BTreeSet<Module>) -> Option<Module> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| modules.contains(m))
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".to_owned()
    } else {
        m.join("::")
    }
}

fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for file in &files {
        let at = module_of(&src, file);
        let code = without_test_modules(&code_only(&std::fs::read_to_string(file).unwrap()));
        let targets = edges.entry(at.clone()).or_default();
        for path in references(&code, &at) {
            if let Some(m) = module_named(&path, &modules)
                && m != at
            {
                targets.insert(m);
            }
        }
    }
    edges
}

/// Every module reachable from `from` by one or more edges.
fn reachable(from: &Module, edges: &BTreeMap<Module, BTreeSet<Module>>) -> BTreeSet<Module> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&Module> = edges.get(from).into_iter().flatten().collect();
    while let Some(m) = todo.pop() {
        if seen.insert(m.clone()) {
            todo.extend(edges.get(m).into_iter().flatten());
        }
    }
    seen
}

/// The groups of modules that reach each other (the strongly connected components with a cycle).
fn tangles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    let reach: BTreeMap<&Module, BTreeSet<Module>> = edges.keys().map(|m| (m, reachable(m, edges))).collect();
    let mut out: Vec<BTreeSet<Module>> = Vec::new();
    for (m, r) in &reach {
        if !r.contains(*m) || out.iter().any(|t| t.contains(*m)) {
            continue;
        }
        out.push(
            r.iter()
                .filter(|o| reach.get(o).is_some_and(|back| back.contains(*m)))
                .cloned()
                .collect(),
        );
    }
    out
}

#[test]
fn the_reader_sees_paths_in_code_only() {
    let code = without_test_modules(&code_only(
        "use crate::a::{b::C, d};\n// crate::e\nlet s = \"super::f\";\nfn g() { super::h::i(); }\n\
         #[cfg(test)]\nmod tests { use crate::j; }\nlet c = '{'; use crate::k;",
    ));
    let found: Vec<String> = references(&code, &vec!["x".into(), "y".into()])
        .iter()
        .map(name)
        .collect();
    assert_eq!(found, ["a::b::C", "a::d", "k", "x::h::i"]);
}

#[test]
fn the_graph_holds_the_known_edges() {
    let edges = graph();
    let has = |from: &str, to: &str| {
        let split = |s: &str| s.split("::").map(str::to_owned).collect::<Module>();
        edges.get(&split(from)).is_some_and(|t| t.contains(&split(to)))
    };
    // If the reader broke, the acyclicity check below would pass on an empty graph.
    for (from, to) in [
        ("reconcile::pod", "context"),
        ("reconcile::subnet", "ovn::plan"),
        ("ovn::owned", "ovn::plan"),
        ("context", "ipam"),
    ] {
        assert!(has(from, to), "no edge {from} -> {to} found");
    }
    assert!(
        edges.values().map(BTreeSet::len).sum::<usize>() > 60,
        "too few edges: {edges:?}"
    );
}

#[test]
fn the_modules_form_no_cycle() {
    let edges = graph();
    let tangles: Vec<String> = tangles(&edges)
        .iter()
        .map(|t| {
            let members: Vec<String> = t.iter().map(name).collect();
            let uses: Vec<String> = t
                .iter()
                .flat_map(|m| {
                    edges[m]
                        .iter()
                        .filter(|o| t.contains(*o))
                        .map(move |o| format!("{} -> {}", name(m), name(o)))
                })
                .collect();
            format!("{{{}}} through {}", members.join(", "), uses.join(", "))
        })
        .collect();
    assert!(
        tangles.is_empty(),
        "the controller's modules form cycles:\n{}",
        tangles.join("\n")
    );
}
