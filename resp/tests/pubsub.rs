//! `pubsub::classify` for every kind, in RESP3 push and RESP2 array form.

use resp::pubsub::{classify, PubSub};
use resp::{parse, Limits, Status};

fn classify_wire(wire: &[u8]) -> Option<PubSub<'_>> {
    let Ok(Status::Complete(p)) = parse(wire, &Limits::default()) else {
        panic!("{}", String::from_utf8_lossy(wire))
    };
    assert_eq!(p.consumed, wire.len());
    classify(&p.frame)
}

/// The same event as a RESP3 push (`>`) and as a RESP2 array (`*`).
fn both(body: &str) -> [Vec<u8>; 2] {
    [
        format!(">{body}").into_bytes(),
        format!("*{body}").into_bytes(),
    ]
}

#[test]
fn every_kind_in_both_forms() {
    use PubSub::*;
    let cases: Vec<(&str, PubSub<'static>)> = vec![
        (
            "3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n",
            Message {
                channel: b"ch",
                payload: b"hi",
            },
        ),
        (
            "3\r\n$7\r\nMESSAGE\r\n$2\r\nch\r\n$0\r\n\r\n",
            Message {
                channel: b"ch",
                payload: b"",
            },
        ),
        (
            "4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n$2\r\nhi\r\n",
            PMessage {
                pattern: b"c*",
                channel: b"ch",
                payload: b"hi",
            },
        ),
        (
            "3\r\n$8\r\nsmessage\r\n$4\r\n{a}b\r\n$1\r\nx\r\n",
            SMessage {
                channel: b"{a}b",
                payload: b"x",
            },
        ),
        (
            "3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n",
            Subscribe {
                channel: b"ch",
                count: 1,
            },
        ),
        (
            "3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:2\r\n",
            PSubscribe {
                pattern: b"c*",
                count: 2,
            },
        ),
        (
            "3\r\n$10\r\nssubscribe\r\n$2\r\nch\r\n:3\r\n",
            SSubscribe {
                channel: b"ch",
                count: 3,
            },
        ),
        (
            "3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n",
            Unsubscribe {
                channel: Some(b"ch"),
                count: 0,
            },
        ),
        (
            "3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n",
            Unsubscribe {
                channel: None,
                count: 0,
            },
        ),
        (
            "3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n",
            Unsubscribe {
                channel: None,
                count: 0,
            },
        ),
        (
            "3\r\n$12\r\npunsubscribe\r\n$2\r\nc*\r\n:0\r\n",
            PUnsubscribe {
                pattern: Some(b"c*"),
                count: 0,
            },
        ),
        (
            "3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n",
            PUnsubscribe {
                pattern: None,
                count: 0,
            },
        ),
        (
            "3\r\n$12\r\nsunsubscribe\r\n$2\r\nch\r\n:0\r\n",
            SUnsubscribe {
                channel: Some(b"ch"),
                count: 0,
            },
        ),
        (
            "3\r\n$12\r\nsunsubscribe\r\n_\r\n:0\r\n",
            SUnsubscribe {
                channel: None,
                count: 0,
            },
        ),
        ("2\r\n$4\r\npong\r\n$0\r\n\r\n", Pong { payload: Some(b"") }),
        (
            "2\r\n$4\r\npong\r\n$3\r\nabc\r\n",
            Pong {
                payload: Some(b"abc"),
            },
        ),
        ("1\r\n$4\r\npong\r\n", Pong { payload: None }),
        (
            "3\r\n+message\r\n+ch\r\n+hi\r\n",
            Message {
                channel: b"ch",
                payload: b"hi",
            },
        ),
    ];
    for (body, want) in cases {
        for wire in both(body) {
            assert_eq!(
                classify_wire(&wire),
                Some(want),
                "{}",
                String::from_utf8_lossy(&wire)
            );
        }
    }
}

#[test]
fn other_pushes_and_non_events() {
    // A push of an unknown kind is Other; the same as an array is a reply.
    let [push, array] = both("2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nkey\r\n");
    assert_eq!(classify_wire(&push), Some(PubSub::Other));
    assert_eq!(classify_wire(&array), None);
    let [push, _] = both("1\r\n$40\r\nabcdefghijabcdefghijabcdefghijabcdefghij\r\n");
    assert_eq!(classify_wire(&push), Some(PubSub::Other));
    for wire in [
        &b"+OK\r\n"[..],
        b":1\r\n",
        b"*0\r\n",
        b">0\r\n",
        b"%1\r\n$7\r\nmessage\r\n:1\r\n",
        b"~3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nb\r\n",
        // Known kinds with the wrong shape.
        b">2\r\n$7\r\nmessage\r\n$1\r\na\r\n",
        b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n$1\r\n1\r\n",
        b">3\r\n$7\r\nmessage\r\n:1\r\n$1\r\nb\r\n",
        b">3\r\n:7\r\n$1\r\na\r\n$1\r\nb\r\n",
        b">3\r\n$9\r\nsubscribe\r\n_\r\n:1\r\n",
        b">3\r\n$4\r\npong\r\n$1\r\na\r\n$1\r\nb\r\n",
    ] {
        assert_eq!(
            classify_wire(wire),
            None,
            "{}",
            String::from_utf8_lossy(wire)
        );
    }
}

#[test]
fn classification_borrows_the_input() {
    let wire = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n";
    let Some(PubSub::Message { payload, .. }) = classify_wire(wire) else {
        panic!()
    };
    let range = wire.as_ptr_range();
    assert!(range.contains(&payload.as_ptr()));
}
