//! The engine against real servers: commands, publishes, RESP2/RESP3,
//! shutdown.

use std::time::Duration;

use shardsub::engine::{Engine, PublishOptions};
use shardsub::{Error, Protocol, Value};
use testkit::{kinds, Server};

fn engine(server: &Server) -> Engine {
    Engine::builder()
        .address(server.addr().to_string())
        .io_threads(1)
        .build()
        .expect("engine connects")
}

#[test]
fn commands_and_publishes_on_both_servers() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let e = engine(&server);
        assert_eq!(
            e.command(["PING"]).unwrap(),
            Value::Simple(b"PONG".to_vec()),
            "{kind:?}"
        );
        e.command(["SET", "k", "v"]).unwrap();
        assert_eq!(e.command(["GET", "k"]).unwrap(), Value::Bulk(b"v".to_vec()));
        // RESP3 is negotiated: HELLO-only types come through.
        assert_eq!(
            e.command(["DEBUG", "PROTOCOL", "true"]).unwrap(),
            Value::Boolean(true)
        );
        // An error reply is an Err that names the server's text.
        let err = e.command(["NOSUCHCOMMAND"]).unwrap_err();
        let Error::Reply { message, .. } = &err else {
            panic!("{err:?}")
        };
        assert!(message.contains("unknown command"), "{message}");
        // Fire-and-forget publishes, then one with an outcome.
        for i in 0..10_000u32 {
            e.publish(b"ch", &i.to_le_bytes()).unwrap();
        }
        let n = e
            .publish_pending(b"ch", b"x", PublishOptions::classic())
            .wait()
            .unwrap();
        assert_eq!(n, 0);
        let n = e
            .publish_pending(b"ch", b"x", PublishOptions::sharded())
            .wait()
            .unwrap();
        assert_eq!(n, 0);
        e.shutdown();
        let s = e.stats();
        assert_eq!(s.requests, s.replies, "{s:?}");
        assert!(s.writes < 10_000, "publishes were coalesced: {s:?}");
        assert!(matches!(e.publish(b"ch", b"x"), Err(Error::Shutdown)));
        assert!(matches!(e.command(["PING"]), Err(Error::Shutdown)));
    }
}

#[test]
fn resp2_by_choice() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let e = Engine::builder()
            .address(server.addr().to_string())
            .protocol(Protocol::Resp2)
            .client_name("resp2-test")
            .build()
            .unwrap();
        let hello = e.command(["CLIENT", "INFO"]).unwrap();
        let Value::Bulk(info) = hello else {
            panic!("{hello:?}")
        };
        let info = String::from_utf8(info).unwrap();
        assert!(info.contains("resp=2"), "{info}");
        assert!(info.contains("name=resp2-test"), "{info}");
    }
}

#[test]
fn build_fails_clearly() {
    // Nothing listens on a port we just closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = Engine::builder()
        .address(format!("127.0.0.1:{port}"))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Connect {
                kind: std::io::ErrorKind::ConnectionRefused,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("cannot connect"), "{err}");
    let err = Engine::builder()
        .address("no-such-host.invalid:6379")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::Resolve { .. }), "{err:?}");
    let err = Engine::builder().address("127.0.0.1").build().unwrap_err();
    assert!(matches!(err, Error::Resolve { .. }), "{err:?}");
    let err = Engine::builder().build().unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
}

#[test]
fn refused_auth_fails_build_on_real_servers() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        server
            .cmd_str(&["ACL", "SETUSER", "alice", "on", ">secret", "~*", "+@all"])
            .unwrap();
        let err = Engine::builder()
            .address(server.addr().to_string())
            .username("alice")
            .password("wrong")
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::Auth { .. }), "{kind:?}: {err:?}");
        assert!(err.to_string().contains("refused the credentials"), "{err}");
        let e = Engine::builder()
            .address(server.addr().to_string())
            .username("alice")
            .password("secret")
            .build()
            .unwrap();
        assert_eq!(
            e.command(["PING"]).unwrap(),
            Value::Simple(b"PONG".to_vec())
        );
    }
}

/// `[kind, channel, payload]` as a RESP2 subscriber receives it.
fn pubsub_message(kind: &str, channel: &[u8], payload: &[u8]) -> Value {
    Value::Array(vec![
        Value::Bulk(kind.as_bytes().to_vec()),
        Value::Bulk(channel.to_vec()),
        Value::Bulk(payload.to_vec()),
    ])
}

/// The crate-level example, against real servers: the receiver count is
/// exact (0 before a subscriber exists, 1 with one), and the subscriber
/// gets both messages, in order.
#[test]
fn crate_docs_example() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let engine = Engine::builder()
            .address(server.addr().to_string())
            .flush_delay(Duration::from_micros(100))
            .build()
            .unwrap();
        let sharded = |payload: &[u8]| {
            engine
                .publish_pending(b"news", payload, PublishOptions::sharded())
                .wait_timeout(Duration::from_secs(5))
                .unwrap()
        };
        assert_eq!(sharded(b"nobody"), 0, "{kind:?}: no subscriber yet");
        let mut sub = testkit::Client::connect(server.addr()).unwrap();
        sub.send(&[b"SUBSCRIBE", b"news"]).unwrap();
        assert_eq!(
            sub.read_value().unwrap(),
            Value::Array(vec![
                Value::Bulk(b"subscribe".to_vec()),
                Value::Bulk(b"news".to_vec()),
                Value::Integer(1),
            ])
        );
        sub.send(&[b"SSUBSCRIBE", b"news"]).unwrap();
        assert_eq!(
            sub.read_value().unwrap(),
            Value::Array(vec![
                Value::Bulk(b"ssubscribe".to_vec()),
                Value::Bulk(b"news".to_vec()),
                Value::Integer(1),
            ])
        );
        engine.publish(b"news", b"hello").unwrap();
        assert_eq!(sharded(b"hello again"), 1, "{kind:?}: one subscriber");
        // One connection, replies in order: the fire-and-forget publish
        // reached the server before the sharded one.
        assert_eq!(
            sub.read_value().unwrap(),
            pubsub_message("message", b"news", b"hello")
        );
        assert_eq!(
            sub.read_value().unwrap(),
            pubsub_message("smessage", b"news", b"hello again")
        );
        let classic = engine
            .publish_pending(b"news", b"classic", PublishOptions::classic())
            .wait_timeout(Duration::from_secs(5))
            .unwrap();
        assert_eq!(classic, 1, "{kind:?}: one classic subscriber");
        assert_eq!(
            sub.read_value().unwrap(),
            pubsub_message("message", b"news", b"classic")
        );
        assert_eq!(
            engine.command(["PING"]).unwrap(),
            Value::Simple(b"PONG".to_vec())
        );
        engine.shutdown();
    }
}
