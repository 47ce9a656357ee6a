//! Shutdown and routing: pending work is flushed or failed (never hangs),
//! several connections per server share the load, and with several servers
//! each channel goes to `shardcore::shard_of(channel, servers)`.

use std::time::{Duration, Instant};

use shardsub::engine::{Engine, PublishOptions};
use shardsub::{Error, Value};
use testkit::{kinds, FakeServer, Server, Servers, Step};

#[test]
fn shutdown_flushes_what_was_submitted() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let e = Engine::builder()
            .address(server.addr().to_string())
            .build()
            .unwrap();
        let pending: Vec<_> = (0..20_000)
            .map(|_| e.publish_pending(b"ch", b"x", PublishOptions::classic()))
            .collect();
        e.shutdown();
        // Everything submitted before shutdown() was written and answered.
        for p in pending {
            assert_eq!(p.wait_timeout(Duration::from_secs(1)).unwrap(), 0);
        }
        assert!(matches!(e.publish(b"ch", b"x"), Err(Error::Shutdown)));
    }
}

#[test]
fn shutdown_is_bounded_when_the_server_never_answers() {
    let mut hello = Vec::new();
    resp::encode_command(&mut hello, ["HELLO", "3"]);
    let fake = FakeServer::start(vec![
        Step::Expect(hello),
        Step::send(b"%0\r\n"),
        Step::Silence,
    ])
    .unwrap();
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .request_timeout(Duration::ZERO) // only shutdown can end the wait
        .shutdown_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let p = e.command_pending(0, ["PING"]);
    let started = Instant::now();
    drop(e); // Drop shuts down too
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert!(matches!(p.wait(), Err(Error::Shutdown)));
    fake.finish().unwrap();
}

fn client_names(server: &Server) -> usize {
    let list = server.cmd_str(&["CLIENT", "LIST"]).unwrap();
    let text = match list {
        Value::Bulk(b) | Value::Verbatim { text: b, .. } => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    text.lines()
        .filter(|l| l.contains("name=routing-test"))
        .count()
}

#[test]
fn several_connections_per_server_and_io_threads() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let e = Engine::builder()
            .address(server.addr().to_string())
            .connections_per_server(3)
            .io_threads(2)
            .client_name("routing-test")
            .build()
            .unwrap();
        assert_eq!(client_names(&server), 3, "{kind:?}");
        // Commands rotate over the connections; all come back right.
        let replies: Vec<_> = (0..300)
            .map(|i| (i, e.command_pending(0, ["ECHO", &i.to_string()])))
            .collect();
        for (i, p) in replies {
            assert_eq!(p.wait().unwrap(), Value::Bulk(i.to_string().into_bytes()));
        }
        for i in 0..3_000u32 {
            e.publish(format!("ch{}", i % 100).as_bytes(), b"x")
                .unwrap();
        }
        e.shutdown();
        let s = e.stats();
        assert_eq!(s.replies, s.requests, "{s:?}");
        assert_eq!(s.connects, 3);
    }
}

#[test]
fn channels_go_to_their_shard() {
    for kind in kinds() {
        let servers = Servers::start(kind, 3).unwrap();
        let addrs: Vec<String> = servers.addrs().iter().map(|a| a.to_string()).collect();
        let e = Engine::builder().addresses(addrs).build().unwrap();
        let mut expected = [0u64; 3];
        for i in 0..600 {
            let channel = format!("user:{i}");
            expected[shardcore::shard_of(channel.as_bytes(), 3) as usize] += 1;
            e.publish(channel.as_bytes(), b"x").unwrap();
        }
        e.shutdown();
        let got: Vec<u64> = (0..3)
            .map(|i| servers[i].command_calls("publish").unwrap())
            .collect();
        assert_eq!(got, expected, "{kind:?}");
        assert!(expected.iter().all(|&n| n > 100), "{expected:?}");
    }
}

#[test]
fn a_server_that_stops_reading_makes_publishers_wait_then_fail_clearly() {
    let mut hello = Vec::new();
    resp::encode_command(&mut hello, ["HELLO", "3"]);
    // After the handshake the server reads nothing for a while: the socket
    // fills, then the engine's buffers, then publishers wait.
    let fake = FakeServer::start_each(vec![
        vec![
            Step::Expect(hello),
            Step::send(b"%0\r\n"),
            Step::Delay(Duration::from_secs(10)),
        ],
        vec![Step::Silence],
    ])
    .unwrap();
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .max_buffered_bytes(64 << 10)
        .request_timeout(Duration::from_millis(500))
        .reconnect_backoff(Duration::from_secs(5), Duration::from_secs(5))
        .build()
        .unwrap();
    let payload = [b'x'; 1024];
    let started = Instant::now();
    let mut accepted = 0u64;
    let err = loop {
        match e.publish(b"ch", &payload) {
            Ok(()) => accepted += 1,
            Err(err) => break err,
        }
        assert!(accepted < 1_000_000, "no backpressure after 1 GB");
    };
    let took = started.elapsed();
    assert!(
        matches!(err, Error::Backpressure { .. } | Error::NotConnected { .. }),
        "{err:?}"
    );
    assert!(err.is_transient());
    // Bounded by the kernel's socket buffers plus two 64 KiB buffers.
    assert!(accepted * 1050 < 64 << 20, "accepted {accepted} publishes");
    assert!(took < Duration::from_secs(3), "{took:?}");
    eprintln!("accepted {accepted} publishes, then {err} after {took:?}");
    e.shutdown();
    drop(fake);
}
