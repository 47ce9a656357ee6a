//! TLS (the `tls` feature) against a real Redis listening for TLS on
//! loopback, with certificates generated at test time: the engine's
//! commands and publishes, Pub/Sub delivery on one server and on N shards
//! (counted by the accounting checker), client certificates, the errors a
//! wrong CA, a wrong name or a plain port give (clear and bounded), and
//! `rediss://` URLs with ACL credentials (and a wrong password's
//! `Error::Auth`) inside TLS.
//!
//! Redis only: the Valkey binary installed here is built without TLS
//! (`tls_unavailable_on_valkey` checks that this is still so).

use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::engine::{Engine, PublishOptions};
use shardsub::{Error, Protocol, PubSub, TlsConfig, Value};
use testkit::accounting::Ledger;
use testkit::{kinds, Server, ServerKind, TlsAuthClients};

use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;
use crate::support::tls::{unrelated_ca_pem, Pki};

const BOUND: Duration = Duration::from_secs(20);
/// The connect timeout the failing cases use: their errors must come well
/// before it (a TLS failure is an answer, not a hang).
const CONNECT: Duration = Duration::from_secs(5);

fn redis_here() -> bool {
    kinds().contains(&ServerKind::Redis)
}

fn engine(addr: &str, tls: TlsConfig) -> Result<Engine, Error> {
    Engine::builder()
        .address(addr)
        .io_threads(1)
        .connect_timeout(CONNECT)
        .tls(tls)
        .build()
}

/// `build`'s error, and that it came at once rather than at the timeout.
fn refused(result: Result<Engine, Error>) -> Error {
    let start = Instant::now();
    let e = match result {
        Ok(_) => panic!("expected the TLS connection to fail"),
        Err(e) => e,
    };
    assert!(start.elapsed() < CONNECT, "{e}: took {:?}", start.elapsed());
    e
}

fn tls_reason(e: &Error) -> String {
    match e {
        Error::Tls { reason, .. } => reason.to_string(),
        other => panic!("expected Error::Tls, got {other:?} ({other})"),
    }
}

#[test]
fn engine_commands_and_publishes_over_tls() {
    if !redis_here() {
        return;
    }
    let pki = Pki::new("engine");
    let mut server = pki.redis(TlsAuthClients::No);
    let addr = Pki::addr(&server);
    for protocol in [Protocol::Resp3, Protocol::Resp2] {
        let e = Engine::builder()
            .address(&addr)
            .io_threads(1)
            .protocol(protocol)
            .tls(TlsConfig::ca_pem(&pki.ca_pem))
            .build()
            .unwrap();
        let ok = e.command(["SET", "k", "v"]).unwrap();
        assert_eq!(ok, Value::Simple(b"OK".to_vec()), "{protocol:?}");
        // A value of several TLS records each way (16 KiB per record).
        let big = vec![b'x'; 3 << 20];
        e.command([b"SET".as_slice(), b"big", &big]).unwrap();
        let got = e.command(["GET", "big"]).unwrap();
        assert_eq!(got, Value::Bulk(big), "{protocol:?}");
        // A pipelined burst: more than rustls buffers at once.
        let pending: Vec<_> = (0..5000)
            .map(|_| e.publish_pending(b"ch", &[7u8; 512], PublishOptions::classic()))
            .collect();
        for p in pending {
            assert_eq!(p.wait().unwrap(), 0);
        }
        // A subscriber on the plain port sees what was published over TLS.
        let mut sub = server.connect().unwrap();
        sub.cmd(&[b"SUBSCRIBE", b"seen"]).unwrap();
        let n = e
            .publish_pending(b"seen", b"hello", PublishOptions::classic())
            .wait()
            .unwrap();
        assert_eq!(n, 1, "{protocol:?}");
        let msg = sub.read_value().unwrap();
        assert_eq!(
            msg,
            Value::Array(vec![
                Value::Bulk(b"message".to_vec()),
                Value::Bulk(b"seen".to_vec()),
                Value::Bulk(b"hello".to_vec()),
            ])
        );
        e.shutdown();
    }
    // A restart: the engine reconnects over TLS on its own.
    let e = engine(&addr, TlsConfig::ca_pem(&pki.ca_pem)).unwrap();
    server.restart().unwrap();
    let v = testkit::wait_for("a command after the restart", BOUND, || {
        Ok(e.command(["PING"]).ok())
    })
    .unwrap();
    assert_eq!(v, Value::Simple(b"PONG".to_vec()));
    assert!(e.stats().connects >= 2, "{:?}", e.stats());
}

#[test]
fn a_full_socket_waits_for_writable_and_resumes_over_tls() {
    if !redis_here() {
        return;
    }
    let pki = Pki::new("blocked");
    let server = pki.redis(TlsAuthClients::No);
    let e = engine(&Pki::addr(&server), TlsConfig::ca_pem(&pki.ca_pem)).unwrap();
    assert_eq!(
        e.command(["PING"]).unwrap(),
        Value::Simple(b"PONG".to_vec())
    );
    // The server reads nothing for a second: 24 MiB of publishes cannot
    // all fit in the socket buffers, so TLS records wait for WRITABLE.
    let mut sleeper = server.connect().unwrap();
    sleeper.send(&[b"DEBUG", b"SLEEP", b"1"]).unwrap();
    let payload = vec![b'p'; 1024];
    let pending: Vec<_> = (0..24 * 1024)
        .map(|_| e.publish_pending(b"full", &payload, PublishOptions::classic()))
        .collect();
    for p in pending {
        assert_eq!(p.wait().unwrap(), 0);
    }
    assert_eq!(sleeper.read_value().unwrap(), Value::Simple(b"OK".to_vec()));
    let s = e.stats();
    assert!(s.write_would_block >= 1, "{s:?}");
    assert_eq!(s.failed, 0, "{s:?}");
}

#[test]
fn pubsub_delivers_over_tls_on_one_server_and_on_shards() {
    if !redis_here() {
        return;
    }
    let pki = Pki::new("pubsub");
    let servers = [pki.redis(TlsAuthClients::No), pki.redis(TlsAuthClients::No)];
    for count in [1, 2] {
        for protocol in [Protocol::Resp3, Protocol::Resp2] {
            let addrs: Vec<String> = servers[..count].iter().map(Pki::addr).collect();
            let chans = channels("tls", 200);
            let ledger = Arc::new(Ledger::new(&chans));
            let handler = Accounted::new(&ledger, "sub");
            let ps = Arc::new(
                PubSub::builder()
                    .addresses(addrs)
                    .workers(4)
                    .protocol(protocol)
                    .io_threads(1)
                    .require_all_servers(true)
                    .tls(TlsConfig::ca_pem(&pki.ca_pem))
                    .handler_arc(handler.clone())
                    .build()
                    .unwrap(),
            );
            ps.subscribe(&chans).unwrap();
            ps.wait_active(&chans, BOUND).unwrap();
            let publish = accounted::via_pubsub(ps.clone());
            let rounds = 50u64;
            for _ in 0..rounds {
                accounted::round(&ledger, &*publish);
            }
            let what = format!("{count} server(s) {protocol:?}");
            let report = accounted::settle_and_check(&ledger, BOUND, &what);
            assert_eq!(report.counts.delivered, rounds * 200, "{what}");
            // Every server carries its share: channels are spread by hash.
            for s in &servers[..count] {
                let info = s.cmd(&[b"PUBSUB", b"CHANNELS", b"tls:*"]).unwrap();
                let Value::Array(list) = info else {
                    panic!("{what}: {info:?}")
                };
                assert!(!list.is_empty(), "{what}: a server without channels");
            }
            ps.shutdown();
        }
    }
}

#[test]
fn client_certificates_are_shown_when_asked_for() {
    if !redis_here() {
        return;
    }
    let pki = Pki::new("mtls");
    let server = pki.redis(TlsAuthClients::Yes);
    let addr = Pki::addr(&server);
    let with_cert =
        TlsConfig::ca_pem(&pki.ca_pem).client_cert_pem(&pki.client_cert_pem, &pki.client_key_pem);
    let e = engine(&addr, with_cert).unwrap();
    assert_eq!(
        e.command(["PING"]).unwrap(),
        Value::Simple(b"PONG".to_vec())
    );
    e.shutdown();
    // The same from files.
    let files = TlsConfig::ca_pem_file(pki.dir().join("ca.crt"))
        .client_cert_pem_files(pki.dir().join("client.crt"), pki.dir().join("client.key"));
    let e = engine(&addr, files).unwrap();
    assert_eq!(
        e.command(["PING"]).unwrap(),
        Value::Simple(b"PONG".to_vec())
    );
    e.shutdown();
    // Without one, the server's refusal is the error.
    let e = refused(engine(&addr, TlsConfig::ca_pem(&pki.ca_pem)));
    let reason = tls_reason(&e);
    assert!(reason.contains("CertificateRequired"), "{e}");
    assert!(e.to_string().contains(&addr), "{e}");
}

#[test]
fn an_untrusted_server_is_a_clear_error() {
    if !redis_here() {
        return;
    }
    let pki = Pki::new("wrong-ca");
    let server = pki.redis(TlsAuthClients::No);
    let addr = Pki::addr(&server);
    let e = refused(engine(&addr, TlsConfig::ca_pem(unrelated_ca_pem())));
    assert!(tls_reason(&e).contains("UnknownIssuer"), "{e}");
    assert!(!e.is_transient(), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "TLS with {addr} failed: invalid peer certificate: UnknownIssuer"
        )),
        "{text}"
    );
    // Pub/Sub says the same from `build` when every server is required.
    let ps = PubSub::builder()
        .address(&addr)
        .require_all_servers(true)
        .connect_timeout(CONNECT)
        .tls(TlsConfig::ca_pem(unrelated_ca_pem()))
        .handler(shardsub::handler_fn(|_, _| {}))
        .build();
    match ps {
        Err(e @ Error::Tls { .. }) => assert!(e.to_string().contains("UnknownIssuer"), "{e}"),
        Err(other) => panic!("expected Error::Tls, got {other:?}"),
        Ok(_) => panic!("expected Error::Tls, got a PubSub"),
    }
}

#[test]
fn the_server_name_is_checked() {
    if !redis_here() {
        return;
    }
    let pki = Pki::new("sni");
    let server = pki.redis(TlsAuthClients::No);
    let addr = Pki::addr(&server);
    // The certificate names localhost (DNS) and 127.0.0.1 (IP).
    let named = TlsConfig::ca_pem(&pki.ca_pem).server_name("localhost");
    let e = engine(&addr, named).unwrap();
    assert_eq!(
        e.command(["PING"]).unwrap(),
        Value::Simple(b"PONG".to_vec())
    );
    e.shutdown();
    let other = TlsConfig::ca_pem(&pki.ca_pem).server_name("cache.example");
    let e = refused(engine(&addr, other));
    assert!(
        tls_reason(&e).contains("certificate not valid for name \"cache.example\""),
        "{e}"
    );
    let bad = Engine::builder()
        .address(&addr)
        .tls(TlsConfig::ca_pem(&pki.ca_pem).server_name("not a name"))
        .build();
    match bad {
        Err(Error::Config(what)) => assert!(what.contains("\"not a name\""), "{what}"),
        other => panic!("expected a config error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn tls_to_a_plain_port_is_a_clear_error() {
    if !redis_here() {
        return;
    }
    let pki = Pki::new("plain-port");
    let server = pki.redis(TlsAuthClients::No);
    let plain = server.addr().to_string();
    // Redis reads the ClientHello as the start of an inline command and
    // waits for its end: the handshake never finishes, and the connect
    // timeout names TLS as the likely cause.
    let timeout = Duration::from_millis(500);
    let start = Instant::now();
    let e = Engine::builder()
        .address(&plain)
        .connect_timeout(timeout)
        .tls(TlsConfig::ca_pem(&pki.ca_pem))
        .build()
        .map(|_| ())
        .unwrap_err();
    assert!(start.elapsed() < timeout * 4, "{:?}", start.elapsed());
    assert!(
        tls_reason(&e).contains("no TLS handshake within the connect timeout (500ms)"),
        "{e}"
    );
    assert!(e.to_string().contains("does this port speak TLS?"), "{e}");
}

#[test]
fn rediss_urls_select_tls() {
    if !redis_here() {
        return;
    }
    let pki = Pki::new("url");
    let server = pki.redis(TlsAuthClients::No);
    let port = server.tls_addr().unwrap().port();
    // Credentials travel inside TLS (HELLO 3 AUTH, or AUTH on RESP2).
    server
        .cmd_str(&[
            "ACL", "SETUSER", "app", "on", ">s3cret", "~*", "&*", "+@all",
        ])
        .unwrap();
    let url = format!("rediss://app:s3cret@127.0.0.1:{port}");
    for protocol in [Protocol::Resp3, Protocol::Resp2] {
        let e = Engine::builder()
            .url(&url)
            .protocol(protocol)
            .tls(TlsConfig::ca_pem(&pki.ca_pem))
            .build()
            .unwrap();
        let who = e.command(["ACL", "WHOAMI"]).unwrap();
        assert_eq!(who, Value::Bulk(b"app".to_vec()), "{protocol:?}");
        e.shutdown();
    }
    let wrong = Engine::builder()
        .url(&format!("rediss://app:wrong@127.0.0.1:{port}"))
        .tls(TlsConfig::ca_pem(&pki.ca_pem))
        .build();
    assert!(
        matches!(wrong, Err(Error::Auth { .. })),
        "{:?}",
        wrong.map(|_| ())
    );
    // Without a config the URL trusts the system's roots, which do not
    // know this test CA: TLS was selected, and said why it failed.
    let e = refused(
        Engine::builder()
            .url(&format!("valkeys://localhost:{port}"))
            .connect_timeout(CONNECT)
            .build(),
    );
    match &e {
        Error::Tls { .. } => assert!(tls_reason(&e).contains("UnknownIssuer"), "{e}"),
        // A machine without any system roots says that instead.
        Error::Config(what) => assert!(what.contains("no system root certificate"), "{e}"),
        other => panic!("{other:?}"),
    }
    let chans = channels("url", 20);
    let ledger = Arc::new(Ledger::new(&chans));
    let handler = Accounted::new(&ledger, "sub");
    let ps = Arc::new(
        PubSub::builder()
            .url(&url)
            .tls(TlsConfig::ca_pem(&pki.ca_pem))
            .client_name("tls-pubsub")
            .require_all_servers(true)
            .io_threads(1)
            .handler_arc(handler.clone())
            .build()
            .unwrap(),
    );
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, BOUND).unwrap();
    let publish = accounted::via_pubsub(ps.clone());
    for _ in 0..10 {
        accounted::round(&ledger, &*publish);
    }
    let report = accounted::settle_and_check(&ledger, BOUND, "rediss:// pubsub");
    assert_eq!(report.counts.delivered, 200);
    ps.shutdown();
}

#[test]
fn tls_unavailable_on_valkey() {
    if !kinds().contains(&ServerKind::Valkey) {
        return;
    }
    // The environment fact behind "Redis only": if this starts failing,
    // the installed Valkey has TLS and the tests above should run on it.
    let pki = Pki::new("valkey");
    let started = Server::builder(ServerKind::Valkey)
        .tls(pki.server_files(TlsAuthClients::No))
        .start_timeout(Duration::from_secs(5))
        .start();
    match started {
        Err(testkit::Error::StartFailed { log, .. }) => {
            assert!(log.contains("Failed finding TLS support"), "{log}")
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("the installed Valkey now has TLS: run the TLS tests on it too"),
    }
}

/// TLS over a Unix socket fails `build` with a clear error, in the
/// engine and in `PubSub`, before anything connects.
#[test]
fn tls_over_a_unix_socket_is_refused_at_build() {
    let e = engine(
        "unix:/tmp/shardsub-tls-unix.sock",
        TlsConfig::system_roots(),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Config(t) if t.contains("TLS over a Unix socket")),
        "{e:?}"
    );
    let e = shardsub::PubSub::builder()
        .url("unix:///tmp/shardsub-tls-unix.sock")
        .tls(TlsConfig::system_roots())
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(t) if t.contains("TLS over a Unix socket (unix:/tmp/shardsub-tls-unix.sock)")),
        "{e:?}"
    );
}
