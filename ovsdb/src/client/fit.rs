//! Fitting a transaction to the server's schema before it is sent. Pure: no I/O.
//!
//! Typed rows carry every column we know; an older server may lack some (Debian's NB 7.0.0 has
//! no `Logical_Switch_Port.mirror_rules` readers, a future one may drop a column). A column the
//! server lacks is dropped from an insert or update when our value for it is the default, since
//! writing it would change nothing; any other use of it is an error that names it, before
//! anything is sent, so nothing is half-applied.

use crate::data::Row;
use crate::error::Error;
use crate::ops::{Condition, Mutation, Operation};
use crate::schema::DatabaseSchema;

/// Implicit columns every table has (RFC 7047 §3.1).
const IMPLICIT: [&str; 2] = ["_uuid", "_version"];

pub fn fit_to_schema(schema: &DatabaseSchema, ops: Vec<Operation>) -> Result<Vec<Operation>, Error> {
    ops.into_iter().map(|op| fit_one(schema, op)).collect()
}

fn fit_one(schema: &DatabaseSchema, mut op: Operation) -> Result<Operation, Error> {
    let Some(table) = op.table().map(str::to_owned) else {
        return Ok(op);
    };
    let Some(ts) = schema.table(&table) else {
        return Err(Error::UnknownTable {
            database: schema.name.clone(),
            table,
        });
    };
    let unknown = |column: &str| Error::UnknownColumn {
        database: schema.name.clone(),
        version: schema.version.clone(),
        table: table.clone(),
        column: column.to_owned(),
    };
    let known = |column: &str| IMPLICIT.contains(&column) || ts.columns.contains_key(column);
    let fit_row = |row: &mut Row| -> Result<(), Error> {
        let mut error = None;
        row.retain(|column, value| {
            if known(column) {
                true
            } else {
                if !value.is_default() && error.is_none() {
                    error = Some(unknown(column));
                }
                false
            }
        });
        error.map_or(Ok(()), Err)
    };
    let check_conditions = |conds: &[Condition]| match conds.iter().find(|c| !known(&c.column)) {
        Some(c) => Err(unknown(&c.column)),
        None => Ok(()),
    };
    let check_mutations = |muts: &[Mutation]| match muts.iter().find(|m| !known(&m.column)) {
        Some(m) => Err(unknown(&m.column)),
        None => Ok(()),
    };
    match &mut op {
        Operation::Insert { row, .. } => fit_row(row)?,
        Operation::Update { row, conditions, .. } => {
            check_conditions(conditions)?;
            fit_row(row)?;
        }
        Operation::Mutate {
            conditions,
            mutations,
            ..
        } => {
            check_conditions(conditions)?;
            check_mutations(mutations)?;
        }
        Operation::Select {
            conditions, columns, ..
        } => {
            check_conditions(conditions)?;
            if let Some(c) = columns.iter().flatten().find(|c| !known(c)) {
                return Err(unknown(c));
            }
        }
        Operation::Delete { conditions, .. } => check_conditions(conditions)?,
        Operation::Wait {
            conditions,
            columns,
            rows,
            ..
        } => {
            check_conditions(conditions)?;
            if let Some(c) = columns.iter().find(|c| !known(c)) {
                return Err(unknown(c));
            }
            for row in rows {
                fit_row(row)?;
            }
        }
        _ => {}
    }
    Ok(op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Value;
    use serde_json::json;

    fn schema() -> DatabaseSchema {
        serde_json::from_value(json!({"name":"NB","version":"7.0.0","tables":{
            "LS":{"columns":{"name":{"type":"string"}}}}}))
        .unwrap()
    }

    #[test]
    fn default_values_of_missing_columns_are_dropped() {
        let row = Row::from([
            ("name".into(), Value::from("a")),
            ("newer".into(), Value::empty_map()),
        ]);
        let ops = fit_to_schema(&schema(), vec![Operation::insert("LS", row)]).unwrap();
        let Operation::Insert { row, .. } = &ops[0] else {
            unreachable!()
        };
        assert_eq!(row.keys().collect::<Vec<_>>(), vec!["name"]);
    }

    #[test]
    fn real_values_of_missing_columns_are_errors_naming_them() {
        let row = Row::from([("newer".into(), Value::from("x"))]);
        let err = fit_to_schema(&schema(), vec![Operation::insert("LS", row)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "column LS.newer is not in the server's NB schema (version 7.0.0), and the value to write is not the column's default"
        );
        let err = fit_to_schema(
            &schema(),
            vec![Operation::delete("LS", vec![Condition::eq("zz", "x")])],
        );
        assert!(matches!(err, Err(Error::UnknownColumn { column, .. }) if column == "zz"));
        let err = fit_to_schema(&schema(), vec![Operation::delete("Nope", vec![])]);
        assert!(matches!(err, Err(Error::UnknownTable { table, .. }) if table == "Nope"));
    }

    #[test]
    fn uuid_conditions_are_always_known() {
        let ops = vec![Operation::delete("LS", vec![Condition::uuid(uuid::Uuid::nil())])];
        assert!(fit_to_schema(&schema(), ops).is_ok());
    }
}
