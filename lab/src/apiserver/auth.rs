//! Authentication and authorization in front of every request, with kube-apiserver's flags:
//! `--token-auth-file` (bearer tokens → users) and `--authorization-mode` (`AlwaysAllow`, the
//! default, or `RBAC`, decided by [`rbac`] from the RBAC objects stored in the emulator itself).
//!
//! So the lab can run each component with its own ServiceAccount's identity and a missing
//! permission is a real 403. Each denial is kept (`GET /debug/authorization/denials`) and
//! logged at warn; each allowed request's (user, verb, group, resource, subresource) is kept in
//! a set (`GET /debug/authorization/requests`), so a test can compare what a component did with
//! what its ClusterRole grants. Both debug paths answer anyone: they are the lab's, not the API's.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::rbac::{Decision, Policy, Request, User};
use super::selectors::{FieldSelector, LabelSelector};
use super::store::Store;

pub const DENIALS_PATH: &str = "/debug/authorization/denials";
pub const REQUESTS_PATH: &str = "/debug/authorization/requests";

/// `--authorization-mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Every request is allowed (the emulator's behaviour before RBAC existed).
    #[default]
    AlwaysAllow,
    /// Requests are authorized from the stored Roles, ClusterRoles and bindings.
    Rbac,
}

impl std::str::FromStr for AuthorizationMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "AlwaysAllow" => Ok(Self::AlwaysAllow),
            "RBAC" => Ok(Self::Rbac),
            other => Err(format!(
                "unsupported authorization mode {other:?}: use AlwaysAllow or RBAC"
            )),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    pub mode: AuthorizationMode,
    /// Bearer token → user. Empty: no token authentication (every request is anonymous, and
    /// tokens are ignored).
    pub tokens: HashMap<String, User>,
}

#[derive(Debug, thiserror::Error)]
#[error("token file line {line}: {why}")]
pub struct TokenFileError {
    pub line: usize,
    pub why: String,
}

/// Parses a static token file as kube-apiserver's `--token-auth-file` reads it: CSV lines
/// `token,user,uid[,"group1,group2"]`. Blank lines and lines starting with `#` are skipped.
pub fn parse_token_file(text: &str) -> Result<HashMap<String, User>, TokenFileError> {
    let mut tokens = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let err = |why: String| TokenFileError { line: line_no, why };
        let fields = csv_fields(trimmed).map_err(err)?;
        if fields.len() < 3 {
            return Err(err(format!(
                "{} fields; want token,user,uid[,\"group1,group2\"]",
                fields.len()
            )));
        }
        let (token, user, uid) = (&fields[0], &fields[1], &fields[2]);
        if token.is_empty() || user.is_empty() {
            return Err(err("the token and the user name must not be empty".into()));
        }
        let groups: Vec<String> = fields
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if tokens
            .insert(token.clone(), User::authenticated(user, uid, &groups))
            .is_some()
        {
            return Err(err(format!("token of user {user:?} is used twice")));
        }
    }
    Ok(tokens)
}

/// The fields of one CSV line; `"…"` quotes a field, `""` inside it is a quote.
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => quoted = false,
            ('"', false) if field.trim().is_empty() && !was_quoted => {
                field.clear();
                quoted = true;
                was_quoted = true;
            }
            (',', false) => {
                fields.push(std::mem::take(&mut field).trim().to_owned());
                was_quoted = false;
            }
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err("a quoted field is not closed".into());
    }
    fields.push(field.trim().to_owned());
    Ok(fields)
}

/// One allowed request, as kept in the set at [`REQUESTS_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    user: String,
    verb: String,
    group: String,
    resource: String,
    subresource: String,
    /// Set for non-resource requests (and then resource is empty).
    path: String,
}

/// The authenticator and authorizer of one server, with what they saw.
#[derive(Debug, Default)]
pub struct Auth {
    config: AuthConfig,
    denials: Mutex<Vec<Value>>,
    seen: Mutex<BTreeSet<Seen>>,
}

impl Auth {
    pub fn new(config: AuthConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// Runs before the API: answers the debug paths, refuses an unknown token (401) or a request
    /// the policy does not allow (403). `None` lets the request through.
    pub fn gate(&self, store: &Store, method: &Method, uri: &Uri, headers: &HeaderMap) -> Option<Response> {
        if *method == Method::GET {
            match uri.path() {
                DENIALS_PATH => return Some(ok(&Value::Array(lock(&self.denials).clone()))),
                REQUESTS_PATH => return Some(ok(&self.requests())),
                _ => {}
            }
        }
        let Some(user) = self.authenticate(headers) else {
            return Some(json_response(
                StatusCode::UNAUTHORIZED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": "Unauthorized", "reason": "Unauthorized", "code": 401}),
            ));
        };
        let query: Vec<(String, String)> = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
        let request = Request::parse(method.as_str(), uri.path(), &query);
        if self.config.mode == AuthorizationMode::Rbac
            && let Decision::Deny = policy(store).authorize(&user, &request)
        {
            return Some(self.deny(&user, &request));
        }
        lock(&self.seen).insert(seen(&user, &request));
        None
    }

    /// The request's user; `None` for a token that is not in the file (a 401).
    fn authenticate(&self, headers: &HeaderMap) -> Option<User> {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match bearer {
            _ if self.config.tokens.is_empty() => Some(User::anonymous()),
            None => Some(User::anonymous()),
            Some(token) => self.config.tokens.get(token).cloned(),
        }
    }

    fn deny(&self, user: &User, request: &Request) -> Response {
        let status = forbidden(user, request);
        let message = status["message"].as_str().unwrap_or_default().to_owned();
        tracing::warn!(user = %user.name, verb = request.verb(), %message, "request forbidden");
        let mut record = json!({"user": user.name, "groups": user.groups, "verb": request.verb(),
                                "message": message, "time": jiff::Timestamp::now().to_string()});
        match request {
            Request::Resource(r) => {
                record["group"] = json!(r.group);
                record["resource"] = json!(r.resource);
                record["subresource"] = json!(r.subresource);
                record["namespace"] = json!(r.namespace);
                record["name"] = json!(r.name);
            }
            Request::NonResource { path, .. } => record["path"] = json!(path),
        }
        lock(&self.denials).push(record);
        json_response(StatusCode::FORBIDDEN, &status)
    }

    fn requests(&self) -> Value {
        lock(&self.seen)
            .iter()
            .map(|s| {
                if s.path.is_empty() {
                    json!({"user": s.user, "verb": s.verb, "group": s.group, "resource": s.resource,
                           "subresource": s.subresource})
                } else {
                    json!({"user": s.user, "verb": s.verb, "path": s.path})
                }
            })
            .collect()
    }
}

fn seen(user: &User, request: &Request) -> Seen {
    match request {
        Request::Resource(r) => Seen {
            user: user.name.clone(),
            verb: r.verb.clone(),
            group: r.group.clone(),
            resource: r.resource.clone(),
            subresource: r.subresource.clone(),
            path: String::new(),
        },
        Request::NonResource { verb, path } => Seen {
            user: user.name.clone(),
            verb: verb.clone(),
            group: String::new(),
            resource: String::new(),
            subresource: String::new(),
            path: path.clone(),
        },
    }
}

/// What a server's [`DENIALS_PATH`] lists, asked through a client of it (tests and the lab).
pub async fn denials(kube: &kube::Client) -> Result<Vec<Value>, kube::Error> {
    debug_list(kube, DENIALS_PATH).await
}

/// What a server's [`REQUESTS_PATH`] lists: `{user, verb, group, resource, subresource}` (or
/// `{user, verb, path}`) for every distinct allowed request.
pub async fn requests(kube: &kube::Client) -> Result<Vec<Value>, kube::Error> {
    debug_list(kube, REQUESTS_PATH).await
}

async fn debug_list(kube: &kube::Client, path: &str) -> Result<Vec<Value>, kube::Error> {
    let request = axum::http::Request::get(path)
        .body(Vec::new())
        .expect("a GET of a fixed path is a valid request");
    let list: Vec<Value> = kube.request(request).await?;
    Ok(list)
}

/// The 403 Status kube-apiserver answers, its message naming the user, verb, resource, group
/// and namespace (or path).
pub fn forbidden(user: &User, request: &Request) -> Value {
    let (message, details) = match request {
        Request::NonResource { verb, path } => (
            format!("forbidden: User {:?} cannot {verb} path {path:?}", user.name),
            json!({}),
        ),
        Request::Resource(r) => {
            let combined = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let scope = if r.namespace.is_empty() {
                "at the cluster scope".to_owned()
            } else {
                format!("in the namespace {:?}", r.namespace)
            };
            let what = if r.group.is_empty() {
                r.resource.clone()
            } else {
                format!("{}.{}", r.resource, r.group)
            };
            let subject = if r.name.is_empty() {
                what
            } else {
                format!("{what} {:?}", r.name)
            };
            let mut details = json!({"group": r.group, "kind": r.resource});
            if !r.name.is_empty() {
                details["name"] = json!(r.name);
            }
            (
                format!(
                    "{subject} is forbidden: User {:?} cannot {} resource {combined:?} in API group {:?} {scope}",
                    user.name, r.verb, r.group
                ),
                details,
            )
        }
    };
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": "Forbidden", "details": details, "code": 403})
}

/// The stored policy plus the bootstrap policy every cluster has.
fn policy(store: &Store) -> Policy {
    let (mut cluster_roles, mut cluster_role_bindings) = bootstrap();
    cluster_roles.extend(stored::<ClusterRole>(store, "clusterroles"));
    cluster_role_bindings.extend(stored::<ClusterRoleBinding>(store, "clusterrolebindings"));
    Policy::new(
        cluster_roles,
        stored::<Role>(store, "roles"),
        cluster_role_bindings,
        stored::<RoleBinding>(store, "rolebindings"),
    )
}

fn stored<K: DeserializeOwned>(store: &Store, plural: &str) -> Vec<K> {
    let Some(res) = store.resource("rbac.authorization.k8s.io", "v1", plural) else {
        return Vec::new();
    };
    let Ok(page) = store.list(
        &res,
        None,
        &LabelSelector::default(),
        &FieldSelector::default(),
        None,
        None,
    ) else {
        return Vec::new();
    };
    page.items
        .iter()
        .filter_map(|o| match serde_json::from_value((**o).clone()) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::warn!(plural, error = %e, object = %o, "RBAC object ignored: it does not parse");
                None
            }
        })
        .collect()
}

/// What kube-apiserver's bootstrap policy grants to everyone: discovery, version and health to
/// authenticated users (`system:discovery`), version and health to anyone
/// (`system:public-info-viewer`). Built in rather than stored, so a fresh emulator has them.
fn bootstrap() -> (Vec<ClusterRole>, Vec<ClusterRoleBinding>) {
    let health = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let discovery = ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*"];
    let role = |name: &str, urls: Vec<&str>| -> ClusterRole {
        serde_json::from_value(json!({"metadata": {"name": name},
            "rules": [{"nonResourceURLs": urls, "verbs": ["get"]}]}))
        .expect("a valid ClusterRole")
    };
    let binding = |name: &str, groups: &[&str]| -> ClusterRoleBinding {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g}))
            .collect();
        serde_json::from_value(json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subjects}))
        .expect("a valid ClusterRoleBinding")
    };
    let mut authenticated: Vec<&str> = health.to_vec();
    authenticated.extend(discovery);
    (
        vec![
            role("system:discovery", authenticated),
            role("system:public-info-viewer", health.to_vec()),
        ],
        vec![
            binding("system:discovery", &["system:authenticated"]),
            binding(
                "system:public-info-viewer",
                &["system:authenticated", "system:unauthenticated"],
            ),
        ],
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn ok(body: &Value) -> Response {
    json_response(StatusCode::OK, body)
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    super::http::json_response(code, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_parse_as_kube_apiserver_reads_them() {
        let text = "# admin\n\
                    admin-token,admin,1,\"system:masters\"\n\
                    \n\
                    ctl-token,system:serviceaccount:kube-system:kube-ovn-controller,2\n\
                    ops-token, carol ,3,\"ops, dev\"\n";
        let tokens = parse_token_file(text).unwrap();
        assert_eq!(tokens.len(), 3);
        assert_eq!(
            tokens["admin-token"].groups,
            ["system:masters", "system:authenticated"]
        );
        let ctl = &tokens["ctl-token"];
        assert_eq!(ctl.uid, "2");
        assert_eq!(
            ctl.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                "system:authenticated"
            ]
        );
        assert_eq!(tokens["ops-token"].name, "carol");
        assert_eq!(tokens["ops-token"].groups, ["ops", "dev", "system:authenticated"]);
    }

    #[test]
    fn bad_token_files_name_the_line() {
        let e = parse_token_file("a,b,c\nonly-two,fields\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().contains("2 fields"), "{e}");
        let e = parse_token_file("t,u,1,\"g1,g2\nt2,u2,2\n").unwrap_err();
        assert!(e.to_string().contains("not closed"), "{e}");
        let e = parse_token_file("t,u,1\nt,v,2\n").unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
    }

    #[test]
    fn forbidden_messages_have_kubernetes_shape() {
        let user = User::authenticated("system:serviceaccount:kube-system:kube-ovn-cni", "", &[]);
        let r = Request::parse("PATCH", "/apis/kubeovn.io/v1/subnets/s1/status", &[]);
        let s = forbidden(&user, &r);
        assert_eq!(s["code"], 403);
        assert_eq!(s["reason"], "Forbidden");
        assert_eq!(
            s["message"],
            "subnets.kubeovn.io \"s1\" is forbidden: User \"system:serviceaccount:kube-system:kube-ovn-cni\" \
             cannot patch resource \"subnets/status\" in API group \"kubeovn.io\" at the cluster scope"
        );
        assert_eq!(
            s["details"],
            json!({"group": "kubeovn.io", "kind": "subnets", "name": "s1"})
        );
        let r = Request::parse("GET", "/api/v1/namespaces/kube-system/secrets", &[]);
        assert_eq!(
            forbidden(&user, &r)["message"],
            "secrets is forbidden: User \"system:serviceaccount:kube-system:kube-ovn-cni\" cannot list \
             resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
        );
        let r = Request::parse("GET", "/metrics", &[]);
        assert_eq!(
            forbidden(&user, &r)["message"],
            "forbidden: User \"system:serviceaccount:kube-system:kube-ovn-cni\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn modes_parse_by_kube_apiserver_names() {
        assert_eq!("RBAC".parse(), Ok(AuthorizationMode::Rbac));
        assert_eq!("AlwaysAllow".parse(), Ok(AuthorizationMode::AlwaysAllow));
        assert!("Node,RBAC".parse::<AuthorizationMode>().is_err());
    }
}
