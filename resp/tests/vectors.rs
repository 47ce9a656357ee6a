//! Table-driven vectors: every type, every malformed form.

use resp::{parse, Decoder, ErrorKind, Limits, Status, Value};

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn s(x: &str) -> Value {
    Value::Simple(b(x))
}

fn bulk(x: &str) -> Value {
    Value::Bulk(b(x))
}

/// Valid frames and the value each parses to.
fn valid() -> Vec<(&'static str, Value)> {
    use Value::*;
    vec![
        ("+OK\r\n", s("OK")),
        ("+\r\n", s("")),
        ("-ERR unknown\r\n", Error(b("ERR unknown"))),
        (":0\r\n", Integer(0)),
        (":-42\r\n", Integer(-42)),
        (":+7\r\n", Integer(7)),
        (":9223372036854775807\r\n", Integer(i64::MAX)),
        (":-9223372036854775808\r\n", Integer(i64::MIN)),
        ("$5\r\nhello\r\n", bulk("hello")),
        ("$0\r\n\r\n", bulk("")),
        ("$4\r\na\r\nb\r\n", bulk("a\r\nb")),
        ("$-1\r\n", Null),
        ("*-1\r\n", Null),
        ("_\r\n", Null),
        (",1.5\r\n", Double(1.5)),
        (",-0.25\r\n", Double(-0.25)),
        (",10\r\n", Double(10.0)),
        (",1e+300\r\n", Double(1e300)),
        (",0.10000000000000001\r\n", Double(0.1)),
        (",inf\r\n", Double(f64::INFINITY)),
        (",-inf\r\n", Double(f64::NEG_INFINITY)),
        (",nan\r\n", Double(f64::NAN)),
        ("#t\r\n", Boolean(true)),
        ("#f\r\n", Boolean(false)),
        ("!21\r\nSYNTAX invalid syntax\r\n", BlobError(b("SYNTAX invalid syntax"))),
        (
            "=15\r\ntxt:Some string\r\n",
            Verbatim {
                format: *b"txt",
                text: b("Some string"),
            },
        ),
        (
            "=4\r\nmkd:\r\n",
            Verbatim {
                format: *b"mkd",
                text: b(""),
            },
        ),
        (
            "(3492890328409238509324850943850943825024385\r\n",
            BigNumber(b("3492890328409238509324850943850943825024385")),
        ),
        ("(-1\r\n", BigNumber(b("-1"))),
        ("*0\r\n", Array(vec![])),
        ("*2\r\n:1\r\n$1\r\nx\r\n", Array(vec![Integer(1), bulk("x")])),
        (
            "*2\r\n*1\r\n+a\r\n*0\r\n",
            Array(vec![Array(vec![s("a")]), Array(vec![])]),
        ),
        ("~2\r\n+a\r\n+b\r\n", Set(vec![s("a"), s("b")])),
        (
            "%2\r\n+a\r\n:1\r\n+b\r\n:2\r\n",
            Map(vec![(s("a"), Integer(1)), (s("b"), Integer(2))]),
        ),
        ("%0\r\n", Map(vec![])),
        (
            ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n",
            Push(vec![bulk("message"), bulk("ch"), bulk("hi")]),
        ),
        (
            "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n",
            Attributed {
                attributes: vec![(
                    s("key-popularity"),
                    Map(vec![(bulk("a"), Double(0.1923)), (bulk("b"), Double(0.0012))]),
                )],
                value: Box::new(Array(vec![Integer(2039123), Integer(9543892)])),
            },
        ),
        (
            "*2\r\n|1\r\n+ttl\r\n:3600\r\n:1\r\n:2\r\n",
            Array(vec![
                Attributed {
                    attributes: vec![(s("ttl"), Integer(3600))],
                    value: Box::new(Integer(1)),
                },
                Integer(2),
            ]),
        ),
        (
            "|0\r\n+x\r\n",
            Attributed {
                attributes: vec![],
                value: Box::new(s("x")),
            },
        ),
        ("$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;2\r\nld\r\n;0\r\n", bulk("Hello world")),
        ("$?\r\n;0\r\n", bulk("")),
        (
            "*3\r\n|1\r\n+a\r\n+b\r\n$1\r\nx\r\n|1\r\n+c\r\n+d\r\n$1\r\ny\r\n$1\r\nz\r\n",
            Array(vec![
                Attributed {
                    attributes: vec![(s("a"), s("b"))],
                    value: Box::new(bulk("x")),
                },
                Attributed {
                    attributes: vec![(s("c"), s("d"))],
                    value: Box::new(bulk("y")),
                },
                bulk("z"),
            ]),
        ),
        (
            "|0\r\n*?\r\n.\r\n",
            Attributed {
                attributes: vec![],
                value: Box::new(Array(vec![])),
            },
        ),
        (
            "*1\r\n|1\r\n+a\r\n+b\r\n$?\r\n;1\r\nx\r\n;0\r\n",
            Array(vec![Attributed {
                attributes: vec![(s("a"), s("b"))],
                value: Box::new(bulk("x")),
            }]),
        ),
        ("*?\r\n:1\r\n:2\r\n.\r\n", Array(vec![Integer(1), Integer(2)])),
        ("*?\r\n.\r\n", Array(vec![])),
        ("~?\r\n+a\r\n.\r\n", Set(vec![s("a")])),
        (
            "%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n",
            Map(vec![(s("a"), Integer(1)), (s("b"), Integer(2))]),
        ),
        (">?\r\n+pong\r\n.\r\n", Push(vec![s("pong")])),
        (
            "*?\r\n*?\r\n$?\r\n;1\r\nx\r\n;0\r\n.\r\n*1\r\n*?\r\n.\r\n.\r\n",
            Array(vec![Array(vec![bulk("x")]), Array(vec![Array(vec![])])]),
        ),
        (
            "*3\r\n*?\r\n:1\r\n.\r\n%1\r\n$?\r\n;1\r\nk\r\n;0\r\n*-1\r\n$-1\r\n",
            Array(vec![
                Array(vec![Integer(1)]),
                Map(vec![(bulk("k"), Null)]),
                Null,
            ]),
        ),
    ]
}

#[test]
fn every_valid_vector_parses_whole_and_nothing_less() {
    let limits = Limits::default();
    for (wire, want) in valid() {
        let mut buf = wire.as_bytes().to_vec();
        buf.extend_from_slice(b"+next\r\n");
        let Ok(Status::Complete(p)) = parse(&buf, &limits) else {
            panic!("{wire:?}: {:?}", parse(&buf, &limits));
        };
        assert_eq!(p.consumed, wire.len(), "{wire:?}");
        assert_eq!(p.to_value(), want, "{wire:?}");
        for cut in 0..wire.len() {
            assert_eq!(
                parse(&buf[..cut], &limits).map(|s| s.is_complete()),
                Ok(false),
                "{wire:?} cut at {cut}"
            );
        }
        // Fed one byte at a time to a decoder: the same result.
        let mut d = Decoder::new(limits);
        for end in 0..wire.len() {
            assert!(matches!(d.decode(&buf[..end]), Ok(Status::Incomplete)));
        }
        let Ok(Status::Complete(q)) = d.decode(&buf) else {
            panic!("{wire:?}: decoder")
        };
        assert_eq!((q.consumed, q.to_value()), (wire.len(), want), "{wire:?}");
    }
}

/// Malformed frames: the error and its offset.
#[test]
fn every_malformed_vector_is_rejected_with_its_offset() {
    let cases: &[(&str, ErrorKind, usize)] = &[
        ("x\r\n", ErrorKind::UnknownType(b'x'), 0),
        ("\r\n", ErrorKind::UnknownType(b'\r'), 0),
        ("+OK\rx", ErrorKind::MissingCrlf, 4),
        (":\r\n", ErrorKind::BadInteger, 1),
        (":12a\r\n", ErrorKind::BadInteger, 1),
        (":9223372036854775808\r\n", ErrorKind::BadInteger, 1),
        (":-\r\n", ErrorKind::BadInteger, 1),
        ("$\r\n", ErrorKind::BadLength, 1),
        ("$-2\r\n", ErrorKind::BadLength, 1),
        ("$+1\r\nx\r\n", ErrorKind::BadLength, 1),
        ("$1x\r\n", ErrorKind::BadLength, 1),
        ("$18446744073709551616\r\n", ErrorKind::LengthOverflow, 1),
        ("$3\r\nabcd\r\n", ErrorKind::MissingCrlf, 7),
        ("!-1\r\n", ErrorKind::BadLength, 1),
        ("*\r\n", ErrorKind::BadLength, 1),
        ("%-1\r\n", ErrorKind::BadLength, 1),
        ("*1x\r\n", ErrorKind::BadLength, 1),
        ("_x\r\n", ErrorKind::MissingCrlf, 1),
        (",\r\n", ErrorKind::BadDouble, 1),
        (",1.2.3\r\n", ErrorKind::BadDouble, 1),
        (",infinity\r\n", ErrorKind::BadDouble, 1),
        (",abc\r\n", ErrorKind::BadDouble, 1),
        (",1e\r\n", ErrorKind::BadDouble, 1),
        ("#x\r\n", ErrorKind::BadBoolean, 1),
        ("#\r\n", ErrorKind::BadBoolean, 1),
        ("#tt\r\n", ErrorKind::BadBoolean, 1),
        ("(\r\n", ErrorKind::BadBigNumber, 1),
        ("(12a\r\n", ErrorKind::BadBigNumber, 1),
        ("=3\r\ntxt\r\n", ErrorKind::BadVerbatim, 0),
        ("=5\r\ntxtxy\r\n", ErrorKind::BadVerbatim, 7),
        ("$?\r\n4\r\nabcd\r\n", ErrorKind::BadStreamChunk, 4),
        ("$?\r\n;x\r\n", ErrorKind::BadStreamChunk, 4),
        ("$?\r\n;2\r\nabc\r\n", ErrorKind::MissingCrlf, 10),
        ("!?\r\n", ErrorKind::BadLength, 1),
        ("*-1?\r\n", ErrorKind::BadLength, 1),
        (".\r\n", ErrorKind::UnexpectedEnd, 0),
        ("*1\r\n.\r\n", ErrorKind::UnexpectedEnd, 4),
        ("*?\r\n.x\r\n", ErrorKind::MissingCrlf, 5),
        ("%?\r\n+k\r\n.\r\n", ErrorKind::OddMapLength, 8),
        (
            "*?\r\n|1\r\n+a\r\n+b\r\n.\r\n",
            ErrorKind::UnexpectedEnd,
            16,
        ),
        (
            "|1\r\n+a\r\n+b\r\n|0\r\n+c\r\n",
            ErrorKind::NestedAttribute,
            12,
        ),
        ("|0\r\n|0\r\n+c\r\n", ErrorKind::NestedAttribute, 4),
        ("|?\r\n", ErrorKind::BadLength, 1),
        ("|-1\r\n", ErrorKind::BadLength, 1),
        ("*2\r\n:1\r\n?\r\n", ErrorKind::UnknownType(b'?'), 8),
        (
            "$1234567890123456789012345678901234567890",
            ErrorKind::BadLength,
            1,
        ),
    ];
    for &(wire, kind, offset) in cases {
        let got = parse(wire.as_bytes(), &Limits::default());
        let Err(e) = got else {
            panic!("{wire:?} should fail with {kind:?}, got {got:?}")
        };
        assert_eq!((e.kind, e.offset), (kind, offset), "{wire:?}: {e}");
        // The decoder agrees when fed byte by byte.
        let mut d = Decoder::default();
        let mut first = None;
        for end in 1..=wire.len() {
            if let Err(e) = d.decode(&wire.as_bytes()[..end]) {
                first = Some(e);
                break;
            }
        }
        assert_eq!(first, Some(e), "{wire:?} fed byte by byte");
    }
}

#[test]
fn errors_say_what_was_expected() {
    let e = parse(b"$x\r\n", &Limits::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "RESP parse error at byte 1: bad length; expected decimal digits, `-1` or `?`"
    );
    let e = parse(b"#maybe\r\n", &Limits::default()).unwrap_err();
    assert!(e.to_string().contains("expected `t` or `f`"), "{e}");
}
