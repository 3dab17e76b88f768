//! Every long-lived task the speaker's run loop starts runs under `kube_ovn_support::Supervisor`
//! (owned per-peer helpers through `spawn_owned`), so one that panics (or, for the process-wide
//! ones, returns) fails `/livez`; the supervisor's own tests show that. A task spawned any
//! other way would die silently again: the run loop's sources (outside their unit tests) must
//! not spawn one. The BGP driver's per-connection tasks are not background tasks of the
//! process: their end is a session's end, which the driver reports.

use std::path::Path;

const UNSUPERVISED: [&str; 4] = ["tokio::spawn(", "task::spawn(", "JoinSet", "AbortOnDrop::spawn("];

#[test]
fn every_spawn_of_the_run_loop_goes_through_the_supervisor() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/run");
    let mut offenders = Vec::new();
    let mut supervised = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        let code = source.split("#[cfg(test)]").next().unwrap_or(&source);
        supervised += code.matches("tasks.spawn(").count() + code.matches("supervisor.spawn_owned(").count();
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
    // routes, nexthop, bgppeers, heartbeat, metrics-server, and the two per-peer helpers.
    assert!(supervised >= 7, "only {supervised} supervised spawns found");
}
