//! Module cycles, found from the source alone (no compiler, no new dependency): files → module
//! graph → cycles. A cycle makes modules that cannot be read, tested or moved alone; the
//! workspace test `testkit/tests/module_graph.rs` runs this over every crate of the workspace.
//!
//! - [`workspace_crates`] lists the crates of a workspace from its manifests (each binary is a
//!   crate of its own).
//! - [`crate_graph`] follows `mod` declarations from a crate's root file. Module `a` depends on
//!   module `b` when `a`'s code names an item of `b` through a path or a `use`; re-exports are
//!   followed to the defining module, and items under `#[cfg(test)]` (test modules above all)
//!   are left out.
//! - [`Graph::cycles`] names each cycle with the file and line of every edge.
//!
//! The reader is lexical: it understands comments, literals, use trees, inline modules,
//! `#[path]` and `#[cfg(test)]`, not macros' expansions nor names brought in by globs beyond one
//! level.

mod cargo;
mod cycles;
mod graph;
mod lex;
mod parse;

#[cfg(test)]
mod tests;

pub use cargo::{CrateRoot, package_crates, workspace_crates};
pub use cycles::{Cycle, Use};
pub use graph::{Graph, Module, Site, crate_graph, crate_graph_with, name};
