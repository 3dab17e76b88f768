use serde_json::{Value, json};

use super::{builtin, widget};
use crate::apiserver::managed::{StrategicMergeError, strategic_merge};

fn pod(spec: Value) -> Value {
    let mut obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    obj["spec"] = spec;
    obj
}

#[test]
fn merge_keys_and_directives() {
    let pods = builtin("", "pods");
    let services = builtin("", "services");
    let leases = builtin("coordination.k8s.io", "leases");
    let two = json!({"containers": [{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
                                    {"name": "b", "image": "b:1"}]});
    // (what, resource, object, patch, expected result)
    let cases = [
        (
            "containers merge by name, new ones are appended",
            &pods,
            pod(two.clone()),
            json!({"spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}]}}),
            pod(
                json!({"containers": [{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
                                   {"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}]}),
            ),
        ),
        (
            "env merges by name inside a container",
            &pods,
            pod(two.clone()),
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}]}}),
            pod(
                json!({"containers": [{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
                                   {"name": "b", "image": "b:1"}]}),
            ),
        ),
        (
            "$patch: delete removes the element with that key",
            &pods,
            pod(two.clone()),
            json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
            pod(json!({"containers": [{"name": "b", "image": "b:1"}]})),
        ),
        (
            "$patch: replace as an element replaces the list",
            &pods,
            pod(two.clone()),
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z"}]}}),
            pod(json!({"containers": [{"name": "z", "image": "z"}]})),
        ),
        (
            "$patch: replace in a map replaces the map",
            &pods,
            pod(json!({"nodeSelector": {"a": "1", "b": "2"}})),
            json!({"spec": {"nodeSelector": {"$patch": "replace", "c": "3"}}}),
            pod(json!({"nodeSelector": {"c": "3"}})),
        ),
        (
            "$patch: delete in a map deletes it",
            &pods,
            pod(json!({"nodeSelector": {"a": "1"}, "nodeName": "n"})),
            json!({"spec": {"nodeSelector": {"$patch": "delete"}}}),
            pod(json!({"nodeName": "n"})),
        ),
        (
            "null deletes a field",
            &pods,
            pod(json!({"nodeName": "n", "hostname": "h"})),
            json!({"spec": {"hostname": null}}),
            pod(json!({"nodeName": "n"})),
        ),
        (
            "tolerations are atomic",
            &pods,
            pod(json!({"tolerations": [{"key": "a"}, {"key": "b"}]})),
            json!({"spec": {"tolerations": [{"key": "c"}]}}),
            pod(json!({"tolerations": [{"key": "c"}]})),
        ),
        (
            "container ports merge by containerPort",
            &pods,
            pod(
                json!({"containers": [{"name": "a", "ports": [{"containerPort": 80}, {"containerPort": 443}]}]}),
            ),
            json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "http"}]}]}}),
            pod(
                json!({"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}]}]}),
            ),
        ),
        (
            "volumes by name, volumeMounts by mountPath",
            &pods,
            pod(
                json!({"volumes": [{"name": "v", "emptyDir": {}}], "containers": [{"name": "a", "volumeMounts": [{"mountPath": "/x", "name": "v"}]}]}),
            ),
            json!({"spec": {"volumes": [{"name": "w", "emptyDir": {}}], "containers": [{"name": "a", "volumeMounts": [{"mountPath": "/x", "readOnly": true}]}]}}),
            pod(
                json!({"volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}],
                    "containers": [{"name": "a", "volumeMounts": [{"mountPath": "/x", "name": "v", "readOnly": true}]}]}),
            ),
        ),
        (
            "initContainers merge like containers",
            &pods,
            pod(json!({"initContainers": [{"name": "i", "image": "1"}]})),
            json!({"spec": {"initContainers": [{"name": "i", "image": "2"}]}}),
            pod(json!({"initContainers": [{"name": "i", "image": "2"}]})),
        ),
        (
            "service ports merge by port",
            &services,
            json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 53}]}}),
            json!({"spec": {"ports": [{"port": 53, "protocol": "UDP"}]}}),
            json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 53, "protocol": "UDP"}]}}),
        ),
        (
            "conditions merge by type",
            &pods,
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]}}),
        ),
        (
            "finalizers merge as a set",
            &leases,
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["b", "c"]}}),
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
        ),
        (
            "$deleteFromPrimitiveList removes values",
            &leases,
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"], "finalizers": ["d"]}}),
            json!({"metadata": {"finalizers": ["a", "c", "d"]}}),
        ),
        (
            "ownerReferences merge by uid",
            &leases,
            json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "x"}]}}),
            json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "y"}, {"uid": "1", "controller": true}]}}),
            json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "x", "controller": true}, {"uid": "2", "name": "y"}]}}),
        ),
        (
            "$setElementOrder orders the result, other elements keep their slots",
            &pods,
            pod(json!({"containers": [{"name": "a"}, {"name": "x"}, {"name": "b"}]})),
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}, {"name": "c"}],
                         "containers": [{"name": "c"}]}}),
            pod(json!({"containers": [{"name": "x"}, {"name": "b"}, {"name": "a"}, {"name": "c"}]})),
        ),
        (
            "$setElementOrder on a set of scalars",
            &leases,
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["b", "a"]}}),
            json!({"metadata": {"finalizers": ["b", "a"]}}),
        ),
        (
            "$retainKeys clears the keys it does not name",
            &pods,
            pod(json!({"volumes": [{"name": "v", "emptyDir": {}}]})),
            json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}}),
            pod(json!({"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]})),
        ),
        (
            "a lease renewal as kube-lease-manager sends it",
            &leases,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": {"holderIdentity": "a", "renewTime": "t1", "leaseDurationSeconds": 2}}),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": {"renewTime": "t2", "holderIdentity": null}}),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": {"renewTime": "t2", "leaseDurationSeconds": 2}}),
        ),
    ];
    for (what, res, object, patch, expected) in cases {
        assert_eq!(strategic_merge(res, &object, &patch).unwrap(), expected, "{what}");
    }
}

#[test]
fn malformed_patches_and_custom_resources_are_refused() {
    let pods = builtin("", "pods");
    let object = pod(json!({"containers": [{"name": "a"}], "nodeSelector": {"a": "1"}}));
    let bad_requests = [
        json!(["not", "an", "object"]),
        json!({"spec": {"nodeSelector": {"$patch": "frob"}}}),
        json!({"spec": {"containers": [{"image": "no merge key"}]}}),
        json!({"spec": {"containers": ["not an object"]}}),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
        json!({"spec": {"$setElementOrder/containers": {"name": "a"}}}),
        json!({"spec": {"$setElementOrder/containers": [{"image": "no key"}]}}),
        json!({"spec": {"$frob": 1}}),
        json!({"$patch": "delete"}),
    ];
    for patch in bad_requests {
        match strategic_merge(&pods, &object, &patch) {
            Err(e @ StrategicMergeError::BadRequest(_)) => assert_eq!(e.into_api_error().code, 400),
            other => panic!("{patch}: {other:?}"),
        }
    }
    let retain = json!({"spec": {"$retainKeys": ["nodeName"], "hostname": "h"}});
    let e = strategic_merge(&pods, &object, &retain).unwrap_err();
    assert!(matches!(e, StrategicMergeError::Invalid(_)), "{e:?}");
    assert_eq!(e.into_api_error().code, 422);

    let e = strategic_merge(&widget(), &json!({}), &json!({"spec": {}})).unwrap_err();
    let api = e.into_api_error();
    assert_eq!((api.code, api.reason), (415, "UnsupportedMediaType"));
}
