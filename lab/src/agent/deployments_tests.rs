use super::*;

fn pods(spec: &[(&str, &str, bool)]) -> Vec<PodView> {
    spec.iter()
        .map(|(name, hash, ready)| PodView {
            name: (*name).into(),
            hash: (*hash).into(),
            ready: *ready,
        })
        .collect()
}

fn deployment(replicas: i32, strategy: &Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "a", "uid": "d-uid", "generation": 3},
        "spec": {"replicas": replicas, "strategy": strategy,
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "kube-ovn-lab/netexec"}]}}},
    }))
    .unwrap()
}

const ROLLING: Strategy = Strategy::RollingUpdate {
    max_surge: 1,
    max_unavailable: 0,
};

#[test]
fn scaling_creates_and_deletes_new_pods() {
    assert_eq!(
        plan(3, ROLLING, "h", &[]),
        Plan {
            create: 3,
            delete: vec![]
        }
    );
    let three = pods(&[("a", "h", true), ("b", "h", false), ("c", "h", true)]);
    assert_eq!(plan(3, ROLLING, "h", &three), Plan::default());
    // Scale down: not-ready pods go first.
    assert_eq!(plan(1, ROLLING, "h", &three).delete, ["b", "c"]);
    assert_eq!(plan(0, Strategy::Recreate, "h", &three).delete.len(), 3);
}

#[test]
fn recreate_deletes_every_old_pod_before_creating() {
    let old = pods(&[("a", "old", true), ("b", "old", true)]);
    assert_eq!(
        plan(2, Strategy::Recreate, "new", &old),
        Plan {
            create: 0,
            delete: vec!["b".into(), "a".into()]
        }
    );
    assert_eq!(plan(2, Strategy::Recreate, "new", &[]).create, 2);
}

#[test]
fn rolling_update_surges_then_deletes_old_pods_as_new_ones_become_ready() {
    let old = pods(&[("a", "old", true), ("b", "old", true)]);
    // One extra pod (surge 1), nothing deleted while every ready pod is needed.
    assert_eq!(
        plan(2, ROLLING, "new", &old),
        Plan {
            create: 1,
            delete: vec![]
        }
    );
    let mut step = old.clone();
    step.extend(pods(&[("n1", "new", false)]));
    assert_eq!(plan(2, ROLLING, "new", &step), Plan::default(), "waits for n1");
    step[2].ready = true;
    assert_eq!(plan(2, ROLLING, "new", &step).delete, ["b"]);
    // Not-ready old pods go at once.
    let sick = pods(&[("a", "old", false), ("n1", "new", true)]);
    assert_eq!(
        plan(2, ROLLING, "new", &sick),
        Plan {
            create: 1,
            delete: vec!["a".into()]
        }
    );
}

#[test]
fn strategies_resolve_percentages_as_kubernetes_does() {
    let d = deployment(10, &json!({"type": "RollingUpdate"}));
    assert_eq!(
        Strategy::of(&d, 10),
        Strategy::RollingUpdate {
            max_surge: 3,
            max_unavailable: 2
        }
    );
    let d = deployment(
        1,
        &json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}),
    );
    assert_eq!(
        Strategy::of(&d, 1),
        Strategy::RollingUpdate {
            max_surge: 0,
            max_unavailable: 1
        }
    );
    assert_eq!(
        Strategy::of(&deployment(1, &json!({"type": "Recreate"})), 1),
        Strategy::Recreate
    );
}

#[test]
fn pods_carry_the_template_the_hash_and_the_owner() {
    let d = deployment(2, &json!({"type": "Recreate"}));
    let hash = template_hash(&d);
    assert_eq!(hash.len(), 10);
    let pod = new_pod(&d, &hash, "bcdfg");
    assert_eq!(pod.name_any(), format!("web-{hash}-bcdfg"));
    assert_eq!(pod.labels()["app"], "web");
    assert_eq!(pod.labels()[TEMPLATE_HASH_LABEL], hash);
    let owner = &pod.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("Deployment", "d-uid", Some(true))
    );
    let mut changed = d.clone();
    changed
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("other".into());
    assert_ne!(template_hash(&changed), hash);
    assert_eq!(template_hash(&d.clone()), hash, "stable");
}

#[test]
fn status_counts_pods_and_keeps_condition_times() {
    let mut d = deployment(2, &json!({"type": "RollingUpdate"}));
    let s = status(
        &d,
        "h",
        &pods(&[("a", "h", true), ("b", "old", false)]),
        "2026-01-01T00:00:01Z",
    );
    assert_eq!(
        (
            &s["replicas"],
            &s["updatedReplicas"],
            &s["readyReplicas"],
            &s["availableReplicas"],
            &s["unavailableReplicas"],
            &s["observedGeneration"]
        ),
        (&json!(2), &json!(1), &json!(1), &json!(1), &json!(1), &json!(3))
    );
    assert_eq!(s["conditions"][0]["type"], "Available");
    // 25 % of 2 rounds down to 0 unavailable allowed: 1 of 2 is not enough.
    assert_eq!(s["conditions"][0]["status"], "False", "{s}");
    d.status = Some(serde_json::from_value(s.clone()).unwrap());
    let again = status(
        &d,
        "h",
        &pods(&[("a", "h", true), ("b", "old", false)]),
        "2026-01-01T00:00:02Z",
    );
    assert_eq!(again, s, "nothing changed, nothing restamped");
    let done = status(
        &d,
        "h",
        &pods(&[("a", "h", true), ("c", "h", true)]),
        "2026-01-01T00:00:03Z",
    );
    assert_eq!(
        (
            &done["conditions"][0]["status"],
            &done["conditions"][0]["lastTransitionTime"]
        ),
        (&json!("True"), &json!("2026-01-01T00:00:03Z"))
    );
    assert_eq!(done["conditions"][1]["reason"], "NewReplicaSetAvailable");
    assert_eq!(
        done["conditions"][1]["lastTransitionTime"], "2026-01-01T00:00:03Z",
        "a new reason is a transition"
    );
    assert!(done.get("unavailableReplicas").is_none());
}
