//! Reading and writing `metadata` on objects held as JSON.

use serde_json::{Map, Value, json};

pub fn metadata(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// `metadata`, created empty if missing or not an object.
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"].as_object_mut().expect("metadata is an object")
}

pub fn str_field<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    metadata(obj)?.get(field)?.as_str()
}

pub fn name(obj: &Value) -> Option<&str> {
    str_field(obj, "name").filter(|n| !n.is_empty())
}

pub fn namespace(obj: &Value) -> Option<&str> {
    str_field(obj, "namespace").filter(|n| !n.is_empty())
}

pub fn uid(obj: &Value) -> Option<&str> {
    str_field(obj, "uid")
}

pub fn resource_version(obj: &Value) -> Option<&str> {
    str_field(obj, "resourceVersion").filter(|v| !v.is_empty())
}

pub fn is_deleting(obj: &Value) -> bool {
    metadata(obj).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|v| !v.is_null()))
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    metadata(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, finalizers: &[String]) {
    let meta = metadata_mut(obj);
    if finalizers.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), json!(finalizers));
    }
}

/// UIDs of the object's owners.
pub fn owner_uids(obj: &Value) -> Vec<String> {
    metadata(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|o| o.get("uid")?.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Now, in the seconds-precision RFC 3339 form of `metav1.Time`.
pub fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Five characters from the alphabet the real server uses for `generateName` suffixes (no
/// vowels, no look-alike digits).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

/// The name rule of `res`'s objects: RBAC objects' names are path segments (so
/// `system:kube-ovn-controller` is one), every other kind's a DNS-1123 subdomain.
pub fn valid_name_for(res: &super::registry::Resource, name: &str) -> Result<(), String> {
    if res.group != "rbac.authorization.k8s.io" {
        return valid_name(name);
    }
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('%') {
        return Err(format!(
            "Invalid value: {name:?}: may not be '.' or '..' and may not contain '/' or '%'"
        ));
    }
    Ok(())
}

/// A DNS-1123 subdomain, the rule for most object names.
pub fn valid_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

/// The object without `metadata.resourceVersion` and `metadata.managedFields`: what a no-op
/// write is compared on.
pub fn comparable(obj: &Value) -> Value {
    let mut c = obj.clone();
    if let Some(m) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    c
}

/// Everything but `metadata` (and `status`, when it is a subresource): a change here bumps
/// `generation`.
pub fn spec_part(obj: &Value, status_is_subresource: bool) -> Value {
    let mut c = obj.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("metadata");
        if status_is_subresource {
            m.remove("status");
        }
    }
    c
}
