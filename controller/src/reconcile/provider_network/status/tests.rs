use serde_json::json;

use super::*;

fn pn(v: serde_json::Value) -> ProviderNetwork {
    serde_json::from_value(v).unwrap()
}

fn at(secs: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap())
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn node_conditions(s: &ProviderNetworkStatus) -> Vec<(String, ConditionStatus, String, String)> {
    s.conditions
        .iter()
        .flatten()
        .map(|c| {
            (
                c.node.clone().unwrap_or_default(),
                c.condition.status,
                c.condition.reason.clone().unwrap_or_default(),
                c.condition.message.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn ready_label_and_cni_pod_message_make_the_status() {
    let net = pn(json!({"metadata": {"name": "pn1"},
        "spec": {"defaultInterface": "eth1", "excludeNodes": ["n4"]},
        "status": {"vlans": ["v1"]}}));
    let ready = labels(&[("pn1.provider-network.kubernetes.io/ready", "true")]);
    let none = labels(&[]);
    let nodes = [
        NodeView {
            name: "n2",
            labels: &none,
        },
        NodeView {
            name: "n1",
            labels: &ready,
        },
        NodeView {
            name: "n3",
            labels: &none,
        },
        NodeView {
            name: "n4",
            labels: &none,
        },
        NodeView {
            name: "n5",
            labels: &none,
        },
    ];
    let cni = BTreeMap::from([
        (
            "n2",
            CniPod::Found(Some("failed to add nic eth1 to OVS bridge br-pn1")),
        ),
        ("n3", CniPod::Found(None)),
    ]);
    let s = plan_status(&net, &nodes, &cni, &at(0)).expect("a first status");
    assert_eq!(s.ready_nodes, Some(vec!["n1".into()]));
    assert_eq!(
        s.not_ready_nodes,
        Some(vec!["n2".into(), "n3".into(), "n5".into()])
    );
    assert_eq!(s.ready, Some(false));
    assert_eq!(s.vlans, Some(vec!["v1".into()]), "vlans pass through");
    assert_eq!(
        node_conditions(&s),
        [
            (
                "n1".into(),
                ConditionStatus::True,
                "InitOVSBridgeSucceeded".into(),
                String::new()
            ),
            (
                "n2".into(),
                ConditionStatus::False,
                "InitOVSBridgeFailed".into(),
                "failed to add nic eth1 to OVS bridge br-pn1".into()
            ),
            (
                "n3".into(),
                ConditionStatus::False,
                "InitOVSBridgeFailed".into(),
                "unknown error".into()
            ),
            (
                "n5".into(),
                ConditionStatus::False,
                "InitOVSBridgeFailed".into(),
                "kube-ovn-cni pod on node n5 not found".into()
            ),
        ]
    );
    // Nothing changed: nothing to write, timestamps untouched.
    let mut done = net.clone();
    done.status = Some(s.clone());
    assert_eq!(plan_status(&done, &nodes, &cni, &at(10)), None);

    // n2 turns ready, n5 is excluded now: n2's transition moves, n5's condition goes.
    let mut later = done.clone();
    later.spec.exclude_nodes = Some(vec!["n4".into(), "n5".into()]);
    let nodes = [
        NodeView {
            name: "n1",
            labels: &ready,
        },
        NodeView {
            name: "n2",
            labels: &ready,
        },
        NodeView {
            name: "n3",
            labels: &none,
        },
        NodeView {
            name: "n5",
            labels: &none,
        },
    ];
    let s2 = plan_status(&later, &nodes, &cni, &at(20)).unwrap();
    assert_eq!(s2.ready_nodes, Some(vec!["n1".into(), "n2".into()]));
    assert_eq!(s2.not_ready_nodes, Some(vec!["n3".into()]));
    let n2 = s2
        .conditions
        .iter()
        .flatten()
        .find(|c| c.node.as_deref() == Some("n2"))
        .unwrap();
    assert_eq!(n2.condition.last_transition_time, Some(at(20)));
    let n1 = s2
        .conditions
        .iter()
        .flatten()
        .find(|c| c.node.as_deref() == Some("n1"))
        .unwrap();
    assert_eq!(
        n1.condition.last_update_time,
        Some(at(0)),
        "unchanged conditions keep their time"
    );
    assert!(
        s2.conditions
            .iter()
            .flatten()
            .all(|c| c.node.as_deref() != Some("n5"))
    );
}

#[test]
fn every_node_ready_is_ready_and_a_node_selector_decides_alone() {
    let net = pn(json!({"metadata": {"name": "pn1"},
        "spec": {"defaultInterface": "eth1", "excludeNodes": ["n1"],
                 "nodeSelector": {"matchLabels": {"rack": "a"}}}}));
    let a_ready = labels(&[
        ("rack", "a"),
        ("pn1.provider-network.kubernetes.io/ready", "true"),
    ]);
    let b = labels(&[("rack", "b")]);
    let nodes = [
        NodeView {
            name: "n1",
            labels: &a_ready,
        },
        NodeView {
            name: "n2",
            labels: &b,
        },
    ];
    let s = plan_status(&net, &nodes, &BTreeMap::new(), &at(0)).unwrap();
    assert_eq!(
        (s.ready, s.ready_nodes, s.not_ready_nodes),
        (Some(true), Some(vec!["n1".into()]), None)
    );
}

#[test]
fn an_unusable_spec_is_named_by_its_field() {
    for (spec, name, field) in [
        (json!({}), "pn1", "spec.defaultInterface is missing"),
        (
            json!({"defaultInterface": "eth 1"}),
            "pn1",
            "spec.defaultInterface \"eth 1\"",
        ),
        (
            json!({"defaultInterface": "eth1"}),
            "provider12345",
            "metadata.name",
        ),
        (
            json!({"defaultInterface": "eth1", "customInterfaces": [
                {"interface": "eth2", "nodes": ["n1"]}, {"interface": "eth3", "nodes": ["n2", "n1"]}]}),
            "pn1",
            "spec.customInterfaces[1].nodes lists node n1 already in spec.customInterfaces[0]",
        ),
        (
            json!({"defaultInterface": "eth1", "nodeSelector": {"matchExpressions": [
                {"key": "rack", "operator": "Near"}]}}),
            "pn1",
            "spec.nodeSelector",
        ),
    ] {
        let net = pn(json!({"metadata": {"name": name}, "spec": spec}));
        let err = validate(&net).unwrap_err();
        assert!(
            err.starts_with(&format!("provider network {name}: ")) && err.contains(field),
            "{err}"
        );
        let s = invalid_status(&net, &err, &at(0)).unwrap();
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.node.as_deref(), c.condition.type_.as_str()),
            (None, "Validated")
        );
        assert_eq!(c.condition.reason.as_deref(), Some("InvalidProviderNetwork"));
        let mut again = net.clone();
        again.status = Some(s);
        assert_eq!(invalid_status(&again, &err, &at(5)), None, "said already");
    }
    let ok = pn(
        json!({"metadata": {"name": "pn1"}, "spec": {"defaultInterface": "eth1"},
        "status": {"conditions": [{"type": "Validated", "status": "False", "reason": "InvalidProviderNetwork"}]}}),
    );
    validate(&ok).unwrap();
    let s = plan_status(&ok, &[], &BTreeMap::new(), &at(0)).unwrap();
    assert_eq!(s.conditions, None, "the spec's condition goes once it is fine");
}
