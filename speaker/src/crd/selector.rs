//! Label selectors (`matchLabels` + `matchExpressions`) checked once and matched against a
//! node's labels, with the semantics of Kubernetes' set-based selectors: every requirement must
//! hold; `In` needs the label with one of the values, `NotIn` holds when the label is absent or
//! has none of the values, `Exists` / `DoesNotExist` look at the key only. A selector with no
//! requirements selects every node.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::validate::CrdError;

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
    /// Every node.
    pub fn everything() -> Self {
        Selector::default()
    }

    /// Checks `selector` (found at `field`, for error messages): operators must be one of the
    /// four, `In`/`NotIn` need values, `Exists`/`DoesNotExist` must have none, keys must not be
    /// empty. Absent means every node.
    pub fn parse(selector: Option<&LabelSelector>, field: &str) -> Result<Self, CrdError> {
        let Some(selector) = selector else {
            return Ok(Selector::everything());
        };
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            if key.is_empty() {
                return Err(CrdError::new(
                    format!("{field}.matchLabels"),
                    "a label key must not be empty",
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
                return Err(CrdError::new(format!("{at}.key"), "must not be empty"));
            }
            let operator = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(CrdError::new(
                        format!("{at}.operator"),
                        format!("{other:?} is not one of In, NotIn, Exists, DoesNotExist"),
                    ));
                }
            };
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            let wants_values = matches!(operator, Operator::In | Operator::NotIn);
            if wants_values && values.is_empty() {
                return Err(CrdError::new(
                    format!("{at}.values"),
                    format!("must not be empty for {operator:?}"),
                ));
            }
            if !wants_values && !values.is_empty() {
                return Err(CrdError::new(
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

    /// True when a node with `labels` is selected.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}
