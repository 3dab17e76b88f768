//! A decoded [`Value`] fitted to its column's [`ColumnType`]: the canonical shape of a value
//! (RFC 7047 §5.1) and `update2` diffs (ovsdb-server(7)).
//!
//! Pure: no I/O. It depends on [`crate::data`] (values) and [`crate::schema`] (types); `data`
//! depends on neither, so a schema can hold values (an `enum`, a column's default) without a
//! cycle.

use std::collections::BTreeSet;

use crate::data::{Atom, Value};
use crate::schema::{AtomicType, ColumnType};

impl Atom {
    /// Coerces a decoded atom to the column's atomic type where JSON cannot tell them apart
    /// (an integral JSON number in a `real` column).
    fn coerce(self, ty: AtomicType) -> Self {
        match (self, ty) {
            #[allow(clippy::cast_precision_loss)] // OVSDB reals are doubles; the server sent this number
            (Self::Integer(i), AtomicType::Real) => Self::Real(i as f64),
            (atom, _) => atom,
        }
    }
}

impl Value {
    /// Brings a decoded value into the canonical shape for its column type: sets are always
    /// `Set` (a bare atom becomes a one-element set), scalars always `Atom`, and integral
    /// numbers in `real` columns become reals.
    #[must_use]
    pub fn normalize(self, ty: &ColumnType) -> Self {
        let key_ty = ty.key.atomic;
        if let Some(value_ty) = ty.value.as_ref().map(|v| v.atomic) {
            return match self {
                Self::Map(m) => Self::Map(
                    m.into_iter()
                        .map(|(k, v)| (k.coerce(key_ty), v.coerce(value_ty)))
                        .collect(),
                ),
                other => other,
            };
        }
        if ty.is_scalar() {
            match self {
                Self::Atom(a) => Self::Atom(a.coerce(key_ty)),
                Self::Set(s) if s.len() == 1 => Self::Atom(s.into_iter().next().unwrap().coerce(key_ty)),
                other => other,
            }
        } else {
            match self {
                Self::Atom(a) => Self::Set(BTreeSet::from([a.coerce(key_ty)])),
                Self::Set(s) => Self::Set(s.into_iter().map(|a| a.coerce(key_ty)).collect()),
                map @ Self::Map(_) => map,
            }
        }
    }

    /// Applies an `update2` `modify` diff for a column (ovsdb-server(7), "<diff>"): for sets
    /// the diff's elements are toggled (present ones removed, absent ones added); for maps a key
    /// absent from the old value is added, a key present with the same value is removed, and a
    /// key present with another value takes the new value. Columns holding at most one element
    /// are not diffed by the server: the diff is the new value.
    #[must_use]
    pub fn apply_diff(&self, diff: Value, ty: &ColumnType) -> Value {
        let diff = diff.normalize(ty);
        if !ty.is_composite() {
            return diff;
        }
        match (self, diff) {
            (Self::Set(old), Self::Set(toggles)) => {
                let mut out = old.clone();
                for atom in toggles {
                    if !out.remove(&atom) {
                        out.insert(atom);
                    }
                }
                Self::Set(out)
            }
            (Self::Map(old), Self::Map(changes)) => {
                let mut out = old.clone();
                for (k, v) in changes {
                    match out.get(&k) {
                        Some(existing) if *existing == v => {
                            out.remove(&k);
                        }
                        _ => {
                            out.insert(k, v);
                        }
                    }
                }
                Self::Map(out)
            }
            // A diff whose shape does not match the old value (the old value was decoded before
            // the schema was known, say): the diff alone is the best information we have.
            (_, diff) => diff,
        }
    }
}
