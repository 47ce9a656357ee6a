//! Property tests: any interleaving of replies, attributed replies, pushes
//! and subscribe confirmations, cut into any chunks, gives the same events.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use resp::Value;

use super::*;

/// One thing the server sends.
#[derive(Clone, Debug)]
enum Item {
    /// A reply to the next request: an integer, a bulk, an error, or a bulk
    /// with an attribute.
    Reply(u8, i64),
    /// A Pub/Sub message push.
    Push(i64),
    /// A server-initiated `sunsubscribe` (never a reply).
    Sunsubscribe(i64),
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        (0u8..4, any::<i64>()).prop_map(|(k, n)| Item::Reply(k, n)),
        any::<i64>().prop_map(Item::Push),
        any::<i64>().prop_map(Item::Sunsubscribe),
    ]
}

fn encode(item: &Item, out: &mut Vec<u8>) -> Value {
    let bulk = |s: String| Value::Bulk(s.into_bytes());
    let v = match item {
        Item::Reply(0, n) => Value::Integer(*n),
        Item::Reply(1, n) => bulk(format!("v{n}")),
        Item::Reply(2, n) => Value::Error(format!("ERR e{n}").into_bytes()),
        Item::Reply(_, n) => Value::Attributed {
            attributes: vec![(bulk("a".into()), Value::Integer(*n))],
            value: Box::new(bulk(format!("r{n}"))),
        },
        Item::Push(n) => Value::Push(vec![
            bulk("message".into()),
            bulk("ch".into()),
            bulk(n.to_string()),
        ]),
        Item::Sunsubscribe(n) => Value::Push(vec![
            bulk("sunsubscribe".into()),
            bulk(format!("c{n}")),
            Value::Integer(0),
        ]),
    };
    resp::encode_value(out, &v);
    v
}

proptest! {
    #[test]
    fn any_interleaving_any_chunking(
        items in proptest::collection::vec(item(), 0..40),
        cuts in proptest::collection::vec(1usize..64, 0..80),
        subscribe_first in any::<bool>(),
    ) {
        let t0 = Instant::now();
        let mut c: Connection<u32> = Connection::new(
            ConnConfig { flush_delay: Duration::ZERO, ..ConnConfig::default() },
            t0,
        );
        c.handle_read(b"%0\r\n", t0);
        while c.poll_event().is_some() {}
        // Optionally an SSUBSCRIBE of two channels goes first; its
        // confirmations come first in the stream.
        let mut stream = Vec::new();
        let mut want: Vec<(Option<u32>, bool, Value)> = Vec::new(); // (user, is_push, value)
        let mut user = 0u32;
        if subscribe_first {
            c.send_encoded(b"", [Request { user, kind: ReplyKind::Subscribe { kind: SubscribeKind::Shard, confirmations: 2 } }], t0);
            for (i, ch) in ["a", "b"].iter().enumerate() {
                let v = Value::Push(vec![
                    Value::Bulk(b"ssubscribe".to_vec()),
                    Value::Bulk(ch.as_bytes().to_vec()),
                    Value::Integer(i as i64 + 1),
                ]);
                resp::encode_value(&mut stream, &v);
                want.push((if i == 1 { Some(user) } else { None }, true, v));
            }
            user += 1;
        }
        for it in &items {
            let v = encode(it, &mut stream);
            match it {
                Item::Reply(..) => {
                    c.send_encoded(b"", [Request::single(user)], t0);
                    want.push((Some(user), false, v));
                    user += 1;
                }
                _ => want.push((None, true, v)),
            }
        }
        let mut got = Vec::new();
        let mut rest = &stream[..];
        let mut cuts = cuts.into_iter();
        while !rest.is_empty() {
            let n = cuts.next().unwrap_or(rest.len()).min(rest.len());
            c.handle_read(&rest[..n], t0);
            rest = &rest[n..];
            while let Some(ev) = c.poll_event() {
                got.push(match ev {
                    Event::Reply { user, reply } => (Some(user), false, reply.to_value()),
                    Event::Push { push, completes, .. } => (completes, true, push.to_value()),
                    other => panic!("unexpected {other:?}"),
                });
            }
        }
        prop_assert_eq!(got, want);
        prop_assert_eq!(c.pending_len(), 0);
        prop_assert!(!c.is_closed());
    }
}

proptest! {
    /// Whatever the server sends, the core never panics, and every request
    /// ends up answered, still pending on an open connection, or failed.
    #[test]
    fn arbitrary_server_bytes_never_panic_and_never_lose_a_request(
        garbage in proptest::collection::vec(any::<u8>(), 0..512),
        resp2 in any::<bool>(),
        subscribe_role in any::<bool>(),
        requests in 0u32..8,
    ) {
        let t0 = Instant::now();
        let mut c: Connection<u32> = Connection::new(
            ConnConfig {
                protocol: if resp2 { Protocol::Resp2 } else { Protocol::Resp3 },
                role: if subscribe_role { Role::Subscribe } else { Role::Command },
                ..ConnConfig::default()
            },
            t0,
        );
        for u in 0..requests {
            let kind = if u % 3 == 2 {
                ReplyKind::Subscribe { kind: SubscribeKind::Shard, confirmations: 2 }
            } else {
                ReplyKind::Single
            };
            c.send_encoded(b"*1\r\n$4\r\nPING\r\n", [Request { user: u, kind }], t0);
        }
        let mut done = std::collections::BTreeSet::new();
        for chunk in garbage.chunks(17) {
            c.handle_read(chunk, t0);
            while let Some(ev) = c.poll_event() {
                match ev {
                    Event::Reply { user, .. } | Event::Failed { user, .. } => {
                        prop_assert!(done.insert(user), "request {} completed twice", user);
                    }
                    Event::Push { completes: Some(user), .. } => {
                        prop_assert!(done.insert(user), "request {} completed twice", user);
                    }
                    _ => {}
                }
            }
            let _ = c.poll_transmit(t0);
        }
        c.handle_eof(t0);
        while let Some(ev) = c.poll_event() {
            if let Event::Failed { user, .. } = ev {
                prop_assert!(done.insert(user), "request {} completed twice", user);
            }
        }
        prop_assert_eq!(done.len() as u32, requests);
    }
}
