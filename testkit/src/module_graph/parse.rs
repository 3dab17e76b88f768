//! One file's tokens as the modules it holds (the file's own and each inline `mod x { … }`): what
//! each declares, imports, defines and names by path. Items under `#[cfg(test)]` are left out:
//! test code may reach anywhere, it is not the crate's structure.

use super::lex::{Tok, Token};
use std::collections::BTreeSet;

/// A `use` leaf: `use a::b::C as D;` is `name` D, `path` [a, b, C].
#[derive(Debug, Clone)]
pub(crate) struct Import {
    pub(crate) name: String,
    pub(crate) path: Vec<String>,
    pub(crate) line: usize,
}

/// A path naming something through `::` outside `use` (`crate::a::f()`, `super::X`, `b::g`).
#[derive(Debug, Clone)]
pub(crate) struct Reference {
    pub(crate) path: Vec<String>,
    pub(crate) line: usize,
}

/// A `mod x;` whose body is in another file.
#[derive(Debug, Clone)]
pub(crate) struct FileModule {
    pub(crate) name: String,
    /// `#[path = "…"]`, relative to the declaring file's directory.
    pub(crate) path: Option<String>,
    pub(crate) line: usize,
}

/// What one module holds within one file.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    /// Inline modules' names below the file's module (empty for the file's own).
    pub(crate) inline: Vec<String>,
    pub(crate) imports: Vec<Import>,
    /// `use a::*;` (the name is `*`).
    pub(crate) globs: Vec<Import>,
    pub(crate) references: Vec<Reference>,
    pub(crate) file_modules: Vec<FileModule>,
    /// Child modules declared inline.
    pub(crate) inline_modules: BTreeSet<String>,
    /// Names of items defined here (fn, struct, enum, trait, type, const, static, union, macro).
    pub(crate) defines: BTreeSet<String>,
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t.map(|t| &t.tok) {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

fn punct(t: Option<&Token>, c: u8) -> bool {
    t.is_some_and(|t| t.tok == Tok::Punct(c))
}

/// The scopes of a file, its own first.
pub(crate) fn scopes(toks: &[Token]) -> Vec<Scope> {
    let mut out = vec![Scope::default()];
    // (scope index, brace depth its body opened at)
    let mut stack: Vec<(usize, usize)> = vec![(0, 0)];
    let mut depth = 0usize;
    let mut test_only = false;
    let mut path_attr: Option<String> = None;
    let mut i = 0;
    while i < toks.len() {
        let cur = stack.last().unwrap().0;
        let t = &toks[i];
        if t.tok == Tok::Punct(b'#') {
            let open = if punct(toks.get(i + 1), b'!') {
                i + 2
            } else {
                i + 1
            };
            if punct(toks.get(open), b'[') {
                let end = matching(toks, open);
                let attr = &toks[open + 1..end.min(toks.len())];
                if is_cfg_test(attr) {
                    test_only = true;
                }
                if let [a, b, c] = attr
                    && a.tok == Tok::Ident("path".into())
                    && b.tok == Tok::Punct(b'=')
                    && let Tok::Str(p) = &c.tok
                {
                    path_attr = Some(p.clone());
                }
                i = end + 1;
                continue;
            }
        }
        if test_only {
            test_only = false;
            path_attr = None;
            i = item_end(toks, i);
            continue;
        }
        match &t.tok {
            Tok::Punct(b'{') => depth += 1,
            Tok::Punct(b'}') => {
                if stack.len() > 1 && stack.last().unwrap().1 == depth {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let Some(name) = ident(toks.get(i + 1)) {
                    let name = name.to_owned();
                    if punct(toks.get(i + 2), b';') {
                        out[cur].file_modules.push(FileModule {
                            name,
                            path: path_attr.take(),
                            line: t.line,
                        });
                        i += 3;
                        continue;
                    }
                    if punct(toks.get(i + 2), b'{') {
                        let mut inline = out[cur].inline.clone();
                        inline.push(name.clone());
                        out[cur].inline_modules.insert(name);
                        out.push(Scope {
                            inline,
                            ..Scope::default()
                        });
                        depth += 1;
                        stack.push((out.len() - 1, depth));
                        path_attr = None;
                        i += 3;
                        continue;
                    }
                }
            }
            Tok::Ident(kw) if kw == "use" => {
                let mut j = i + 1;
                let mut leaves = Vec::new();
                use_tree(toks, &mut j, &[], &mut leaves);
                for (name, path, line) in leaves {
                    let import = Import { name, path, line };
                    if import.name == "*" {
                        out[cur].globs.push(import);
                    } else {
                        out[cur].imports.push(import);
                    }
                }
                // To the `;`.
                while j < toks.len() && !punct(toks.get(j), b';') {
                    j += 1;
                }
                i = j + 1;
                continue;
            }
            Tok::Ident(kw)
                if matches!(
                    kw.as_str(),
                    "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "union"
                ) =>
            {
                if let Some(name) = ident(toks.get(i + 1)) {
                    out[cur].defines.insert(name.to_owned());
                }
            }
            Tok::Ident(kw) if kw == "macro_rules" && punct(toks.get(i + 1), b'!') => {
                if let Some(name) = ident(toks.get(i + 2)) {
                    out[cur].defines.insert(name.to_owned());
                }
            }
            Tok::Ident(first) if toks.get(i + 1).is_some_and(|n| n.tok == Tok::PathSep) => {
                // The start of a path (not a later segment, not `::std`): `$crate` counts as `crate`.
                let after_sep = i > 0 && toks[i - 1].tok == Tok::PathSep;
                if !after_sep {
                    let mut path = vec![first.clone()];
                    let mut j = i + 2;
                    while let Some(seg) = ident(toks.get(j)) {
                        path.push(seg.to_owned());
                        if toks.get(j + 1).is_some_and(|n| n.tok == Tok::PathSep) {
                            j += 2;
                        } else {
                            j += 1;
                            break;
                        }
                    }
                    out[cur].references.push(Reference { path, line: t.line });
                    i = j;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// `#[cfg(test)]`'s tokens between the brackets.
fn is_cfg_test(attr: &[Token]) -> bool {
    let words: Vec<&Tok> = attr.iter().map(|t| &t.tok).collect();
    matches!(
        words.as_slice(),
        [Tok::Ident(cfg), Tok::Punct(b'('), Tok::Ident(test), Tok::Punct(b')')] if cfg == "cfg" && test == "test"
    )
}

/// The index of the bracket closing the one at `open` (`[`, `(` or `{`), or the end.
fn matching(toks: &[Token], open: usize) -> usize {
    let mut depth = 0i32;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct(b'[' | b'(' | b'{') => depth += 1,
            Tok::Punct(b']' | b')' | b'}') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// The index just after the item starting at `start`: its `;`, or the `}` closing its body
/// (`use`, `const`, `static`, `type` and `let` end at `;` even after braces). A closer that
/// ends the enclosing body (an item that was a field or the last statement) stays unread.
fn item_end(toks: &[Token], start: usize) -> usize {
    let kind = toks[start..]
        .iter()
        .find_map(|t| match &t.tok {
            Tok::Ident(s) if s != "pub" && s != "crate" && s != "async" && s != "unsafe" && s != "extern" => {
                Some(s.as_str())
            }
            _ => None,
        })
        .unwrap_or("");
    let ends_at_semicolon = matches!(kind, "use" | "const" | "static" | "type" | "let");
    let mut depth = 0i32;
    for (k, t) in toks.iter().enumerate().skip(start) {
        match t.tok {
            Tok::Punct(b'[' | b'(' | b'{') => depth += 1,
            Tok::Punct(b']' | b')' | b'}') => {
                depth -= 1;
                if depth < 0 {
                    return k;
                }
                if depth == 0 && t.tok == Tok::Punct(b'}') && !ends_at_semicolon {
                    return k + 1;
                }
            }
            Tok::Punct(b';') if depth == 0 => return k + 1,
            _ => {}
        }
    }
    toks.len()
}

/// Reads a use tree at `*j` below `prefix`, appending (local name, full path, line) per leaf.
fn use_tree(toks: &[Token], j: &mut usize, prefix: &[String], out: &mut Vec<(String, Vec<String>, usize)>) {
    let mut path = prefix.to_vec();
    if toks.get(*j).is_some_and(|t| t.tok == Tok::PathSep) {
        // `use ::ext::…`: another crate.
        path.push("::".into());
        *j += 1;
    }
    loop {
        let Some(t) = toks.get(*j) else { return };
        let line = t.line;
        match &t.tok {
            Tok::Punct(b'{') => {
                *j += 1;
                loop {
                    match toks.get(*j).map(|t| &t.tok) {
                        None => return,
                        Some(Tok::Punct(b'}')) => {
                            *j += 1;
                            return;
                        }
                        Some(Tok::Punct(b',')) => *j += 1,
                        Some(_) => {
                            let before = *j;
                            use_tree(toks, j, &path, out);
                            if *j == before {
                                *j += 1;
                            }
                        }
                    }
                }
            }
            Tok::Punct(b'*') => {
                *j += 1;
                out.push(("*".into(), path, line));
                return;
            }
            Tok::Ident(seg) => {
                let seg = seg.clone();
                *j += 1;
                if toks.get(*j).is_some_and(|t| t.tok == Tok::PathSep) {
                    path.push(seg);
                    *j += 1;
                    continue;
                }
                let name = if seg == "self" {
                    path.last().cloned().unwrap_or_default()
                } else {
                    path.push(seg.clone());
                    seg
                };
                let name = if ident(toks.get(*j)) == Some("as") {
                    *j += 2;
                    ident(toks.get(*j - 1)).unwrap_or("_").to_owned()
                } else {
                    name
                };
                out.push((name, path, line));
                return;
            }
            _ => return,
        }
    }
}
