//! Unit tests of the connection core: byte sequences in, events out.

use std::time::{Duration, Instant};

use resp::Value;

use super::*;

/// An owned copy of an [`Event`], for comparisons.
#[derive(Debug, PartialEq)]
enum Ev {
    Connected(Protocol, bool),
    Reply(u32, Value),
    Push(Value, Option<u32>),
    Failed(u32, ConnError),
    Closed(ConnError),
}

fn drain(c: &mut Connection<u32>) -> Vec<Ev> {
    let mut out = Vec::new();
    while let Some(ev) = c.poll_event() {
        out.push(match ev {
            Event::Connected {
                protocol,
                fell_back,
            } => Ev::Connected(protocol, fell_back),
            Event::Reply { user, reply } => Ev::Reply(user, reply.to_value()),
            Event::Push {
                push,
                class,
                completes,
            } => {
                // Classified once, by the core, as the observer would.
                assert_eq!(class, resp::classify(&push.frame), "{push:?}");
                Ev::Push(push.to_value(), completes)
            }
            Event::Failed { user, error, .. } => Ev::Failed(user, error),
            Event::Closed { error } => Ev::Closed(error),
        });
    }
    out
}

fn transmit(c: &mut Connection<u32>, now: Instant) -> Vec<u8> {
    let mut all = Vec::new();
    while let Some(b) = c.poll_transmit(now) {
        let b = b.to_vec();
        c.advance_transmit(b.len());
        all.extend_from_slice(&b);
    }
    all
}

fn cmd(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_command(&mut out, args.iter().map(|a| a.as_bytes()));
    out
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

fn push(items: &[Value]) -> Value {
    Value::Push(items.to_vec())
}

const HELLO_REPLY: &[u8] = b"%1\r\n$6\r\nserver\r\n$5\r\nredis\r\n";

fn config() -> ConnConfig {
    ConnConfig {
        request_timeout: Duration::from_secs(1),
        handshake_timeout: Duration::from_secs(2),
        ..ConnConfig::default()
    }
}

/// A RESP3 connection past its handshake.
fn ready(config: ConnConfig) -> (Connection<u32>, Instant) {
    let t0 = Instant::now();
    let mut c = Connection::new(config, t0);
    assert_eq!(transmit(&mut c, t0), cmd(&["HELLO", "3"]));
    c.handle_read(HELLO_REPLY, t0);
    assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp3, false)]);
    (c, t0)
}

fn send(c: &mut Connection<u32>, args: &[&str], user: u32, now: Instant) {
    c.send_encoded(&cmd(args), [Request::single(user)], now);
}

#[test]
fn hello_carries_auth_and_name() {
    let t0 = Instant::now();
    let cfg = ConnConfig {
        password: Some(b"pw".to_vec()),
        client_name: Some(b"me".to_vec()),
        ..config()
    };
    let mut c: Connection<u32> = Connection::new(cfg, t0);
    assert_eq!(
        transmit(&mut c, t0),
        cmd(&["HELLO", "3", "AUTH", "default", "pw", "SETNAME", "me"])
    );
    assert!(!c.is_ready());
}

#[test]
fn requests_wait_for_the_handshake() {
    let t0 = Instant::now();
    let mut c = Connection::new(config(), t0);
    send(&mut c, &["GET", "k"], 7, t0);
    assert_eq!(transmit(&mut c, t0), cmd(&["HELLO", "3"]));
    assert_eq!(c.pending_len(), 0);
    c.handle_read(HELLO_REPLY, t0);
    assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp3, false)]);
    assert_eq!(transmit(&mut c, t0), cmd(&["GET", "k"]));
    c.handle_read(b"$1\r\nv\r\n", t0);
    assert_eq!(drain(&mut c), vec![Ev::Reply(7, bulk("v"))]);
}

#[test]
fn scripts_load_in_the_handshake_before_any_request_and_a_refusal_is_not_fatal() {
    for (reply, what) in [
        (&b"$3\r\nabc\r\n"[..], "loaded"),
        (&b"-NOPERM no SCRIPT for you\r\n"[..], "refused"),
    ] {
        let t0 = Instant::now();
        let cfg = ConnConfig {
            load_scripts: vec!["return 1"],
            ..config()
        };
        let mut c = Connection::new(cfg, t0);
        send(&mut c, &["EVALSHA", "abc", "0"], 7, t0);
        let mut want = cmd(&["HELLO", "3"]);
        want.extend(cmd(&["SCRIPT", "LOAD", "return 1"]));
        assert_eq!(transmit(&mut c, t0), want, "{what}");
        c.handle_read(HELLO_REPLY, t0);
        assert!(drain(&mut c).is_empty(), "{what}: still in the handshake");
        c.handle_read(reply, t0);
        assert_eq!(
            drain(&mut c),
            vec![Ev::Connected(Protocol::Resp3, false)],
            "{what}"
        );
        assert_eq!(
            transmit(&mut c, t0),
            cmd(&["EVALSHA", "abc", "0"]),
            "{what}"
        );
    }
}

/// Found by the conn_core fuzz target: commands held for the handshake
/// were not counted as unsent, so the engine's backpressure (which reads
/// `unsent_len`) let staged commands pile up past its bound while a
/// handshake was in progress.
#[test]
fn commands_held_for_the_handshake_count_as_unsent() {
    let t0 = Instant::now();
    let mut c = Connection::new(config(), t0);
    assert_eq!(transmit(&mut c, t0), cmd(&["HELLO", "3"]));
    assert_eq!(c.unsent_len(), 0);
    let big = "x".repeat(100_000);
    let one = cmd(&["SET", "k", &big]).len();
    for user in 0..10 {
        send(&mut c, &["SET", "k", &big], user, t0);
    }
    assert_eq!(c.unsent_len(), 10 * one, "held bytes are unsent bytes");
    c.handle_read(HELLO_REPLY, t0);
    assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp3, false)]);
    assert_eq!(c.unsent_len(), 10 * one, "now in the output buffer");
    assert_eq!(transmit(&mut c, t0).len(), 10 * one);
    assert_eq!(c.unsent_len(), 0);
}

#[test]
fn refused_hello_falls_back_to_resp2_with_separate_commands() {
    for refusal in [
        &b"-ERR unknown command 'HELLO', with args beginning with: '3'\r\n"[..],
        b"-NOPROTO sorry, this protocol version is not supported\r\n",
    ] {
        let t0 = Instant::now();
        let cfg = ConnConfig {
            username: Some(b"u".to_vec()),
            password: Some(b"pw".to_vec()),
            client_name: Some(b"me".to_vec()),
            ..config()
        };
        let mut c = Connection::new(cfg, t0);
        send(&mut c, &["PING"], 1, t0);
        transmit(&mut c, t0);
        c.handle_read(refusal, t0);
        assert_eq!(drain(&mut c), vec![]);
        let mut want = cmd(&["AUTH", "u", "pw"]);
        want.extend(cmd(&["CLIENT", "SETNAME", "me"]));
        assert_eq!(transmit(&mut c, t0), want);
        c.handle_read(b"+OK\r\n+OK\r\n", t0);
        assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp2, true)]);
        assert_eq!(c.protocol(), Protocol::Resp2);
        assert_eq!(transmit(&mut c, t0), cmd(&["PING"]));
        c.handle_read(b"+PONG\r\n", t0);
        assert_eq!(
            drain(&mut c),
            vec![Ev::Reply(1, Value::Simple(b"PONG".to_vec()))]
        );
    }
}

#[test]
fn refused_hello_without_credentials_is_ready_at_once() {
    let t0 = Instant::now();
    let mut c = Connection::new(config(), t0);
    transmit(&mut c, t0);
    c.handle_read(b"-ERR unknown command 'HELLO'\r\n", t0);
    assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp2, true)]);
}

#[test]
fn refused_credentials_fail_the_handshake_and_what_waits() {
    let t0 = Instant::now();
    let cfg = ConnConfig {
        password: Some(b"bad".to_vec()),
        ..config()
    };
    let mut c = Connection::new(cfg, t0);
    send(&mut c, &["PING"], 3, t0);
    transmit(&mut c, t0);
    c.handle_read(
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
        t0,
    );
    let auth =
        ConnError::Auth("WRONGPASS invalid username-password pair or user is disabled.".into());
    assert_eq!(
        drain(&mut c),
        vec![Ev::Failed(3, auth.clone()), Ev::Closed(auth)]
    );
    assert!(c.is_closed());
    assert_eq!(c.poll_transmit(t0), None);
}

#[test]
fn resp2_auth_refused() {
    let t0 = Instant::now();
    let cfg = ConnConfig {
        protocol: Protocol::Resp2,
        password: Some(b"bad".to_vec()),
        ..config()
    };
    let mut c: Connection<u32> = Connection::new(cfg, t0);
    assert_eq!(transmit(&mut c, t0), cmd(&["AUTH", "bad"]));
    c.handle_read(b"-ERR invalid password\r\n", t0);
    assert_eq!(
        drain(&mut c),
        vec![Ev::Closed(ConnError::Auth("ERR invalid password".into()))]
    );
}

#[test]
fn a_server_that_must_be_a_primary_is_asked_role_last_and_a_replica_is_refused() {
    let role = |r: &str| format!("*3\r\n${}\r\n{r}\r\n$9\r\n127.0.0.1\r\n:6379\r\n", r.len());
    // A primary is required, with a password (so ROLE must follow AUTH).
    let with_password = || ConnConfig {
        require_primary: true,
        password: Some(b"pw".to_vec()),
        ..config()
    };
    // RESP3: after HELLO is answered, so ROLE runs authenticated.
    for (reply, want) in [
        ("master", None),
        ("slave", Some("slave")),
        ("sentinel", Some("sentinel")),
    ] {
        let t0 = Instant::now();
        let mut c: Connection<u32> = Connection::new(with_password(), t0);
        send(&mut c, &["GET", "k"], 7, t0);
        assert_eq!(
            transmit(&mut c, t0),
            cmd(&["HELLO", "3", "AUTH", "default", "pw"])
        );
        c.handle_read(HELLO_REPLY, t0);
        assert_eq!(drain(&mut c), vec![], "{reply}: not connected before ROLE");
        assert_eq!(transmit(&mut c, t0), cmd(&["ROLE"]), "{reply}");
        c.handle_read(role(reply).as_bytes(), t0);
        match want {
            None => {
                assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp3, false)]);
                assert_eq!(transmit(&mut c, t0), cmd(&["GET", "k"]));
            }
            Some(r) => {
                let events = drain(&mut c);
                assert!(
                    events.contains(&Ev::Closed(ConnError::NotPrimary(r.into()))),
                    "{reply}: {events:?}"
                );
            }
        }
    }
    // RESP2 with nothing else to send: ROLE alone.
    let t0 = Instant::now();
    let cfg = ConnConfig {
        protocol: Protocol::Resp2,
        require_primary: true,
        ..config()
    };
    let mut c: Connection<u32> = Connection::new(cfg, t0);
    assert_eq!(transmit(&mut c, t0), cmd(&["ROLE"]));
    c.handle_read(role("master").as_bytes(), t0);
    assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp2, false)]);
    // HELLO refused: ROLE follows the RESP2 AUTH, not the HELLO.
    let t0 = Instant::now();
    let mut c: Connection<u32> = Connection::new(with_password(), t0);
    transmit(&mut c, t0);
    c.handle_read(b"-ERR unknown command 'HELLO'\r\n", t0);
    assert_eq!(drain(&mut c), vec![]);
    assert_eq!(transmit(&mut c, t0), cmd(&["AUTH", "pw"]));
    c.handle_read(b"+OK\r\n", t0);
    assert_eq!(drain(&mut c), vec![]);
    assert_eq!(transmit(&mut c, t0), cmd(&["ROLE"]));
    c.handle_read(role("master").as_bytes(), t0);
    assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp2, true)]);
}

#[test]
fn plain_resp2_needs_no_handshake() {
    let t0 = Instant::now();
    let cfg = ConnConfig {
        protocol: Protocol::Resp2,
        ..config()
    };
    let mut c: Connection<u32> = Connection::new(cfg, t0);
    assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp2, false)]);
    assert!(c.is_ready());
    assert_eq!(transmit(&mut c, t0), b"");
}

#[test]
fn handshake_timeout() {
    let t0 = Instant::now();
    let mut c: Connection<u32> = Connection::new(config(), t0);
    transmit(&mut c, t0);
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(2)));
    c.handle_timeout(t0 + Duration::from_secs(1));
    assert_eq!(drain(&mut c), vec![]);
    c.handle_timeout(t0 + Duration::from_secs(2));
    assert_eq!(
        drain(&mut c),
        vec![Ev::Closed(ConnError::HandshakeTimeout(
            Duration::from_secs(2)
        ))]
    );
}

/// Every byte sequence below yields the same events however it is cut.
fn check_all_splits(mk: &dyn Fn() -> Connection<u32>, stream: &[u8], want: &[Ev], now: Instant) {
    // Whole.
    let mut c = mk();
    c.handle_read(stream, now);
    assert_eq!(drain(&mut c), want, "whole stream");
    // Cut once at every byte, draining in between.
    for cut in 1..stream.len() {
        let mut c = mk();
        c.handle_read(&stream[..cut], now);
        let mut got = drain(&mut c);
        c.handle_read(&stream[cut..], now);
        got.extend(drain(&mut c));
        assert_eq!(got, want, "cut at {cut}");
    }
    // One byte at a time.
    let mut c = mk();
    let mut got = Vec::new();
    for b in stream {
        c.handle_read(std::slice::from_ref(b), now);
        got.extend(drain(&mut c));
    }
    assert_eq!(got, want, "byte by byte");
}

#[test]
fn pushes_between_replies_and_attributes_before_a_reply() {
    let mk = || {
        let (mut c, t0) = ready(config());
        send(&mut c, &["GET", "a"], 1, t0);
        send(&mut c, &["DEBUG", "PROTOCOL", "attrib"], 2, t0);
        send(&mut c, &["INCR", "n"], 3, t0);
        c
    };
    let stream: &[u8] = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n\
$1\r\nA\r\n\
>3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n\
|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n$4\r\nreal\r\n\
:5\r\n";
    let want = vec![
        Ev::Push(
            push(&[bulk("invalidate"), Value::Array(vec![bulk("k")])]),
            None,
        ),
        Ev::Reply(1, bulk("A")),
        Ev::Push(push(&[bulk("message"), bulk("ch"), bulk("hi")]), None),
        Ev::Reply(
            2,
            Value::Attributed {
                attributes: vec![(
                    bulk("key-popularity"),
                    Value::Array(vec![bulk("key:123"), Value::Integer(90)]),
                )],
                value: Box::new(bulk("real")),
            },
        ),
        Ev::Reply(3, Value::Integer(5)),
    ];
    check_all_splits(&mk, stream, &want, Instant::now());
}

#[test]
fn error_replies_complete_their_request_only() {
    let mk = || {
        let (mut c, t0) = ready(config());
        send(&mut c, &["X"], 1, t0);
        send(&mut c, &["Y"], 2, t0);
        c
    };
    let stream: &[u8] = b"-ERR unknown command 'X'\r\n!5\r\nblob!\r\n";
    let want = vec![
        Ev::Reply(1, Value::Error(b"ERR unknown command 'X'".to_vec())),
        Ev::Reply(2, Value::BlobError(b"blob!".to_vec())),
    ];
    check_all_splits(&mk, stream, &want, Instant::now());
}

fn ssub_request(user: u32, channels: u32) -> Request<u32> {
    Request {
        user,
        kind: ReplyKind::Subscribe {
            kind: SubscribeKind::Shard,
            confirmations: channels,
        },
    }
}

#[test]
fn server_sunsubscribe_while_ssubscribe_and_commands_pend_resp3() {
    let mk = || {
        let (mut c, t0) = ready(ConnConfig {
            role: Role::Subscribe,
            ..config()
        });
        c.send_encoded(&cmd(&["SSUBSCRIBE", "a", "b"]), [ssub_request(1, 2)], t0);
        send(&mut c, &["PING"], 2, t0);
        c
    };
    let stream: &[u8] = b">3\r\n$12\r\nsunsubscribe\r\n$1\r\nx\r\n:0\r\n\
>3\r\n$10\r\nssubscribe\r\n$1\r\na\r\n:1\r\n\
>3\r\n$8\r\nsmessage\r\n$1\r\na\r\n$2\r\nhi\r\n\
>3\r\n$12\r\nsunsubscribe\r\n$1\r\na\r\n:0\r\n\
>3\r\n$10\r\nssubscribe\r\n$1\r\nb\r\n:1\r\n\
+PONG\r\n";
    let s = |k: &str, ch: &str, n: i64| push(&[bulk(k), bulk(ch), Value::Integer(n)]);
    let want = vec![
        Ev::Push(s("sunsubscribe", "x", 0), None),
        Ev::Push(s("ssubscribe", "a", 1), None),
        Ev::Push(push(&[bulk("smessage"), bulk("a"), bulk("hi")]), None),
        Ev::Push(s("sunsubscribe", "a", 0), None),
        Ev::Push(s("ssubscribe", "b", 1), Some(1)),
        Ev::Reply(2, Value::Simple(b"PONG".to_vec())),
    ];
    check_all_splits(&mk, stream, &want, Instant::now());
}

fn resp2_ready(role: Role) -> (Connection<u32>, Instant) {
    let t0 = Instant::now();
    let mut c = Connection::new(
        ConnConfig {
            protocol: Protocol::Resp2,
            role,
            ..config()
        },
        t0,
    );
    assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp2, false)]);
    (c, t0)
}

#[test]
fn server_unsubscribe_while_subscribe_and_ping_pend_resp2() {
    let mk = || {
        let (mut c, t0) = resp2_ready(Role::Subscribe);
        c.send_encoded(
            &cmd(&["SUBSCRIBE", "a", "b"]),
            [Request {
                user: 1,
                kind: ReplyKind::Subscribe {
                    kind: SubscribeKind::Channel,
                    confirmations: 2,
                },
            }],
            t0,
        );
        // UNSUBSCRIBE's confirmations are pushes; the PING stands for it.
        c.send_raw(&cmd(&["UNSUBSCRIBE", "a"]), t0);
        send(&mut c, &["PING"], 2, t0);
        c
    };
    let arr = |k: &str, ch: &str, n: i64| Value::Array(vec![bulk(k), bulk(ch), Value::Integer(n)]);
    let stream: &[u8] = b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nz\r\n:0\r\n\
*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n\
*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n\
*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n\
*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n\
*2\r\n$4\r\npong\r\n$0\r\n\r\n";
    let want = vec![
        Ev::Push(arr("unsubscribe", "z", 0), None),
        Ev::Push(arr("subscribe", "a", 1), None),
        Ev::Push(
            Value::Array(vec![bulk("message"), bulk("a"), bulk("hi")]),
            None,
        ),
        Ev::Push(arr("subscribe", "b", 2), Some(1)),
        Ev::Push(arr("unsubscribe", "a", 1), None),
        Ev::Reply(2, Value::Array(vec![bulk("pong"), bulk("")])),
    ];
    check_all_splits(&mk, stream, &want, Instant::now());
}

#[test]
fn resp2_command_role_arrays_are_replies() {
    let (mut c, t0) = resp2_ready(Role::Command);
    send(&mut c, &["LRANGE", "l", "0", "-1"], 1, t0);
    c.handle_read(b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n", t0);
    assert_eq!(
        drain(&mut c),
        vec![Ev::Reply(
            1,
            Value::Array(vec![bulk("message"), bulk("a"), bulk("hi")])
        )]
    );
}

#[test]
fn garbage_is_fatal_and_fails_everything_pending() {
    let (mut c, t0) = ready(config());
    send(&mut c, &["A"], 1, t0);
    send(&mut c, &["B"], 2, t0);
    send(&mut c, &["C"], 3, t0);
    c.handle_read(b"+OK\r\n@garbage\r\n", t0);
    let evs = drain(&mut c);
    assert_eq!(evs.len(), 4, "{evs:?}");
    assert_eq!(evs[0], Ev::Reply(1, Value::Simple(b"OK".to_vec())));
    let Ev::Failed(2, ConnError::Protocol(e)) = &evs[1] else {
        panic!("{evs:?}")
    };
    assert_eq!(e.kind, resp::ErrorKind::UnknownType(b'@'));
    assert!(matches!(evs[2], Ev::Failed(3, ConnError::Protocol(_))));
    assert!(matches!(evs[3], Ev::Closed(ConnError::Protocol(_))));
    // Later requests fail too, and nothing more is written.
    send(&mut c, &["D"], 4, t0);
    assert!(matches!(
        drain(&mut c)[..],
        [Ev::Failed(4, ConnError::Protocol(_))]
    ));
    assert_eq!(c.poll_transmit(t0), None);
}

#[test]
fn a_reply_nobody_asked_for_is_fatal() {
    let (mut c, t0) = ready(config());
    c.handle_read(b":1\r\n", t0);
    assert_eq!(drain(&mut c), vec![Ev::Closed(ConnError::UnexpectedReply)]);
}

#[test]
fn eof_fails_pending_in_order() {
    let (mut c, t0) = ready(config());
    for i in 0..3 {
        send(&mut c, &["PING"], i, t0);
    }
    c.handle_eof(t0);
    assert_eq!(
        drain(&mut c),
        vec![
            Ev::Failed(0, ConnError::Closed),
            Ev::Failed(1, ConnError::Closed),
            Ev::Failed(2, ConnError::Closed),
            Ev::Closed(ConnError::Closed),
        ]
    );
}

/// Each failed request's `sent`, in order, after the connection ends.
fn failed_sent(c: &mut Connection<u32>) -> Vec<(u32, bool)> {
    let mut out = Vec::new();
    while let Some(ev) = c.poll_event() {
        if let Event::Failed { user, sent, .. } = ev {
            out.push((user, sent));
        }
    }
    out
}

#[test]
fn a_failure_says_whether_the_request_may_have_reached_the_server() {
    let (mut c, t0) = ready(config());
    // Written whole (two requests in one batch), answered once.
    let mut two = cmd(&["A"]);
    two.extend_from_slice(&cmd(&["B"]));
    c.send_encoded(&two, [Request::single(1), Request::single(2)], t0);
    transmit(&mut c, t0);
    c.handle_read(b"+a\r\n", t0);
    assert_eq!(drain(&mut c).len(), 1);
    // A batch whose writing began and did not end: its first request is
    // written whole, which the core cannot tell from its bytes.
    let mut batch = cmd(&["C"]);
    batch.extend_from_slice(&cmd(&["D"]));
    c.send_encoded(&batch, [Request::single(3), Request::single(4)], t0);
    let written = cmd(&["C"]).len();
    assert!(c.poll_transmit(t0).is_some_and(|b| b.len() > written));
    c.advance_transmit(written);
    // A later batch, not written at all.
    send(&mut c, &["E"], 5, t0);
    c.close();
    // One sent after the close.
    send(&mut c, &["F"], 6, t0);
    assert_eq!(
        failed_sent(&mut c),
        vec![(2, true), (3, true), (4, true), (5, false), (6, false)]
    );

    // Held for the handshake: never written.
    let mut c = Connection::new(config(), t0);
    send(&mut c, &["G"], 7, t0);
    transmit(&mut c, t0);
    c.handle_eof(t0);
    assert_eq!(failed_sent(&mut c), vec![(7, false)]);

    // Nothing of a batch written yet, then some of it after a reply to a
    // request written before it.
    let (mut c, t0) = ready(config());
    send(&mut c, &["H"], 8, t0);
    transmit(&mut c, t0);
    send(&mut c, &["I"], 9, t0);
    send(&mut c, &["J"], 10, t0);
    c.handle_eof(t0);
    assert_eq!(
        failed_sent(&mut c),
        vec![(8, true), (9, false), (10, false)]
    );
}

#[test]
fn request_timeout_counts_from_each_write() {
    let (mut c, t0) = ready(config());
    let s = Duration::from_millis(1);
    send(&mut c, &["A"], 1, t0);
    send(&mut c, &["B"], 2, t0);
    let t1 = t0 + Duration::from_millis(200);
    transmit(&mut c, t1);
    assert_eq!(c.poll_timeout(), Some(t1 + Duration::from_secs(1)));
    // A reply just before the deadline: the next request's clock does not
    // restart, it has run since B was written, at t1.
    c.handle_read(b"+a\r\n", t1 + Duration::from_millis(900));
    assert_eq!(drain(&mut c).len(), 1);
    assert_eq!(c.poll_timeout(), Some(t1 + Duration::from_secs(1)));
    // C, written later, has its own clock, but B fails first.
    send(&mut c, &["C"], 3, t1 + Duration::from_millis(900));
    transmit(&mut c, t1 + Duration::from_millis(900));
    c.handle_timeout(t1 + Duration::from_secs(1) - s);
    assert_eq!(drain(&mut c), vec![]);
    c.handle_timeout(t1 + Duration::from_secs(1));
    let t = ConnError::Timeout(Duration::from_secs(1));
    assert_eq!(
        drain(&mut c),
        vec![
            Ev::Failed(2, t.clone()),
            Ev::Failed(3, t.clone()),
            Ev::Closed(t)
        ]
    );
}

#[test]
fn a_request_written_late_is_timed_from_its_write() {
    let (mut c, t0) = ready(config());
    send(&mut c, &["A"], 1, t0);
    transmit(&mut c, t0);
    c.handle_read(b"+a\r\n", t0);
    assert_eq!(drain(&mut c).len(), 1);
    // Queued at t0 behind nothing, but written (the socket was full, say)
    // only at t0 + 500 ms.
    send(&mut c, &["B"], 2, t0);
    let written = t0 + Duration::from_millis(500);
    transmit(&mut c, written);
    assert_eq!(c.poll_timeout(), Some(written + Duration::from_secs(1)));
}

#[test]
fn pushes_and_confirmations_do_not_move_a_request_deadline() {
    let (mut c, t0) = ready(config());
    // A subscribe of two channels, of which only one is ever confirmed,
    // while messages keep coming every 50 ms.
    let sub = cmd(&["SUBSCRIBE", "a", "b"]);
    let kind = ReplyKind::Subscribe {
        kind: SubscribeKind::Channel,
        confirmations: 2,
    };
    c.send_encoded(&sub, [Request { user: 1, kind }], t0);
    send(&mut c, &["PING"], 2, t0);
    transmit(&mut c, t0);
    let confirm = b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n";
    c.handle_read(confirm, t0 + Duration::from_millis(50));
    assert_eq!(drain(&mut c).len(), 1);
    let message = b">3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n";
    let mut now = t0;
    for _ in 0..19 {
        now += Duration::from_millis(50);
        c.handle_read(message, now);
        c.handle_timeout(now);
        assert_eq!(drain(&mut c).len(), 1, "at {:?}", now - t0);
    }
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    c.handle_read(message, t0 + Duration::from_secs(1));
    c.handle_timeout(t0 + Duration::from_secs(1));
    let t = ConnError::Timeout(Duration::from_secs(1));
    let evs = drain(&mut c);
    assert_eq!(
        evs[evs.len() - 3..],
        [
            Ev::Failed(1, t.clone()),
            Ev::Failed(2, t.clone()),
            Ev::Closed(t)
        ]
    );
}

/// On an idle connection A (1) and Z (9) go at once, written together;
/// then both await their replies.
fn write_a_and_z(c: &mut Connection<u32>, now: Instant) {
    send(c, &["A"], 1, now);
    send(c, &["Z"], 9, now);
    let mut az = cmd(&["A"]);
    az.extend(cmd(&["Z"]));
    assert_eq!(c.poll_transmit(now), Some(&az[..]));
    c.advance_transmit(az.len());
}

#[test]
fn flush_delay_holds_commands_sent_behind_outstanding_ones() {
    let (mut c, t0) = ready(ConnConfig {
        flush_delay: Duration::from_micros(100),
        ..config()
    });
    write_a_and_z(&mut c, t0);
    // Behind two written requests: held until t1 + 100 µs, joined by C.
    let t1 = t0 + Duration::from_micros(10);
    send(&mut c, &["B"], 2, t1);
    assert_eq!(c.poll_transmit(t1), None);
    assert_eq!(c.poll_timeout(), Some(t1 + Duration::from_micros(100)));
    let t2 = t1 + Duration::from_micros(50);
    send(&mut c, &["C"], 3, t2);
    assert_eq!(c.poll_transmit(t2), None);
    let due = t1 + Duration::from_micros(100);
    let mut both = cmd(&["B"]);
    both.extend(cmd(&["C"]));
    assert_eq!(c.poll_transmit(due), Some(&both[..]));
    // A partial write keeps the rest due.
    c.advance_transmit(3);
    assert_eq!(c.poll_transmit(due), Some(&both[3..]));
    c.advance_transmit(both.len() - 3);
    assert_eq!(c.poll_transmit(due), None);
    // Once the replies are in, the next command goes at once again.
    c.handle_read(b"+a\r\n+z\r\n+b\r\n+c\r\n", due);
    assert_eq!(drain(&mut c).len(), 4);
    send(&mut c, &["D"], 4, due);
    assert_eq!(c.poll_transmit(due), Some(&cmd(&["D"])[..]));
}

#[test]
fn flush_now_sends_what_the_flush_delay_holds_and_nothing_else() {
    let (mut c, t0) = ready(ConnConfig {
        flush_delay: Duration::from_micros(100),
        ..config()
    });
    // Nothing unsent: no flush time appears.
    c.flush_now(t0);
    assert_eq!(c.poll_flush_at(), None);
    write_a_and_z(&mut c, t0);
    // Behind two written requests B is held; flush_now makes it due at
    // once.
    let t1 = t0 + Duration::from_micros(10);
    send(&mut c, &["B"], 2, t1);
    assert_eq!(c.poll_transmit(t1), None);
    c.flush_now(t1);
    assert_eq!(c.poll_flush_at(), Some(t1));
    assert_eq!(c.poll_transmit(t1), Some(&cmd(&["B"])[..]));
}

#[test]
fn zero_flush_delay_sends_at_once() {
    let (mut c, t0) = ready(ConnConfig {
        flush_delay: Duration::ZERO,
        ..config()
    });
    send(&mut c, &["A"], 1, t0);
    send(&mut c, &["A"], 2, t0);
    transmit(&mut c, t0);
    send(&mut c, &["B"], 3, t0);
    assert_eq!(c.poll_transmit(t0), Some(&cmd(&["B"])[..]));
}

#[test]
fn one_request_in_flight_is_no_reason_to_hold() {
    let (mut c, t0) = ready(ConnConfig {
        flush_delay: Duration::from_micros(100),
        ..config()
    });
    send(&mut c, &["A"], 1, t0);
    transmit(&mut c, t0);
    // Another caller's command behind A alone: no pipeline to batch behind.
    send(&mut c, &["B"], 2, t0);
    assert_eq!(c.poll_transmit(t0), Some(&cmd(&["B"])[..]));
}

#[test]
fn read_from_fills_the_buffer_directly() {
    let (mut c, t0) = ready(config());
    send(&mut c, &["A"], 1, t0);
    let mut src: &[u8] = b"$5\r\nhello\r\n";
    assert_eq!(c.read_from(&mut src, t0).unwrap(), 11);
    assert_eq!(drain(&mut c), vec![Ev::Reply(1, bulk("hello"))]);
    let mut empty: &[u8] = b"";
    assert_eq!(c.read_from(&mut empty, t0).unwrap(), 0);
}

#[test]
fn large_pipelines_keep_order() {
    let (mut c, t0) = ready(config());
    let mut bytes = Vec::new();
    let n = 10_000u32;
    for _ in 0..n {
        resp::encode_command(&mut bytes, ["PUBLISH", "ch", "x"]);
    }
    c.send_encoded(&bytes, (0..n).map(Request::single), t0);
    assert_eq!(transmit(&mut c, t0), bytes);
    let mut replies = Vec::new();
    for i in 0..n {
        replies.extend_from_slice(format!(":{i}\r\n").as_bytes());
    }
    for chunk in replies.chunks(7777) {
        c.handle_read(chunk, t0);
        for (k, ev) in drain(&mut c).into_iter().enumerate() {
            let _ = k;
            let Ev::Reply(user, Value::Integer(v)) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(i64::from(user), v);
        }
    }
    assert_eq!(c.pending_len(), 0);
}

#[test]
fn held_commands_leave_once_every_written_request_is_answered() {
    let (mut c, t0) = ready(ConnConfig {
        flush_delay: Duration::from_micros(100),
        ..config()
    });
    send(&mut c, &["A"], 1, t0);
    send(&mut c, &["A"], 2, t0);
    transmit(&mut c, t0);
    let t1 = t0 + Duration::from_micros(10);
    send(&mut c, &["B"], 3, t1);
    assert_eq!(c.poll_transmit(t1), None, "held behind two As");
    // One reply leaves a single request in flight: B goes now, well before
    // its 100 µs are up.
    let t2 = t1 + Duration::from_micros(20);
    c.handle_read(b"+a\r\n", t2);
    assert_eq!(drain(&mut c).len(), 1);
    assert_eq!(c.poll_flush_at(), Some(t2));
    assert_eq!(c.poll_transmit(t2), Some(&cmd(&["B"])[..]));
    c.advance_transmit(cmd(&["B"]).len());
    // A reply for a request whose bytes were not all written yet (the
    // server had its part) keeps the counts sane.
    send(&mut c, &["C"], 4, t2);
    send(&mut c, &["D"], 5, t2);
    let due = t2 + Duration::from_micros(100);
    let cd = c.poll_transmit(due).unwrap().len();
    c.advance_transmit(cd - 1);
    c.handle_read(b"+a\r\n+b\r\n+c\r\n", due);
    assert_eq!(drain(&mut c).len(), 3);
    c.advance_transmit(1);
    c.handle_read(b"+d\r\n", due);
    assert_eq!(drain(&mut c).len(), 1);
    assert_eq!(c.pending_len(), 0);
    send(&mut c, &["E"], 6, due);
    assert_eq!(c.poll_transmit(due), Some(&cmd(&["E"])[..]));
}

#[test]
fn output_buffer_stays_bounded_under_continuous_load() {
    let (mut c, t0) = ready(ConnConfig {
        flush_delay: Duration::ZERO,
        ..config()
    });
    let one = cmd(&["PUBLISH", "ch", &"x".repeat(200)]);
    let mut user = 0;
    // Each round queues more and writes a little less than everything, so
    // the buffer never empties; it must not keep what was written.
    for _ in 0..20_000 {
        for _ in 0..4 {
            c.send_encoded(&one, [Request::single(user)], t0);
            user += 1;
        }
        let n = c.poll_transmit(t0).map_or(0, <[u8]>::len);
        c.advance_transmit(n.saturating_sub(10));
        assert!(
            c.st.out.len() < 2 * COMPACT_AFTER + 8 * one.len(),
            "{}",
            c.st.out.len()
        );
    }
    // Written requests count as in flight: replies drain them exactly.
    let written_requests = c.st.in_flight;
    assert!(written_requests > 70_000, "{written_requests}");
    assert_eq!(written_requests + c.st.unsent_requests, c.pending_len());
}

#[test]
fn send_encoded_vec_swaps_when_nothing_waits_and_appends_otherwise() {
    let t0 = Instant::now();
    let mut c = Connection::new(config(), t0);
    // During the handshake: held, like send_encoded.
    let mut buf = cmd(&["A"]);
    c.send_encoded_vec(&mut buf, [Request::single(1)], t0);
    assert!(buf.is_empty());
    assert_eq!(transmit(&mut c, t0), cmd(&["HELLO", "3"]));
    c.handle_read(HELLO_REPLY, t0);
    assert_eq!(drain(&mut c), vec![Ev::Connected(Protocol::Resp3, false)]);
    assert_eq!(transmit(&mut c, t0), cmd(&["A"]));
    // Nothing unsent: the bytes are taken by swap.
    let mut buf = cmd(&["B"]);
    buf.reserve(1000);
    c.send_encoded_vec(&mut buf, [Request::single(2)], t0);
    assert!(buf.is_empty());
    // Something unsent: appended behind it.
    let mut buf = cmd(&["C"]);
    c.send_encoded_vec(&mut buf, [Request::single(3)], t0);
    let mut both = cmd(&["B"]);
    both.extend(cmd(&["C"]));
    // (Held behind A, which awaits its reply, until the flush delay.)
    let later = t0 + Duration::from_millis(1);
    assert_eq!(transmit(&mut c, later), both);
    c.handle_read(b"+a\r\n+b\r\n+c\r\n", later);
    let users: Vec<_> = drain(&mut c)
        .into_iter()
        .map(|e| match e {
            Ev::Reply(u, _) => u,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(users, vec![1, 2, 3]);
}

#[test]
fn a_held_batch_leaves_once_it_is_big() {
    let (mut c, t0) = ready(ConnConfig {
        flush_delay: Duration::from_micros(100),
        flush_batch_bytes: 1000,
        ..config()
    });
    send(&mut c, &["A"], 0, t0);
    send(&mut c, &["A"], 0, t0);
    transmit(&mut c, t0);
    let big = cmd(&["PUBLISH", "ch", &"x".repeat(300)]);
    c.send_encoded(&big, [Request::single(1)], t0);
    c.send_encoded(&big, [Request::single(2)], t0);
    assert_eq!(c.poll_transmit(t0), None, "small: held behind the As");
    c.send_encoded(&big, [Request::single(3)], t0);
    c.send_encoded(&big, [Request::single(4)], t0);
    assert_eq!(
        c.poll_transmit(t0).map(<[u8]>::len),
        Some(4 * big.len()),
        "over 1000 bytes: due at once"
    );
}

#[test]
fn an_endless_line_closes_the_connection_at_the_line_limit() {
    let (mut c, t0) = ready(config());
    send(&mut c, &["PING"], 1, t0);
    transmit(&mut c, t0);
    let limit = resp::Limits::default().max_line_len;
    c.handle_read(b"+", t0);
    let chunk = [b'a'; 4096];
    let mut fed = 0;
    let evs = loop {
        assert!(fed <= limit + chunk.len(), "no error after {fed} bytes");
        c.handle_read(&chunk, t0);
        fed += chunk.len();
        let evs = drain(&mut c);
        if !evs.is_empty() {
            break evs;
        }
    };
    // Cut as the line passes the limit, with the input buffer still small.
    assert!(fed > limit, "{fed}");
    assert!(c.input.buf.len() <= 4 * limit, "{}", c.input.buf.len());
    let error = ConnError::Protocol(resp::ParseError {
        offset: 1,
        kind: resp::ErrorKind::LineTooLong {
            limit: limit as u64,
        },
    });
    assert_eq!(
        evs,
        vec![Ev::Failed(1, error.clone()), Ev::Closed(error.clone())]
    );
    assert!(error.to_string().contains("line longer than"), "{error}");
}

#[test]
fn a_half_received_reply_still_times_out() {
    let (mut c, t0) = ready(config());
    send(&mut c, &["GET", "k"], 1, t0);
    transmit(&mut c, t0);
    // Bytes of the reply keep coming, but the reply never completes: the
    // deadline holds on input too, without waiting for handle_timeout.
    let s = Duration::from_millis(1);
    c.handle_read(b"$100\r\nabc", t0 + Duration::from_millis(500));
    assert_eq!(drain(&mut c), vec![]);
    c.handle_read(b"def", t0 + Duration::from_secs(1) - s);
    assert_eq!(drain(&mut c), vec![]);
    c.handle_read(b"ghi", t0 + Duration::from_secs(1));
    let t = ConnError::Timeout(Duration::from_secs(1));
    assert_eq!(drain(&mut c), vec![Ev::Failed(1, t.clone()), Ev::Closed(t)]);
}

#[test]
fn a_complete_reply_after_the_deadline_still_wins_until_the_timeout_is_checked() {
    let (mut c, t0) = ready(config());
    send(&mut c, &["GET", "k"], 1, t0);
    transmit(&mut c, t0);
    c.handle_read(b"$1\r\nv\r\n", t0 + Duration::from_secs(2));
    assert_eq!(drain(&mut c), vec![Ev::Reply(1, bulk("v"))]);
}

/// A reader with an endless supply of bytes.
struct Endless;

impl io::Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        buf.fill(b'x');
        Ok(buf.len())
    }
}

#[test]
fn one_read_takes_at_most_max_read_bytes() {
    let (mut c, t0) = ready(config());
    send(&mut c, &["GET", "k"], 1, t0);
    transmit(&mut c, t0);
    // A big bulk reply arriving: the input buffer grows past MAX_READ.
    c.handle_read(format!("${}\r\n", 64 << 20).as_bytes(), t0);
    c.handle_read(&vec![b'x'; 5 * MAX_READ], t0);
    assert!(c.input.buf.len() - c.input.end > MAX_READ);
    // However much room and however much data: one bounded read, so the
    // parsing after it is bounded too.
    let n = c.read_from(&mut Endless, t0).unwrap();
    assert_eq!(n, MAX_READ);
    assert_eq!(drain(&mut c), vec![]);
}

#[test]
fn an_unsubscribe_refused_before_its_ping_keeps_the_queue_in_step() {
    // SUNSUBSCRIBE of a slot the node lost is answered `MOVED` (not a
    // push); the PING after it still answers the request, and nothing
    // is left over to desynchronise the connection.
    let mk = || {
        let (mut c, t0) = ready(ConnConfig {
            role: Role::Subscribe,
            ..config()
        });
        let mut bytes = cmd(&["SUNSUBSCRIBE", "{a}.x"]);
        bytes.extend(cmd(&["PING"]));
        let unsub = Request {
            user: 1,
            kind: ReplyKind::Unsubscribe,
        };
        c.send_encoded(&bytes, [unsub], t0);
        send(&mut c, &["PING"], 2, t0);
        c
    };
    let stream: &[u8] = b"-MOVED 5 127.0.0.1:7001\r\n+PONG\r\n+PONG\r\n";
    let want = vec![
        Ev::Reply(1, Value::Simple(b"PONG".to_vec())),
        Ev::Reply(2, Value::Simple(b"PONG".to_vec())),
    ];
    check_all_splits(&mk, stream, &want, Instant::now());
}
