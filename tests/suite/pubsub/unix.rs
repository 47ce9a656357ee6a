//! Servers on Unix sockets (`unix:///path` URLs, Redis 7 and Valkey 9):
//! one server and two shards deliver everything through the accounting
//! checker (the same code as over TCP); a subscribe connection the
//! server kills is named by its socket in the gap and connection events,
//! every lost message is signalled and the rest arrive; TLS over a socket
//! fails `build` with a clear error.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use shardsub::{Error, PubSub, ServerAddr};
use testkit::accounting::Ledger;
use testkit::{kinds, Server};

use crate::pubsub::placement::subscribe_publish_check;
use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;

const BOUND: Duration = Duration::from_secs(20);

fn unix_server(kind: testkit::ServerKind) -> (Server, String) {
    let server = Server::builder(kind).unix_socket().start().unwrap();
    let path = server.unix_socket().unwrap();
    let url = format!("unix://{}", path.display());
    (server, url)
}

#[test]
fn one_server_and_two_shards_over_unix_sockets_deliver_everything() {
    for kind in kinds() {
        let (server, url) = unix_server(kind);
        let what = format!("{kind:?} one server over {url}");
        let m = subscribe_publish_check(PubSub::builder().url(&url), &what);
        assert_eq!(m.subscribe_errors, 0, "{what}");
        let (a, b) = (unix_server(kind), unix_server(kind));
        let what = format!("{kind:?} two shards over Unix sockets");
        subscribe_publish_check(PubSub::builder().urls([&a.1, &b.1]), &what);
        drop(server);
    }
}

#[test]
fn a_killed_socket_connection_is_named_by_its_path_and_every_loss_signalled() {
    for kind in kinds() {
        let (server, url) = unix_server(kind);
        let path = server.unix_socket().unwrap();
        let chans = channels("ux", 200);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "unix");
        let ps = Arc::new(
            PubSub::builder()
                .url(&url)
                .workers(2)
                .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
                .handler_arc(handler.clone())
                .build()
                .unwrap(),
        );
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        // Nothing of it goes over TCP: the one TCP client is testkit's
        // own; the instance's subscribe and publish connections are on
        // the socket (`flags=U`).
        let (unix, tcp) = clients_by_transport(&server);
        assert_eq!((unix, tcp), (2, 1), "{kind:?}: CLIENT LIST");
        let what = format!("{kind:?} over {url}");
        let (report, rounds) = accounted::kill_pubsub_clients_under_load(
            &ps, &ledger, &handler, &server, 1, &chans, BOUND, &what,
        );
        let want: HashSet<Vec<u8>> = chans.iter().cloned().collect();
        assert!(rounds >= 3, "{what}: {rounds} rounds");
        assert_eq!(*handler.gap_channels.lock(), want, "{what}");
        assert_eq!(report.counts.signals, 200, "{what}: one gap per channel");
        let socket = ServerAddr::unix(&path);
        let timeline = handler.timeline.lock().clone();
        assert!(
            timeline.iter().any(|l| *l == format!("gap {socket}")),
            "{what}: the gap names {socket}: {timeline:?}"
        );
        let health = ps.health();
        assert_eq!(health.len(), 1, "{what}: {health:?}");
        assert_eq!(health[0].addr, Some(socket), "{what}: {health:?}");
        assert_eq!(ps.metrics().reconnects, 1, "{what}");
    }
}

/// `CLIENT LIST` entries on a Unix socket (`flags=…U…`) and over TCP.
fn clients_by_transport(server: &Server) -> (usize, usize) {
    let v = server.cmd(&[b"CLIENT", b"LIST"]).expect("client list");
    let text = testkit::values::text(&v).unwrap_or_default();
    let unix = text
        .lines()
        .filter(|l| {
            l.split(' ')
                .any(|f| f.strip_prefix("flags=").is_some_and(|f| f.contains('U')))
        })
        .count();
    (unix, text.lines().count() - unix)
}

/// With `require_all_servers`, a socket that is not there fails `build`
/// naming its path (by default the start is degraded, as over TCP).
#[test]
fn a_missing_socket_fails_build_naming_it() {
    let dir = std::env::temp_dir().join(format!("shardsub-no-socket-{}", std::process::id()));
    let url = format!("unix://{}/none.sock", dir.display());
    let e = PubSub::builder()
        .url(&url)
        .require_all_servers(true)
        .handler(|_: &[u8], _: &[u8]| {})
        .build()
        .unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(&e, Error::Connect { addr, .. } if addr.unix_path().is_some()),
        "{e:?}"
    );
    assert!(text.contains("none.sock"), "{text}");
}
