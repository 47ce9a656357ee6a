//! One server refused at build fails `build` (it can start degraded when
//! told to). Shards start degraded: `build` succeeds while one of two shards is
//! down, the live shard's channels deliver every message, the down one's
//! channels are not active and their publishes fail at once, and once the
//! server is back its channels become active and deliver too; with
//! `require_all_servers` the same build fails with the connection error.
//! A cluster starts the same way with one primary down: its channels wait,
//! the metrics say it has no subscribe connection, and once it is back
//! every channel is active and delivers; with `require_all_servers` that
//! build fails, naming the primary. Discovery fails within its own bound,
//! naming every seed with why.

use std::sync::Arc;
use std::time::Duration;

use shardsub::{Error, PubSub};
use testkit::accounting::Ledger;
use testkit::{Cluster, Server};

use crate::support::accounted;
use crate::support::accounted::Accounted;

const BOUND: Duration = Duration::from_secs(10);

#[test]
fn one_shard_down_at_build_starts_degraded_and_joins_when_it_comes_up() {
    for kind in testkit::kinds() {
        let a = Server::start(kind).expect("server a");
        let mut b = Server::start(kind).expect("server b");
        let addrs = [a.addr().to_string(), b.addr().to_string()];
        b.stop();
        let strict = PubSub::builder()
            .addresses(addrs.clone())
            .require_all_servers(true)
            .connect_timeout(Duration::from_millis(500))
            .handler(shardsub::handler_fn(|_, _| {}))
            .build();
        assert!(
            matches!(
                strict,
                Err(Error::Connect { .. } | Error::ConnectTimeout { .. })
            ),
            "{kind:?}: {strict:?}"
        );

        let names: Vec<Vec<u8>> = (0..200).map(|i| format!("deg:{i}").into_bytes()).collect();
        let ledger = Arc::new(Ledger::new(&names));
        let handler = Accounted::new(&ledger, "sub");
        let ps = Arc::new(
            PubSub::builder()
                .addresses(addrs.clone())
                .subscribe_connections(1)
                .workers(2)
                .connect_timeout(Duration::from_millis(500))
                .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
                .handler_arc(handler.clone())
                .build()
                .unwrap_or_else(|e| panic!("{kind:?}: degraded start refused: {e}")),
        );
        let (on_a, on_b): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) =
            names.iter().partition(|n| ps.server_of(n) == Some(0));
        assert!(!on_a.is_empty() && !on_b.is_empty());
        ps.subscribe(&names).unwrap();
        ps.wait_active(&on_a, BOUND)
            .unwrap_or_else(|e| panic!("{kind:?}: the live shard: {e}"));
        assert!(on_b.iter().all(|n| !ps.is_active(n)), "{kind:?}");
        assert_eq!(ps.metrics().active_connections, vec![1, 0], "{kind:?}");
        // The wait names the server it cannot reach and why.
        let b_addr = addrs[1].clone();
        match ps.wait_active(&on_b, Duration::from_millis(300)) {
            Err(Error::Unreachable { servers, .. })
                if servers.len() == 1 && *servers[0].0 == *b_addr => {}
            other => panic!("{kind:?}: waiting on the down shard: {other:?}"),
        }
        // So do the degraded start's event and the health view.
        testkit::wait_for("the degraded start's event", BOUND, || {
            let t = handler.timeline.lock();
            Ok(t.iter()
                .any(|e| e.starts_with(&format!("down {b_addr}:")))
                .then_some(()))
        })
        .unwrap();
        let health = ps.health();
        let b_health = health.iter().find(|h| h.server == b_addr);
        assert!(
            b_health.is_some_and(|h| !h.connected && h.failures >= 1 && h.last_error.is_some()),
            "{kind:?}: {health:?}"
        );
        assert!(
            health.iter().any(|h| h.server == addrs[0] && h.connected),
            "{kind:?}: {health:?}"
        );
        let r = ps.publish(on_b[0], b"x");
        assert!(
            matches!(r, Err(Error::NotConnected { .. })),
            "{kind:?}: {r:?}"
        );

        b.restart().expect("server b back on its port");
        ps.wait_active(&on_b, BOUND)
            .unwrap_or_else(|e| panic!("{kind:?}: the shard that came up: {e}"));
        // The event reaches the handler on a worker: `wait_active` reads
        // the registry, so it may return before the handler has seen it.
        testkit::wait_for("the shard's return event", BOUND, || {
            let t = handler.timeline.lock();
            Ok(t.iter().any(|e| *e == format!("up {b_addr}")).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}: {:?}", handler.timeline.lock()));
        {
            let t = handler.timeline.lock();
            let down = t
                .iter()
                .position(|e| e.starts_with(&format!("down {b_addr}:")));
            let up = t.iter().position(|e| *e == format!("up {b_addr}"));
            assert!(down < up && down.is_some(), "{kind:?}: {t:?}");
        }
        assert!(ps.health().iter().all(|h| h.connected), "{kind:?}");
        // A channel outside the ledger on the same shard: its publish
        // succeeds once the publish connection is back.
        let probe = (0..)
            .map(|i| format!("deg:probe:{i}").into_bytes())
            .find(|n| ps.server_of(n) == Some(1))
            .unwrap();
        testkit::wait_for("the publish connection back", BOUND, || {
            Ok(ps.publish_wait(&probe, b"p", BOUND).is_ok().then_some(()))
        })
        .unwrap();
        assert_eq!(ps.metrics().active_connections, vec![1, 1], "{kind:?}");
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?} degraded"));
        ps.shutdown();
    }
}

/// One server that refuses the connection at build: nothing can work, so
/// `build` fails with the refusal (a typo'd port, say), unless told to
/// start degraded; then its channels become active once it is up.
#[test]
fn one_server_refused_at_build_fails_build_unless_told_to_start_degraded() {
    for kind in testkit::kinds() {
        let mut s = Server::start(kind).expect("server");
        let addr = s.addr().to_string();
        s.stop();
        let built = PubSub::builder()
            .address(addr.clone())
            .handler(shardsub::handler_fn(|_, _| {}))
            .build();
        match &built {
            Err(Error::Connect { addr: a, .. }) if a.to_string() == addr => {}
            other => panic!("{kind:?}: one refused server built: {other:?}"),
        }

        let names: Vec<Vec<u8>> = (0..20).map(|i| format!("one:{i}").into_bytes()).collect();
        let ledger = Arc::new(Ledger::new(&names));
        let handler = Accounted::new(&ledger, "sub");
        let ps = Arc::new(
            PubSub::builder()
                .address(addr.clone())
                .require_all_servers(false)
                .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
                .handler_arc(handler.clone())
                .build()
                .unwrap_or_else(|e| panic!("{kind:?}: degraded start refused: {e}")),
        );
        ps.subscribe(&names).unwrap();
        assert_eq!(ps.metrics().active_connections, vec![0], "{kind:?}");
        s.restart().expect("the server back on its port");
        ps.wait_active(&names, BOUND)
            .unwrap_or_else(|e| panic!("{kind:?}: the server that came up: {e}"));
        testkit::wait_for("the publish connection back", BOUND, || {
            Ok(ps
                .publish_wait("one:probe", b"p", BOUND)
                .is_ok()
                .then_some(()))
        })
        .unwrap();
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?} one server degraded"));
        ps.shutdown();
    }
}

#[test]
fn a_cluster_with_a_primary_down_at_build_starts_and_joins_it_when_it_comes_up() {
    for kind in testkit::kinds() {
        let mut cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let seeds: Vec<String> = cluster.seed_addrs().iter().map(|a| a.to_string()).collect();
        let down = cluster.masters()[2];
        cluster.node_mut(down).expect("node").kill();
        let down_addr = cluster.node(down).addr().to_string();
        let strict = PubSub::builder()
            .seeds(seeds.clone())
            .require_all_servers(true)
            .connect_timeout(Duration::from_millis(500))
            .handler(shardsub::handler_fn(|_, _| {}))
            .build();
        match &strict {
            Err(Error::Cluster { reason, .. }) if reason.contains(&down_addr) => {}
            Ok(ps) => panic!(
                "{kind:?}: require_all_servers built: {:?}",
                ps.cluster_metrics()
            ),
            other => panic!("{kind:?}: require_all_servers: {other:?}"),
        }
        let names: Vec<Vec<u8>> = (0..300).map(|i| format!("cdeg:{i}").into_bytes()).collect();
        let ledger = Arc::new(Ledger::new(&names));
        let handler = Accounted::new(&ledger, "sub");
        let ps = Arc::new(
            PubSub::builder()
                .seeds(seeds)
                .workers(2)
                .connect_timeout(Duration::from_millis(500))
                .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
                .handler_arc(handler.clone())
                .build()
                .unwrap_or_else(|e| panic!("{kind:?}: degraded start refused: {e}")),
        );
        let parts = ps.partitions().expect("a cluster").clone();
        let on_down: Vec<&Vec<u8>> = names
            .iter()
            .filter(|n| cluster.owner_of_slot(parts.slot(parts.partition_of(n))) == Some(down))
            .collect();
        assert!(!on_down.is_empty(), "{kind:?}");
        ps.subscribe(&names).unwrap();
        // While it is down its channels wait, and the metrics say so.
        let m = ps.cluster_metrics().expect("a cluster");
        assert!(m.subscribe_connections < 3, "{kind:?}: {m:?}");
        assert!(on_down.iter().all(|n| !ps.is_active(n)), "{kind:?}");
        // A wait names the primary it cannot reach.
        match ps.wait_active(&on_down, Duration::from_millis(300)) {
            Err(Error::Unreachable { servers, .. })
                if servers.iter().any(|(s, _)| **s == *down_addr) => {}
            other => panic!("{kind:?}: waiting on the down primary: {other:?}"),
        }
        cluster.restart_node(down).expect("the primary back");
        ps.wait_active(&names, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{kind:?}: after the primary came back: {e}"));
        let m = ps.cluster_metrics().expect("a cluster");
        assert_eq!(m.subscribe_connections, 3, "{kind:?}: {m:?}");
        accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
        accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?} cluster degraded"));
        ps.shutdown();
    }
}

/// Discovery has a bound of its own, and its error names every seed with
/// why it failed: one that refuses connections, one that accepts and never
/// answers (a frozen server). It used to take a fixed 10 s and fail with
/// `Error::Cluster { slot: 0, … }` naming only the last seed's error.
#[test]
fn discovery_fails_within_its_bound_naming_every_seed() {
    for kind in testkit::kinds() {
        let refusing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let refusing_addr = refusing.local_addr().unwrap();
        drop(refusing);
        let mut frozen = Server::start(kind).expect("server");
        frozen.freeze();
        let started = std::time::Instant::now();
        let r = PubSub::builder()
            .seeds([refusing_addr.to_string(), frozen.addr().to_string()])
            .connect_timeout(Duration::from_millis(300))
            .discovery_timeout(Duration::from_millis(1500))
            .build();
        let took = started.elapsed();
        frozen.thaw();
        match &r {
            Err(Error::Discovery { after, seeds })
                if *after == Duration::from_millis(1500)
                    && seeds.iter().any(|(s, _)| **s == *refusing_addr.to_string())
                    && seeds.iter().any(|(s, _)| **s == *frozen.addr().to_string()) => {}
            other => panic!("{kind:?}: {other:?}"),
        }
        let text = r.unwrap_err().to_string();
        assert!(text.contains("discovery_timeout"), "{kind:?}: {text}");
        assert!(took < Duration::from_secs(5), "{kind:?}: {took:?}");
    }
}
