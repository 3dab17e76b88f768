//! RBAC authorization as kube-apiserver does it, pure: a request's attributes (user, verb,
//! group, resource, subresource, namespace, name, or a non-resource path) from its method, path
//! and query; and a decision from the Roles, ClusterRoles and their bindings. No I/O: `auth`
//! reads the objects from the store and calls [`Policy::authorize`].
//!
//! What the real authorizer does and this one does too: `*` in verbs, apiGroups and resources;
//! `resource/subresource` and `*/subresource`; `resourceNames` (which never match a create or a
//! collection request, and match a list or watch only through a `metadata.name=` field selector);
//! `nonResourceURLs` with a trailing `*` (granted by ClusterRoleBindings only); RoleBindings that
//! reference a ClusterRole; subjects of kind User, Group and ServiceAccount; `system:masters`
//! allowed everything. Not done: aggregated ClusterRoles (`aggregationRule`), escalation checks
//! on writes to RBAC objects, impersonation.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};

/// The group every request of a `system:masters` member passes in, whatever the policy says.
pub const MASTERS: &str = "system:masters";

/// Who makes a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl User {
    pub fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
        }
    }

    /// An authenticated user with the groups kube-apiserver adds: `system:authenticated`, and for
    /// a ServiceAccount's user name (`system:serviceaccount:<ns>:<name>`) `system:serviceaccounts`
    /// and `system:serviceaccounts:<ns>`.
    pub fn authenticated(name: &str, uid: &str, groups: &[String]) -> Self {
        let mut all: Vec<String> = groups.to_vec();
        let mut add = |g: String| {
            if !all.contains(&g) {
                all.push(g);
            }
        };
        if let Some((ns, _)) = service_account(name) {
            add("system:serviceaccounts".into());
            add(format!("system:serviceaccounts:{ns}"));
        }
        add("system:authenticated".into());
        Self {
            name: name.into(),
            uid: uid.into(),
            groups: all,
        }
    }
}

/// `(namespace, name)` of a ServiceAccount user name.
pub fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// What a request asks to do, as kube-apiserver's request info resolver derives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Resource(ResourceRequest),
    /// A path outside the resource tree (`/version`, `/api`, `/openapi/v3`, `/healthz`), with
    /// the lower-cased method as the verb.
    NonResource {
        verb: String,
        path: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRequest {
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped requests (and for requests across all namespaces).
    pub namespace: String,
    /// Empty for collection requests (list, watch, create, deletecollection) unless a list or
    /// watch selects one name with `fieldSelector=metadata.name=<name>`.
    pub name: String,
}

impl Request {
    /// The attributes of a request to `path` with `method` and `query` (`key=value` pairs,
    /// decoded).
    pub fn parse(method: &str, path: &str, query: &[(String, String)]) -> Self {
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let non_resource = || Request::NonResource {
            verb: method.to_ascii_lowercase(),
            path: path.to_owned(),
        };
        // /api/{version}/… and /apis/{group}/{version}/…; anything shorter is discovery.
        let (group, rest) = match parts.as_slice() {
            ["api", rest @ ..] if rest.len() >= 2 => ("", rest),
            ["apis", group, rest @ ..] if rest.len() >= 2 => (*group, rest),
            _ => return non_resource(),
        };
        let version = rest[0];
        let mut rest = &rest[1..];
        let verb = match (rest.first(), method) {
            // The old `/watch/` form.
            (Some(&"watch"), _) if rest.len() >= 2 => {
                rest = &rest[1..];
                "watch"
            }
            (_, "POST") => "create",
            (_, "GET" | "HEAD") => "get",
            (_, "PUT") => "update",
            (_, "PATCH") => "patch",
            (_, "DELETE") => "delete",
            _ => "",
        };
        let mut namespace = "";
        if rest.first() == Some(&"namespaces")
            && let Some(ns) = rest.get(1)
        {
            namespace = ns;
            // `namespaces/{ns}/status` and `/finalize` are the Namespace's own subresources.
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        let resource = rest.first().copied().unwrap_or_default();
        let mut name = rest.get(1).copied().unwrap_or_default().to_owned();
        let subresource = rest.get(2).copied().unwrap_or_default();
        let mut verb = verb.to_owned();
        let get = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        if name.is_empty() && verb == "get" {
            verb = if matches!(get("watch"), Some("true" | "1")) {
                "watch".into()
            } else {
                "list".into()
            };
        }
        if name.is_empty()
            && matches!(verb.as_str(), "list" | "watch")
            && let Some(selected) = get("fieldSelector").and_then(exact_name)
        {
            name = selected;
        }
        if name.is_empty() && verb == "delete" {
            verb = "deletecollection".into();
        }
        Request::Resource(ResourceRequest {
            verb,
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            namespace: namespace.to_owned(),
            name,
        })
    }

    pub fn verb(&self) -> &str {
        match self {
            Request::Resource(r) => &r.verb,
            Request::NonResource { verb, .. } => verb,
        }
    }
}

/// The name a field selector requires exactly (`metadata.name=x` or `metadata.name==x`, alone or
/// among other terms).
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let rest = term.trim().strip_prefix("metadata.name")?.trim_start();
        let value = rest.strip_prefix("==").or_else(|| rest.strip_prefix('='))?.trim();
        (!value.is_empty()).then(|| value.to_owned())
    })
}

/// The stored RBAC objects, indexed for evaluation.
#[derive(Debug, Default, Clone)]
pub struct Policy {
    cluster_roles: BTreeMap<String, Vec<PolicyRule>>,
    roles: BTreeMap<(String, String), Vec<PolicyRule>>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    role_bindings: Vec<RoleBinding>,
}

/// Why a request was allowed (for logs and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow(String),
    Deny,
}

impl Policy {
    pub fn new(
        cluster_roles: Vec<ClusterRole>,
        roles: Vec<Role>,
        cluster_role_bindings: Vec<ClusterRoleBinding>,
        role_bindings: Vec<RoleBinding>,
    ) -> Self {
        Self {
            cluster_roles: cluster_roles
                .into_iter()
                .map(|r| (r.metadata.name.unwrap_or_default(), r.rules.unwrap_or_default()))
                .collect(),
            roles: roles
                .into_iter()
                .map(|r| {
                    (
                        (
                            r.metadata.namespace.unwrap_or_default(),
                            r.metadata.name.unwrap_or_default(),
                        ),
                        r.rules.unwrap_or_default(),
                    )
                })
                .collect(),
            cluster_role_bindings,
            role_bindings,
        }
    }

    pub fn authorize(&self, user: &User, request: &Request) -> Decision {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Decision::Allow(format!("group {MASTERS}"));
        }
        for b in &self.cluster_role_bindings {
            if !b.subjects.iter().flatten().any(|s| subject_matches(s, user, "")) {
                continue;
            }
            let Some(rules) = (b.role_ref.kind == "ClusterRole")
                .then(|| self.cluster_roles.get(&b.role_ref.name))
                .flatten()
            else {
                continue;
            };
            if rules.iter().any(|r| rule_allows(r, request)) {
                return Decision::Allow(format!(
                    "ClusterRoleBinding {:?} of ClusterRole {:?}",
                    b.metadata.name.as_deref().unwrap_or_default(),
                    b.role_ref.name
                ));
            }
        }
        // RoleBindings grant only namespaced resource requests in their own namespace.
        let Request::Resource(r) = request else {
            return Decision::Deny;
        };
        if r.namespace.is_empty() {
            return Decision::Deny;
        }
        for b in &self.role_bindings {
            let ns = b.metadata.namespace.as_deref().unwrap_or_default();
            if ns != r.namespace || !b.subjects.iter().flatten().any(|s| subject_matches(s, user, ns)) {
                continue;
            }
            let rules = match b.role_ref.kind.as_str() {
                "ClusterRole" => self.cluster_roles.get(&b.role_ref.name),
                "Role" => self.roles.get(&(ns.to_owned(), b.role_ref.name.clone())),
                _ => None,
            };
            if rules.is_some_and(|rules| rules.iter().any(|rule| rule_allows(rule, request))) {
                return Decision::Allow(format!(
                    "RoleBinding {ns}/{} of {} {:?}",
                    b.metadata.name.as_deref().unwrap_or_default(),
                    b.role_ref.kind,
                    b.role_ref.name
                ));
            }
        }
        Decision::Deny
    }
}

/// Whether a binding's subject is `user`; `binding_ns` is where a RoleBinding lives (a
/// ServiceAccount subject without a namespace means that one).
fn subject_matches(s: &Subject, user: &User, binding_ns: &str) -> bool {
    match s.kind.as_str() {
        "User" => s.name == user.name,
        "Group" => user.groups.contains(&s.name),
        "ServiceAccount" => {
            let ns = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            service_account(&user.name) == Some((ns, s.name.as_str()))
        }
        _ => false,
    }
}

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

/// Whether one rule allows `request`.
pub fn rule_allows(rule: &PolicyRule, request: &Request) -> bool {
    if !has(&rule.verbs, request.verb()) {
        return false;
    }
    match request {
        Request::NonResource { path, .. } => rule.non_resource_urls.iter().flatten().any(|u| {
            u == "*" || u == path || u.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
        }),
        Request::Resource(r) => {
            let groups = rule.api_groups.as_deref().unwrap_or_default();
            let resources = rule.resources.as_deref().unwrap_or_default();
            has(groups, &r.group)
                && resource_matches(resources, &r.resource, &r.subresource)
                && names_match(rule.resource_names.as_deref().unwrap_or_default(), &r.name)
        }
    }
}

fn resource_matches(rules: &[String], resource: &str, subresource: &str) -> bool {
    let combined = if subresource.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}/{subresource}")
    };
    rules.iter().any(|r| {
        r == "*" || *r == combined || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
    })
}

fn names_match(names: &[String], name: &str) -> bool {
    names.is_empty() || names.iter().any(|n| n == name)
}

#[cfg(test)]
#[path = "rbac_tests.rs"]
mod tests;
