//! Label and field selectors, as the Kubernetes API parses and applies them to lists and watches.
//!
//! Pure: no I/O. Label selectors parse to [`kube_ovn_api::selector::Selector`], so they match
//! as every selector of ours does. They have the full syntax (`k=v`, `k==v`, `k!=v`, `k in (a,b)`,
//! `k notin (a,b)`, `k`, `!k`); `!=` and `notin` match objects that lack the key, as upstream.
//! Field selectors support `=`, `==`, `!=` on the fields each resource allows; any other field is
//! a 400 naming it, as the real API server answers ("field label not supported").

use std::collections::BTreeMap;

use kube_ovn_api::selector::{Operator, Requirement, Selector};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("unable to parse requirement: {0}")]
    Label(String),
    #[error("invalid field selector {selector:?}: {reason}")]
    Field { selector: String, reason: String },
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// The requirements, matched as every selector of ours is ([`Selector::matches`]).
    selector: Selector,
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(SelectorError::Label(format!("empty requirement in {text:?}")));
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(Self {
            selector: Selector { requirements },
        })
    }

    pub fn is_empty(&self) -> bool {
        self.selector.requirements.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches_object(&self, object: &Value) -> bool {
        self.is_empty() || self.matches(&labels_of(object))
    }
}

/// The object's labels; absent or malformed labels are no labels.
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_requirement(part: &str) -> Result<Requirement, SelectorError> {
    let bad = |why: &str| SelectorError::Label(format!("{part:?}: {why}"));
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        validate_key(key).map_err(|e| bad(&e))?;
        return Ok(requirement(key, Operator::DoesNotExist, []));
    }
    // `k!=v` is `k notin (v)` and `k=v` is `k in (v)`: `!=` holds for objects without the key.
    for (token, operator) in [("!=", Operator::NotIn), ("==", Operator::In), ("=", Operator::In)] {
        if let Some((key, value)) = part.split_once(token) {
            let (key, value) = (key.trim(), value.trim());
            validate_key(key).map_err(|e| bad(&e))?;
            validate_value(value).map_err(|e| bad(&e))?;
            return Ok(requirement(key, operator, [value.to_owned()]));
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let key = words[0];
        let rest = words[1].trim_start();
        let (negated, set) = if let Some(s) = rest.strip_prefix("notin") {
            (true, s)
        } else if let Some(s) = rest.strip_prefix("in") {
            (false, s)
        } else {
            return Err(bad("expected =, ==, !=, in or notin"));
        };
        let inner = set
            .trim()
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| bad("expected a parenthesised list of values"))?;
        validate_key(key).map_err(|e| bad(&e))?;
        let values: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
        for v in &values {
            validate_value(v).map_err(|e| bad(&e))?;
        }
        let operator = if negated { Operator::NotIn } else { Operator::In };
        return Ok(requirement(key, operator, values));
    }
    validate_key(part).map_err(|e| bad(&e))?;
    Ok(requirement(part, Operator::Exists, []))
}

fn requirement(key: &str, operator: Operator, values: impl IntoIterator<Item = String>) -> Requirement {
    Requirement {
        key: key.to_owned(),
        operator,
        values: values.into_iter().collect(),
    }
}

/// A qualified name: an optional DNS-subdomain prefix and `/`, then 1–63 characters of
/// alphanumerics, `-`, `_`, `.`, beginning and ending with an alphanumeric.
fn validate_key(key: &str) -> Result<(), String> {
    let name = match key.rsplit_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty() || prefix.len() > 253 {
                return Err(format!("prefix of key {key:?} must be 1-253 characters"));
            }
            name
        }
        None => key,
    };
    if name.is_empty() || name.len() > 63 {
        return Err(format!("name part of key {key:?} must be 1-63 characters"));
    }
    validate_label_chars(name).map_err(|why| format!("key {key:?}: {why}"))
}

/// A label value: empty, or up to 63 characters shaped like a key's name part.
fn validate_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 {
        return Err(format!("value {value:?} is longer than 63 characters"));
    }
    validate_label_chars(value).map_err(|why| format!("value {value:?}: {why}"))
}

fn validate_label_chars(s: &str) -> Result<(), String> {
    let ok_inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let first = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    let last = s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric());
    if first && last && s.chars().all(ok_inner) {
        Ok(())
    } else {
        Err("must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric".into())
    }
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses `selector`, accepting only the fields in `supported` (dotted paths).
    pub fn parse(selector: &str, supported: &[&str]) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for part in split_unescaped(selector, ',') {
            if part.is_empty() {
                if selector.is_empty() {
                    continue;
                }
                return Err(SelectorError::Field {
                    selector: selector.into(),
                    reason: "empty term".into(),
                });
            }
            let (field, equal, value) = if let Some((f, v)) = split_op(&part, "!=") {
                (f, false, v)
            } else if let Some((f, v)) = split_op(&part, "==").or_else(|| split_op(&part, "=")) {
                (f, true, v)
            } else {
                return Err(SelectorError::Field {
                    selector: selector.into(),
                    reason: format!("{part:?} has no =, == or !="),
                });
            };
            if !supported.contains(&field.as_str()) {
                return Err(SelectorError::UnsupportedField(field));
            }
            terms.push((field, equal, unescape(&value)));
        }
        Ok(Self { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Matches an object; a missing field reads as `""`, and booleans as `"true"`/`"false"`.
    /// Boolean fields the API server computes from a Go `bool` (`spec.hostNetwork` of a pod,
    /// `spec.unschedulable` of a node) read as `"false"` when absent, as there.
    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|(field, equal, value)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = match object.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ if matches!(field.as_str(), "spec.hostNetwork" | "spec.unschedulable") => {
                    "false".to_owned()
                }
                _ => String::new(),
            };
            (actual == *value) == *equal
        })
    }
}

fn split_unescaped(text: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in text.chars() {
        if escaped {
            cur.push('\\');
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    out
}

fn split_op(part: &str, op: &str) -> Option<(String, String)> {
    // The operator must not be escaped: find it outside `\x` pairs.
    let bytes = part.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if part[i..].starts_with(op) {
            return Some((part[..i].trim().to_owned(), part[i + op.len()..].to_owned()));
        }
        i += 1;
    }
    None
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn label_selector_operators() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("kubernetes.io/os", "linux")]);
        let yes = [
            "",
            "app=web",
            "app==web",
            "app!=db",
            "missing!=x",
            "app in (web,db)",
            "app notin (db)",
            "missing notin (db)",
            "app",
            "!missing",
            "kubernetes.io/os=linux",
            "app=web,tier in (front, back),!missing",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&l), "{s:?} should match");
        }
        let no = [
            "app=db",
            "app!=web",
            "app in (db)",
            "app notin (web,db)",
            "missing",
            "!app",
            "missing in (x)",
        ];
        for s in no {
            assert!(
                !LabelSelector::parse(s).unwrap().matches(&l),
                "{s:?} should not match"
            );
        }
    }

    #[test]
    fn bad_label_selectors_are_errors() {
        for s in [
            "app=",
            "=web",
            "app in web",
            "app in (a",
            "app=we b",
            "a,,b",
            "-bad=x",
            "app ~ x",
            "!",
        ] {
            let r = LabelSelector::parse(s);
            // `app=` (empty value) is valid upstream; everything else here is not.
            if s == "app=" {
                assert!(r.is_ok());
            } else {
                assert!(r.is_err(), "{s:?} parsed");
            }
        }
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1", "hostNetwork": false},
                          "status": {"phase": "Running"}});
        let supported = [
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "status.phase",
            "spec.hostNetwork",
        ];
        for (s, want) in [
            ("spec.nodeName=n1", true),
            ("spec.nodeName==n1,status.phase!=Failed", true),
            ("spec.nodeName=n2", false),
            ("spec.hostNetwork=false", true),
            ("metadata.name=p,metadata.namespace=ns", true),
            ("status.phase!=Running", false),
        ] {
            assert_eq!(
                FieldSelector::parse(s, &supported).unwrap().matches(&pod),
                want,
                "{s}"
            );
        }
        let unset = json!({"metadata": {"name": "p"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.hostNetwork=false", &supported)
                .unwrap()
                .matches(&unset),
            "an unset bool is false"
        );
        assert_eq!(
            FieldSelector::parse("spec.restartPolicy=Always", &supported),
            Err(SelectorError::UnsupportedField("spec.restartPolicy".into()))
        );
        assert!(FieldSelector::parse("metadata.name", &supported).is_err());
        let escaped = FieldSelector::parse(r"metadata.name=a\,b", &supported).unwrap();
        assert!(escaped.matches(&json!({"metadata": {"name": "a,b"}})));
    }
}
