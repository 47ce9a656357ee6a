//! The lazy aggregate views, however they are walked: a nested aggregate is
//! found without walking its elements, and its parent steps over them only
//! when iteration goes on past it. These tests walk part of a child and then
//! go on with the parent, skip with `nth`/`get`, read `body()` of nested
//! aggregates, and mix attributes, maps in maps and streamed aggregates in
//! counted ones (and the reverse).

mod common;

use common::{encode_varied, value, Coin};
use proptest::prelude::*;
use resp::{
    encode_aggregate_header, parse, Aggregate, AggregateKind, Frame, Limits, Status, Value,
};

fn parsed(wire: &[u8]) -> resp::Parsed<'_> {
    match parse(wire, &Limits::default()) {
        Ok(Status::Complete(p)) => {
            assert_eq!(p.consumed, wire.len());
            p
        }
        other => panic!("{other:?} for {:?}", String::from_utf8_lossy(wire)),
    }
}

fn agg<'a>(f: &Frame<'a>) -> Aggregate<'a> {
    f.as_aggregate().expect("an aggregate")
}

/// An element as a value, with its attribute (whose own keys and values may
/// carry attributes too).
fn with_attrs(attrs: Option<Aggregate<'_>>, f: &Frame<'_>) -> Value {
    match attrs {
        Some(a) => {
            let items: Vec<Value> = a
                .iter()
                .with_attributes()
                .map(|(x, e)| with_attrs(x, &e))
                .collect();
            Value::Attributed {
                attributes: items
                    .chunks(2)
                    .map(|kv| (kv[0].clone(), kv[1].clone()))
                    .collect(),
                value: Box::new(f.to_value()),
            }
        }
        None => f.to_value(),
    }
}

/// The elements an aggregate value yields, in order (maps: key, value, …).
fn elements(v: &Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(i) | Value::Set(i) | Value::Push(i) => Some(i.clone()),
        Value::Map(p) => Some(p.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect()),
        _ => None,
    }
}

/// The value an element stands for, attributes aside.
fn plain(v: &Value) -> &Value {
    match v {
        Value::Attributed { value, .. } => value,
        v => v,
    }
}

/// Walks `a` (whose value is `v`) choosing by `coin`, for each element, to
/// leave it unread, compare it whole, descend into part of it, or jump over
/// some elements with `nth`; checks everything it reads.
fn partial_walk(a: Aggregate<'_>, v: &Value, coin: &mut Coin) -> Result<(), TestCaseError> {
    let want = elements(v).expect("an aggregate value");
    prop_assert_eq!(a.iter().count(), want.len());
    let mut it = a.iter().with_attributes();
    let mut i = 0;
    while i < want.len() {
        match coin.pick(5) {
            // Jump: `nth` on the plain iterator from the same position.
            0 => {
                let n = coin.pick(3) as usize;
                let mut rest = a.iter();
                if i > 0 {
                    rest.nth(i - 1);
                }
                let got = rest.nth(n);
                prop_assert_eq!(
                    got.map(|f| f.to_value()),
                    want.get(i + n).map(|w| plain(w).clone())
                );
                prop_assert_eq!(
                    a.get(i + n).map(|f| f.to_value()),
                    want.get(i + n).map(|w| plain(w).clone())
                );
                let (attrs, f) = it.next().expect("element");
                prop_assert_eq!(&with_attrs(attrs, &f), &want[i]);
            }
            // Leave it unread.
            1 => {
                it.next().expect("element");
            }
            // Descend into part of it, then go on with the parent.
            2 | 3 => {
                let (_, f) = it.next().expect("element");
                if let (Some(child), Some(_)) = (f.as_aggregate(), elements(plain(&want[i]))) {
                    if coin.flip() {
                        partial_walk(child, plain(&want[i]), coin)?;
                    } else {
                        let take = coin.pick(child.iter().count() as u64 + 1) as usize;
                        let got: Vec<Value> =
                            child.iter().take(take).map(|e| e.to_value()).collect();
                        let w: Vec<Value> = elements(plain(&want[i]))
                            .unwrap()
                            .iter()
                            .take(take)
                            .map(|e| plain(e).clone())
                            .collect();
                        prop_assert_eq!(got, w);
                    }
                    // The exact bytes of the nested aggregate parse back to it.
                    let mut again = Vec::new();
                    encode_aggregate_header(&mut again, child.kind(), child.len());
                    again.extend_from_slice(child.body());
                    prop_assert_eq!(&parsed(&again).to_value(), plain(&want[i]));
                } else {
                    prop_assert_eq!(&f.to_value(), plain(&want[i]));
                }
            }
            // Compare it whole.
            _ => {
                let (attrs, f) = it.next().expect("element");
                prop_assert_eq!(&with_attrs(attrs, &f), &want[i]);
            }
        }
        i += 1;
    }
    prop_assert!(it.next().is_none());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn partial_walks_read_what_was_encoded(v in value(), seed in 1u64..) {
        let mut wire = Vec::new();
        encode_varied(&mut wire, &v, &mut Coin::new(seed));
        let p = parsed(&wire);
        prop_assert_eq!(&p.to_value(), &v);
        if let Some(a) = p.frame.as_aggregate() {
            partial_walk(a, plain(&v), &mut Coin::new(seed ^ 0x5555))?;
        }
    }
}

#[test]
fn maps_in_maps_step_over_unread_values() {
    let wire = b"%3\r\n$1\r\na\r\n%2\r\n$1\r\nx\r\n%1\r\n:1\r\n*2\r\n:2\r\n:3\r\n$1\r\ny\r\n:4\r\n\
                 $1\r\nb\r\n%0\r\n$1\r\nc\r\n*1\r\n%1\r\n+k\r\n+v\r\n";
    let p = parsed(wire);
    let top = agg(&p.frame);
    assert_eq!((top.kind(), top.len()), (AggregateKind::Map, 3));
    let keys: Vec<_> = top.pairs().map(|(k, _)| k.as_bytes().unwrap()).collect();
    assert_eq!(keys, [b"a", b"b", b"c"]);
    // Read the inner map's first key only, then go on.
    let mut pairs = top.pairs();
    let (_, a) = pairs.next().unwrap();
    let inner = agg(&a);
    assert_eq!(inner.iter().next().unwrap().as_bytes(), Some(&b"x"[..]));
    let (b, empty) = pairs.next().unwrap();
    assert_eq!((b.as_bytes(), agg(&empty).len()), (Some(&b"b"[..]), 0));
    let (_, c) = pairs.next().unwrap();
    let deep = agg(&agg(&c).get(0).unwrap());
    assert_eq!(
        deep.pairs()
            .next()
            .map(|(k, v)| (k.as_bytes(), v.as_bytes())),
        Some((Some(&b"k"[..]), Some(&b"v"[..])))
    );
    assert!(pairs.next().is_none());
    // `get` jumps over the nested maps without reading them.
    assert_eq!(inner.get(2).and_then(|f| f.as_bytes()), Some(&b"y"[..]));
    assert_eq!(inner.get(3).and_then(|f| f.as_int()), Some(4));
    assert!(inner.get(4).is_none());
    assert_eq!(top.get(4).and_then(|f| f.as_bytes()), Some(&b"c"[..]));
    // A nested aggregate's body is exactly its elements.
    assert_eq!(
        inner.body(),
        b"$1\r\nx\r\n%1\r\n:1\r\n*2\r\n:2\r\n:3\r\n$1\r\ny\r\n:4\r\n"
    );
    assert_eq!(
        agg(&inner.get(1).unwrap()).body(),
        b":1\r\n*2\r\n:2\r\n:3\r\n"
    );
    assert!(format!("{inner:?}").contains("len: 2"));
}

#[test]
fn attributes_on_nested_elements_after_unread_siblings() {
    // [[1, |{ttl: 5} "x"], |{a: [1]} [ |{} 7 ], "z"]
    let wire = b"*3\r\n*2\r\n:1\r\n|1\r\n+ttl\r\n:5\r\n$1\r\nx\r\n\
                 |1\r\n+a\r\n*1\r\n:1\r\n*1\r\n|0\r\n:7\r\n$1\r\nz\r\n";
    let p = parsed(wire);
    let top = agg(&p.frame);
    let mut it = top.iter().with_attributes();
    let (none, first) = it.next().unwrap();
    assert!(none.is_none());
    let (attrs, second) = it.next().unwrap();
    let attrs = attrs.unwrap();
    assert_eq!(attrs.pairs().next().unwrap().0.as_bytes(), Some(&b"a"[..]));
    let mut inner = agg(&second).iter().with_attributes();
    let (empty, seven) = inner.next().unwrap();
    assert_eq!((empty.map(|a| a.len()), seven.as_int()), (Some(0), Some(7)));
    let (_, z) = it.next().unwrap();
    assert_eq!(z.as_bytes(), Some(&b"z"[..]));
    assert!(it.next().is_none());
    // The first child, read only now: its attributed element.
    let mut firsts = agg(&first).iter().with_attributes();
    firsts.next();
    let (ttl, x) = firsts.next().unwrap();
    assert_eq!(ttl.unwrap().pairs().next().unwrap().1.as_int(), Some(5));
    assert_eq!(x.as_bytes(), Some(&b"x"[..]));
    // Plain iteration skips attributes, `get` too.
    assert_eq!(top.get(2).and_then(|f| f.as_bytes()), Some(&b"z"[..]));
    assert_eq!(
        agg(&first).get(1).and_then(|f| f.as_bytes()),
        Some(&b"x"[..])
    );
}

#[test]
fn streamed_and_counted_aggregates_nest_either_way() {
    // *3 [ *?[1, %1{k: [2]}] , ~1{ *?[] }, >?[ *2[3, 4], 5 ] ]
    let wire = b"*3\r\n*?\r\n:1\r\n%1\r\n+k\r\n*1\r\n:2\r\n.\r\n~1\r\n*?\r\n.\r\n\
                 >?\r\n*2\r\n:3\r\n:4\r\n:5\r\n.\r\n";
    let p = parsed(wire);
    let top = agg(&p.frame);
    let kids: Vec<_> = top.iter().collect();
    assert_eq!(kids.len(), 3);
    let streamed = agg(&kids[0]);
    assert_eq!(
        (streamed.len(), streamed.body()),
        (2, &b":1\r\n%1\r\n+k\r\n*1\r\n:2\r\n"[..])
    );
    let set = agg(&kids[1]);
    assert_eq!((set.kind(), set.len()), (AggregateKind::Set, 1));
    assert_eq!(agg(&set.get(0).unwrap()).len(), 0);
    let push = agg(&kids[2]);
    assert_eq!(push.kind(), AggregateKind::Push);
    // Inside the streamed push: a counted array left unread, then 5.
    assert_eq!(push.get(1).and_then(|f| f.as_int()), Some(5));
    let mut it = push.iter();
    let pair = agg(&it.next().unwrap());
    assert_eq!(pair.iter().next().and_then(|f| f.as_int()), Some(3));
    assert_eq!(it.next().and_then(|f| f.as_int()), Some(5));
    assert!(it.next().is_none());
    assert_eq!(pair.body(), b":3\r\n:4\r\n");
    assert_eq!(
        p.to_value(),
        Value::Array(vec![
            Value::Array(vec![
                Value::Integer(1),
                Value::Map(vec![(
                    Value::Simple(b"k".to_vec()),
                    Value::Array(vec![Value::Integer(2)])
                )]),
            ]),
            Value::Set(vec![Value::Array(vec![])]),
            Value::Push(vec![
                Value::Array(vec![Value::Integer(3), Value::Integer(4)]),
                Value::Integer(5)
            ]),
        ])
    );
}

#[test]
fn cluster_slots_read_in_part() {
    for name in [
        "redis7_slots_resp3.bin",
        "valkey9_slots_resp3.bin",
        "redis7_slots_resp2.bin",
    ] {
        let path = format!(
            "{}/../topology/tests/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let wire = std::fs::read(&path).unwrap();
        let p = parsed(&wire);
        let whole = p.to_value();
        let Value::Array(ranges) = &whole else {
            panic!("{name}")
        };
        // For each range: its end slot and the master's id only, with
        // everything else left unread.
        let top = agg(&p.frame);
        let mut n = 0;
        for (range, want) in top.iter().zip(ranges) {
            let Value::Array(want) = want else { panic!() };
            let r = agg(&range);
            assert_eq!(r.get(1).map(|f| f.to_value()), Some(want[1].clone()));
            let master = agg(&r.get(2).unwrap());
            let Value::Array(m) = &want[2] else { panic!() };
            assert_eq!(master.get(2).map(|f| f.to_value()), Some(m[2].clone()));
            n += 1;
        }
        assert_eq!(n, ranges.len());
    }
}
