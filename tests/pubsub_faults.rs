//! Pub/Sub under trouble, against real servers: a slow handler (drops are
//! counted, nothing hangs), `CLIENT KILL TYPE pubsub` (gap events name
//! exactly the resubscribed channels, delivery resumes), a black-holed
//! connection (the liveness probe restarts it), and the lag envelope.

mod pubsub_support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use pubsub_support::{channels, payload, Recorder};
use shardsub::{Protocol, PubSub};
use testkit::{kinds, FaultProxy, Server};

const BOUND: Duration = Duration::from_secs(20);

/// A handler held at a gate until the test opens it.
struct Gated {
    open: Mutex<bool>,
    cond: Condvar,
    handled: AtomicU64,
}

impl shardsub::Handler for Gated {
    fn on_message(&self, _channel: &[u8], _payload: &[u8]) {
        let mut open = self.open.lock();
        let deadline = Instant::now() + BOUND;
        while !*open && !self.cond.wait_until(&mut open, deadline).timed_out() {}
        self.handled.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn slow_handler_drops_and_counts_without_hanging() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let gated = Arc::new(Gated {
            open: Mutex::new(false),
            cond: Condvar::new(),
            handled: AtomicU64::new(0),
        });
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .workers(1)
            .queue_capacity(16)
            .io_threads(1)
            .handler_arc(gated.clone())
            .build()
            .unwrap();
        ps.subscribe(["slow"]).unwrap();
        ps.wait_active(&["slow"], BOUND).unwrap();
        let sent = 2000u64;
        for i in 0..sent {
            ps.publish(b"slow", &payload(i, 16)).unwrap();
        }
        // The reader never blocks: every message is either queued or dropped.
        let m = testkit::wait_for("all received", BOUND, || {
            let m = ps.metrics();
            Ok((m.received == sent).then_some(m))
        })
        .unwrap();
        // At most one batch taken by the worker plus one full queue wait.
        assert!(m.dropped.queue_full >= sent - 2 * 16, "{kind:?} {m:?}");
        assert!(m.queue_depths[0] <= 16, "{m:?}");
        // The connection is still fine: a command round trip works.
        assert!(ps.publisher().command(["PING"]).is_ok());
        *gated.open.lock() = true;
        gated.cond.notify_all();
        let m = testkit::wait_for("queued ones delivered", BOUND, || {
            let m = ps.metrics();
            Ok((m.delivered + m.dropped.total() == sent).then_some(m))
        })
        .unwrap();
        assert_eq!(gated.handled.load(Ordering::Relaxed), m.delivered);
        assert!(m.delivered >= 1 && m.delivered <= 2 * 16, "{m:?}");
        let start = Instant::now();
        ps.shutdown();
        assert!(start.elapsed() < Duration::from_secs(5), "shutdown hung");
    }
}

#[test]
fn client_kill_signals_exactly_the_resubscribed_channels() {
    for (kind, protocol) in kinds()
        .into_iter()
        .flat_map(|k| [(k, Protocol::Resp3), (k, Protocol::Resp2)])
    {
        let server = Server::start(kind).unwrap();
        let rec = Recorder::new();
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .protocol(protocol)
            .workers(4)
            .subscribe_connections(2)
            .batch_size(64)
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
            .io_threads(1)
            .handler_arc(rec.clone())
            .build()
            .unwrap();
        let chans = channels("gap", 300);
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        // Given up before the kill: must not be resubscribed nor named.
        let gone = channels("gap", 310)[300..].to_vec();
        ps.subscribe(&gone).unwrap();
        ps.wait_active(&gone, BOUND).unwrap();
        ps.unsubscribe(&gone).unwrap();
        testkit::wait_for("unsubscribed", BOUND, || {
            Ok(pubsub_support::numsub(&server, &gone)
                .iter()
                .all(|&n| n == 0)
                .then_some(()))
        })
        .unwrap();
        let killed = server
            .cmd(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"])
            .unwrap();
        assert_eq!(killed, testkit::Value::Integer(2), "{kind:?} {protocol:?}");
        let want: HashSet<Vec<u8>> = chans.iter().cloned().collect();
        rec.wait("gap events for every channel", BOUND, |s| {
            s.gap_channels.len() >= want.len()
        });
        ps.wait_active(&chans, BOUND).unwrap();
        {
            let s = rec.seen.lock();
            assert_eq!(
                s.gap_channels, want,
                "{kind:?}: exactly the resubscribed channels"
            );
            assert!(
                s.gaps >= 2 && s.gaps <= 8,
                "one per worker per connection: {}",
                s.gaps
            );
        }
        for c in &chans {
            ps.publish(c, &payload(7, 16)).unwrap();
        }
        rec.wait("delivery resumes", BOUND, |s| s.total >= 300);
        let m = ps.metrics();
        assert_eq!(m.reconnects, 2, "{m:?}");
        assert_eq!(m.gap_channels, 300, "{m:?}");
        assert_eq!(m.active_connections, vec![2], "{m:?}");
        assert_eq!(
            pubsub_support::numsub(&server, &gone),
            vec![0; 10],
            "{kind:?}"
        );
    }
}

#[test]
fn liveness_probe_restarts_a_black_holed_connection() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let proxy = FaultProxy::start(server.addr()).unwrap();
        let rec = Recorder::new();
        let probe = Duration::from_millis(200);
        let ps = PubSub::builder()
            .address(proxy.addr().to_string())
            .subscribe_connections(1)
            .workers(1)
            .probe_interval(probe)
            .connect_timeout(Duration::from_millis(500))
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
            .io_threads(1)
            .handler_arc(rec.clone())
            .build()
            .unwrap();
        ps.subscribe(["live"]).unwrap();
        ps.wait_active(&["live"], BOUND).unwrap();
        // While healthy and idle, probes go out and come back.
        testkit::wait_for("a probe", BOUND, || {
            Ok((ps.metrics().probes_sent >= 2).then_some(()))
        })
        .unwrap();
        assert_eq!(ps.metrics().probe_restarts, 0, "{kind:?}");
        let accepted = proxy.stats().accepted;
        proxy.blackhole(true);
        let started = Instant::now();
        testkit::wait_for("probe restart", BOUND, || {
            Ok((ps.metrics().probe_restarts >= 1).then_some(()))
        })
        .unwrap();
        // Idle for one interval, then the probe's interval: about 2 × 200 ms
        // plus the tick (50 ms); generous for a loaded machine.
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        proxy.blackhole(false);
        proxy.cut_all(); // the old, black-holed pairs
        rec.wait("gap after the restart", BOUND, |s| {
            s.gap_channels.contains(&b"live"[..])
        });
        ps.wait_active(&["live"], BOUND).unwrap();
        assert!(
            proxy.stats().accepted > accepted,
            "reconnected through the proxy"
        );
        // The publish connection went through the black hole too.
        testkit::wait_for("publish accepted", BOUND, || {
            Ok(ps.publish(b"live", &payload(1, 8)).is_ok().then_some(()))
        })
        .unwrap();
        rec.wait("delivery after restart", BOUND, |s| s.total >= 1);
    }
}

#[test]
fn envelope_measures_lag_and_is_stripped() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let rec = Recorder::new();
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .workers(2)
            .envelope(true)
            .active_events(true)
            .io_threads(1)
            .handler_arc(rec.clone())
            .build()
            .unwrap();
        let chans = channels("lag", 20);
        ps.subscribe(&chans).unwrap();
        rec.wait("active events", BOUND, |s| s.active.len() == 20);
        for seq in 0..50 {
            for c in &chans {
                ps.publish(c, &payload(seq, 40)).unwrap();
            }
        }
        rec.wait("all", BOUND, |s| s.total >= 1000);
        // Payloads arrive without the header: the sequence numbers check out.
        assert_eq!(rec.seen.lock().out_of_order, 0);
        let m = testkit::wait_for("lag recorded", BOUND, || {
            let m = ps.metrics();
            Ok((m.lag.is_some_and(|l| l.count >= 1000)).then_some(m))
        })
        .unwrap();
        let lag = m.lag.unwrap();
        assert!(lag.p50 <= lag.p99 && lag.p99 <= lag.p999 && lag.p999 <= lag.max);
        assert!(lag.max < Duration::from_secs(10), "{lag:?}");
        assert_eq!(m.unenveloped, 0);
        // A raw publish without the envelope is delivered as is and counted.
        ps.publisher().publish(&chans[0], &payload(99, 8)).unwrap();
        rec.wait("raw", BOUND, |s| s.total >= 1001);
        assert_eq!(ps.metrics().unenveloped, 1);
    }
}

#[test]
fn unsubscribe_taken_back_in_time_keeps_the_subscription_and_says_so() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let rec = Recorder::new();
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .workers(2)
            .active_events(true)
            .subscribe_delay(Duration::from_millis(300))
            .io_threads(1)
            .handler_arc(rec.clone())
            .build()
            .unwrap();
        let chans = channels("back", 5);
        ps.subscribe(&chans).unwrap();
        rec.wait("first active events", BOUND, |s| s.active_events == 5);
        let m0 = ps.metrics();
        // Unsubscribe and take it back within one subscribe delay: no
        // command leaves, the subscription never lapses, and the handler
        // hears again that the channels are active.
        ps.unsubscribe(&chans).unwrap();
        ps.subscribe(&chans).unwrap();
        rec.wait("second active events", BOUND, |s| s.active_events == 10);
        let m = ps.metrics();
        assert_eq!(m.unsubscribe_commands, m0.unsubscribe_commands, "{kind:?}");
        assert_eq!(m.subscribe_commands, m0.subscribe_commands, "{kind:?}");
        assert!(pubsub_support::numsub(&server, &chans)
            .iter()
            .all(|&n| n == 1));
        ps.wait_active(&chans, BOUND).unwrap();
    }
}

#[test]
fn a_refused_subscribe_is_counted_not_silent() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        // User `app` may only use channels ok:* (and the probes').
        server
            .cmd(&[
                b"ACL",
                b"SETUSER",
                b"app",
                b"on",
                b">secret",
                b"+@all",
                b"resetchannels",
                b"&ok:*",
                b"&__shardsub:*",
            ])
            .unwrap();
        let rec = Recorder::new();
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .username("app")
            .password("secret")
            .client_name("pubsub-acl-test")
            .subscribe_connections(1)
            .workers(1)
            .io_threads(1)
            .handler_arc(rec.clone())
            .build()
            .unwrap();
        ps.subscribe(["no:1"]).unwrap();
        let m = testkit::wait_for("the refusal counted", BOUND, || {
            let m = ps.metrics();
            Ok((m.subscribe_errors >= 1).then_some(m))
        })
        .unwrap();
        assert_eq!(m.subscribe_errors, 1, "{kind:?} {m:?}");
        assert!(!ps.is_active(b"no:1"));
        // The connection is fine: allowed channels still work.
        ps.subscribe(["ok:1"]).unwrap();
        ps.wait_active(&["ok:1"], BOUND).unwrap();
        ps.publish(b"ok:1", &payload(1, 8)).unwrap();
        rec.wait("allowed channel delivers", BOUND, |s| s.total >= 1);
        assert_eq!(ps.metrics().reconnects, 0);
        // Both engines' connections carry the name and the user.
        let list = match server.cmd(&[b"CLIENT", b"LIST"]).unwrap() {
            testkit::Value::Bulk(b) | testkit::Value::Verbatim { text: b, .. } => {
                String::from_utf8_lossy(&b).to_string()
            }
            other => panic!("{other:?}"),
        };
        let ours: Vec<&str> = list
            .lines()
            .filter(|l| l.contains("name=pubsub-acl-test"))
            .collect();
        assert_eq!(ours.len(), 2, "1 subscribe + 1 publish connection: {list}");
        assert!(ours.iter().all(|l| l.contains("user=app")), "{list}");
    }
}
