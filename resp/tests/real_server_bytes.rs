//! Bytes captured from real servers (Redis 7.0 and Valkey 9.1; see
//! `data/capture.py`): `DEBUG PROTOCOL <type>` for every RESP3 type the
//! server emits, and Pub/Sub events in RESP3 and RESP2.

use resp::pubsub::{classify, PubSub};
use resp::{parse, Decoder, Limits, Parsed, Status, Value};

const SERVERS: [&str; 2] = ["redis-7.0", "valkey-9.1"];

fn read(server: &str, name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/data/{server}/{name}.resp",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every frame in the file, which must parse to its last byte.
fn frames(wire: &[u8]) -> Vec<Parsed<'_>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        match parse(&wire[at..], &Limits::default()) {
            Ok(Status::Complete(p)) => {
                at += p.consumed;
                out.push(p);
            }
            other => panic!("at {at}: {other:?}"),
        }
    }
    out
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

#[test]
fn debug_protocol_every_type() {
    use Value::*;
    for server in SERVERS {
        let one = |name: &str| {
            let wire = read(server, name);
            let f = frames(&wire);
            assert_eq!(f.len(), 1, "{server} {name}");
            f[0].to_value()
        };
        assert_eq!(one("debug_protocol_string"), bulk("Hello World"));
        assert_eq!(one("debug_protocol_integer"), Integer(12345));
        // The server sends 3.141 (clippy would take the literal for a bad PI).
        assert_eq!(
            one("debug_protocol_double"),
            Double("3.141".parse().unwrap())
        );
        assert_eq!(
            one("debug_protocol_bignum"),
            BigNumber(b"1234567999999999999999999999999999999".to_vec())
        );
        assert_eq!(one("debug_protocol_null"), Null);
        assert_eq!(
            one("debug_protocol_array"),
            Array(vec![Integer(0), Integer(1), Integer(2)])
        );
        assert_eq!(
            one("debug_protocol_set"),
            Set(vec![Integer(0), Integer(1), Integer(2)])
        );
        assert_eq!(
            one("debug_protocol_map"),
            Map(vec![
                (Integer(0), Boolean(false)),
                (Integer(1), Boolean(true)),
                (Integer(2), Boolean(false))
            ])
        );
        assert_eq!(
            one("debug_protocol_attrib"),
            Attributed {
                attributes: vec![(
                    bulk("key-popularity"),
                    Array(vec![bulk("key:123"), Integer(90)])
                )],
                value: Box::new(bulk("Some real reply following the attribute")),
            }
        );
        assert_eq!(
            one("debug_protocol_verbatim"),
            Verbatim {
                format: *b"txt",
                text: b"This is a verbatim\nstring".to_vec()
            }
        );
        assert_eq!(one("debug_protocol_true"), Boolean(true));
        assert_eq!(one("debug_protocol_false"), Boolean(false));
        // A push and the reply, in the order the server chose.
        let wire = read(server, "debug_protocol_push");
        let f = frames(&wire);
        assert_eq!(f.len(), 2, "{server}");
        let (pushes, replies): (Vec<&Parsed<'_>>, Vec<_>) =
            f.iter().partition(|p| matches!(p.to_value(), Push(_)));
        assert_eq!(classify(&pushes[0].frame), Some(PubSub::Other));
        assert_eq!(
            replies[0].to_value(),
            bulk("Some real reply following the push reply")
        );
    }
}

#[test]
fn pubsub_events_in_both_protocols() {
    use PubSub::*;
    let cases: &[(&str, &[PubSub<'static>])] = &[
        (
            "subscribe",
            &[
                Subscribe {
                    channel: b"ch1",
                    count: 1,
                },
                Subscribe {
                    channel: b"ch2",
                    count: 2,
                },
            ],
        ),
        (
            "unsubscribe_all",
            &[
                Unsubscribe {
                    channel: Some(b"ch1"),
                    count: 1,
                },
                Unsubscribe {
                    channel: Some(b"ch2"),
                    count: 0,
                },
            ],
        ),
        (
            "unsubscribe_none",
            &[Unsubscribe {
                channel: None,
                count: 0,
            }],
        ),
        (
            "ssubscribe",
            &[SSubscribe {
                channel: b"{a}x",
                count: 1,
            }],
        ),
        (
            "smessage",
            &[SMessage {
                channel: b"{a}x",
                payload: b"payload",
            }],
        ),
        (
            "resp2_subscribe",
            &[Subscribe {
                channel: b"c",
                count: 1,
            }],
        ),
        ("resp2_ping_subscribed", &[Pong { payload: Some(b"") }]),
        (
            "resp2_unsubscribe",
            &[Unsubscribe {
                channel: Some(b"c"),
                count: 0,
            }],
        ),
        (
            "resp2_unsubscribe_none",
            &[Unsubscribe {
                channel: None,
                count: 0,
            }],
        ),
    ];
    for server in SERVERS {
        for &(name, want) in cases {
            let wire = read(server, name);
            let got: Vec<_> = frames(&wire).iter().map(|p| classify(&p.frame)).collect();
            let want: Vec<_> = want.iter().copied().map(Some).collect();
            assert_eq!(got, want, "{server} {name}");
        }
        // In RESP3, PING on a subscribed connection is a plain reply.
        let wire = read(server, "ping_subscribed");
        assert_eq!(classify(&frames(&wire)[0].frame), None);
    }
}

#[test]
fn every_capture_decodes_the_same_in_tiny_reads() {
    for server in SERVERS {
        let dir = format!("{}/tests/data/{server}", env!("CARGO_MANIFEST_DIR"));
        for entry in std::fs::read_dir(dir).unwrap() {
            let wire = std::fs::read(entry.unwrap().path()).unwrap();
            let whole: Vec<Value> = frames(&wire).iter().map(Parsed::to_value).collect();
            let mut fed = Vec::new();
            let mut d = Decoder::default();
            let (mut start, mut end) = (0, 0);
            while start < wire.len() {
                end = (end + 3).min(wire.len());
                if let Status::Complete(p) = d.decode(&wire[start..end]).unwrap() {
                    start += p.consumed;
                    end = end.max(start);
                    fed.push(p.to_value());
                }
            }
            assert_eq!(fed, whole);
        }
    }
}
