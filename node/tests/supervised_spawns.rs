//! Every long-lived task of the node daemon runs under `kube_ovn_support::Supervisor`, so one
//! that panics or returns fails `/livez` (the supervisor's own tests show that). A task spawned
//! any other way would die silently again: the daemon's sources (outside their unit tests) must
//! not spawn one.

use std::path::Path;

use kube_ovn_testkit::audit_spawns;

#[test]
fn every_spawn_of_the_daemon_goes_through_the_supervisor() {
    let audit = audit_spawns(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &["tasks.spawn(\""],
    );
    assert!(
        audit.unsupervised.is_empty(),
        "unsupervised spawns:\n{}",
        audit.unsupervised.join("\n")
    );
    // node, qos, gateway, ovn0-check, cni-server, metrics-server.
    assert!(
        audit.supervised >= 6,
        "only {} supervised spawns found",
        audit.supervised
    );
}
