//! `metadata.managedFields`: its entries, read from and written back to objects.
//!
//! Pure: no I/O. An entry belongs to a manager identity: for updates the manager name, the
//! operation, the apiVersion and the subresource; for apply the same without the apiVersion, so
//! an applier keeps its entry across versions (Kubernetes' `BuildManagerIdentifier`). Entries
//! are written in the real server's order: Apply before Update, then by time, manager,
//! apiVersion and subresource.

use serde_json::{Map, Value, json};

use super::fieldset::FieldSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "Apply",
            Self::Update => "Update",
        }
    }
}

/// Who owns an entry's fields.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ManagerId {
    pub manager: String,
    pub operation: Operation,
    /// Empty for appliers.
    pub api_version: String,
    /// Empty for the main resource.
    pub subresource: String,
}

impl ManagerId {
    pub fn apply(manager: &str, subresource: Option<&str>) -> Self {
        Self {
            manager: manager.to_owned(),
            operation: Operation::Apply,
            api_version: String::new(),
            subresource: subresource.unwrap_or_default().to_owned(),
        }
    }

    pub fn update(manager: &str, api_version: &str, subresource: Option<&str>) -> Self {
        Self {
            manager: manager.to_owned(),
            operation: Operation::Update,
            api_version: api_version.to_owned(),
            subresource: subresource.unwrap_or_default().to_owned(),
        }
    }

    /// How conflict messages name the manager: `"x"`, `"x" with subresource "status"`,
    /// `"x" using v1` for an updater.
    pub fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s = format!("{s} with subresource {:?}", self.subresource);
        }
        if self.operation == Operation::Update {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }
}

/// One managedFields entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: ManagerId,
    /// The apiVersion the fields are in (for appliers, the one last applied with).
    pub api_version: String,
    pub time: Option<String>,
    pub fields: FieldSet,
}

/// An object's managedFields, decoded, with the JSON they came from.
#[derive(Debug, Clone, Default)]
pub struct Managed {
    pub entries: Vec<Entry>,
    /// The list as stored, written back untouched when the entries do not change, so that a
    /// write that changes nothing stays a no-op.
    original: Option<Value>,
}

impl Managed {
    /// Decodes a managedFields list. Errors say what is malformed.
    pub fn decode(list: Option<&Value>) -> Result<Self, String> {
        let Some(list) = list.filter(|l| !l.is_null()) else {
            return Ok(Self::default());
        };
        let items = list.as_array().ok_or("managedFields must be a list")?;
        let mut entries: Vec<Entry> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let entry = decode_entry(item).map_err(|e| format!("managedFields[{i}]: {e}"))?;
            // Two entries of one identity are one owner.
            match entries.iter_mut().find(|e| e.id == entry.id) {
                Some(existing) => existing.fields.union(&entry.fields),
                None => entries.push(entry),
            }
        }
        Ok(Self {
            entries,
            original: Some(list.clone()),
        })
    }

    /// Decodes, treating malformed managedFields as none (as the API server does with what is
    /// stored).
    pub fn decode_or_empty(list: Option<&Value>) -> Self {
        Self::decode(list).unwrap_or_default()
    }

    pub fn get(&self, id: &ManagerId) -> Option<&Entry> {
        self.entries.iter().find(|e| &e.id == id)
    }

    pub fn get_mut(&mut self, id: &ManagerId) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| &e.id == id)
    }

    /// Drops entries that own nothing.
    pub fn drop_empty(&mut self) {
        self.entries.retain(|e| !e.fields.is_empty());
    }

    /// The list to store, or `None` when no entry is left (the field is then omitted).
    pub fn encode(&self) -> Option<Value> {
        if let Some(original) = &self.original
            && Self::decode(Some(original)).is_ok_and(|d| d.entries == self.entries)
        {
            return Some(original.clone());
        }
        if self.entries.is_empty() {
            return None;
        }
        let mut entries: Vec<&Entry> = self.entries.iter().collect();
        entries.sort_by_key(|e| {
            (
                e.id.operation,
                e.time.as_deref().map_or(0, seconds),
                e.id.manager.clone(),
                e.api_version.clone(),
                e.id.subresource.clone(),
            )
        });
        Some(Value::Array(entries.into_iter().map(encode_entry).collect()))
    }

    /// Stores the entries in `obj`'s metadata (removing the field when none is left).
    pub fn store(&self, obj: &mut Value) {
        let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
            if let Some(list) = self.encode()
                && let Some(o) = obj.as_object_mut()
            {
                o.insert("metadata".into(), json!({"managedFields": list}));
            }
            return;
        };
        match self.encode() {
            Some(list) if list.as_array().is_some_and(|a| !a.is_empty()) => {
                meta.insert("managedFields".into(), list);
            }
            _ => {
                meta.remove("managedFields");
            }
        }
    }
}

fn seconds(time: &str) -> i64 {
    time.parse::<jiff::Timestamp>()
        .map_or(0, jiff::Timestamp::as_second)
}

fn decode_entry(item: &Value) -> Result<Entry, String> {
    let m = item.as_object().ok_or("an entry must be an object")?;
    let text = |k: &str| -> Result<String, String> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("{k} must be a string")),
        }
    };
    let operation = match text("operation")?.as_str() {
        "Apply" => Operation::Apply,
        "Update" => Operation::Update,
        other => return Err(format!("unknown operation {other:?}")),
    };
    let fields_type = text("fieldsType")?;
    if !fields_type.is_empty() && fields_type != "FieldsV1" {
        return Err(format!("unsupported fieldsType {fields_type:?}"));
    }
    let fields = match m.get("fieldsV1") {
        None | Some(Value::Null) => FieldSet::new(),
        Some(v) => FieldSet::from_fields_v1(v)?,
    };
    let api_version = text("apiVersion")?;
    let manager = text("manager")?;
    let subresource = text("subresource")?;
    let id = match operation {
        Operation::Apply => ManagerId::apply(&manager, Some(&subresource)),
        Operation::Update => ManagerId::update(&manager, &api_version, Some(&subresource)),
    };
    let time = text("time")?;
    Ok(Entry {
        id,
        api_version,
        time: (!time.is_empty()).then_some(time),
        fields,
    })
}

fn encode_entry(e: &Entry) -> Value {
    let mut m = Map::new();
    m.insert("manager".into(), json!(e.id.manager));
    m.insert("operation".into(), json!(e.id.operation.as_str()));
    if !e.api_version.is_empty() {
        m.insert("apiVersion".into(), json!(e.api_version));
    }
    if let Some(t) = &e.time {
        m.insert("time".into(), json!(t));
    }
    m.insert("fieldsType".into(), json!("FieldsV1"));
    m.insert("fieldsV1".into(), e.fields.to_fields_v1());
    if !e.id.subresource.is_empty() {
        m.insert("subresource".into(), json!(e.id.subresource));
    }
    Value::Object(m)
}
