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

impl Value {
    /// The bytes of a string reply (simple, bulk or verbatim), looking
    /// through attributes; `None` for any other type.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Simple(b) | Value::Bulk(b) => Some(b),
            Value::Verbatim { text, .. } => Some(text),
            Value::Attributed { value, .. } => value.as_bytes(),
            _ => None,
        }
    }

    /// A string reply as UTF-8 text (`None` for another type or invalid
    /// UTF-8).
    pub fn as_str(&self) -> Option<&str> {
        core::str::from_utf8(self.as_bytes()?).ok()
    }

    /// An integer reply, or a string reply that is a decimal integer (as
    /// `CONFIG GET` and `GET` return numbers).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            Value::Attributed { value, .. } => value.as_int(),
            v => v.as_str()?.parse().ok(),
        }
    }

    /// The elements of an array, set or push reply.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) | Value::Set(v) | Value::Push(v) => Some(v),
            Value::Attributed { value, .. } => value.as_array(),
            _ => None,
        }
    }

    /// The text of an error reply (simple or blob).
    pub fn as_error(&self) -> Option<&[u8]> {
        match self {
            Value::Error(b) | Value::BlobError(b) => Some(b),
            Value::Attributed { value, .. } => value.as_error(),
            _ => None,
        }
    }

    /// Whether the reply is null.
    pub fn is_null(&self) -> bool {
        match self {
            Value::Null => true,
            Value::Attributed { value, .. } => value.is_null(),
            _ => false,
        }
    }

    /// The type of the reply, in the words of the RESP3 specification.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Simple(_) => "simple string",
            Value::Error(_) => "simple error",
            Value::Integer(_) => "number",
            Value::Bulk(_) => "blob string",
            Value::Null => "null",
            Value::Double(_) => "double",
            Value::Boolean(_) => "boolean",
            Value::BlobError(_) => "blob error",
            Value::Verbatim { .. } => "verbatim string",
            Value::BigNumber(_) => "big number",
            Value::Array(_) => "array",
            Value::Set(_) => "set",
            Value::Map(_) => "map",
            Value::Push(_) => "push",
            Value::Attributed { value, .. } => value.kind(),
        }
    }
}

/// A [`Value`] that is not of the type asked for, from its `TryFrom`
/// conversions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrongType {
    /// What was asked for.
    pub expected: &'static str,
    /// What the reply was ([`Value::kind`]).
    pub found: &'static str,
}

impl core::fmt::Display for WrongType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "expected {}, the reply is a {}",
            self.expected, self.found
        )
    }
}

impl core::error::Error for WrongType {}

impl TryFrom<Value> for Vec<u8> {
    type Error = WrongType;

    /// A string reply's bytes.
    fn try_from(v: Value) -> Result<Vec<u8>, WrongType> {
        let found = v.kind();
        match v {
            Value::Simple(b) | Value::Bulk(b) | Value::Verbatim { text: b, .. } => Ok(b),
            Value::Attributed { value, .. } => Vec::try_from(*value),
            _ => Err(WrongType {
                expected: "a string",
                found,
            }),
        }
    }
}

impl TryFrom<Value> for alloc::string::String {
    type Error = WrongType;

    /// A string reply as UTF-8 text.
    fn try_from(v: Value) -> Result<alloc::string::String, WrongType> {
        let found = v.kind();
        let wrong = WrongType {
            expected: "UTF-8 text",
            found,
        };
        let bytes = Vec::try_from(v).map_err(|_| wrong.clone())?;
        alloc::string::String::from_utf8(bytes).map_err(|_| wrong)
    }
}

impl TryFrom<Value> for i64 {
    type Error = WrongType;

    /// As [`Value::as_int`].
    fn try_from(v: Value) -> Result<i64, WrongType> {
        v.as_int().ok_or(WrongType {
            expected: "an integer",
            found: v.kind(),
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_read_every_string_shape_and_say_what_they_found() {
        assert_eq!(Value::Bulk(b"a".to_vec()).as_bytes(), Some(&b"a"[..]));
        let verbatim = Value::Verbatim {
            format: *b"txt",
            text: b"b".to_vec(),
        };
        assert_eq!(verbatim.as_str(), Some("b"));
        let attributed = Value::Attributed {
            attributes: Vec::new(),
            value: Box::new(Value::Simple(b"42".to_vec())),
        };
        assert_eq!(attributed.as_bytes(), Some(&b"42"[..]));
        assert_eq!(attributed.as_int(), Some(42));
        assert_eq!(Value::Integer(1).as_bytes(), None);
        assert_eq!(i64::try_from(Value::Integer(7)), Ok(7));
        assert_eq!(
            alloc::string::String::try_from(Value::Bulk(b"x".to_vec())).as_deref(),
            Ok("x")
        );
        let e = Vec::<u8>::try_from(Value::Integer(1)).unwrap_err();
        assert_eq!(
            alloc::string::ToString::to_string(&e),
            "expected a string, the reply is a number"
        );
        assert!(Value::Null.is_null());
        assert_eq!(
            Value::Error(b"ERR x".to_vec()).as_error(),
            Some(&b"ERR x"[..])
        );
        let arr = Value::Array(alloc::vec![Value::Null]);
        assert_eq!(arr.as_array().map(<[Value]>::len), Some(1));
    }
}
