//! Every long-lived task of the node daemon runs under `kube_ovn_support::Supervisor`, so one
//! that panics or returns fails `/livez` (the supervisor's own tests show that). A task spawned
//! any other way would die silently again: the daemon's sources (outside their unit tests) must
//! not spawn one.

use std::path::Path;

/// Spawning that bypasses the supervisor. `spawn_blocking` (a bounded piece of blocking work
/// that is awaited) is not a background task.
const UNSUPERVISED: [&str; 4] = ["tokio::spawn(", "task::spawn(", "JoinSet", "AbortOnDrop::spawn("];

fn production_code(source: &str) -> &str {
    source.split("#[cfg(test)]").next().unwrap_or(source)
}

#[test]
fn every_spawn_of_the_daemon_goes_through_the_supervisor() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/daemon");
    let mut offenders = Vec::new();
    let mut supervised = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        let code = production_code(&source);
        supervised += code.matches("tasks.spawn(\"").count();
        for (n, line) in code.lines().enumerate() {
            if UNSUPERVISED.iter().any(|p| line.contains(p)) && !line.trim_start().starts_with("//") {
                offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "unsupervised spawns:\n{}",
        offenders.join("\n")
    );
    // node, qos, gateway, ovn0-check, cni-server, metrics-server.
    assert!(supervised >= 6, "only {supervised} supervised spawns found");
}
