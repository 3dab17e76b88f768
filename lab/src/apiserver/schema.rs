//! What the API server does with a custom resource's `openAPIV3Schema` before storing it:
//! prune unknown fields (structural schema), apply defaults, validate.
//!
//! Pure: no I/O. The order is the real server's: nulls of non-nullable fields are dropped, unknown
//! fields pruned, defaults filled in, then the result validated (types, `enum`, `required`,
//! `pattern`, bounds). Errors carry the field path (`spec.cidrBlock`) and read like the real
//! server's, so a test can check the field a 422 names. Not done: CEL rules
//! (`x-kubernetes-validations`), `anyOf`/`oneOf`/`not` (they only constrain, never prune).

use serde_json::{Map, Value};

/// One invalid field, as in a 422 `Invalid` Status's `details.causes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, `FieldValueTypeInvalid`.
    pub reason: &'static str,
    /// Dotted path with list indices: `spec.staticRoutes[0].cidr`.
    pub field: String,
    pub message: String,
}

/// Prunes, defaults and validates `object` (a whole custom resource) against its version's
/// `openAPIV3Schema`. `apiVersion`, `kind` and `metadata` are the API server's, never pruned.
pub fn admit(schema: &Value, object: &mut Value) -> Result<(), Vec<FieldError>> {
    admit_noting_pruned(schema, object, &mut Vec::new())
}

/// [`admit`], noting in `pruned` the path of every unknown field it drops (`spec.foo`,
/// `spec.routes[0].bar`): what `fieldValidation=Strict` refuses and `Warn` warns about.
pub fn admit_noting_pruned(
    schema: &Value,
    object: &mut Value,
    pruned: &mut Vec<String>,
) -> Result<(), Vec<FieldError>> {
    let Some(obj) = object.as_object_mut() else {
        return Err(vec![FieldError {
            reason: "FieldValueTypeInvalid",
            field: String::new(),
            message: "the object must be a JSON object".into(),
        }]);
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let keys: Vec<String> = obj.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&key)) {
            Some(sub) => {
                let value = obj.get_mut(&key).expect("key listed above");
                if value.is_null() && !flag(sub, "nullable") {
                    obj.remove(&key);
                } else {
                    prune_and_default(sub, value, &key, pruned);
                }
            }
            None if preserve => {}
            None => {
                pruned.push(key.clone());
                obj.remove(&key);
            }
        }
    }
    if let Some(props) = props {
        apply_defaults(props, obj);
    }
    let mut errors = Vec::new();
    for (key, sub) in props.into_iter().flatten() {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if let Some(value) = obj.get(key) {
            validate(sub, value, key, &mut errors);
        }
    }
    for req in required(schema) {
        if !matches!(req, "apiVersion" | "kind" | "metadata") && !obj.contains_key(req) {
            errors.push(required_error(req));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn required(schema: &Value) -> impl Iterator<Item = &str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn required_error(field: &str) -> FieldError {
    FieldError {
        reason: "FieldValueRequired",
        field: field.to_owned(),
        message: "Required value".into(),
    }
}

/// Prunes unknown fields and fills defaults below `value` (at `path`), noting pruned paths.
fn prune_and_default(schema: &Value, value: &mut Value, path: &str, pruned: &mut Vec<String>) {
    if flag(schema, "x-kubernetes-embedded-resource") || flag(schema, "x-kubernetes-int-or-string") {
        return;
    }
    match value {
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let keys: Vec<String> = obj.keys().cloned().collect();
            for key in keys {
                let sub = props
                    .and_then(|p| p.get(&key))
                    .or_else(|| additional.filter(|a| a.is_object()));
                match sub {
                    Some(sub) => {
                        let v = obj.get_mut(&key).expect("key listed above");
                        if v.is_null() && !flag(sub, "nullable") {
                            obj.remove(&key);
                        } else {
                            prune_and_default(sub, v, &format!("{path}.{key}"), pruned);
                        }
                    }
                    None if preserve || additional == Some(&Value::Bool(true)) => {}
                    None => {
                        pruned.push(format!("{path}.{key}"));
                        obj.remove(&key);
                    }
                }
            }
            if let Some(props) = props {
                apply_defaults(props, obj);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_and_default(item_schema, item, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

fn apply_defaults(props: &Map<String, Value>, obj: &mut Map<String, Value>) {
    for (key, sub) in props {
        if obj.contains_key(key) {
            continue;
        }
        if let Some(default) = sub.get("default") {
            let mut v = default.clone();
            // A default is the schema's own, not the client's: what it prunes is not reported.
            prune_and_default(sub, &mut v, key, &mut Vec::new());
            obj.insert(key.clone(), v);
        }
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn invalid(field: &str, value: &Value, why: &str) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: field.to_owned(),
        message: format!("Invalid value: {}: {why}", show(value)),
    }
}

fn validate(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if value.is_null() {
        if !flag(schema, "nullable") {
            errors.push(invalid(path, value, &format!("{path} in body must not be null")));
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !matches!(json_type(value), "integer" | "string") {
            errors.push(FieldError {
                reason: "FieldValueTypeInvalid",
                field: path.to_owned(),
                message: format!(
                    "Invalid value: {}: {path} in body must be of type integer or string",
                    show(value)
                ),
            });
        }
        return;
    }
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let got = json_type(value);
        let fits = got == want || (want == "number" && got == "integer");
        if !fits {
            errors.push(FieldError {
                reason: "FieldValueTypeInvalid",
                field: path.to_owned(),
                message: format!(
                    "Invalid value: {}: {path} in body must be of type {want}: {got:?}",
                    show(value)
                ),
            });
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list = allowed.iter().map(show).collect::<Vec<_>>().join(", ");
        errors.push(FieldError {
            reason: "FieldValueNotSupported",
            field: path.to_owned(),
            message: format!("Unsupported value: {}: supported values: {list}", show(value)),
        });
    }
    match value {
        Value::String(s) => validate_string(schema, value, s, path, errors),
        Value::Number(_) => validate_number(schema, value, path, errors),
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && n > max
            {
                errors.push(invalid(
                    path,
                    value,
                    &format!("{path} in body should have at most {max} items"),
                ));
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && n < min
            {
                errors.push(invalid(
                    path,
                    value,
                    &format!("{path} in body should have at least {min} items"),
                ));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, v) in obj {
                if let Some(sub) = props.and_then(|p| p.get(key)).or(additional) {
                    validate(sub, v, &format!("{path}.{key}"), errors);
                }
            }
            for req in required(schema) {
                if !obj.contains_key(req) {
                    errors.push(required_error(&format!("{path}.{req}")));
                }
            }
        }
        _ => {}
    }
}

fn validate_string(schema: &Value, value: &Value, s: &str, path: &str, errors: &mut Vec<FieldError>) {
    let len = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        errors.push(FieldError {
            reason: "FieldValueTooLong",
            field: path.to_owned(),
            message: format!("Too long: may not be more than {max} bytes"),
        });
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        errors.push(invalid(
            path,
            value,
            &format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match regex::Regex::new(pattern) {
            Ok(re) if !re.is_match(s) => {
                errors.push(invalid(
                    path,
                    value,
                    &format!("{path} in body should match '{pattern}'"),
                ));
            }
            Ok(_) => {}
            Err(e) => errors.push(invalid(
                path,
                value,
                &format!("the schema's pattern {pattern:?} is invalid: {e}"),
            )),
        }
    }
}

fn validate_number(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(x) = value.as_f64() else { return };
    let exclusive = |k: &str| flag(schema, k);
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let over = if exclusive("exclusiveMaximum") {
            x >= max
        } else {
            x > max
        };
        if over {
            let op = if exclusive("exclusiveMaximum") {
                "less than"
            } else {
                "less than or equal to"
            };
            errors.push(invalid(
                path,
                value,
                &format!("{path} in body should be {op} {max}"),
            ));
        }
    }
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let under = if exclusive("exclusiveMinimum") {
            x <= min
        } else {
            x < min
        };
        if under {
            let op = if exclusive("exclusiveMinimum") {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errors.push(invalid(
                path,
                value,
                &format!("{path} in body should be {op} {min}"),
            ));
        }
    }
    if schema.get("format").and_then(Value::as_str) == Some("int32")
        && value.as_i64().is_none_or(|i| i32::try_from(i).is_err())
    {
        errors.push(invalid(
            path,
            value,
            &format!("{path} in body must be of format int32"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["subnet"], "properties": {
                "subnet": {"type": "string"},
                "type": {"type": "string", "enum": ["exclusive", "share"], "default": "exclusive"},
                "id": {"type": "integer", "minimum": 0, "maximum": 4095},
                "name": {"type": "string", "maxLength": 15, "pattern": "^[a-z]+$"},
                "routes": {"type": "array", "items": {"type": "object", "properties": {"cidr": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "bfd": {"type": "object", "properties": {"enabled": {"type": "boolean", "default": false}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "port": {"x-kubernetes-int-or-string": true}
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
        }})
    }

    #[test]
    fn prunes_unknown_fields_and_applies_defaults() {
        let mut obj = json!({"apiVersion": "kubeovn.io/v1", "kind": "X", "metadata": {"name": "a", "junk": 1},
            "spec": {"subnet": "s", "typo": true, "routes": [{"cidr": "0.0.0.0/0", "nexthop": "x"}],
                     "labels": {"a": "b"}, "bfd": {}, "free": {"any": {"thing": 1}}, "port": "http"},
            "extra": 1});
        admit(&schema(), &mut obj).unwrap();
        assert_eq!(obj["spec"].get("typo"), None);
        assert_eq!(obj.get("extra"), None);
        assert_eq!(obj["spec"]["routes"][0], json!({"cidr": "0.0.0.0/0"}));
        assert_eq!(obj["spec"]["type"], json!("exclusive"));
        assert_eq!(obj["spec"]["bfd"], json!({"enabled": false}));
        assert_eq!(obj["spec"]["free"], json!({"any": {"thing": 1}}));
        assert_eq!(
            obj["metadata"]["junk"],
            json!(1),
            "metadata belongs to the API server"
        );
    }

    #[test]
    fn validation_errors_name_the_field() {
        let cases = [
            (json!({"spec": {}}), "spec.subnet", "FieldValueRequired"),
            (
                json!({"spec": {"subnet": "s", "type": "odd"}}),
                "spec.type",
                "FieldValueNotSupported",
            ),
            (
                json!({"spec": {"subnet": "s", "id": "7"}}),
                "spec.id",
                "FieldValueTypeInvalid",
            ),
            (
                json!({"spec": {"subnet": "s", "id": 5000}}),
                "spec.id",
                "FieldValueInvalid",
            ),
            (
                json!({"spec": {"subnet": "s", "name": "ABC"}}),
                "spec.name",
                "FieldValueInvalid",
            ),
            (
                json!({"spec": {"subnet": "s", "name": "abcdefghijklmnop"}}),
                "spec.name",
                "FieldValueTooLong",
            ),
            (
                json!({"spec": {"subnet": "s", "routes": [{"cidr": 1}]}}),
                "spec.routes[0].cidr",
                "FieldValueTypeInvalid",
            ),
            (
                json!({"spec": {"subnet": "s", "labels": {"a": 1}}}),
                "spec.labels.a",
                "FieldValueTypeInvalid",
            ),
            (
                json!({"spec": {"subnet": "s", "port": true}}),
                "spec.port",
                "FieldValueTypeInvalid",
            ),
        ];
        for (mut obj, field, reason) in cases {
            let errs = admit(&schema(), &mut obj).unwrap_err();
            assert!(
                errs.iter().any(|e| e.field == field && e.reason == reason),
                "{obj}: {errs:?}"
            );
        }
    }

    #[test]
    fn pruned_fields_are_noted_with_their_paths() {
        let mut obj = json!({"spec": {"subnet": "s", "typo": 1, "routes": [{"cidr": "c", "via": "x"}],
                                      "free": {"kept": 1}, "labels": {"any": "thing"}}, "extra": 1});
        let mut pruned = Vec::new();
        admit_noting_pruned(&schema(), &mut obj, &mut pruned).unwrap();
        pruned.sort();
        assert_eq!(pruned, ["extra", "spec.routes[0].via", "spec.typo"]);
    }

    #[test]
    fn nulls_of_non_nullable_fields_are_dropped_then_defaulted() {
        let mut obj = json!({"spec": {"subnet": "s", "type": null}});
        admit(&schema(), &mut obj).unwrap();
        assert_eq!(obj["spec"]["type"], json!("exclusive"));
    }
}
