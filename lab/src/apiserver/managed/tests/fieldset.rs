use serde_json::json;

use crate::apiserver::managed::fieldset::{FieldSet, PathElement, canonical, display_path};

fn f(name: &str) -> PathElement {
    PathElement::Field(name.into())
}

#[test]
fn path_elements_encode_decode_and_display() {
    let cases = [
        ("f:app", f("app"), ".app"),
        (
            r#"k:{"name":"c"}"#,
            PathElement::Key(r#"{"name":"c"}"#.into()),
            r#"[name="c"]"#,
        ),
        (
            r#"k:{"containerPort":80,"protocol":"TCP"}"#,
            PathElement::Key(r#"{"containerPort":80,"protocol":"TCP"}"#.into()),
            r#"[containerPort=80,protocol="TCP"]"#,
        ),
        (
            r#"v:"kubernetes""#,
            PathElement::Value(r#""kubernetes""#.into()),
            r#"[="kubernetes"]"#,
        ),
        ("i:3", PathElement::Index(3), "[3]"),
        // A field name may itself hold colons and slashes.
        (
            "f:kubectl.kubernetes.io/last-applied-configuration",
            f("kubectl.kubernetes.io/last-applied-configuration"),
            ".kubectl.kubernetes.io/last-applied-configuration",
        ),
    ];
    for (text, element, shown) in cases {
        assert_eq!(PathElement::decode(text).unwrap(), element, "{text}");
        assert_eq!(element.encode(), text);
        assert_eq!(element.display(), shown);
    }
    // Keys written with other spacing or order are the same element.
    assert_eq!(
        PathElement::decode(r#"k:{ "protocol": "TCP", "containerPort": 80 }"#).unwrap(),
        PathElement::decode(r#"k:{"containerPort":80,"protocol":"TCP"}"#).unwrap()
    );
    for bad in ["x:1", "app", "k:[1]", "k:{", "i:x", "v:"] {
        assert!(PathElement::decode(bad).is_err(), "{bad}");
    }
    assert_eq!(
        canonical(&json!({"b": [1, {"d": 1, "c": 2}], "a": "x"})),
        r#"{"a":"x","b":[1,{"c":2,"d":1}]}"#
    );
}

#[test]
fn fields_v1_round_trip_with_members_and_children() {
    // What a real server writes for a Pod created with a label and one container.
    let wire = json!({
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}
    });
    let set = FieldSet::from_fields_v1(&wire).unwrap();
    let paths: Vec<String> = set.paths().iter().map(|p| display_path(p)).collect();
    assert_eq!(
        paths,
        [
            ".metadata.labels",
            ".metadata.labels.app",
            ".spec.containers[name=\"c\"]",
            ".spec.containers[name=\"c\"].image",
            ".spec.containers[name=\"c\"].name",
        ]
    );
    assert!(set.contains(&[f("metadata"), f("labels")]));
    assert!(
        !set.contains(&[f("metadata")]),
        "a path with only children is not a member"
    );
    assert_eq!(set.to_fields_v1(), wire);
    assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
    assert!(FieldSet::from_fields_v1(&json!([])).is_err());
    assert!(FieldSet::from_fields_v1(&json!({"q:a": {}})).is_err());
}

#[test]
fn set_operations() {
    let a = FieldSet::from_paths([
        &[f("spec"), f("x")][..],
        &[f("spec"), f("y")][..],
        &[f("spec")][..],
    ]);
    let b = FieldSet::from_paths([&[f("spec"), f("y")][..], &[f("spec"), f("z")][..]]);
    let both = a.intersection(&b);
    assert_eq!(both.paths(), vec![vec![f("spec"), f("y")]]);
    let mut u = a.clone();
    u.union(&b);
    assert_eq!(u.paths().len(), 4);
    let mut d = a.clone();
    d.subtract(&b);
    assert_eq!(d.paths(), vec![vec![f("spec")], vec![f("spec"), f("x")]]);
    // Subtracting a parent path removes only that member, not what is below it.
    let mut d2 = a.clone();
    d2.subtract(&FieldSet::from_paths([&[f("spec")][..]]));
    assert_eq!(d2.paths().len(), 2);
    let mut empty = b.clone();
    empty.subtract(&b);
    assert!(empty.is_empty());
    assert_eq!(empty.to_fields_v1(), json!({}));
}
