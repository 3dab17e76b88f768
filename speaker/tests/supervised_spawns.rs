//! Every long-lived task the speaker's run loop starts runs under `kube_ovn_support::Supervisor`
//! (owned per-peer helpers through `spawn_owned`), so one that panics (or, for the process-wide
//! ones, returns) fails `/livez`; the supervisor's own tests show that. A task spawned any
//! other way would die silently again: the run loop's sources (outside their unit tests) must
//! not spawn one. The BGP driver's per-connection tasks are not background tasks of the
//! process: their end is a session's end, which the driver reports.

use std::path::Path;

use kube_ovn_testkit::audit_spawns;

#[test]
fn every_spawn_of_the_run_loop_goes_through_the_supervisor() {
    let audit = audit_spawns(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/run"),
        &["tasks.spawn(", "supervisor.spawn_owned("],
    );
    assert!(
        audit.unsupervised.is_empty(),
        "unsupervised spawns:\n{}",
        audit.unsupervised.join("\n")
    );
    // routes, nexthop, bgppeers, heartbeat, metrics-server, and the two per-peer helpers.
    assert!(
        audit.supervised >= 7,
        "only {} supervised spawns found",
        audit.supervised
    );
}
