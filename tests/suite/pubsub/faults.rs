//! Pub/Sub under trouble, against real servers: a slow handler (drops are
//! counted, nothing hangs), `CLIENT KILL TYPE pubsub` (gap events name
//! exactly the resubscribed channels, delivery resumes), a black-holed
//! connection (the liveness probe restarts it), and the lag envelope.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use shardsub::pubsub::Event;
use shardsub::{Error, Protocol, PubSub};
use testkit::accounting::Ledger;
use testkit::{kinds, FaultProxy, Server};

use crate::support;
use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;

const BOUND: Duration = Duration::from_secs(20);

/// A handler held at a gate until the test opens it; it records into an
/// [`Accounted`] once through.
struct Gated {
    open: Mutex<bool>,
    cond: Condvar,
    handled: AtomicU64,
    inner: Arc<Accounted>,
}

impl shardsub::Handler for Gated {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        let mut open = self.open.lock();
        let deadline = Instant::now() + BOUND;
        while !*open && !self.cond.wait_until(&mut open, deadline).timed_out() {}
        drop(open);
        self.handled.fetch_add(1, Ordering::Relaxed);
        self.inner.on_message(channel, payload);
    }

    fn on_event(&self, event: Event<'_>) {
        self.inner.on_event(event);
    }
}

#[test]
fn slow_handler_drops_and_counts_without_hanging() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let ledger = Arc::new(Ledger::new(["slow", "slow2"]));
        let gated = Arc::new(Gated {
            open: Mutex::new(false),
            cond: Condvar::new(),
            handled: AtomicU64::new(0),
            inner: Accounted::new(&ledger, "slow handler"),
        });
        let ps = Arc::new(
            PubSub::builder()
                .address(server.addr().to_string())
                .workers(1)
                .queue_capacity(16)
                .io_threads(1)
                .handler_arc(gated.clone())
                .build()
                .unwrap(),
        );
        ps.subscribe(["slow", "slow2"]).unwrap();
        ps.wait_active(&["slow", "slow2"], BOUND).unwrap();
        let rounds = 1000u64;
        let sent = 2 * rounds;
        let publish = accounted::via_pubsub(ps.clone());
        for _ in 0..rounds {
            accounted::round(&ledger, &*publish);
        }
        // The reader never blocks: every message is either queued or dropped,
        // at most one batch taken by the worker plus one full queue waiting.
        // (A read's last messages are counted received before their flush
        // into the queue counts their drops: wait for both.)
        let m = testkit::wait_for("all received and the rest dropped", BOUND, || {
            let m = ps.metrics();
            let settled = m.received == sent && m.dropped.queue_full >= sent - 2 * 16;
            Ok(settled.then_some(m))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e} ({:?})", ps.metrics()));
        assert!(m.queue_depths[0] <= 16, "{m:?}");
        // The connection is still fine: a command round trip works.
        assert!(ps
            .publisher()
            .expect("servers have a publish engine")
            .command(["PING"])
            .is_ok());
        *gated.open.lock() = true;
        gated.cond.notify_all();
        let m = testkit::wait_for("queued ones delivered", BOUND, || {
            let m = ps.metrics();
            Ok((m.delivered + m.dropped.total() == sent).then_some(m))
        })
        .unwrap();
        assert_eq!(gated.handled.load(Ordering::Relaxed), m.delivered);
        assert!(m.delivered >= 1 && m.delivered <= 2 * 16, "{m:?}");
        // Every drop was named, per channel, after the messages before it.
        testkit::wait_for("a drop event", BOUND, || {
            Ok((gated.inner.drop_events.load(Ordering::Relaxed) >= 1).then_some(()))
        })
        .unwrap();
        let report = ledger.report();
        report.assert_clean();
        assert_eq!(report.counts.delivered, m.delivered, "{kind:?}: {report}");
        assert_eq!(
            report.counts.lost_signalled, m.dropped.queue_full,
            "{kind:?}: {report}"
        );
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
        let chans = channels("gap", 300);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let ps = Arc::new(
            PubSub::builder()
                .address(server.addr().to_string())
                .protocol(protocol)
                .workers(4)
                .subscribe_connections(2)
                .batch_size(64)
                .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
                .io_threads(1)
                .handler_arc(handler.clone())
                .build()
                .unwrap(),
        );
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        // Given up before the kill: must not be resubscribed nor named.
        let gone = channels("gap", 310)[300..].to_vec();
        ps.subscribe(&gone).unwrap();
        ps.wait_active(&gone, BOUND).unwrap();
        ps.unsubscribe(&gone).unwrap();
        testkit::wait_for("unsubscribed", BOUND, || {
            Ok(support::pubsub::numsub(&server, &gone)
                .iter()
                .all(|&n| n == 0)
                .then_some(()))
        })
        .unwrap();
        // Publishing all along: what the kill loses must be signalled.
        let what = format!("{kind:?} {protocol:?}");
        let (report, rounds) = accounted::kill_pubsub_clients_under_load(
            &ps, &ledger, &handler, &server, 2, &chans, BOUND, &what,
        );
        let want: HashSet<Vec<u8>> = chans.iter().cloned().collect();
        assert!(rounds >= 3, "{what}: {rounds} rounds");
        assert_eq!(
            *handler.gap_channels.lock(),
            want,
            "{what}: exactly the resubscribed channels"
        );
        let gaps = handler.gap_events.load(Ordering::Relaxed);
        assert!(
            (2..=8).contains(&gaps),
            "one per worker per connection: {gaps}"
        );
        assert_eq!(report.counts.signals, 300, "{what}: one gap per channel");
        let m = ps.metrics();
        assert_eq!(m.reconnects, 2, "{m:?}");
        assert_eq!(m.gap_channels, 300, "{m:?}");
        assert_eq!(m.active_connections, vec![2], "{m:?}");
        assert_eq!(
            support::pubsub::numsub(&server, &gone),
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
        let ledger = Arc::new(Ledger::new(["live"]));
        let handler = Accounted::new(&ledger, "sub");
        let probe = Duration::from_millis(200);
        let ps = PubSub::builder()
            .address(proxy.addr().to_string())
            .subscribe_connections(1)
            .workers(1)
            .probe_interval(probe)
            .connect_timeout(Duration::from_millis(500))
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
            .io_threads(1)
            .handler_arc(handler.clone())
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
        assert_eq!(ps.metrics().reconnects, 0, "{kind:?}");
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
        testkit::wait_for("gap after the restart", BOUND, || {
            Ok(handler
                .gap_channels
                .lock()
                .contains(&b"live"[..])
                .then_some(()))
        })
        .unwrap();
        ps.wait_active(&["live"], BOUND).unwrap();
        assert!(
            proxy.stats().accepted > accepted,
            "reconnected through the proxy"
        );
        // The restart is counted as one (reopened at least once), and the
        // application heard of the loss before the gap, then of the
        // connection back, then the gap.
        assert!(ps.metrics().reconnects >= 1, "{kind:?}: {:?}", ps.metrics());
        let at = proxy.addr().to_string();
        let t = handler.timeline.lock().clone();
        let down = t
            .iter()
            .position(|e| e.starts_with(&format!("down {at}: stopped answering")));
        let up = t.iter().position(|e| *e == format!("up {at}"));
        let gap = t.iter().position(|e| *e == format!("gap {at}"));
        assert!(down.is_some() && down < up && up < gap, "{kind:?}: {t:?}");
        let health = ps.health();
        assert!(
            health.len() == 1 && health[0].connected && health[0].failures >= 1,
            "{kind:?}: {health:?}"
        );
        // The publish connection went through the black hole too.
        let mut payload = Vec::new();
        testkit::wait_for("publish accepted", BOUND, || {
            let stamp = ledger.stamp(0, &mut payload, 16);
            let r = ps.publish(b"live", &payload);
            accounted::record(&ledger, stamp, &r, false);
            Ok(r.is_ok().then_some(()))
        })
        .unwrap();
        let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
        assert_eq!(report.counts.delivered, 1, "{report}");
    }
}

#[test]
fn envelope_measures_lag_and_is_stripped() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let chans = channels("lag", 20);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let ps = Arc::new(
            PubSub::builder()
                .address(server.addr().to_string())
                .workers(2)
                .envelope(true)
                .active_events(true)
                .io_threads(1)
                .handler_arc(handler.clone())
                .build()
                .unwrap(),
        );
        ps.subscribe(&chans).unwrap();
        testkit::wait_for("active events", BOUND, || {
            Ok((handler.active.lock().len() == 20).then_some(()))
        })
        .unwrap();
        let publish = accounted::via_pubsub(ps.clone());
        for _ in 0..50 {
            accounted::round(&ledger, &*publish);
        }
        // Payloads arrive without the header: the stamps check out.
        let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
        assert_eq!(report.counts.delivered, 1000);
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
        let mut payload = Vec::new();
        let stamp = ledger.stamp(0, &mut payload, 24);
        let r = ps
            .publisher()
            .expect("servers have a publish engine")
            .publish(&chans[0], &payload);
        accounted::record(&ledger, stamp, &r, false);
        let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?} raw"));
        assert_eq!(report.counts.delivered, 1001);
        assert_eq!(ps.metrics().unenveloped, 1);
    }
}

#[test]
fn unsubscribe_taken_back_in_time_keeps_the_subscription_and_says_so() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        // A reconnect in the middle (a loaded machine can time out a
        // connect) resends everything and says so: the scenario then tests
        // nothing, so it is run again, at most three times.
        let mut verdict = None;
        for attempt in 1..=3 {
            verdict = taken_back(&server, attempt);
            if verdict.is_some() {
                break;
            }
        }
        assert_eq!(
            verdict,
            Some(()),
            "{kind:?}: a reconnect disturbed every attempt"
        );
    }
}

/// One try of the scenario; `None` when a reconnect got in the way.
fn taken_back(server: &Server, attempt: u32) -> Option<()> {
    let chans = channels(&format!("back{attempt}"), 5);
    let handler = Accounted::new(&Ledger::new(&chans), "sub");
    let events_at_least = |n: u64| {
        let h = handler.clone();
        move || Ok((h.active_events.load(Ordering::Relaxed) >= n).then_some(()))
    };
    let ps = PubSub::builder()
        .address(server.addr().to_string())
        .workers(2)
        .active_events(true)
        .subscribe_delay(Duration::from_millis(300))
        .io_threads(1)
        .handler_arc(handler.clone())
        .build()
        .unwrap();
    ps.subscribe(&chans).unwrap();
    testkit::wait_for("an active event for every channel", BOUND, || {
        Ok((handler.active.lock().len() == chans.len()).then_some(()))
    })
    .unwrap();
    let m0 = ps.metrics();
    let before = handler.active_events.load(Ordering::Relaxed);
    // Unsubscribe and take it back within one subscribe delay: no command
    // leaves, the subscription never lapses, and the handler hears again
    // that the channels are active.
    ps.unsubscribe(&chans).unwrap();
    ps.subscribe(&chans).unwrap();
    testkit::wait_for("second active events", BOUND, events_at_least(before + 5)).unwrap();
    let m = ps.metrics();
    if m.reconnects != 0 {
        eprintln!(
            "attempt {attempt}: {} reconnects; trying again",
            m.reconnects
        );
        return None;
    }
    assert_eq!(handler.active_events.load(Ordering::Relaxed), before + 5);
    assert_eq!(m.unsubscribe_commands, m0.unsubscribe_commands, "{m:?}");
    assert_eq!(m.subscribe_commands, m0.subscribe_commands, "{m:?}");
    assert!(support::pubsub::numsub(server, &chans)
        .iter()
        .all(|&n| n == 1));
    ps.wait_active(&chans, BOUND).unwrap();
    Some(())
}

#[test]
fn a_refused_channel_is_isolated_reported_and_the_rest_of_its_batch_delivers() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        // User `app` may only use channels ok:*.
        support::pubsub::acl_app(&server, &[b"&ok:*"]);
        let ok = channels("ok", 40);
        let no: Vec<Vec<u8>> = vec![b"no:1".to_vec(), b"no:2".to_vec()];
        let ledger = Arc::new(Ledger::new(&ok));
        let handler = Accounted::new(&ledger, "sub");
        let ps = Arc::new(
            PubSub::builder()
                .address(server.addr().to_string())
                .username("app")
                .password("secret")
                .client_name("pubsub-acl-test")
                .subscribe_connections(1)
                .workers(2)
                .io_threads(1)
                .handler_arc(handler.clone())
                .build()
                .unwrap(),
        );
        // One call, one coalesced SUBSCRIBE: two refused channels among 40
        // allowed ones.
        let mut all = ok.clone();
        all.insert(7, no[0].clone());
        all.insert(30, no[1].clone());
        ps.subscribe(&all).unwrap();
        ps.wait_active(&ok, BOUND)
            .unwrap_or_else(|e| panic!("{kind:?}: the allowed channels: {e}; {:?}", ps.metrics()));
        for c in &no {
            accounted::assert_refused(ps.wait_active(&[c], BOUND), c, &format!("{kind:?}"));
            assert!(!ps.is_active(c));
        }
        // The handler hears of each refusal, once.
        testkit::wait_for("refused events", BOUND, || {
            Ok((handler.refused.lock().len() >= 2).then_some(()))
        })
        .unwrap();
        let mut refused: Vec<Vec<u8>> = handler
            .refused
            .lock()
            .iter()
            .map(|(c, _)| c.clone())
            .collect();
        refused.sort();
        assert_eq!(refused, no, "{kind:?}");
        let m = ps.metrics();
        assert_eq!(m.refused_channels, 2, "{kind:?} {m:?}");
        assert!(m.subscribe_errors >= 3, "the batch and its halves: {m:?}");
        // Isolated in a few commands, not one per channel.
        assert!(m.subscribe_commands <= 2 + 4 * 6, "{m:?}");
        assert_eq!(m.reconnects, 0);
        // The allowed channels deliver, every message accounted for.
        let publish = accounted::via_pubsub(ps.clone());
        for _ in 0..3 {
            accounted::round(&ledger, &*publish);
        }
        let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
        assert_eq!(report.counts.delivered, 120);
        // Subscribing again retries; once the ACL allows it, it works.
        support::pubsub::acl_app(&server, &[b"&ok:*", b"&no:1"]);
        ps.subscribe([&no[0]]).unwrap();
        ps.wait_active(&[&no[0]], BOUND)
            .unwrap_or_else(|e| panic!("{kind:?}: after the ACL change: {e}"));
        assert!(matches!(
            ps.wait_active(&[&no[1]], Duration::from_millis(50)),
            Err(Error::SubscribeRefused { .. })
        ));
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

/// Fire-and-forget publishes taken (`Ok`) by a server that then dies are
/// each counted in `Metrics::publish_errors`, once: the server is frozen
/// (the publishes are written, no reply comes), then killed. Before, the
/// engine dropped their failures and `publish_errors` counted only
/// publishes refused at once. Acknowledged ones (`publish_pending`) fail
/// through their handles and are counted the same way, once.
#[test]
fn taken_fire_and_forget_publishes_lost_with_their_server_are_counted() {
    const N: u64 = 200;
    for kind in kinds() {
        let mut server = Server::start(kind).unwrap();
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .build()
            .unwrap();
        // Connected, and a publish answered.
        ps.publish_wait("pe:warm", b"x", BOUND).unwrap();
        server.freeze();
        for i in 0..N {
            ps.publish(format!("pe:{i}"), b"lost")
                .unwrap_or_else(|e| panic!("{kind:?}: publish {i} refused: {e}"));
        }
        let acked: Vec<_> = (0..N)
            .map(|i| ps.publish_pending(format!("pa:{i}"), b"lost"))
            .collect();
        assert_eq!(ps.metrics().publish_errors, 0, "{kind:?}: before the kill");
        server.kill();
        for (i, p) in acked.into_iter().enumerate() {
            let r = p.wait_timeout(BOUND);
            assert!(r.is_err(), "{kind:?}: acknowledged publish {i}: {r:?}");
        }
        // On the one publish connection the fire-and-forget publishes came
        // first, so they failed (and were counted) before the last
        // acknowledged one did: every one is counted now, no wait.
        let m = ps.metrics();
        assert_eq!(
            m.publish_errors,
            2 * N,
            "{kind:?}: taken publishes counted once the last failed: {m:?}"
        );
        // Once each: nothing more comes of them.
        ps.shutdown();
        assert_eq!(ps.metrics().publish_errors, 2 * N, "{kind:?}");
    }
}
