//! Typed rows.
//!
//! A typed table declares the columns it uses; the server's schema decides what exists. Reading is
//! tolerant: a column the server lacks decodes as its default, and columns the server has beyond
//! ours are ignored (they stay in the cache's raw rows). Writing is checked by the client against
//! the server's schema before sending (see `Client::transact`).

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::data::{Atom, Row, Value};
use crate::error::DecodeError;
use crate::schema::{AtomicType, ColumnType, DatabaseSchema};

/// A row type of one table.
pub trait Table: Sized {
    /// The table's name in the schema.
    const NAME: &'static str;
    /// The columns this type reads and writes.
    const COLUMNS: &'static [&'static str];

    fn uuid(&self) -> Uuid;
    fn from_row(uuid: Uuid, row: &Row) -> Result<Self, DecodeError>;
    /// Every column this type knows, for an insert.
    fn to_row(&self) -> Row;
    /// The shape each column's Rust type expects, to check against a schema.
    fn shapes() -> Vec<(&'static str, Shape)>;

    /// Only the named columns, for an update that must not touch the others (columns other
    /// writers own, such as `up` on a logical switch port, which `ovn-northd` sets).
    fn partial_row(&self, columns: &[&str]) -> Row {
        let mut row = self.to_row();
        row.retain(|k, _| columns.contains(&k.as_str()));
        row
    }
}

/// What a Rust field type can hold, compared with a column's [`ColumnType`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Scalar(AtomicType),
    Optional(AtomicType),
    Set(AtomicType),
    Map(AtomicType, AtomicType),
}

impl Shape {
    /// Whether a column of this type can be read into and written from this shape. A set column
    /// whose maximum is 1 is read fine as an optional and vice versa a `Vec` reads an optional.
    pub fn fits(self, ty: &ColumnType) -> bool {
        let key = ty.key.atomic;
        match (self, &ty.value) {
            (Self::Map(k, v), Some(value)) => k == key && v == value.atomic,
            (Self::Map(..), None) | (_, Some(_)) => false,
            (Self::Scalar(a), None) => a == key && ty.is_scalar(),
            (Self::Optional(a), None) => a == key && ty.max == Some(1),
            (Self::Set(a), None) => a == key,
        }
    }
}

/// Checks a typed table against a schema: every column it names exists with a type it can hold.
/// Returns one line per mismatch.
pub fn check_table<T: Table>(schema: &DatabaseSchema) -> Vec<String> {
    let Some(ts) = schema.table(T::NAME) else {
        return vec![format!(
            "table {} is not in schema {} {}",
            T::NAME,
            schema.name,
            schema.version
        )];
    };
    T::shapes()
        .into_iter()
        .filter_map(|(col, shape)| match ts.columns.get(col) {
            None => Some(format!(
                "{}.{col} is not in schema {} {}",
                T::NAME,
                schema.name,
                schema.version
            )),
            Some(cs) if !shape.fits(&cs.ty) => {
                Some(format!("{}.{col}: {shape:?} does not fit {:?}", T::NAME, cs.ty))
            }
            Some(_) => None,
        })
        .collect()
}

/// A Rust type one atom converts to and from.
pub trait AtomValue: Sized {
    const TYPE: AtomicType;
    fn from_atom(atom: &Atom) -> Option<Self>;
    fn to_atom(&self) -> Atom;
}

impl AtomValue for String {
    const TYPE: AtomicType = AtomicType::String;
    fn from_atom(atom: &Atom) -> Option<Self> {
        atom.as_str().map(str::to_owned)
    }
    fn to_atom(&self) -> Atom {
        Atom::String(self.clone())
    }
}

impl AtomValue for i64 {
    const TYPE: AtomicType = AtomicType::Integer;
    fn from_atom(atom: &Atom) -> Option<Self> {
        atom.as_i64()
    }
    fn to_atom(&self) -> Atom {
        Atom::Integer(*self)
    }
}

impl AtomValue for bool {
    const TYPE: AtomicType = AtomicType::Boolean;
    fn from_atom(atom: &Atom) -> Option<Self> {
        atom.as_bool()
    }
    fn to_atom(&self) -> Atom {
        Atom::Boolean(*self)
    }
}

impl AtomValue for f64 {
    const TYPE: AtomicType = AtomicType::Real;
    fn from_atom(atom: &Atom) -> Option<Self> {
        match atom {
            Atom::Real(r) => Some(*r),
            #[allow(clippy::cast_precision_loss)] // a real column value sent as an integral number
            Atom::Integer(i) => Some(*i as f64),
            _ => None,
        }
    }
    fn to_atom(&self) -> Atom {
        Atom::Real(*self)
    }
}

impl AtomValue for Uuid {
    const TYPE: AtomicType = AtomicType::Uuid;
    fn from_atom(atom: &Atom) -> Option<Self> {
        atom.as_uuid()
    }
    fn to_atom(&self) -> Atom {
        Atom::Uuid(*self)
    }
}

/// A Rust type a whole column converts to and from.
pub trait ColumnValue: Sized {
    const SHAPE: Shape;
    /// `None` when the value does not have this type's shape.
    fn from_value(value: &Value) -> Option<Self>;
    /// The value of a column the server does not have.
    fn absent() -> Self;
    fn to_value(&self) -> Value;
}

fn single<T: AtomValue>(value: &Value) -> Option<T> {
    match value {
        Value::Atom(a) => T::from_atom(a),
        Value::Set(s) if s.len() == 1 => T::from_atom(s.iter().next()?),
        _ => None,
    }
}

impl<T: AtomValue + Default> ColumnValue for T {
    const SHAPE: Shape = Shape::Scalar(T::TYPE);
    fn from_value(value: &Value) -> Option<Self> {
        single(value)
    }
    fn absent() -> Self {
        T::default()
    }
    fn to_value(&self) -> Value {
        Value::Atom(self.to_atom())
    }
}

impl<T: AtomValue> ColumnValue for Option<T> {
    const SHAPE: Shape = Shape::Optional(T::TYPE);
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Set(s) if s.is_empty() => Some(None),
            other => single(other).map(Some),
        }
    }
    fn absent() -> Self {
        None
    }
    fn to_value(&self) -> Value {
        Value::Set(self.iter().map(AtomValue::to_atom).collect())
    }
}

impl<T: AtomValue> ColumnValue for Vec<T> {
    const SHAPE: Shape = Shape::Set(T::TYPE);
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Atom(a) => T::from_atom(a).map(|t| vec![t]),
            Value::Set(s) => s.iter().map(T::from_atom).collect(),
            Value::Map(_) => None,
        }
    }
    fn absent() -> Self {
        Vec::new()
    }
    fn to_value(&self) -> Value {
        Value::Set(self.iter().map(AtomValue::to_atom).collect())
    }
}

impl<K: AtomValue + Ord, V: AtomValue> ColumnValue for BTreeMap<K, V> {
    const SHAPE: Shape = Shape::Map(K::TYPE, V::TYPE);
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Map(m) => m
                .iter()
                .map(|(k, v)| Some((K::from_atom(k)?, V::from_atom(v)?)))
                .collect(),
            // An empty map may be decoded as an empty set before the schema is known.
            Value::Set(s) if s.is_empty() => Some(BTreeMap::new()),
            _ => None,
        }
    }
    fn absent() -> Self {
        BTreeMap::new()
    }
    fn to_value(&self) -> Value {
        Value::Map(self.iter().map(|(k, v)| (k.to_atom(), v.to_atom())).collect())
    }
}

/// Decodes one column of a row for a typed table; used by [`crate::ovsdb_table!`].
pub fn decode_column<T: ColumnValue>(
    row: &Row,
    table: &'static str,
    uuid: Uuid,
    column: &'static str,
) -> Result<T, DecodeError> {
    match row.get(column) {
        None => Ok(T::absent()),
        Some(v) => T::from_value(v).ok_or_else(|| DecodeError {
            table,
            uuid,
            column,
            expected: shape_name(T::SHAPE),
            found: serde_json::to_string(v).unwrap_or_default(),
        }),
    }
}

fn shape_name(shape: Shape) -> &'static str {
    match shape {
        Shape::Scalar(_) => "one atom of the column's type",
        Shape::Optional(_) => "zero or one atom of the column's type",
        Shape::Set(_) => "a set of the column's atoms",
        Shape::Map(..) => "a map of the column's key and value types",
    }
}

/// Declares a typed table: a struct with `uuid` plus one field per column, and its [`Table`]
/// implementation.
///
/// ```
/// kube_ovn_ovsdb::ovsdb_table! {
///     /// A row of a test table.
///     pub struct Widget in "Widget" {
///         name: String => "name",
///         tags: Vec<String> => "tags",
///     }
/// }
/// ```
#[macro_export]
macro_rules! ovsdb_table {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident in $table:literal {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty => $col:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq)]
        $vis struct $name {
            /// The row's `_uuid`.
            pub uuid: $crate::Uuid,
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $crate::table::Table for $name {
            const NAME: &'static str = $table;
            const COLUMNS: &'static [&'static str] = &[$($col),*];

            fn uuid(&self) -> $crate::Uuid {
                self.uuid
            }

            fn from_row(uuid: $crate::Uuid, row: &$crate::Row) -> ::std::result::Result<Self, $crate::DecodeError> {
                Ok(Self {
                    uuid,
                    $( $field: $crate::table::decode_column(row, $table, uuid, $col)?, )*
                })
            }

            fn to_row(&self) -> $crate::Row {
                let mut row = $crate::Row::new();
                $( row.insert($col.to_owned(), $crate::table::ColumnValue::to_value(&self.$field)); )*
                row
            }

            fn shapes() -> ::std::vec::Vec<(&'static str, $crate::table::Shape)> {
                vec![$( ($col, <$ty as $crate::table::ColumnValue>::SHAPE) ),*]
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::ovsdb_table! {
        struct Thing in "Thing" {
            name: String => "name",
            count: i64 => "count",
            parent: Option<Uuid> => "parent",
            tags: Vec<String> => "tags",
            ext: BTreeMap<String, String> => "external_ids",
        }
    }

    #[test]
    fn round_trip_and_tolerance() {
        let t = Thing {
            uuid: Uuid::new_v4(),
            name: "a".into(),
            count: 3,
            parent: Some(Uuid::new_v4()),
            tags: vec!["x".into(), "y".into()],
            ext: BTreeMap::from([("k".into(), "v".into())]),
        };
        let mut row = t.to_row();
        assert_eq!(Thing::from_row(t.uuid, &row).unwrap(), t);
        // A server without `count` and with an extra column still decodes.
        row.remove("count");
        row.insert("newer".into(), Value::from(1));
        assert_eq!(Thing::from_row(t.uuid, &row).unwrap().count, 0);
        // A bare atom in a set column is a one-element set.
        row.insert("tags".into(), Value::from("only"));
        assert_eq!(
            Thing::from_row(t.uuid, &row).unwrap().tags,
            vec!["only".to_owned()]
        );
    }

    #[test]
    fn wrong_shape_names_table_column_and_row() {
        let u = Uuid::new_v4();
        let row = Row::from([("count".to_owned(), Value::from("three"))]);
        let err = Thing::from_row(u, &row).unwrap_err();
        assert_eq!(err.table, "Thing");
        assert_eq!(err.column, "count");
        assert_eq!(err.uuid, u);
        assert!(err.to_string().contains("\"three\""), "{err}");
    }

    #[test]
    fn partial_rows_keep_only_named_columns() {
        let t = Thing {
            name: "a".into(),
            ..Thing::default()
        };
        assert_eq!(t.partial_row(&["name"]).keys().collect::<Vec<_>>(), vec!["name"]);
    }
}
