//! kube-apiserver's audit log (JSON lines, one `audit.k8s.io/v1` Event per request) read back:
//! who asked for what and how the server answered. A 403 is a permission the requester's roles
//! lack: the lab's `status` and the RBAC tests report those.

use std::fmt;
use std::path::Path;

use serde::Deserialize;

/// One request, from its `ResponseComplete` (or `Panic`) event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedRequest {
    pub user: String,
    pub verb: String,
    /// `group/resource[/subresource]` (group empty for the core API), or the non-resource
    /// path (`/healthz`).
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub code: u16,
    pub message: String,
}

impl AuditedRequest {
    pub fn is_denial(&self) -> bool {
        self.code == 403
    }
}

impl fmt::Display for AuditedRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.user, self.verb, self.resource)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(name) = &self.name {
            write!(f, " named {name}")?;
        }
        write!(f, ": {}", self.code)?;
        if !self.message.is_empty() {
            write!(f, " ({})", self.message)?;
        }
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    stage: String,
    verb: String,
    // Go's spelling, not camelCase's `requestUri`.
    #[serde(default, rename = "requestURI")]
    request_uri: String,
    user: User,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<Status>,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    api_group: String,
    #[serde(default)]
    subresource: Option<String>,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
}

/// The requests of an audit log's text; lines that are not completed requests (a line cut by a
/// concurrent write, another stage) are skipped.
pub fn parse(text: &str) -> Vec<AuditedRequest> {
    text.lines()
        .filter_map(|line| serde_json::from_str::<Event>(line).ok())
        .filter(|e| e.stage == "ResponseComplete" || e.stage == "Panic")
        .map(|e| {
            let (resource, namespace, name) = match e.object_ref {
                Some(o) => {
                    let mut resource = format!("{}/{}", o.api_group, o.resource);
                    if let Some(sub) = o.subresource {
                        resource.push('/');
                        resource.push_str(&sub);
                    }
                    (resource, o.namespace, o.name)
                }
                None => (
                    e.request_uri.split('?').next().unwrap_or_default().to_owned(),
                    None,
                    None,
                ),
            };
            let status = e.response_status.unwrap_or(Status {
                code: 0,
                message: String::new(),
            });
            AuditedRequest {
                user: e.user.username,
                verb: e.verb,
                resource,
                namespace,
                name,
                code: status.code,
                message: status.message,
            }
        })
        .collect()
}

/// The requests in the log at `path` (none while it does not exist).
pub fn read(path: &Path) -> Vec<AuditedRequest> {
    std::fs::read_to_string(path)
        .map(|text| parse(&text))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_denial_and_skips_other_stages_and_torn_lines() {
        let text = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/kube-system/secrets/x","verb":"get","user":{"username":"system:serviceaccount:kube-system:kube-ovn-cni","groups":["system:serviceaccounts"]},"objectRef":{"resource":"secrets","namespace":"kube-system","name":"x","apiVersion":"v1"},"responseStatus":{"metadata":{},"status":"Failure","message":"secrets \"x\" is forbidden","reason":"Forbidden","code":403}}
{"kind":"Event","stage":"ResponseStarted","verb":"watch","requestURI":"/api/v1/pods","user":{"username":"u"}}
{"kind":"Event","stage":"ResponseComplete","verb":"get","requestURI":"/healthz?timeout=1s","user":{"username":"system:anonymous"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","stage":"ResponseComp"#;
        let requests = parse(text);
        assert_eq!(requests.len(), 2);
        assert!(requests[0].is_denial());
        assert_eq!(requests[0].resource, "/secrets");
        assert_eq!(
            requests[0].to_string(),
            "system:serviceaccount:kube-system:kube-ovn-cni get /secrets in kube-system named x: 403 (secrets \"x\" is forbidden)"
        );
        assert_eq!(requests[1].resource, "/healthz");
        assert!(!requests[1].is_denial());
    }
}
