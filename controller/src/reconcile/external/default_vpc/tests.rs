use super::*;

fn node(name: &str, chassis: &str, labelled: bool) -> GatewayNode {
    GatewayNode {
        node: name.into(),
        chassis: chassis.into(),
        labelled,
    }
}

fn cfg(nodes: &[&str], ty: GatewayType) -> ExternalGwConfig {
    ExternalGwConfig {
        enabled: true,
        gateway_type: ty,
        nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
        ..Default::default()
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn labelled_nodes_by_name_then_the_list_with_falling_priorities() {
    let nodes = [
        node("n3", "c3", false),
        node("n2", "c2", true),
        node("n1", "c1", false),
        node("n0", "c0", true),
    ];
    let g = gateways(
        &cfg(&["n3", "n1", "n2"], GatewayType::Centralized),
        &nodes,
        &[],
        |_| true,
    )
    .unwrap();
    assert_eq!(
        g.chassis,
        [
            ("c0".to_owned(), 100),
            ("c2".to_owned(), 99),
            ("c3".to_owned(), 98),
            ("c1".to_owned(), 97)
        ]
    );
    assert_eq!(g.label_true, ["n3", "n1"], "the listed nodes not yet labelled");
    assert!(g.label_false.is_empty());
    assert_eq!(g.applied, ["n3", "n1", "n2"]);
}

#[test]
fn a_node_dropped_from_the_list_is_unlabelled_and_no_gateway() {
    // n1 and n2 were listed (and labelled by us); now only n2 and n3.
    let nodes = [
        node("n1", "c1", true),
        node("n2", "c2", true),
        node("n3", "c3", false),
    ];
    let g = gateways(
        &cfg(&["n2", "n3"], GatewayType::Centralized),
        &nodes,
        &strings(&["n1", "n2"]),
        |_| true,
    )
    .unwrap();
    assert_eq!(g.label_false, ["n1"]);
    assert_eq!(g.label_true, ["n3"]);
    assert_eq!(g.chassis, [("c2".to_owned(), 100), ("c3".to_owned(), 99)]);
}

#[test]
fn distributed_reads_no_list_and_touches_no_label() {
    let nodes = [node("n1", "c1", true), node("n2", "c2", false)];
    let g = gateways(
        &cfg(&["n2", "gone"], GatewayType::Distributed),
        &nodes,
        &strings(&["n1"]),
        |_| true,
    )
    .unwrap();
    assert_eq!(g.chassis, [("c1".to_owned(), 100)]);
    assert!(g.label_true.is_empty() && g.label_false.is_empty());
    assert_eq!(
        g.applied,
        ["n1"],
        "the list applied before is kept for a later disable"
    );
}

#[test]
fn an_unknown_listed_node_is_bad_data_and_no_chassis_is_not_ready() {
    let nodes = [node("n1", "", false), node("n2", "c2", false)];
    assert_eq!(
        gateways(&cfg(&["n1", "nx"], GatewayType::Centralized), &nodes, &[], |_| {
            true
        }),
        Err(GatewayError::UnknownNode("nx".into()))
    );
    let err = gateways(&cfg(&["n1", "n2"], GatewayType::Centralized), &nodes, &[], |c| {
        c != "c2"
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("node n1 has no chassis annotation, kube-ovn-cni not ready")
            && err.contains("node n2's chassis c2 is not in the southbound database"),
        "{err}"
    );
    let err = gateways(&cfg(&[], GatewayType::Centralized), &nodes, &[], |_| true).unwrap_err();
    assert!(err.to_string().contains("external-gw-nodes lists none"), "{err}");
    // A node without a chassis is skipped while another can serve.
    let g = gateways(&cfg(&["n1", "n2"], GatewayType::Centralized), &nodes, &[], |_| {
        true
    })
    .unwrap();
    assert_eq!(g.chassis, [("c2".to_owned(), 100)]);
    assert_eq!(g.label_true, ["n1", "n2"]);
}
