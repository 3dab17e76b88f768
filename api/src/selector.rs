//! Kubernetes label selectors (`matchLabels` + `matchExpressions`), checked once and then matched
//! against an object's labels: the one implementation the controller (a Subnet's
//! `namespaceSelectors`) and the speaker (a BgpPeer's `nodeSelector`) share.
//!
//! Semantics are Kubernetes' set-based selectors: every requirement must hold; `matchLabels`
//! entries are equality; `In` needs the label with one of the values; `NotIn` holds when the label
//! is absent or has none of the values; `Exists` / `DoesNotExist` look at the key only. A selector
//! with no requirements selects everything. As the API server's validation does, `In`/`NotIn`
//! must list values, `Exists`/`DoesNotExist` must list none, and keys must not be empty; any other
//! operator is an error.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A selector that could not be checked; names the field (from the caller's root) and the fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SelectorError {
    /// Path of the offending field: `spec.namespaceSelectors[1].matchExpressions[0].operator`.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

/// A requirement's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One requirement on one label key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    /// Non-empty for `In` / `NotIn`, empty for `Exists` / `DoesNotExist`.
    pub values: BTreeSet<String>,
}

impl Requirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

/// A checked label selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub requirements: Vec<Requirement>,
}

impl Selector {
    /// Selects everything.
    pub fn everything() -> Self {
        Selector::default()
    }

    /// Checks `selector`, found at `field` (for error messages). Absent selects everything.
    pub fn parse(selector: Option<&LabelSelector>, field: &str) -> Result<Self, SelectorError> {
        let fail = |field: String, problem: String| SelectorError { field, problem };
        let Some(selector) = selector else {
            return Ok(Selector::everything());
        };
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            if key.is_empty() {
                return Err(fail(
                    format!("{field}.matchLabels"),
                    "a label key must not be empty".into(),
                ));
            }
            requirements.push(Requirement {
                key: key.clone(),
                operator: Operator::In,
                values: BTreeSet::from([value.clone()]),
            });
        }
        for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
            let at = format!("{field}.matchExpressions[{i}]");
            if expr.key.is_empty() {
                return Err(fail(format!("{at}.key"), "must not be empty".into()));
            }
            let operator = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(fail(
                        format!("{at}.operator"),
                        format!("{other:?} is not one of In, NotIn, Exists, DoesNotExist"),
                    ));
                }
            };
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            let wants_values = matches!(operator, Operator::In | Operator::NotIn);
            if wants_values && values.is_empty() {
                return Err(fail(
                    format!("{at}.values"),
                    format!("must not be empty for {operator:?}"),
                ));
            }
            if !wants_values && !values.is_empty() {
                return Err(fail(
                    format!("{at}.values"),
                    format!("must be empty for {operator:?}"),
                ));
            }
            requirements.push(Requirement {
                key: expr.key.clone(),
                operator,
                values,
            });
        }
        Ok(Selector { requirements })
    }

    /// Whether an object with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

/// Checks `selector` (at `field`) and matches it against `labels` in one go, for callers that
/// hold the selector only once.
pub fn matches(
    selector: &LabelSelector,
    field: &str,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    Ok(Selector::parse(Some(selector), field)?.matches(labels))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn follows_kubernetes_semantics() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("rack", "r1")])),
            match_expressions: Some(vec![
                requirement("zone", "In", &["a", "b"]),
                requirement("tier", "NotIn", &["edge"]),
                requirement("ovn.kubernetes.io/bgp", "Exists", &[]),
                requirement("drain", "DoesNotExist", &[]),
            ]),
        };
        let s = Selector::parse(Some(&selector), "spec.nodeSelector").unwrap();
        let base = [("rack", "r1"), ("zone", "a"), ("ovn.kubernetes.io/bgp", "true")];
        assert!(s.matches(&labels(&base)));
        let plus = |extra: (&'static str, &'static str)| {
            let mut l = labels(&base);
            l.insert(extra.0.into(), extra.1.into());
            s.matches(&l)
        };
        assert!(plus(("tier", "core")), "NotIn holds for another value");
        assert!(!plus(("tier", "edge")), "NotIn fails for a listed value");
        assert!(
            !plus(("drain", "")),
            "DoesNotExist fails for a present key, even empty"
        );
        assert!(!plus(("rack", "r2")), "matchLabels is equality");
        assert!(!plus(("zone", "c")), "In fails for another value");
        assert!(
            !s.matches(&labels(&[("rack", "r1"), ("ovn.kubernetes.io/bgp", "true")])),
            "In needs the key"
        );
        assert!(
            !s.matches(&labels(&[("rack", "r1"), ("zone", "b")])),
            "Exists needs the key"
        );
        for empty in [None, Some(LabelSelector::default())] {
            let s = Selector::parse(empty.as_ref(), "f").unwrap();
            assert!(s.matches(&labels(&[])) && s.matches(&labels(&[("a", "b")])));
        }
        assert!(matches(&selector, "f", &labels(&base)).unwrap());
    }

    #[test]
    fn invalid_selectors_name_the_field() {
        let one = |r: LabelSelectorRequirement| LabelSelector {
            match_expressions: Some(vec![r]),
            match_labels: None,
        };
        for (selector, field, problem) in [
            (
                one(requirement("k", "Gt", &["1"])),
                "spec.namespaceSelectors[2].matchExpressions[0].operator",
                "\"Gt\" is not one of",
            ),
            (
                one(requirement("k", "In", &[])),
                "spec.namespaceSelectors[2].matchExpressions[0].values",
                "must not be empty for In",
            ),
            (
                one(requirement("k", "Exists", &["x"])),
                "spec.namespaceSelectors[2].matchExpressions[0].values",
                "must be empty for Exists",
            ),
            (
                one(requirement("", "Exists", &[])),
                "spec.namespaceSelectors[2].matchExpressions[0].key",
                "must not be empty",
            ),
            (
                LabelSelector {
                    match_labels: Some(labels(&[("", "v")])),
                    match_expressions: None,
                },
                "spec.namespaceSelectors[2].matchLabels",
                "must not be empty",
            ),
        ] {
            let err = Selector::parse(Some(&selector), "spec.namespaceSelectors[2]").unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.problem.contains(problem), "{err}");
            assert!(err.to_string().starts_with(field), "{err}");
        }
    }
}
