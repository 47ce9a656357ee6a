//! Properties: encode → parse is the identity; feeding a frame split at every
//! byte boundary gives `Incomplete` until the identical final result; parsing
//! and walking a frame never allocates.

mod common;

use common::{encode_varied, value, walk, Coin};
use proptest::prelude::*;
use resp::{encode_frame, encode_value, parse, Decoder, Limits, Status, Value};
use testkit::alloc::{this_thread, CountingAlloc};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::new();

/// Allocation calls of this thread so far.
fn allocs() -> u64 {
    this_thread::allocations()
}

fn parse_value(wire: &[u8]) -> (Value, usize) {
    match parse(wire, &Limits::default()) {
        Ok(Status::Complete(p)) => (p.to_value(), p.consumed),
        other => panic!("{other:?} for {:?}", String::from_utf8_lossy(wire)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The three ways to encode a command give the same bytes, which parse
    /// to the array of bulk strings; with room reserved, none allocates.
    #[test]
    fn commands_round_trip_without_allocating(
        cmd in prop::collection::vec(any::<u8>(), 0..12),
        args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..16),
    ) {
        let mut whole = Vec::new();
        resp::encode_command(&mut whole, std::iter::once(&cmd).chain(&args).collect::<Vec<_>>());
        let mut with = Vec::with_capacity(whole.len());
        let mut piecewise = Vec::with_capacity(whole.len());
        let before = allocs();
        resp::encode_command_with(&mut with, &cmd, &args);
        resp::encode_command_header(&mut piecewise, args.len() + 1);
        resp::encode_bulk(&mut piecewise, &cmd);
        for a in &args {
            resp::encode_bulk(&mut piecewise, a);
        }
        prop_assert_eq!(allocs() - before, 0);
        prop_assert_eq!(&with, &whole);
        prop_assert_eq!(&piecewise, &whole);
        let (back, consumed) = parse_value(&with);
        prop_assert_eq!(consumed, with.len());
        let expected: Vec<Value> =
            std::iter::once(cmd).chain(args).map(Value::Bulk).collect();
        prop_assert_eq!(back, Value::Array(expected));
    }

    #[test]
    fn encode_then_parse_is_identity(v in value()) {
        let mut wire = Vec::new();
        encode_value(&mut wire, &v);
        let (back, consumed) = parse_value(&wire);
        prop_assert_eq!(consumed, wire.len());
        prop_assert_eq!(&back, &v);
        // A parsed frame re-encodes to bytes that parse to the same value.
        let Ok(Status::Complete(p)) = parse(&wire, &Limits::default()) else { unreachable!() };
        let mut again = Vec::new();
        if let Some(a) = p.attributes {
            resp::encode_aggregate_header(&mut again, a.kind(), a.len());
            again.extend_from_slice(a.body());
        }
        encode_frame(&mut again, &p.frame);
        prop_assert_eq!(parse_value(&again).0, v);
    }

    /// Flat aggregates of bulk strings, some attributed: the shape the
    /// validator's fast lanes handle.
    #[test]
    fn attributed_bulk_runs_round_trip(
        items in prop::collection::vec(
            (any::<bool>(), prop::collection::vec(any::<u8>(), 0..4)), 1..8),
        seed in 1u64..,
    ) {
        let v = Value::Array(items.into_iter().map(|(attr, b)| {
            if attr {
                Value::Attributed {
                    attributes: vec![(Value::Simple(b"k".to_vec()), Value::Integer(1))],
                    value: Box::new(Value::Bulk(b)),
                }
            } else {
                Value::Bulk(b)
            }
        }).collect());
        let mut wire = Vec::new();
        encode_varied(&mut wire, &v, &mut Coin::new(seed));
        prop_assert_eq!(parse_value(&wire), (v, wire.len()));
    }

    #[test]
    fn every_encoding_form_parses_to_the_same_value(v in value(), seed in 1u64..) {
        let mut wire = Vec::new();
        encode_varied(&mut wire, &v, &mut Coin::new(seed));
        let (back, consumed) = parse_value(&wire);
        prop_assert_eq!(consumed, wire.len());
        prop_assert_eq!(back, v);
    }

    #[test]
    fn split_feeding_is_incomplete_until_the_same_result(
        v in value(), next in value(), seed in 1u64..,
    ) {
        let mut wire = Vec::new();
        encode_varied(&mut wire, &v, &mut Coin::new(seed));
        let len = wire.len();
        encode_value(&mut wire, &next);
        let limits = Limits::default();
        // Every strict prefix is incomplete, statelessly.
        for k in 0..len {
            prop_assert!(matches!(parse(&wire[..k], &limits), Ok(Status::Incomplete)), "cut {}", k);
        }
        // Fed one byte at a time to one decoder.
        let mut d = Decoder::new(limits);
        for k in 0..len {
            prop_assert!(matches!(d.decode(&wire[..k]), Ok(Status::Incomplete)), "byte {}", k);
        }
        let Ok(Status::Complete(p)) = d.decode(&wire[..len]) else { panic!("not complete") };
        prop_assert_eq!((p.consumed, p.to_value()), (len, v.clone()));
        // The decoder is ready for the next frame once `consumed` is removed.
        let Ok(Status::Complete(q)) = d.decode(&wire[len..]) else { panic!("next") };
        prop_assert_eq!(q.to_value(), next);
        // Split in two at every boundary, fresh decoder each time.
        for k in 0..len {
            let mut d = Decoder::new(limits);
            prop_assert!(matches!(d.decode(&wire[..k]), Ok(Status::Incomplete)));
            let Ok(Status::Complete(p)) = d.decode(&wire) else { panic!("split {k}") };
            prop_assert_eq!((p.consumed, p.to_value()), (len, v.clone()));
        }
    }

    #[test]
    fn parsing_and_walking_never_allocates(v in value(), seed in 1u64..) {
        let mut wire = Vec::new();
        encode_varied(&mut wire, &v, &mut Coin::new(seed));
        let mut d = Decoder::default();
        let before = allocs();
        let Ok(Status::Complete(p)) = parse(&wire, &Limits::default()) else { panic!() };
        let seen = walk(&p.frame);
        for k in 0..=wire.len() {
            let _ = d.decode(&wire[..k]);
        }
        let _ = resp::classify(&p.frame);
        prop_assert_eq!(allocs() - before, 0);
        prop_assert!(seen >= 1);
    }
}
