//! Encoder vectors: exact bytes for every type, and exact double round trips.

use resp::{
    encode_aggregate_header, encode_bulk, encode_command, encode_command_header,
    encode_command_with, encode_frame, encode_streamed_aggregate_end,
    encode_streamed_aggregate_start, encode_streamed_string, encode_value, parse, AggregateKind,
    Limits, Status, Value,
};

fn enc(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&mut out, v);
    out
}

#[test]
fn every_type_encodes_to_its_wire_form() {
    use Value::*;
    let b = |s: &str| s.as_bytes().to_vec();
    let cases: Vec<(Value, &str)> = vec![
        (Simple(b("OK")), "+OK\r\n"),
        (Error(b("ERR x")), "-ERR x\r\n"),
        (Integer(0), ":0\r\n"),
        (Integer(i64::MIN), ":-9223372036854775808\r\n"),
        (Integer(i64::MAX), ":9223372036854775807\r\n"),
        (Bulk(b("")), "$0\r\n\r\n"),
        (Bulk(b("a\r\nb")), "$4\r\na\r\nb\r\n"),
        (Null, "_\r\n"),
        (Double(1.5), ",1.5\r\n"),
        (Double(f64::INFINITY), ",inf\r\n"),
        (Double(f64::NEG_INFINITY), ",-inf\r\n"),
        (Double(f64::NAN), ",nan\r\n"),
        (Double(1e300), ",1e300\r\n"),
        (Double(-2.5e-7), ",-2.5e-7\r\n"),
        (Double(0.1), ",0.1\r\n"),
        (Double(-0.0), ",-0\r\n"),
        (Boolean(true), "#t\r\n"),
        (Boolean(false), "#f\r\n"),
        (BlobError(b("E")), "!1\r\nE\r\n"),
        (
            Verbatim {
                format: *b"txt",
                text: b("hi"),
            },
            "=6\r\ntxt:hi\r\n",
        ),
        (
            BigNumber(b("-123456789012345678901234567890")),
            "(-123456789012345678901234567890\r\n",
        ),
        (Array(vec![]), "*0\r\n"),
        (Set(vec![Integer(1)]), "~1\r\n:1\r\n"),
        (
            Push(vec![Bulk(b("pong")), Bulk(b(""))]),
            ">2\r\n$4\r\npong\r\n$0\r\n\r\n",
        ),
        (Map(vec![(Simple(b("k")), Null)]), "%1\r\n+k\r\n_\r\n"),
        (
            Attributed {
                attributes: vec![(Simple(b("a")), Integer(1))],
                value: Box::new(Simple(b("v"))),
            },
            "|1\r\n+a\r\n:1\r\n+v\r\n",
        ),
    ];
    for (v, wire) in cases {
        assert_eq!(String::from_utf8_lossy(&enc(&v)), wire, "{v:?}");
        let Ok(Status::Complete(p)) = parse(wire.as_bytes(), &Limits::default()) else {
            panic!("{wire:?}")
        };
        assert_eq!(p.to_value(), v, "{wire:?}");
    }
}

#[test]
fn doubles_round_trip_bit_for_bit() {
    let mut samples = vec![
        0.0,
        -0.0,
        0.1,
        1.0 / 3.0,
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        5e-324,
        1e15,
        1e16,
        123_456_789.123_456_79,
        1e-5,
        9.999999999999999e-6,
    ];
    let mut rng = testkit::Rng::new(1);
    for _ in 0..10_000 {
        let d = f64::from_bits(rng.next_u64());
        if d.is_finite() {
            samples.push(d);
        }
    }
    for d in samples {
        let wire = enc(&Value::Double(d));
        let Ok(Status::Complete(p)) = parse(&wire, &Limits::default()) else {
            panic!("{}", String::from_utf8_lossy(&wire))
        };
        let Value::Double(back) = p.to_value() else {
            panic!()
        };
        assert_eq!(
            back.to_bits(),
            d.to_bits(),
            "{}",
            String::from_utf8_lossy(&wire)
        );
        assert!(wire.len() <= 28, "{}", String::from_utf8_lossy(&wire));
    }
}

#[test]
fn commands_are_arrays_of_bulk_strings() {
    let mut out = Vec::new();
    encode_command(&mut out, [&b"SSUBSCRIBE"[..], b"{a}x", b""]);
    assert_eq!(out, b"*3\r\n$10\r\nSSUBSCRIBE\r\n$4\r\n{a}x\r\n$0\r\n\r\n");
    out.clear();
    encode_command(&mut out, Vec::<Vec<u8>>::new());
    assert_eq!(out, b"*0\r\n");
}

#[test]
fn commands_built_piecewise_match_encode_command() {
    let mut out = Vec::new();
    encode_command_with(&mut out, b"SUNSUBSCRIBE", &[&b"{a}x"[..], b"", b"a\r\nb"]);
    assert_eq!(
        out,
        b"*4\r\n$12\r\nSUNSUBSCRIBE\r\n$4\r\n{a}x\r\n$0\r\n\r\n$4\r\na\r\nb\r\n"
    );
    let mut whole = Vec::new();
    encode_command(&mut whole, [&b"SUNSUBSCRIBE"[..], b"{a}x", b"", b"a\r\nb"]);
    assert_eq!(out, whole);
    out.clear();
    encode_command_with::<&[u8]>(&mut out, b"PING", &[]);
    assert_eq!(out, b"*1\r\n$4\r\nPING\r\n");
    out.clear();
    encode_command_header(&mut out, 1_234_567_890);
    assert_eq!(out, b"*1234567890\r\n");
    out.clear();
    encode_command_header(&mut out, 2);
    encode_bulk(&mut out, b"ECHO");
    encode_bulk(&mut out, &[0, 255]);
    assert_eq!(out, b"*2\r\n$4\r\nECHO\r\n$2\r\n\x00\xff\r\n");
    let Ok(Status::Complete(p)) = parse(&out, &Limits::default()) else {
        panic!()
    };
    assert_eq!(
        p.to_value(),
        Value::Array(vec![
            Value::Bulk(b"ECHO".to_vec()),
            Value::Bulk(vec![0, 255])
        ])
    );
}

#[test]
fn streamed_forms() {
    let mut out = Vec::new();
    encode_streamed_aggregate_start(&mut out, AggregateKind::Map);
    encode_value(&mut out, &Value::Simple(b"k".to_vec()));
    encode_streamed_string(&mut out, ["ab", "c"]);
    encode_streamed_aggregate_end(&mut out);
    assert_eq!(out, b"%?\r\n+k\r\n$?\r\n;2\r\nab\r\n;1\r\nc\r\n;0\r\n.\r\n");
    let Ok(Status::Complete(p)) = parse(&out, &Limits::default()) else {
        panic!()
    };
    assert_eq!(
        p.to_value(),
        Value::Map(vec![(
            Value::Simple(b"k".to_vec()),
            Value::Bulk(b"abc".to_vec())
        )])
    );
    // A frame re-encodes as its validated bytes under a counted header.
    let mut again = Vec::new();
    encode_frame(&mut again, &p.frame);
    assert_eq!(again, b"%1\r\n+k\r\n$?\r\n;2\r\nab\r\n;1\r\nc\r\n;0\r\n");
    let mut hdr = Vec::new();
    encode_aggregate_header(&mut hdr, AggregateKind::Push, 3);
    assert_eq!(hdr, b">3\r\n");
}

#[test]
fn bulk_header_then_bytes_is_a_bulk_string_at_every_digit_count() {
    for len in [0usize, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 65_536] {
        let bytes = vec![b'x'; len];
        let mut pieces = Vec::new();
        resp::encode_bulk_header(&mut pieces, len);
        pieces.extend_from_slice(&bytes);
        pieces.extend_from_slice(b"\r\n");
        let mut whole = Vec::new();
        resp::encode_bulk(&mut whole, &bytes);
        assert_eq!(pieces, whole, "len {len}");
    }
}
