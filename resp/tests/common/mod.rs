//! Shared generators for the property tests.
#![allow(dead_code)]

use proptest::prelude::*;
use resp::{
    encode_streamed_aggregate_end, encode_streamed_aggregate_start, encode_streamed_string,
    encode_value, AggregateKind, Frame, Value,
};

/// Printable ASCII: what a simple string or error may hold.
pub fn text() -> impl Strategy<Value = Vec<u8>> {
    "[ -~]{0,16}".prop_map(String::into_bytes)
}

pub fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(f64::NAN),
        Just(0.0),
        Just(-0.0),
        (-1000i32..1000).prop_map(|i| f64::from(i) / 8.0),
    ]
}

pub fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(Value::Simple),
        text().prop_map(Value::Error),
        any::<i64>().prop_map(Value::Integer),
        prop::collection::vec(any::<u8>(), 0..24).prop_map(Value::Bulk),
        Just(Value::Null),
        double().prop_map(Value::Double),
        any::<bool>().prop_map(Value::Boolean),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Value::BlobError),
        (
            prop_oneof![Just(*b"txt"), Just(*b"mkd")],
            prop::collection::vec(any::<u8>(), 0..12)
        )
            .prop_map(|(format, text)| Value::Verbatim { format, text }),
        "-?[0-9]{1,30}".prop_map(|s| Value::BigNumber(s.into_bytes())),
    ]
}

/// Any value, nested a few levels, with attributes here and there.
pub fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 5, |inner| {
        let attributed = (
            prop::collection::vec((inner.clone(), inner.clone()), 0..3),
            inner.clone(),
        )
            .prop_map(|(attributes, value)| match value {
                // An attribute describes a plain value, never another attribute.
                Value::Attributed { .. } => value,
                value => Value::Attributed {
                    attributes,
                    value: Box::new(value),
                },
            });
        prop_oneof![
            3 => prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            2 => prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Set),
            2 => prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Push),
            3 => prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
            1 => attributed,
        ]
    })
}

/// A deterministic coin for choosing among equivalent encodings.
pub struct Coin(testkit::Rng);

impl Coin {
    pub fn new(seed: u64) -> Coin {
        Coin(testkit::Rng::new(seed))
    }
    pub fn flip(&mut self) -> bool {
        self.pick(2) == 0
    }
    pub fn pick(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
}

/// Encodes `v` choosing, by `coin`, among the forms that parse back to it:
/// streamed or plain strings and aggregates, `$-1`, `*-1` or `_` for null.
pub fn encode_varied(out: &mut Vec<u8>, v: &Value, coin: &mut Coin) {
    match v {
        Value::Null => out.extend_from_slice(match coin.pick(3) {
            0 => &b"_\r\n"[..],
            1 => b"$-1\r\n",
            _ => b"*-1\r\n",
        }),
        Value::Bulk(b) if coin.flip() => {
            let mut chunks = Vec::new();
            let mut rest = &b[..];
            while !rest.is_empty() {
                let n = (coin.pick(rest.len() as u64) + 1) as usize;
                chunks.push(&rest[..n]);
                rest = &rest[n..];
            }
            encode_streamed_string(out, chunks);
        }
        Value::Array(items) | Value::Set(items) | Value::Push(items) if coin.flip() => {
            let kind = match v {
                Value::Array(_) => AggregateKind::Array,
                Value::Set(_) => AggregateKind::Set,
                _ => AggregateKind::Push,
            };
            encode_streamed_aggregate_start(out, kind);
            for i in items {
                encode_varied(out, i, coin);
            }
            encode_streamed_aggregate_end(out);
        }
        Value::Array(items) | Value::Set(items) | Value::Push(items) => {
            let t = match v {
                Value::Array(_) => b'*',
                Value::Set(_) => b'~',
                _ => b'>',
            };
            out.extend_from_slice(format!("{}{}\r\n", t as char, items.len()).as_bytes());
            for i in items {
                encode_varied(out, i, coin);
            }
        }
        Value::Map(pairs) => {
            let streamed = coin.flip();
            if streamed {
                encode_streamed_aggregate_start(out, AggregateKind::Map);
            } else {
                out.extend_from_slice(format!("%{}\r\n", pairs.len()).as_bytes());
            }
            for (k, v) in pairs {
                encode_varied(out, k, coin);
                encode_varied(out, v, coin);
            }
            if streamed {
                encode_streamed_aggregate_end(out);
            }
        }
        Value::Attributed { attributes, value } => {
            out.extend_from_slice(format!("|{}\r\n", attributes.len()).as_bytes());
            for (k, v) in attributes {
                encode_varied(out, k, coin);
                encode_varied(out, v, coin);
            }
            encode_varied(out, value, coin);
        }
        other => encode_value(out, other),
    }
}

/// Walks every element, pair and chunk of a frame (no allocation), returning
/// how many frames it saw.
pub fn walk(f: &Frame<'_>) -> usize {
    match f {
        Frame::Aggregate(a) => {
            let mut n = 1;
            for (attrs, e) in a.iter().with_attributes() {
                if let Some(attrs) = attrs {
                    for (k, v) in attrs.pairs() {
                        n += walk(&k) + walk(&v);
                    }
                }
                n += walk(&e);
            }
            n
        }
        Frame::Streamed(c) => 1 + c.iter().count(),
        _ => 1,
    }
}
