//! RBAC rules flattened into single grants (one verb on one resource, or one object of it), so
//! that what the server's authorizer reports (a SelfSubjectRulesReview, which merges and splits
//! rules its own way) compares with what a rendered Role says as sets.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use k8s_openapi::api::authorization::v1::SubjectRulesReviewStatus;
use serde_json::Value;

/// One permission.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Grant {
    /// `verb` on `group/resource` (a subresource as `resource/sub`), on every object when `name`
    /// is `None`.
    Resource {
        group: String,
        resource: String,
        verb: String,
        name: Option<String>,
    },
    /// `verb` on a non-resource URL (`/healthz`, `/api/*`).
    NonResource { url: String, verb: String },
}

/// Every grant of `(api_groups × resources × verbs × names)`; no names means every object.
fn expand(
    groups: &[String],
    resources: &[String],
    verbs: &[String],
    names: &[String],
    out: &mut BTreeSet<Grant>,
) {
    let names: Vec<Option<String>> = if names.is_empty() {
        vec![None]
    } else {
        names.iter().cloned().map(Some).collect()
    };
    for group in groups {
        for resource in resources {
            for verb in verbs {
                for name in &names {
                    out.insert(Grant::Resource {
                        group: group.clone(),
                        resource: resource.clone(),
                        verb: verb.clone(),
                        name: name.clone(),
                    });
                }
            }
        }
    }
}

/// The grants of a rules review.
pub fn from_review(status: &SubjectRulesReviewStatus) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in &status.resource_rules {
        expand(
            rule.api_groups.as_deref().unwrap_or_default(),
            rule.resources.as_deref().unwrap_or_default(),
            &rule.verbs,
            rule.resource_names.as_deref().unwrap_or_default(),
            &mut out,
        );
    }
    for rule in &status.non_resource_rules {
        for url in rule.non_resource_urls.iter().flatten() {
            for verb in &rule.verbs {
                out.insert(Grant::NonResource {
                    url: url.clone(),
                    verb: verb.clone(),
                });
            }
        }
    }
    out
}

/// The grants of a rendered Role or ClusterRole.
pub fn from_role(role: &Value) -> BTreeSet<Grant> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().expect("RBAC lists hold strings").to_owned())
            .collect()
    };
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().expect("a role has rules") {
        let verbs = strings(&rule["verbs"]);
        for url in strings(&rule["nonResourceURLs"]) {
            for verb in &verbs {
                out.insert(Grant::NonResource {
                    url: url.clone(),
                    verb: verb.clone(),
                });
            }
        }
        expand(
            &strings(&rule["apiGroups"]),
            &strings(&rule["resources"]),
            &verbs,
            &strings(&rule["resourceNames"]),
            &mut out,
        );
    }
    out
}

/// One line per grant, for failure messages (empty for none).
pub fn describe<'a>(grants: impl Iterator<Item = &'a Grant>) -> String {
    let mut out = String::new();
    for g in grants {
        match g {
            Grant::Resource {
                group,
                resource,
                verb,
                name,
            } => {
                let name = name.as_deref().map(|n| format!(" {n}")).unwrap_or_default();
                writeln!(out, "{verb} {group}/{resource}{name}").unwrap();
            }
            Grant::NonResource { url, verb } => writeln!(out, "{verb} {url}").unwrap(),
        }
    }
    out
}

#[test]
fn a_role_flattens_into_one_grant_per_verb_resource_and_name() {
    let role = serde_json::json!({"rules": [
        {"apiGroups": ["", "apps"], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["a"], "verbs": ["patch"]},
        {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}
    ]});
    let grants = from_role(&role);
    assert_eq!(grants.len(), 6);
    assert_eq!(
        describe(grants.iter()),
        "get /pods\nlist /pods\nget apps/pods\nlist apps/pods\npatch coordination.k8s.io/leases a\nget /healthz\n"
    );
}
