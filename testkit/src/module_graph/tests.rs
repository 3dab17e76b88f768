//! The reader and the cycle finder on tiny crates written to a temporary directory.

use super::cargo::{members, tables};
use super::{crate_graph, package_crates, workspace_crates};
use std::path::Path;

/// Writes `files` (path, text) below a new temporary directory.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn cycles_of(dir: &Path) -> Vec<String> {
    crate_graph(&dir.join("src/lib.rs"))
        .unwrap()
        .cycles()
        .iter()
        .map(super::Cycle::path)
        .collect()
}

#[test]
fn an_acyclic_crate_has_no_cycle_and_its_edges() {
    let dir = tree(&[
        (
            "src/lib.rs",
            "pub mod a;\npub mod b;\nmod c;\npub use b::Thing;\n",
        ),
        (
            "src/a.rs",
            "use crate::b::{self, Thing};\npub fn f() -> Thing { b::make() }\n",
        ),
        (
            "src/b.rs",
            "pub struct Thing;\npub fn make() -> Thing { super::c::helper(); Thing }\n",
        ),
        ("src/c.rs", "pub fn helper() {}\n"),
    ]);
    let g = crate_graph(&dir.path().join("src/lib.rs")).unwrap();
    assert!(g.has_edge("a", "b"));
    assert!(g.has_edge("b", "c"));
    assert!(!g.has_edge("c", "b"));
    // The root's `pub use b::Thing` is an edge of the root (a parent may use its children).
    assert!(g.has_edge("crate", "b"));
    assert_eq!(g.module_count(), 4);
    assert!(g.cycles().is_empty(), "{:?}", g.cycles());
}

#[test]
fn a_cycle_is_named_with_the_file_and_line_of_each_edge() {
    let dir = tree(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
        ("src/b.rs", "pub struct B;\n\nfn f() { let _ = super::a::A; }\n"),
    ]);
    let g = crate_graph(&dir.path().join("src/lib.rs")).unwrap();
    let cycles = g.cycles();
    assert_eq!(cycles.len(), 1);
    assert_eq!(
        cycles[0].describe("demo", dir.path()),
        "demo: a -> b -> a\n    a -> b at src/a.rs:1\n    b -> a at src/b.rs:3"
    );
}

#[test]
fn self_super_crate_and_nested_use_trees_are_edges() {
    let dir = tree(&[
        ("src/lib.rs", "mod x;\nmod y;\nmod z;\nmod w;\n"),
        ("src/x/mod.rs", "mod inner;\npub use self::inner::I;\n"),
        ("src/x/inner.rs", "use super::super::w::W;\npub struct I;\n"),
        ("src/y.rs", "use crate::{x::{self, I}, z::{Z as Zed}};\n"),
        ("src/z.rs", "pub struct Z;\n"),
        ("src/w.rs", "pub struct W;\n"),
    ]);
    let g = crate_graph(&dir.path().join("src/lib.rs")).unwrap();
    assert!(g.has_edge("x", "x::inner"));
    assert!(g.has_edge("x::inner", "w"));
    // `x::I` is a re-export: the edge goes to where `I` is defined.
    assert!(g.has_edge("y", "x::inner"));
    assert!(g.has_edge("y", "x"));
    assert!(g.has_edge("y", "z"));
    assert!(cycles_of(dir.path()).is_empty());
}

#[test]
fn a_cycle_through_a_re_export_and_submodules_is_between_the_siblings() {
    // p::q uses r; r uses a name the root re-exports from p::s: the siblings p and r tangle.
    let dir = tree(&[
        ("src/lib.rs", "mod p;\nmod r;\npub use p::s::S;\n"),
        ("src/p/mod.rs", "pub mod q;\npub mod s;\n"),
        ("src/p/q.rs", "fn f() { crate::r::g(); }\n"),
        ("src/p/s.rs", "pub struct S;\n"),
        ("src/r.rs", "pub fn g() -> crate::S { crate::S }\n"),
    ]);
    assert_eq!(cycles_of(dir.path()), ["p -> r -> p"]);
    let g = crate_graph(&dir.path().join("src/lib.rs")).unwrap();
    let text = g.cycles()[0].describe("demo", dir.path());
    assert!(text.contains("src/p/q.rs:1 (p::q -> r)"), "{text}");
    assert!(text.contains("src/r.rs:1 (r -> p::s)"), "{text}");
}

#[test]
fn a_parent_and_its_children_are_not_a_cycle() {
    let dir = tree(&[
        ("src/lib.rs", "mod m;\n"),
        (
            "src/m/mod.rs",
            "mod child;\npub struct Shared;\npub fn run() { child::go(); }\n",
        ),
        (
            "src/m/child.rs",
            "use super::Shared;\npub fn go() { let _ = Shared; }\n",
        ),
    ]);
    let g = crate_graph(&dir.path().join("src/lib.rs")).unwrap();
    assert!(g.has_edge("m", "m::child") && g.has_edge("m::child", "m"));
    assert!(g.cycles().is_empty());
}

#[test]
fn test_modules_comments_and_strings_are_not_edges() {
    let dir = tree(&[
        ("src/lib.rs", "mod a;\nmod b;\n#[cfg(test)]\nmod tests;\n"),
        (
            "src/a.rs",
            "// crate::b::x\n/* use crate::b; */\nconst S: &str = \"crate::b::B\";\nconst R: &str = r#\"super::b\"#;\n\
             const C: char = '{';\npub struct A<'a>(&'a str);\n\
             #[cfg(test)]\nmod tests { use crate::b::B; }\n#[cfg(test)]\nuse crate::b::B;\n",
        ),
        ("src/b.rs", "use crate::a::A;\npub struct B;\n"),
        // Not read: declared under #[cfg(test)].
        ("src/tests.rs", "use crate::a; use crate::b;\n"),
    ]);
    let g = crate_graph(&dir.path().join("src/lib.rs")).unwrap();
    assert!(g.has_edge("b", "a"));
    assert!(!g.has_edge("a", "b"), "{:?}", g.edges);
    assert_eq!(g.module_count(), 3);
    assert!(g.cycles().is_empty());
}

#[test]
fn modules_inside_files_and_path_attributes_are_modules() {
    let dir = tree(&[
        (
            "src/lib.rs",
            "mod outer {\n    pub mod inner {\n        pub fn f() { super::super::other::g(); }\n    }\n}\n#[path = \"elsewhere/o.rs\"]\nmod other;\n",
        ),
        ("src/elsewhere/o.rs", "pub fn g() { crate::outer::inner::f(); }\n"),
    ]);
    let g = crate_graph(&dir.path().join("src/lib.rs")).unwrap();
    assert!(g.has_edge("outer::inner", "other"));
    assert!(g.has_edge("other", "outer::inner"));
    assert_eq!(cycles_of(dir.path()), ["other -> outer -> other"]);
}

#[test]
fn a_missing_module_file_is_an_error_naming_the_declaration() {
    let dir = tree(&[("src/lib.rs", "mod gone;\n")]);
    let err = crate_graph(&dir.path().join("src/lib.rs"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("lib.rs:1: module `gone`"), "{err}");
}

#[test]
fn the_workspace_manifest_names_every_crate_and_binary() {
    let root = "[workspace]\nresolver = \"3\"\nmembers = [\"one\", # the first\n  \"two\",\n]\nexclude = [\"fuzz\"]\n";
    assert_eq!(members(root), ["one", "two"]);
    let dir = tree(&[
        ("Cargo.toml", root),
        (
            "one/Cargo.toml",
            "[package]\nname = \"one-lib\"\n\n[[bin]]\nname = \"tool\"\npath = \"src/bin/tool.rs\"\n",
        ),
        ("one/src/lib.rs", ""),
        ("one/src/bin/tool.rs", "fn main() {}\n"),
        ("one/src/bin/big/main.rs", "fn main() {}\n"),
        (
            "two/Cargo.toml",
            "[package]\nname = \"two\" # named\n[lib]\npath = \"lib.rs\"\n",
        ),
        ("two/lib.rs", ""),
    ]);
    let names: Vec<String> = workspace_crates(dir.path())
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(
        names,
        ["one-lib", "one-lib (bin tool)", "one-lib (bin big)", "two"]
    );
    assert_eq!(
        package_crates(&dir.path().join("two")).unwrap()[0].root,
        dir.path().join("two/lib.rs")
    );
    assert_eq!(tables("[a]\nx = \"#\"\n")[1].1["x"], ["#"]);
}
