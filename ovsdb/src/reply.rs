//! Transaction replies (RFC 7047 §4.1.3): per-operation results, or a [`TransactError`] that
//! names the operation, its table and row, and the server's error and details.
//!
//! Pure: no I/O.

use serde_json::Value as Json;
use uuid::Uuid;

use crate::data::{Atom, Row};
use crate::ops::Operation;

/// The result of one successful operation.
#[derive(Clone, Debug, PartialEq)]
pub enum OperationResult {
    /// `insert`: the new row's UUID.
    Inserted(Uuid),
    /// `select`: the matching rows (with `_uuid` and `_version` when selected).
    Rows(Vec<Row>),
    /// `update`, `mutate`, `delete`: how many rows matched.
    Count(u64),
    /// `wait`, `commit`, `comment`, `assert`, `abort`.
    Empty,
}

impl OperationResult {
    pub fn uuid(&self) -> Option<Uuid> {
        match self {
            Self::Inserted(u) => Some(*u),
            _ => None,
        }
    }

    pub fn count(&self) -> Option<u64> {
        match self {
            Self::Count(c) => Some(*c),
            _ => None,
        }
    }

    pub fn rows(&self) -> Option<&[Row]> {
        match self {
            Self::Rows(r) => Some(r),
            _ => None,
        }
    }
}

/// Why a transaction did not commit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransactError {
    /// Operation `index` failed; the server did not run the ones after it.
    #[error(
        "operation {index} ({op} on {table}, {target}) failed: {error}{}",
        details.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
    )]
    Operation {
        index: usize,
        op: &'static str,
        table: String,
        target: String,
        error: String,
        details: Option<String>,
    },
    /// Every operation succeeded but the commit did not (referential integrity, a unique index,
    /// a constraint checked at commit). `table` and `row` come from the server's details.
    #[error(
        "commit failed: {error}{}{}: {details}",
        table.as_deref().map(|t| format!(" in table {t}")).unwrap_or_default(),
        row.map(|r| format!(" row {r}")).unwrap_or_default()
    )]
    Commit {
        error: String,
        details: String,
        table: Option<String>,
        row: Option<Uuid>,
    },
    /// The reply does not have the shape RFC 7047 §4.1.3 gives it.
    #[error("malformed transact reply: {0}")]
    MalformedReply(String),
}

/// Turns a `transact` reply into results, one per operation.
pub fn parse_transact_reply(
    ops: &[Operation],
    reply: &[Json],
) -> Result<Vec<OperationResult>, TransactError> {
    let mut results = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        let Some(item) = reply.get(index) else {
            return Err(TransactError::MalformedReply(format!(
                "{} results for {} operations",
                reply.len(),
                ops.len()
            )));
        };
        if let Some(error) = item.get("error").and_then(Json::as_str) {
            return Err(TransactError::Operation {
                index,
                op: op.name(),
                table: op.table().unwrap_or("-").to_owned(),
                target: op.target(),
                error: error.to_owned(),
                details: item.get("details").and_then(Json::as_str).map(str::to_owned),
            });
        }
        results.push(
            parse_one(op, item)
                .map_err(|e| TransactError::MalformedReply(format!("operation {index}: {e}")))?,
        );
    }
    // RFC 7047 §4.1.3: one more element than operations means the commit itself failed.
    if let Some(extra) = reply.get(ops.len())
        && let Some(error) = extra.get("error").and_then(Json::as_str)
    {
        let details = extra
            .get("details")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_owned();
        let (table, row) = commit_error_subject(&details);
        return Err(TransactError::Commit {
            error: error.to_owned(),
            details,
            table,
            row,
        });
    }
    Ok(results)
}

fn parse_one(op: &Operation, item: &Json) -> Result<OperationResult, String> {
    Ok(match op {
        Operation::Insert { .. } => {
            let uuid: Atom =
                serde_json::from_value(item.get("uuid").cloned().ok_or("insert result without uuid")?)
                    .map_err(|e| e.to_string())?;
            OperationResult::Inserted(uuid.as_uuid().ok_or("insert result uuid is not a uuid")?)
        }
        Operation::Select { .. } => {
            let rows = item.get("rows").cloned().ok_or("select result without rows")?;
            OperationResult::Rows(serde_json::from_value(rows).map_err(|e| e.to_string())?)
        }
        Operation::Update { .. } | Operation::Mutate { .. } | Operation::Delete { .. } => {
            OperationResult::Count(
                item.get("count")
                    .and_then(Json::as_u64)
                    .ok_or("result without count")?,
            )
        }
        _ => OperationResult::Empty,
    })
}

/// Finds the table and row a commit error's details talk about. ovsdb-server phrases them as
/// "Table Logical_Switch column ports row <uuid> references nonexistent row …" (referential
/// integrity) and "Transaction causes multiple rows in \"Logical_Switch_Port\" table to have
/// identical values … First row, with UUID <uuid>, …" (unique index).
fn commit_error_subject(details: &str) -> (Option<String>, Option<Uuid>) {
    let word_after = |marker: &str| {
        details.find(marker).map(|i| {
            details[i + marker.len()..]
                .split(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '.')
                .find(|w| !w.is_empty())
                .unwrap_or_default()
                .to_owned()
        })
    };
    let table = word_after("Table ")
        .or_else(|| word_after("rows in \""))
        .filter(|t| !t.is_empty());
    let row = ["row ", "UUID "]
        .iter()
        .filter_map(|m| word_after(m))
        .find_map(|w| Uuid::parse_str(&w).ok());
    (table, row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Row;
    use crate::ops::{Condition, Operation};
    use serde_json::json;

    #[test]
    fn operation_error_names_table_and_target() {
        let ops = vec![
            Operation::comment("x"),
            Operation::delete("Logical_Switch", vec![Condition::eq("name", "ls1")]),
        ];
        let reply = vec![
            json!({}),
            json!({"error": "constraint violation", "details": "d"}),
            Json::Null,
        ];
        let err = parse_transact_reply(&ops, &reply).unwrap_err();
        assert_eq!(
            err.to_string(),
            "operation 1 (delete on Logical_Switch, name == \"ls1\") failed: constraint violation: d"
        );
    }

    #[test]
    fn commit_errors_extract_table_and_row() {
        let ops = vec![Operation::insert("Logical_Switch", Row::new())];
        let u = Uuid::new_v4();
        let reply = vec![
            json!({"uuid": ["uuid", u.to_string()]}),
            json!({"error": "referential integrity violation",
                   "details": format!("Table Logical_Switch column ports row {u} references nonexistent row 00000000-0000-0000-0000-000000000000 in table Logical_Switch_Port.")}),
        ];
        match parse_transact_reply(&ops, &reply).unwrap_err() {
            TransactError::Commit {
                table, row, error, ..
            } => {
                assert_eq!(table.as_deref(), Some("Logical_Switch"));
                assert_eq!(row, Some(u));
                assert_eq!(error, "referential integrity violation");
            }
            other => panic!("{other:?}"),
        }
        let details = format!(
            "Transaction causes multiple rows in \"Logical_Switch_Port\" table to have identical values (\"p\") for index on column \"name\".  First row, with UUID {u}, was inserted by this transaction."
        );
        assert_eq!(
            commit_error_subject(&details),
            (Some("Logical_Switch_Port".into()), Some(u))
        );
    }

    #[test]
    fn short_replies_are_malformed() {
        let ops = vec![Operation::comment("a"), Operation::comment("b")];
        assert!(matches!(
            parse_transact_reply(&ops, &[json!({})]),
            Err(TransactError::MalformedReply(_))
        ));
    }
}
