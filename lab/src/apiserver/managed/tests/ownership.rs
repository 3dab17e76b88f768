use serde_json::{Value, json};

use super::{T1, T2, T3, builtin, fields_of, owners, widget};
use crate::apiserver::managed::{ApplyError, apply, record_update};

fn cm(data: Value) -> Value {
    let mut obj =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}});
    obj["data"] = data;
    obj
}

fn created_cm(manager: &str, data: Value) -> Value {
    let mut obj = cm(data);
    record_update(&builtin("", "configmaps"), None, &mut obj, manager, None, T1);
    obj
}

/// Applies `config` to `live` as `manager`, on the ConfigMap resource.
fn apply_cm(live: Option<&Value>, config: &Value, manager: &str, force: bool) -> Result<Value, ApplyError> {
    apply(&builtin("", "configmaps"), live, config, manager, force, None, T2)
}

#[test]
fn create_records_an_update_entry_in_the_real_servers_form() {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "a"}, "uid": "u1",
                     "creationTimestamp": T1, "generation": 1, "resourceVersion": "5"},
        "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]},
        "status": {"phase": "Pending"}});
    record_update(&builtin("", "pods"), None, &mut pod, "kubectl-create", None, T1);
    assert_eq!(
        pod["metadata"]["managedFields"],
        json!([{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": T1,
                "fieldsType": "FieldsV1", "fieldsV1": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {".": {}, "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}}}])
    );
    // A custom resource's spec did not exist before, so the creator owns it as such (".").
    let mut w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"x": "1"}});
    record_update(&widget(), None, &mut w, "creator", None, T1);
    assert_eq!(
        fields_of(&w, "creator", "Update").unwrap(),
        json!({"f:spec": {".": {}, "f:x": {}}})
    );
}

#[test]
fn updates_take_changed_fields_and_removed_fields_leave_every_owner() {
    let res = builtin("", "configmaps");
    let a = created_cm("a", json!({"k1": "1", "k2": "2"}));
    assert_eq!(
        fields_of(&a, "a", "Update").unwrap(),
        json!({"f:data": {".": {}, "f:k1": {}, "f:k2": {}}})
    );

    let mut b = a.clone();
    b["data"] = json!({"k1": "1", "k2": "two", "k3": "3"});
    record_update(&res, Some(&a), &mut b, "b", None, T2);
    assert_eq!(
        fields_of(&b, "a", "Update").unwrap(),
        json!({"f:data": {".": {}, "f:k1": {}}})
    );
    assert_eq!(
        fields_of(&b, "b", "Update").unwrap(),
        json!({"f:data": {"f:k2": {}, "f:k3": {}}})
    );
    assert_eq!(b["metadata"]["managedFields"][1]["time"], T2);

    // Removing k1 takes it from "a"; "b" gains nothing, so its time stays.
    let mut c = b.clone();
    c["data"] = json!({"k2": "two", "k3": "3"});
    record_update(&res, Some(&b), &mut c, "b", None, T3);
    assert_eq!(fields_of(&c, "a", "Update").unwrap(), json!({"f:data": {}}));
    assert_eq!(c["metadata"]["managedFields"][1]["time"], T2);

    // Removing the rest leaves both owning nothing: their entries go, and managedFields with them.
    let mut d = c.clone();
    d.as_object_mut().unwrap().remove("data");
    record_update(&res, Some(&c), &mut d, "b", None, T3);
    assert!(owners(&d).is_empty(), "{d}");
    assert!(d["metadata"].get("managedFields").is_none());
}

#[test]
fn a_write_that_changes_nothing_leaves_managed_fields_byte_for_byte() {
    let res = builtin("", "configmaps");
    let a = created_cm("a", json!({"k": "1"}));
    let mut same = a.clone();
    record_update(&res, Some(&a), &mut same, "someone-else", None, T3);
    assert_eq!(same, a);
    // Without managedFields in the request (a client that does not know them), the stored ones stay.
    let mut bare = a.clone();
    bare["metadata"].as_object_mut().unwrap().remove("managedFields");
    record_update(&res, Some(&a), &mut bare, "x", None, T3);
    assert_eq!(bare, a);
}

#[test]
fn managed_fields_sent_with_an_update_reset_or_replace_the_stored_ones() {
    let res = builtin("", "configmaps");
    let a = created_cm("a", json!({"k": "1"}));
    let mut reset = a.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    record_update(&res, Some(&a), &mut reset, "x", None, T2);
    assert!(reset["metadata"].get("managedFields").is_none(), "{reset}");

    let mut replaced = a.clone();
    replaced["metadata"]["managedFields"] = json!([{"manager": "m", "operation": "Update", "apiVersion": "v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}}]);
    let wanted = replaced.clone();
    record_update(&res, Some(&a), &mut replaced, "x", None, T2);
    assert_eq!(replaced, wanted);

    // Malformed managedFields in a request are ignored in favour of the stored ones.
    let mut garbage = a.clone();
    garbage["metadata"]["managedFields"] = json!([{"manager": "m", "operation": "Frob"}]);
    record_update(&res, Some(&a), &mut garbage, "x", None, T2);
    assert_eq!(garbage, a);
}

#[test]
fn server_set_metadata_and_status_are_not_owned_by_main_writes() {
    let res = builtin("", "pods");
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u"},
                         "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}});
    record_update(&res, None, &mut pod, "creator", None, T1);
    assert_eq!(
        fields_of(&pod, "creator", "Update").unwrap(),
        json!({"f:spec": {"f:nodeName": {}}})
    );

    // A status write owns status, under the status subresource.
    let mut running = pod.clone();
    running["status"] = json!({"phase": "Running", "podIP": "10.0.0.2"});
    record_update(&res, Some(&pod), &mut running, "kubelet", Some("status"), T2);
    let entry = running["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "kubelet")
        .unwrap()
        .clone();
    assert_eq!(entry["subresource"], "status");
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:status": {"f:phase": {}, "f:podIP": {}}})
    );
    assert_eq!(
        fields_of(&running, "creator", "Update").unwrap(),
        json!({"f:spec": {"f:nodeName": {}}})
    );
}

#[test]
fn apply_creates_with_an_apply_entry_owning_exactly_the_configuration() {
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"app": "x"}},
                        "data": {"k": "1"}});
    let out = apply_cm(None, &config, "m", false).unwrap();
    assert_eq!(out["data"], json!({"k": "1"}));
    assert_eq!(
        out["metadata"]["managedFields"],
        json!([{"manager": "m", "operation": "Apply", "apiVersion": "v1", "time": T2, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}}])
    );
}

#[test]
fn apply_conflicts_shares_and_forces() {
    let cfg = |v: &str| cm(json!({"k": v}));
    let a = apply_cm(None, &cfg("1"), "a", false).unwrap();

    let err = apply_cm(Some(&a), &cfg("2"), "b", false).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "a": .data.k"#
    );
    let api = err.into_api_error(&builtin("", "configmaps"), "c");
    assert_eq!((api.code, api.reason), (409, "Conflict"));
    assert_eq!(
        api.details.unwrap(),
        json!({"causes": [{"reason": "FieldManagerConflict", "message": "conflict with \"a\"", "field": ".data.k"}]})
    );

    // The same value is no conflict: both own the field.
    let shared = apply_cm(Some(&a), &cfg("1"), "b", false).unwrap();
    assert_eq!(fields_of(&shared, "a", "Apply"), fields_of(&shared, "b", "Apply"));

    // Forced, the field changes hands.
    let forced = apply_cm(Some(&a), &cfg("2"), "b", true).unwrap();
    assert_eq!(forced["data"]["k"], "2");
    assert_eq!(owners(&forced), [("b".into(), "Apply".into(), String::new())]);
}

#[test]
fn conflicts_name_updaters_with_their_api_version_and_group_by_manager() {
    let res = builtin("", "configmaps");
    let a = apply_cm(None, &cm(json!({"k": "1", "j": "1"})), "a", false).unwrap();
    let mut u = a.clone();
    u["data"]["k"] = json!("edited");
    u["data"]["m"] = json!("new");
    record_update(&res, Some(&a), &mut u, "kubectl-edit", None, T3);
    let err = apply_cm(Some(&u), &cm(json!({"k": "2", "j": "2", "m": "2"})), "b", false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 3 conflicts: conflicts with \"a\":\n- .data.j\nconflicts with \"kubectl-edit\" using v1:\n- .data.k\n- .data.m"
    );
}

#[test]
fn fields_an_applier_drops_are_removed_unless_someone_else_owns_them() {
    let a = apply_cm(None, &cm(json!({"k": "1", "j": "1", "s": "1"})), "a", false).unwrap();
    // "b" co-owns s.
    let b = apply_cm(Some(&a), &cm(json!({"s": "1"})), "b", false).unwrap();
    let dropped = apply_cm(Some(&b), &cm(json!({"k": "1"})), "a", false).unwrap();
    assert_eq!(dropped["data"], json!({"k": "1", "s": "1"}));
    assert_eq!(
        fields_of(&dropped, "a", "Apply").unwrap(),
        json!({"f:data": {"f:k": {}}})
    );
    // Dropping everything removes what nobody else owns, and the emptied map with it.
    let none = apply_cm(
        Some(&a),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
        "a",
        false,
    )
    .unwrap();
    assert!(none.get("data").is_none(), "{none}");
    assert!(none["metadata"].get("managedFields").is_none());
}

#[test]
fn an_applied_null_unsets_the_field_and_reapplying_it_changes_nothing() {
    let live = apply_cm(None, &cm(json!({"k": "1", "j": "1"})), "a", false).unwrap();
    let config = cm(json!({"k": null, "j": "1"}));
    let unset = apply_cm(Some(&live), &config, "a", false).unwrap();
    assert_eq!(unset["data"], json!({"j": "1"}));
    let again = apply(
        &builtin("", "configmaps"),
        Some(&unset),
        &config,
        "a",
        false,
        None,
        T3,
    )
    .unwrap();
    assert_eq!(again, unset);
    let fresh = apply_cm(
        None,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                       "data": {"k": null}}),
        "a",
        false,
    )
    .unwrap();
    assert_eq!(fresh["data"], json!({}));
}

#[test]
fn a_no_op_apply_returns_the_live_object_unchanged() {
    let config = cm(json!({"k": "1"}));
    let first = apply_cm(None, &config, "a", false).unwrap();
    let second = apply(
        &builtin("", "configmaps"),
        Some(&first),
        &config,
        "a",
        false,
        None,
        T3,
    )
    .unwrap();
    assert_eq!(second, first);
}

#[test]
fn apply_merges_associative_lists_by_key_and_keeps_other_elements() {
    let res = builtin("", "pods");
    let mut live = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}});
    record_update(&res, None, &mut live, "creator", None, T1);
    let config = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}]}});
    let err = apply(&res, Some(&live), &config, "m", false, None, T2).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "creator" using v1: .spec.containers[name="b"].image"#
    );
    let out = apply(&res, Some(&live), &config, "m", true, None, T2).unwrap();
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}])
    );
    assert_eq!(
        fields_of(&out, "m", "Apply").unwrap(),
        json!({"f:spec": {"f:containers": {
            "k:{\"name\":\"b\"}": {".": {}, "f:image": {}, "f:name": {}},
            "k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
    );
}

#[test]
fn custom_resource_list_types_come_from_the_schema() {
    let res = widget();
    let live = apply(
        &res,
        None,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"tags": ["a"], "args": ["1", "2"], "ports": [{"port": 80}], "selector": {"a": "1", "b": "2"},
                 "params": {"p": {"v": "1"}}}}),
        "a",
        false,
        None,
        T1,
    )
    .unwrap();
    assert_eq!(
        fields_of(&live, "a", "Apply").unwrap(),
        json!({"f:spec": {"f:args": {}, "f:params": {"f:p": {".": {}, "f:v": {}}}, "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}},
                          "f:selector": {}, "f:tags": {"v:\"a\"": {}}}})
    );
    let out = apply(&res, Some(&live), &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"tags": ["b"], "ports": [{"port": 80, "protocol": "TCP", "name": "http"}, {"port": 53, "protocol": "UDP"}]}}),
        "b", false, None, T2).unwrap();
    // Sets and maps merge; the other applier's atomic fields stay as they were.
    assert_eq!(out["spec"]["tags"], json!(["a", "b"]));
    assert_eq!(out["spec"]["args"], json!(["1", "2"]));
    assert_eq!(
        out["spec"]["ports"],
        json!([{"port": 80, "protocol": "TCP", "name": "http"}, {"port": 53, "protocol": "UDP"}])
    );
    // An atomic list or map is one field: changing any part of it conflicts.
    let err = apply(
        &res,
        Some(&out),
        &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"args": ["1"], "selector": {"a": "1"}}}),
        "b",
        false,
        None,
        T3,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.args\n- .spec.selector"
    );
}

#[test]
fn malformed_configurations_are_refused_as_the_real_server_refuses_them() {
    let res = widget();
    let widget_with = |spec: Value| {
        let mut w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}});
        w["spec"] = spec;
        w
    };
    // Checked before anything is merged: 400 BadRequest.
    let bad_requests = [
        (
            json!({"apiVersion": "example.com/v2", "kind": "Widget"}),
            "invalid object type: example.com/v2, Kind=Widget",
        ),
        (
            json!({"apiVersion": "example.com/v1", "kind": "Gadget"}),
            "invalid object type: example.com/v1, Kind=Gadget",
        ),
        (
            json!({"metadata": {"name": "w"}}),
            "invalid object type: /, Kind=",
        ),
        (
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"managedFields": []}}),
            "metadata.managedFields must be nil",
        ),
        (
            json!(["not", "an", "object"]),
            "error decoding YAML: the apply configuration must be an object",
        ),
    ];
    for (config, why) in bad_requests {
        match apply(&res, None, &config, "m", false, None, T1) {
            Err(e @ ApplyError::BadRequest(_)) => {
                assert_eq!(e.to_string(), why);
                assert_eq!(e.into_api_error(&res, "w").code, 400);
            }
            other => panic!("{config}: {other:?}"),
        }
    }
    // What does not fit the schema: a bare 500, as the typed conversion fails upstream.
    let prefix = "failed to create typed patch object (ns/w; example.com/v1, Kind=Widget): ";
    let typed = [
        (json!({"bogus": 1}), ".spec.bogus: field not declared in schema"),
        (
            json!({"tags": ["a", "a"]}),
            ".spec.tags: duplicate entries for key [=\"a\"]",
        ),
        (
            json!({"ports": [{"name": "x"}]}),
            ".spec.ports: element 0: associative list with keys has an element that omits key field \"port\" (and doesn't have default value)",
        ),
        (
            json!({"tags": [{"a": 1}], "bogus": 1}),
            "errors:\n  .spec.bogus: field not declared in schema\n  .spec.tags: element 0: a set list can only hold scalars, got {\"a\":1}",
        ),
    ];
    for (spec, why) in typed {
        match apply(&res, None, &widget_with(spec.clone()), "m", false, None, T1) {
            Err(e @ ApplyError::Typed(_)) => {
                assert_eq!(e.to_string(), format!("{prefix}{why}"));
                let api = e.into_api_error(&res, "w");
                assert_eq!((api.code, api.reason), (500, ""));
            }
            other => panic!("{spec}: {other:?}"),
        }
    }
    // Maps and preserved fields take any key.
    assert!(
        apply(
            &res,
            None,
            &widget_with(json!({"params": {"any": {"v": "1"}}})),
            "m",
            false,
            None,
            T1
        )
        .is_ok()
    );
    let e = apply(
        &res,
        None,
        &widget_with(json!({})),
        "m",
        false,
        Some("status"),
        T1,
    );
    assert_eq!(e, Err(ApplyError::NotFound));
    assert_eq!(ApplyError::NotFound.into_api_error(&res, "w").code, 404);
}

#[test]
fn status_apply_owns_status_only_and_main_apply_ignores_status() {
    let res = widget();
    let live = apply(
        &res,
        None,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"x": "1"}, "status": {"phase": "ignored"}}),
        "owner",
        false,
        None,
        T1,
    )
    .unwrap();
    assert!(live.get("status").is_none());
    let out = apply(&res, Some(&live), &json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "labels": {"ignored": "yes"}}, "spec": {"x": "2"}, "status": {"phase": "Ready"}}),
        "ctl", true, Some("status"), T2).unwrap();
    assert_eq!(out["spec"], json!({"x": "1"}));
    assert_eq!(out["status"], json!({"phase": "Ready"}));
    assert!(out["metadata"].get("labels").is_none());
    assert_eq!(
        owners(&out),
        [
            ("owner".into(), "Apply".into(), String::new()),
            ("ctl".into(), "Apply".into(), "status".into())
        ]
    );
    assert_eq!(
        fields_of(&out, "ctl", "Apply").unwrap(),
        json!({"f:status": {"f:phase": {}}})
    );
}

#[test]
fn fields_of_an_object_without_managed_fields_belong_to_before_first_apply() {
    let live = cm(json!({"k": "1"}));
    let err = apply_cm(Some(&live), &cm(json!({"k": "2"})), "a", false).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.k"#
    );
}
