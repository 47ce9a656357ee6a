//! Differential test against the peer parser `redis-protocol` 6: on generated
//! frames, both parse the same bytes to the same structure.

mod common;

use common::{leaf, text};
use proptest::prelude::*;
use redis_protocol::resp3::decode::complete::decode;
use redis_protocol::resp3::types::{OwnedFrame, VerbatimStringFormat};
use resp::{encode_value, parse, Limits, Status, Value};

/// A canonical rendering both sides map to.
fn mine(v: &Value) -> String {
    match v {
        Value::Simple(b) => format!("simple({b:?})"),
        Value::Error(b) => format!("error({b:?})"),
        Value::Integer(i) => format!("int({i})"),
        Value::Bulk(b) => format!("bulk({b:?})"),
        Value::Null => "null".into(),
        Value::Double(d) => double(*d),
        Value::Boolean(b) => format!("bool({b})"),
        Value::BlobError(b) => format!("bloberror({b:?})"),
        Value::Verbatim { format, text } => {
            format!("verbatim({}, {text:?})", String::from_utf8_lossy(format))
        }
        Value::BigNumber(b) => format!("big({b:?})"),
        Value::Array(items) => format!("array[{}]", list(items.iter().map(mine))),
        Value::Set(items) => format!("set[{}]", sorted(items.iter().map(mine))),
        Value::Push(items) => format!("push[{}]", list(items.iter().map(mine))),
        Value::Map(pairs) => format!(
            "map[{}]",
            sorted(
                pairs
                    .iter()
                    .map(|(k, v)| format!("{}: {}", mine(k), mine(v)))
            )
        ),
        Value::Attributed { attributes, value } => {
            // The peer keeps attributes on the frame they describe.
            let attrs = sorted(
                attributes
                    .iter()
                    .map(|(k, v)| format!("{}: {}", mine(k), mine(v))),
            );
            format!("{} @attr[{attrs}]", mine(value))
        }
    }
}

fn double(d: f64) -> String {
    if d.is_nan() {
        "double(nan)".into()
    } else {
        format!("double({:x})", d.to_bits())
    }
}

fn list(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// Maps and sets compare as sorted lists: the peer does not keep their order.
fn sorted(items: impl Iterator<Item = String>) -> String {
    let mut v: Vec<String> = items.collect();
    v.sort();
    v.join(", ")
}

fn theirs(f: &OwnedFrame) -> String {
    use OwnedFrame::*;
    let (body, attrs) = match f {
        SimpleString { data, attributes } => (format!("simple({data:?})"), attributes),
        SimpleError { data, attributes } => (format!("error({:?})", data.as_bytes()), attributes),
        Number { data, attributes } => (format!("int({data})"), attributes),
        BlobString { data, attributes } => (format!("bulk({data:?})"), attributes),
        Null => return "null".into(),
        Double { data, attributes } => (double(*data), attributes),
        Boolean { data, attributes } => (format!("bool({data})"), attributes),
        BlobError { data, attributes } => (format!("bloberror({data:?})"), attributes),
        VerbatimString {
            data,
            format,
            attributes,
        } => {
            let fmt = match format {
                VerbatimStringFormat::Text => "txt",
                VerbatimStringFormat::Markdown => "mkd",
            };
            (format!("verbatim({fmt}, {data:?})"), attributes)
        }
        BigNumber { data, attributes } => (format!("big({data:?})"), attributes),
        Array { data, attributes } => (
            format!("array[{}]", list(data.iter().map(theirs))),
            attributes,
        ),
        Set { data, attributes } => (
            format!("set[{}]", sorted(data.iter().map(theirs))),
            attributes,
        ),
        Push { data, attributes } => (
            format!("push[{}]", list(data.iter().map(theirs))),
            attributes,
        ),
        Map { data, attributes } => (
            format!(
                "map[{}]",
                sorted(
                    data.iter()
                        .map(|(k, v)| format!("{}: {}", theirs(k), theirs(v)))
                )
            ),
            attributes,
        ),
        other => return format!("unexpected({other:?})"),
    };
    match attrs {
        Some(a) => format!(
            "{body} @attr[{}]",
            sorted(
                a.iter()
                    .map(|(k, v)| format!("{}: {}", theirs(k), theirs(v)))
            )
        ),
        None => body,
    }
}

/// Scalars the peer can hash (it keys maps and sets by them).
fn key() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(Value::Simple),
        any::<i64>().prop_map(Value::Integer),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(Value::Bulk),
        "-?[0-9]{1,20}".prop_map(|s| Value::BigNumber(s.into_bytes())),
    ]
}

fn unique(keys: &[&Value]) -> bool {
    let mut seen: Vec<String> = keys.iter().map(|k| mine(k)).collect();
    seen.sort();
    seen.windows(2).all(|w| w[0] != w[1])
}

/// Values within what the peer represents: map keys and set members are
/// distinct scalars, and no attribute describes a null.
fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 32, 4, |inner| {
        let pairs = || {
            prop::collection::vec((key(), inner.clone()), 0..4).prop_filter("distinct keys", |p| {
                unique(&p.iter().map(|(k, _)| k).collect::<Vec<_>>())
            })
        };
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Push),
            prop::collection::vec(key(), 0..4)
                .prop_filter("distinct members", |s| unique(
                    &s.iter().collect::<Vec<_>>()
                ))
                .prop_map(Value::Set),
            pairs().prop_map(Value::Map),
            (pairs(), inner).prop_map(|(attributes, value)| match value {
                Value::Null | Value::Attributed { .. } => value,
                value => Value::Attributed {
                    attributes,
                    value: Box::new(value)
                },
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn both_parsers_agree(v in value()) {
        let mut wire = Vec::new();
        encode_value(&mut wire, &v);
        wire.extend_from_slice(b"+trailing\r\n");
        let Ok(Status::Complete(p)) = parse(&wire, &Limits::default()) else { panic!("ours") };
        let peer = decode(&wire);
        let Ok(Some((frame, consumed))) = peer else {
            panic!("peer: {peer:?} for {:?}", String::from_utf8_lossy(&wire))
        };
        prop_assert_eq!(p.consumed, consumed);
        prop_assert_eq!(mine(&p.to_value()), theirs(&frame));
        // And every strict prefix is incomplete for both.
        for k in (0..p.consumed).step_by(3) {
            prop_assert!(matches!(parse(&wire[..k], &Limits::default()), Ok(Status::Incomplete)));
            prop_assert!(matches!(decode(&wire[..k]), Ok(None)), "peer at {}", k);
        }
    }
}

#[test]
fn both_parsers_agree_on_handwritten_frames() {
    for wire in [
        &b">3\r\n$8\r\nsmessage\r\n$3\r\n{a}\r\n$5\r\nhello\r\n"[..],
        b"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n",
        b"*2\r\n|1\r\n+ttl\r\n:3600\r\n:1\r\n:2\r\n",
        b"=15\r\ntxt:Some string\r\n",
        b",-inf\r\n",
        b"(-3492890328409238509324850943850943825024385\r\n",
    ] {
        let Ok(Status::Complete(p)) = parse(wire, &Limits::default()) else { panic!() };
        let Ok(Some((frame, n))) = decode(wire) else { panic!("peer") };
        assert_eq!(p.consumed, n);
        assert_eq!(mine(&p.to_value()), theirs(&frame), "{}", String::from_utf8_lossy(wire));
    }
}
