//! The owned value tree.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::frame::{AggregateKind, Frame};

/// An owned RESP value: what a [`Frame`] becomes when it must outlive the
/// input buffer, and what tests build to encode.
///
/// Equality treats every NaN as equal to every NaN (so a parsed `nan` equals
/// the `Value` it was encoded from); otherwise it is structural.
#[derive(Clone, Debug)]
pub enum Value {
    /// `+` simple string.
    Simple(Vec<u8>),
    /// `-` simple error.
    Error(Vec<u8>),
    /// `:` integer.
    Integer(i64),
    /// `$` bulk string (also what a streamed string becomes).
    Bulk(Vec<u8>),
    /// `_` null (also RESP2 `$-1`, `*-1`).
    Null,
    /// `,` double.
    Double(f64),
    /// `#` boolean.
    Boolean(bool),
    /// `!` blob error.
    BlobError(Vec<u8>),
    /// `=` verbatim string.
    Verbatim {
        /// The three-byte format, such as `txt`.
        format: [u8; 3],
        /// The text.
        text: Vec<u8>,
    },
    /// `(` big number, as its digits.
    BigNumber(Vec<u8>),
    /// `*` array.
    Array(Vec<Value>),
    /// `~` set.
    Set(Vec<Value>),
    /// `%` map.
    Map(Vec<(Value, Value)>),
    /// `>` push.
    Push(Vec<Value>),
    /// A value preceded by an attribute (`|`) map.
    Attributed {
        /// The attribute's key-value pairs.
        attributes: Vec<(Value, Value)>,
        /// The value they describe (never itself `Attributed`).
        value: Box<Value>,
    },
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        use Value::*;
        match (self, other) {
            (Simple(a), Simple(b))
            | (Error(a), Error(b))
            | (Bulk(a), Bulk(b))
            | (BlobError(a), BlobError(b))
            | (BigNumber(a), BigNumber(b)) => a == b,
            (Integer(a), Integer(b)) => a == b,
            (Null, Null) => true,
            (Double(a), Double(b)) => a == b || (a.is_nan() && b.is_nan()),
            (Boolean(a), Boolean(b)) => a == b,
            (Verbatim { format: f, text: t }, Verbatim { format: g, text: u }) => f == g && t == u,
            (Array(a), Array(b)) | (Set(a), Set(b)) | (Push(a), Push(b)) => a == b,
            (Map(a), Map(b)) => a == b,
            (
                Attributed {
                    attributes: a,
                    value: v,
                },
                Attributed {
                    attributes: b,
                    value: w,
                },
            ) => a == b && v == w,
            _ => false,
        }
    }
}

/// The pairs of a map or attribute, keeping attributes attached to keys or values.
fn pairs_to_values(a: crate::Aggregate<'_>) -> Vec<(Value, Value)> {
    let mut out = Vec::with_capacity(a.len());
    let mut it = a.iter().with_attributes();
    while let (Some((ka, k)), Some((va, v))) = (it.next(), it.next()) {
        out.push((attributed(ka, k.to_value()), attributed(va, v.to_value())));
    }
    out
}

pub(crate) fn attributed(attrs: Option<crate::Aggregate<'_>>, value: Value) -> Value {
    match attrs {
        Some(a) => Value::Attributed {
            attributes: pairs_to_values(a),
            value: Box::new(value),
        },
        None => value,
    }
}

pub(crate) fn frame_to_value(frame: &Frame<'_>) -> Value {
    match *frame {
        Frame::Simple(b) => Value::Simple(b.to_vec()),
        Frame::Error(b) => Value::Error(b.to_vec()),
        Frame::Integer(i) => Value::Integer(i),
        Frame::Bulk(b) => Value::Bulk(b.to_vec()),
        Frame::Null => Value::Null,
        Frame::Double(d) => Value::Double(d),
        Frame::Boolean(b) => Value::Boolean(b),
        Frame::BlobError(b) => Value::BlobError(b.to_vec()),
        Frame::Verbatim { format, text } => Value::Verbatim {
            format,
            text: text.to_vec(),
        },
        Frame::BigNumber(b) => Value::BigNumber(b.to_vec()),
        Frame::Streamed(c) => {
            let mut v = Vec::new();
            c.copy_to(&mut v);
            Value::Bulk(v)
        }
        Frame::Aggregate(a) => {
            let elems = || {
                a.iter()
                    .with_attributes()
                    .map(|(attrs, f)| attributed(attrs, f.to_value()))
                    .collect()
            };
            match a.kind() {
                AggregateKind::Array => Value::Array(elems()),
                AggregateKind::Set => Value::Set(elems()),
                AggregateKind::Push => Value::Push(elems()),
                AggregateKind::Map | AggregateKind::Attribute => Value::Map(pairs_to_values(a)),
            }
        }
    }
}
