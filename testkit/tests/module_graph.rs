//! No crate of the workspace has a module cycle (`testkit::module_graph` says what counts: a
//! module with everything below it is one unit, and sibling units must not depend on each other
//! in a cycle). The crates are read from the workspace's `Cargo.toml` `members`, so a crate added
//! later is checked without editing this test; each binary is a crate of its own. A failure names
//! each cycle as `crate: a -> b -> a` with the file and line of every edge.
//!
//! A cycle makes modules that cannot be read, tested or moved alone; this keeps one from growing
//! back after issue 24 broke them.

use kube_ovn_testkit::module_graph::{Graph, crate_graph, workspace_crates};
use std::collections::BTreeMap;
use std::path::Path;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn graphs() -> BTreeMap<String, Graph> {
    let crates = workspace_crates(workspace()).unwrap();
    crates
        .into_iter()
        .map(|c| {
            let graph = crate_graph(&c.root).unwrap_or_else(|e| panic!("{}: {e:#}", c.name));
            (c.name, graph)
        })
        .collect()
}

#[test]
fn no_crate_has_a_module_cycle() {
    let mut failures = Vec::new();
    for (name, graph) in graphs() {
        failures.extend(graph.cycles().iter().map(|c| c.describe(&name, workspace())));
    }
    assert!(failures.is_empty(), "module cycles:\n{}", failures.join("\n"));
}

#[test]
fn every_member_is_read_with_its_edges() {
    let graphs = graphs();
    // If the reader broke, the check above would pass on empty graphs.
    for (krate, from, to) in [
        ("kube-ovn-controller", "context", "ipam"),
        ("kube-ovn-controller", "ovn::owned", "ovn::plan"),
        ("kube-ovn-dataplane", "route", "link"),
        ("kube-ovn-gateway", "plan", "routing"),
        ("kube-ovn-speaker", "bgp::fsm", "bgp::wire::notification::fsm"),
    ] {
        let graph = graphs
            .get(krate)
            .unwrap_or_else(|| panic!("no crate {krate} in {:?}", graphs.keys()));
        assert!(graph.has_edge(from, to), "{krate}: no edge {from} -> {to} found");
    }
    for (name, graph) in &graphs {
        assert!(graph.module_count() > 0, "{name}: no module read");
    }
    let controller = &graphs["kube-ovn-controller"];
    assert!(
        controller.edge_count() > 60,
        "too few edges in the controller: {}",
        controller.edge_count()
    );
    for member in [
        "kube-ovn-api",
        "kube-ovn-ovsdb",
        "kube-ovn-lab",
        "kube-ovn-lab (bin kube-ovn-lab)",
        "kube-ovn-testkit",
    ] {
        assert!(
            graphs.contains_key(member),
            "{member} is not read: {:?}",
            graphs.keys()
        );
    }
}
