use serde_json::{Value, json};

use super::*;

fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn res(r: &Request) -> &ResourceRequest {
    match r {
        Request::Resource(r) => r,
        Request::NonResource { .. } => panic!("{r:?} is not a resource request"),
    }
}

/// (method, path, query, the verb kube-apiserver derives).
type VerbCase<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);

#[test]
fn verbs_are_derived_as_kube_apiserver_does() {
    let cases: &[VerbCase] = &[
        ("GET", "/api/v1/namespaces/ns1/pods/p1", &[], "get"),
        ("GET", "/api/v1/namespaces/ns1/pods", &[], "list"),
        ("GET", "/api/v1/pods", &[("watch", "true")], "watch"),
        ("GET", "/api/v1/pods", &[("watch", "1")], "watch"),
        ("GET", "/api/v1/watch/namespaces/ns1/pods", &[], "watch"),
        ("POST", "/api/v1/namespaces/ns1/pods", &[], "create"),
        ("PUT", "/api/v1/namespaces/ns1/pods/p1", &[], "update"),
        ("PATCH", "/api/v1/namespaces/ns1/pods/p1", &[], "patch"),
        ("DELETE", "/api/v1/namespaces/ns1/pods/p1", &[], "delete"),
        ("DELETE", "/api/v1/namespaces/ns1/pods", &[], "deletecollection"),
        ("HEAD", "/api/v1/nodes/n1", &[], "get"),
    ];
    for (method, path, query, verb) in cases {
        assert_eq!(
            Request::parse(method, path, &q(query)).verb(),
            *verb,
            "{method} {path} {query:?}"
        );
    }
}

#[test]
fn resource_attributes_come_from_the_path() {
    let r = Request::parse("PATCH", "/apis/kubeovn.io/v1/subnets/s1/status", &[]);
    assert_eq!(
        res(&r),
        &ResourceRequest {
            verb: "patch".into(),
            group: "kubeovn.io".into(),
            version: "v1".into(),
            resource: "subnets".into(),
            subresource: "status".into(),
            namespace: String::new(),
            name: "s1".into(),
        }
    );
    let r = Request::parse("POST", "/api/v1/namespaces/ns1/pods/p1/binding", &[]);
    let r = res(&r);
    assert_eq!(
        (
            r.namespace.as_str(),
            r.resource.as_str(),
            r.name.as_str(),
            r.subresource.as_str()
        ),
        ("ns1", "pods", "p1", "binding")
    );
    // A Namespace is its own namespace; its status and finalize are its subresources.
    let r = Request::parse("PUT", "/api/v1/namespaces/ns1/finalize", &[]);
    let r = res(&r);
    assert_eq!(
        (
            r.namespace.as_str(),
            r.resource.as_str(),
            r.name.as_str(),
            r.subresource.as_str()
        ),
        ("ns1", "namespaces", "ns1", "finalize")
    );
    let r = Request::parse("GET", "/api/v1/namespaces", &[]);
    assert_eq!(
        (res(&r).resource.as_str(), res(&r).verb.as_str()),
        ("namespaces", "list")
    );
    let r = Request::parse(
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        &[],
    );
    assert_eq!(res(&r).group, "coordination.k8s.io");
}

#[test]
fn a_list_or_watch_of_one_name_carries_the_name() {
    let r = Request::parse(
        "GET",
        "/api/v1/nodes",
        &q(&[("watch", "true"), ("fieldSelector", "metadata.name=node1")]),
    );
    assert_eq!((res(&r).verb.as_str(), res(&r).name.as_str()), ("watch", "node1"));
    let r = Request::parse(
        "GET",
        "/api/v1/pods",
        &q(&[("fieldSelector", "spec.nodeName=n1,metadata.name==p1")]),
    );
    assert_eq!(res(&r).name, "p1");
    let r = Request::parse(
        "GET",
        "/api/v1/pods",
        &q(&[("fieldSelector", "metadata.name!=p1")]),
    );
    assert_eq!(res(&r).name, "");
    let r = Request::parse(
        "GET",
        "/api/v1/pods",
        &q(&[("fieldSelector", "spec.nodeName=n1")]),
    );
    assert_eq!(res(&r).name, "");
}

#[test]
fn discovery_and_other_paths_are_non_resource_requests() {
    for path in [
        "/api",
        "/api/v1",
        "/apis",
        "/apis/kubeovn.io",
        "/apis/kubeovn.io/v1",
        "/version",
        "/openapi/v3",
        "/debug/authorization/denials",
    ] {
        assert_eq!(
            Request::parse("GET", path, &[]),
            Request::NonResource {
                verb: "get".into(),
                path: path.into()
            }
        );
    }
}

fn rule(v: Value) -> PolicyRule {
    serde_json::from_value(v).unwrap()
}

fn allows(r: &Value, method: &str, path: &str) -> bool {
    rule_allows(&rule(r.clone()), &Request::parse(method, path, &[]))
}

#[test]
fn rules_match_verbs_groups_resources_and_names() {
    let pods = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]});
    assert!(allows(&pods, "GET", "/api/v1/namespaces/a/pods/p"));
    assert!(allows(&pods, "GET", "/api/v1/pods"));
    assert!(!allows(&pods, "PATCH", "/api/v1/namespaces/a/pods/p"));
    assert!(!allows(&pods, "GET", "/api/v1/nodes/n"), "another resource");
    assert!(
        !allows(&pods, "GET", "/apis/apps/v1/namespaces/a/pods/p"),
        "another group"
    );
    assert!(
        !allows(&pods, "GET", "/api/v1/namespaces/a/pods/p/log"),
        "pods does not cover its subresources"
    );

    let status = json!({"apiGroups": ["kubeovn.io"], "resources": ["subnets/status"], "verbs": ["patch"]});
    assert!(allows(&status, "PATCH", "/apis/kubeovn.io/v1/subnets/s/status"));
    assert!(!allows(&status, "PATCH", "/apis/kubeovn.io/v1/subnets/s"));

    let any_status = json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]});
    assert!(allows(&any_status, "PUT", "/apis/kubeovn.io/v1/vpcs/v/status"));
    assert!(!allows(&any_status, "PUT", "/apis/kubeovn.io/v1/vpcs/v"));

    let all = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
    assert!(allows(&all, "DELETE", "/apis/kubeovn.io/v1/vpcs"));
    assert!(allows(&all, "POST", "/api/v1/namespaces/a/pods/p/binding"));
    assert!(!allows(&all, "GET", "/version"), "resource rules grant no paths");

    let named = json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "resourceNames": ["kube-ovn-controller"], "verbs": ["get", "create", "list"]});
    assert!(allows(
        &named,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-ovn-controller"
    ));
    assert!(!allows(
        &named,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/other"
    ));
    assert!(
        !allows(
            &named,
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
        ),
        "a create names no object, so resourceNames never match it"
    );
    assert!(!allows(
        &named,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    ));
}

#[test]
fn non_resource_urls_match_exactly_or_by_prefix() {
    let r = json!({"nonResourceURLs": ["/version", "/apis/*"], "verbs": ["get"]});
    assert!(allows(&r, "GET", "/version"));
    assert!(!allows(&r, "GET", "/version/x"));
    assert!(allows(&r, "GET", "/apis/kubeovn.io/v1"));
    assert!(!allows(&r, "POST", "/apis/kubeovn.io/v1"));
    assert!(!allows(&r, "GET", "/api"));
}

fn policy() -> Policy {
    let cr = |name: &str, rules: Value| -> ClusterRole {
        serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).unwrap()
    };
    let cluster_roles = vec![
        cr(
            "system:kube-ovn-controller",
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "patch"]}]),
        ),
        cr(
            "secret-reader",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
        ),
        cr(
            "paths",
            json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
        ),
    ];
    let roles: Vec<Role> = vec![
        serde_json::from_value(json!({"metadata": {"name": "lease", "namespace": "kube-system"},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}]}))
        .unwrap(),
    ];
    let crbs: Vec<ClusterRoleBinding> = vec![
        serde_json::from_value(json!({"metadata": {"name": "ctl"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kube-ovn-controller"},
            "subjects": [{"kind": "ServiceAccount", "name": "kube-ovn-controller", "namespace": "kube-system"}]}))
        .unwrap(),
        serde_json::from_value(json!({"metadata": {"name": "ops"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "paths"},
            "subjects": [{"kind": "Group", "name": "ops"}]}))
        .unwrap(),
    ];
    let rbs: Vec<RoleBinding> = vec![
        serde_json::from_value(json!({"metadata": {"name": "lease", "namespace": "kube-system"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
            "subjects": [{"kind": "ServiceAccount", "name": "kube-ovn-controller"}]}))
        .unwrap(),
        serde_json::from_value(json!({"metadata": {"name": "secrets", "namespace": "team"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "secret-reader"},
            "subjects": [{"kind": "User", "name": "alice"}]}))
        .unwrap(),
        // Names a Role that does not exist: grants nothing.
        serde_json::from_value(json!({"metadata": {"name": "dangling", "namespace": "team"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "missing"},
            "subjects": [{"kind": "User", "name": "bob"}]}))
        .unwrap(),
    ];
    Policy::new(cluster_roles, roles, crbs, rbs)
}

fn decide(user: &User, method: &str, path: &str) -> bool {
    matches!(
        policy().authorize(user, &Request::parse(method, path, &[])),
        Decision::Allow(_)
    )
}

#[test]
fn bindings_grant_their_roles_to_their_subjects() {
    let sa = User::authenticated("system:serviceaccount:kube-system:kube-ovn-controller", "u1", &[]);
    assert!(
        sa.groups
            .contains(&"system:serviceaccounts:kube-system".to_owned())
    );
    assert!(sa.groups.contains(&"system:authenticated".to_owned()));
    assert!(decide(&sa, "PATCH", "/api/v1/namespaces/a/pods/p"));
    assert!(decide(&sa, "GET", "/api/v1/pods"));
    assert!(!decide(&sa, "DELETE", "/api/v1/namespaces/a/pods/p"));
    // The Role in kube-system, through a RoleBinding whose subject's namespace is implied.
    assert!(decide(
        &sa,
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"
    ));
    assert!(!decide(
        &sa,
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/l"
    ));
    assert!(
        !decide(&sa, "GET", "/apis/coordination.k8s.io/v1/leases"),
        "not across namespaces"
    );

    let other_sa = User::authenticated("system:serviceaccount:default:kube-ovn-controller", "", &[]);
    assert!(
        !decide(&other_sa, "GET", "/api/v1/pods"),
        "same name, other namespace"
    );

    let alice = User::authenticated("alice", "", &[]);
    assert!(decide(&alice, "GET", "/api/v1/namespaces/team/secrets/s"));
    assert!(!decide(&alice, "GET", "/api/v1/namespaces/other/secrets/s"));
    assert!(!decide(&alice, "GET", "/api/v1/secrets"));
    assert!(!decide(
        &User::authenticated("bob", "", &[]),
        "GET",
        "/api/v1/namespaces/team/secrets/s"
    ));

    let ops = User::authenticated("carol", "", &["ops".into()]);
    assert!(decide(&ops, "GET", "/metrics"));
    assert!(!decide(&ops, "GET", "/version"));

    let admin = User::authenticated("root", "", &[MASTERS.into()]);
    assert!(decide(&admin, "DELETE", "/apis/kubeovn.io/v1/subnets"));
    assert!(!decide(&User::anonymous(), "GET", "/api/v1/pods"));
}

#[test]
fn service_account_names_parse() {
    assert_eq!(
        service_account("system:serviceaccount:kube-system:kube-ovn-cni"),
        Some(("kube-system", "kube-ovn-cni"))
    );
    assert_eq!(service_account("system:serviceaccount:kube-system"), None);
    assert_eq!(service_account("alice"), None);
}
