//! A source audit for the daemons' background tasks: every long-lived task must run under
//! `kube_ovn_support::Supervisor`, so one that panics or returns fails `/livez`. A task spawned
//! any other way would die silently; this finds such spawns in a folder's production code.

use std::path::Path;

/// Spawning that bypasses the supervisor. `spawn_blocking` (a bounded piece of blocking work
/// that is awaited) is not a background task.
const UNSUPERVISED: [&str; 4] = ["tokio::spawn(", "task::spawn(", "JoinSet", "AbortOnDrop::spawn("];

/// What the audit of one folder found.
#[derive(Debug, Default)]
pub struct SpawnAudit {
    /// `file:line: code` of each spawn that bypasses the supervisor.
    pub unsupervised: Vec<String>,
    /// How many times the production code calls one of the supervised spawns asked about.
    pub supervised: usize,
}

/// Audits the `.rs` files directly in `dir`, each up to its first `#[cfg(test)]` (unit tests
/// may spawn as they like), counting the calls that start with one of `supervised_calls`.
pub fn audit_spawns(dir: &Path, supervised_calls: &[&str]) -> SpawnAudit {
    let mut audit = SpawnAudit::default();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let source =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let code = source.split("#[cfg(test)]").next().unwrap_or(&source);
        audit.supervised += supervised_calls
            .iter()
            .map(|c| code.matches(c).count())
            .sum::<usize>();
        for (n, line) in code.lines().enumerate() {
            if UNSUPERVISED.iter().any(|p| line.contains(p)) && !line.trim_start().starts_with("//") {
                audit
                    .unsupervised
                    .push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    audit
}
