//! Automatic recovery of recoverable channels against real servers (Redis
//! 7 and Valkey 9): subscribe connections killed while publishing, and
//! offsets that jump, are filled from history, so the handler sees every
//! message once and in order; a range that is gone (trimmed, a new epoch)
//! gives `Event::Unrecoverable`, then what is left, in order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use shardsub::history::{script, HistoryOptions, Position};
use shardsub::{handler_fn, Event, PubSub, PubSubBuilder};
use testkit::{Cluster, Server, Servers};

const BOUND: Duration = Duration::from_secs(20);

/// What the handler saw, per channel, in order: payloads, and
/// `!unrecoverable <since> <now>` for that event.
#[derive(Default)]
struct Seen {
    log: Mutex<HashMap<Vec<u8>, Vec<String>>>,
    total: AtomicU64,
    gaps: AtomicU64,
}

fn build(b: PubSubBuilder, max_len: u64) -> (PubSub, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let (s1, s2) = (seen.clone(), seen.clone());
    let handler = handler_fn(move |c, p| {
        let text = String::from_utf8_lossy(p).into_owned();
        s1.log.lock().entry(c.to_vec()).or_default().push(text);
        s1.total.fetch_add(1, Ordering::Relaxed);
    })
    .on_event(move |e| match e {
        Event::Gap { .. } | Event::Dropped { .. } => {
            s2.gaps.fetch_add(1, Ordering::Relaxed);
        }
        Event::Unrecoverable {
            channel,
            since,
            now,
            ..
        } => {
            let off = |p: Option<Position>| p.map_or(0, |p| p.offset);
            let text = format!("!unrecoverable {} {}", off(since), off(now));
            s2.log
                .lock()
                .entry(channel.to_vec())
                .or_default()
                .push(text);
        }
        _ => {}
    });
    let caps = HistoryOptions {
        max_len,
        max_age: Duration::from_secs(120),
    };
    let ps = b
        .history("room:", caps)
        .handler(handler)
        .workers(2)
        .build()
        .expect("pubsub");
    (ps, seen)
}

fn log_of(seen: &Seen, channel: &str) -> Vec<String> {
    seen.log
        .lock()
        .get(channel.as_bytes())
        .cloned()
        .unwrap_or_default()
}

/// The metrics once `ready` holds (the workers add their counts after
/// each batch, just after the handler returns).
fn metrics_when(ps: &PubSub, ready: impl Fn(&shardsub::Metrics) -> bool) -> shardsub::Metrics {
    testkit::wait_for("the metrics", BOUND, || {
        let m = ps.metrics();
        Ok(ready(&m).then_some(m))
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", ps.metrics()))
}

fn numbers(a: u64, b: u64) -> Vec<String> {
    (a..=b).map(|i| i.to_string()).collect()
}

fn wait_log(seen: &Seen, channel: &str, len: usize, what: &str) {
    testkit::wait_for(what, BOUND, || {
        Ok((log_of(seen, channel).len() >= len).then_some(()))
    })
    .unwrap_or_else(|e| {
        let log = log_of(seen, channel);
        let tail = &log[log.len().saturating_sub(5)..];
        panic!("{what}: {e}: {} entries, ending {tail:?}", log.len())
    });
}

/// Publishes `n` messages (1..=n) to each channel from a thread while
/// `kill` cuts the subscribe connections `kills` times, each after some
/// progress; then every channel must have 1..=n exactly, in order.
fn kill_while_publishing(ps: PubSub, seen: Arc<Seen>, kill: impl Fn(), kills: u64, what: &str) {
    let ps = Arc::new(ps);
    let chans: Vec<String> = (0..6).map(|i| format!("room:k{i}")).collect();
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, BOUND).unwrap();
    let n: u64 = 1500;
    let done = Arc::new(AtomicBool::new(false));
    let publisher = {
        let (ps, chans, done) = (ps.clone(), chans.clone(), done.clone());
        std::thread::spawn(move || {
            for i in 1..=n {
                for c in &chans {
                    // Acknowledged every so often, so the kills fall
                    // inside the run rather than after it.
                    if i % 50 == 0 {
                        ps.publish_wait(c, i.to_string(), BOUND).expect("publish");
                    } else {
                        ps.publish(c, i.to_string()).expect("publish");
                    }
                }
            }
            done.store(true, Ordering::Release);
        })
    };
    let total = n * chans.len() as u64;
    for k in 1..=kills {
        let progress = total * k / (kills + 1);
        let r = testkit::wait_for("progress", BOUND, || {
            let now = seen.total.load(Ordering::Relaxed);
            Ok((now >= progress || done.load(Ordering::Acquire)).then_some(()))
        });
        r.unwrap_or_else(|e| panic!("{what}: {e}"));
        kill();
    }
    publisher.join().expect("publisher");
    for c in &chans {
        wait_log(&seen, c, n as usize, what);
    }
    // Whatever is still on its way would show as extra entries.
    ps.publish_wait(&chans[0], "end", BOUND).unwrap();
    wait_log(&seen, &chans[0], n as usize + 1, what);
    for c in &chans {
        let mut want = numbers(1, n);
        if c == &chans[0] {
            want.push("end".into());
        }
        let got = log_of(&seen, c);
        if got != want {
            let first = got.iter().zip(&want).position(|(g, w)| g != w);
            panic!(
                "{what}: {c}: {} entries, first difference at {first:?}: {:?}",
                got.len(),
                first.map(|i| &got[i.saturating_sub(2)..(i + 3).min(got.len())])
            );
        }
    }
    assert!(
        seen.gaps.load(Ordering::Relaxed) > 0,
        "{what}: the kills caused gaps"
    );
    let want = n * chans.len() as u64 + 1;
    let m = metrics_when(&ps, |m| m.delivered >= want);
    assert_eq!(m.unrecoverable, 0, "{what}: {m:?}");
    // Each message delivered once: the live copies of recovered ones were
    // passed over.
    assert_eq!(m.delivered, want, "{what}: {m:?}");
    ps.shutdown();
}

#[test]
fn one_server_recovers_every_message_after_subscriber_kills() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let (ps, seen) = build(
            PubSub::builder().address(server.addr().to_string()),
            100_000,
        );
        let kill = || {
            server
                .cmd_str(&["CLIENT", "KILL", "TYPE", "pubsub"])
                .unwrap();
        };
        kill_while_publishing(ps, seen, kill, 3, &format!("{kind:?} one server"));
    }
}

#[test]
fn shards_recover_every_message_after_subscriber_kills() {
    for kind in testkit::kinds() {
        let servers = Servers::start(kind, 3).expect("servers");
        let b = PubSub::builder().addresses(servers.addrs().iter().map(|a| a.to_string()));
        let (ps, seen) = build(b, 100_000);
        let kill = || {
            for s in servers.iter() {
                s.cmd_str(&["CLIENT", "KILL", "TYPE", "pubsub"]).unwrap();
            }
        };
        kill_while_publishing(ps, seen, kill, 3, &format!("{kind:?} shards"));
    }
}

#[test]
fn a_cluster_recovers_every_message_after_subscriber_kills() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let b = PubSub::builder().seeds(cluster.seed_addrs().iter().map(|a| a.to_string()));
        let (ps, seen) = build(b, 100_000);
        let kill = || {
            for &m in &cluster.masters() {
                cluster
                    .node(m)
                    .cmd_str(&["CLIENT", "KILL", "TYPE", "pubsub"])
                    .unwrap();
            }
        };
        kill_while_publishing(ps, seen, kill, 3, &format!("{kind:?} cluster"));
    }
}

/// Runs the publish script for `channel` on `server`, publishing to
/// `wire` (the channel itself, or one nobody hears); returns the
/// script's reply, the receiver count.
fn publish_script(
    server: &Server,
    channel: &str,
    wire: &str,
    payload: &str,
    max_len: &str,
) -> testkit::Value {
    let (meta, stream) = (
        format!("{channel}:history-meta"),
        format!("{channel}:history"),
    );
    let args = [
        "EVAL",
        script::PUBLISH,
        "2",
        &meta,
        &stream,
        wire,
        payload,
        max_len,
        "120",
        "PUBLISH",
    ];
    server.cmd_str(&args).expect("publish script")
}

/// Runs the publish script for `channel` on `server` but publishes to a
/// channel nobody hears: the history moves on, the subscriber misses it.
fn publish_unheard(server: &Server, channel: &str, payload: &str, max_len: &str) {
    publish_script(server, channel, "nobody-listens", payload, max_len);
}

/// Calls of `EVAL` and `EVALSHA` on `server` (history reads and
/// publishes).
fn script_calls(server: &Server) -> u64 {
    let calls = |c| server.command_calls(c).unwrap();
    calls("eval") + calls("evalsha")
}

/// A message published after a subscribe connection went and before its
/// resubscribe reaches the server is neither heard live nor in a history
/// read that ran before the resubscribe; when it is the channel's last,
/// no later offset shows the jump. The read must wait for the server's
/// confirmation. Here the subscriber reaches the server through a proxy
/// that holds every chunk of a new connection back 500 ms: the gap comes
/// once the new subscribe connection is up (its handshake took two hops),
/// a read sent then runs on the server at once (its connection stayed
/// up), the resubscribe one hop later, and the message goes out in
/// between, while nobody listens (the script's receiver count says so).
#[test]
fn a_last_message_published_before_the_resubscribe_is_recovered() {
    const HOP: Duration = Duration::from_millis(500);
    for kind in testkit::kinds() {
        let what = format!("{kind:?}");
        let server = Server::start(kind).expect("server");
        let proxy = testkit::FaultProxy::start(server.addr()).expect("proxy");
        let (ps, seen) = build(PubSub::builder().address(proxy.addr().to_string()), 1000);
        let ch = "room:last";
        ps.subscribe([ch]).unwrap();
        ps.wait_active(&[ch], BOUND).unwrap();
        ps.publish_wait(ch, "1", BOUND).unwrap();
        wait_log(&seen, ch, 1, &what);
        let calls = script_calls(&server);
        proxy.delay_new(HOP);
        server
            .cmd_str(&["CLIENT", "KILL", "TYPE", "pubsub"])
            .unwrap();
        testkit::wait_for("the gap event", BOUND, || {
            Ok((seen.gaps.load(Ordering::Relaxed) > 0).then_some(()))
        })
        .unwrap();
        // A read sent at the gap (the rule this test guards against) is on
        // the server within milliseconds: let it land first, so that rule
        // fails here every time. Under the right rule no read comes before
        // the resubscribe, and this wait runs out, well before it.
        let _ = testkit::wait_for("a read at the gap", HOP / 4, || {
            Ok((script_calls(&server) > calls).then_some(()))
        });
        let receivers = publish_script(&server, ch, ch, "2", "1000");
        assert_eq!(
            receivers,
            testkit::Value::Integer(0),
            "{what}: published while nobody listens"
        );
        wait_log(&seen, ch, 2, &what);
        ps.publish_wait(ch, "3", BOUND).unwrap();
        wait_log(&seen, ch, 3, &what);
        assert_eq!(log_of(&seen, ch), ["1", "2", "3"], "{what}");
        let m = metrics_when(&ps, |m| m.delivered >= 3);
        assert_eq!((m.recovered, m.unrecoverable), (1, 0), "{what}: {m:?}");
        ps.shutdown();
    }
}

#[test]
fn an_offset_jump_is_filled_from_history() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let (ps, seen) = build(PubSub::builder().address(server.addr().to_string()), 1000);
        ps.subscribe(["room:j"]).unwrap();
        ps.wait_active(&["room:j"], BOUND).unwrap();
        ps.publish_wait("room:j", "1", BOUND).unwrap();
        wait_log(&seen, "room:j", 1, "first");
        for i in 2..=4 {
            publish_unheard(&server, "room:j", &i.to_string(), "1000");
        }
        ps.publish_wait("room:j", "5", BOUND).unwrap();
        ps.publish_wait("room:j", "6", BOUND).unwrap();
        wait_log(&seen, "room:j", 6, &format!("{kind:?}"));
        ps.publish_wait("room:j", "7", BOUND).unwrap();
        wait_log(&seen, "room:j", 7, &format!("{kind:?}"));
        assert_eq!(log_of(&seen, "room:j"), numbers(1, 7), "{kind:?}");
        // 2..=4 came from history (and 5, 6 too when the read was later
        // than their publish: their live copies were then passed over).
        let m = metrics_when(&ps, |m| m.delivered >= 7);
        let missed = m.recovered - m.duplicates;
        assert_eq!((missed, m.unrecoverable), (3, 0), "{kind:?}: {m:?}");
        ps.shutdown();
    }
}

#[test]
fn a_trimmed_range_or_a_new_epoch_is_unrecoverable() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let (ps, seen) = build(PubSub::builder().address(server.addr().to_string()), 5);
        ps.subscribe(["room:u", "room:v"]).unwrap();
        ps.wait_active(&["room:u", "room:v"], BOUND).unwrap();
        // Trimmed: 2..=400 go unheard and most are trimmed away.
        ps.publish_wait("room:u", "1", BOUND).unwrap();
        wait_log(&seen, "room:u", 1, "first");
        for i in 2..=400 {
            publish_unheard(&server, "room:u", &i.to_string(), "5");
        }
        ps.publish_wait("room:u", "401", BOUND).unwrap();
        testkit::wait_for("401", BOUND, || {
            Ok((log_of(&seen, "room:u").last().map(String::as_str) == Some("401")).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}: {:?}", log_of(&seen, "room:u")));
        let left = match server.cmd_str(&["XLEN", "room:u:history"]).unwrap() {
            shardsub::Value::Integer(n) => n as u64,
            v => panic!("{v:?}"),
        };
        assert!(left < 399, "{kind:?}: trimmed to {left}");
        let mut want = vec!["1".to_string(), "!unrecoverable 1 401".to_string()];
        want.extend(numbers(401 - left + 1, 401));
        assert_eq!(log_of(&seen, "room:u"), want, "{kind:?}");

        // A new epoch: the history was lost between two messages.
        ps.publish_wait("room:v", "a", BOUND).unwrap();
        wait_log(&seen, "room:v", 1, "first v");
        server
            .cmd_str(&["DEL", "room:v:history-meta", "room:v:history"])
            .unwrap();
        ps.publish_wait("room:v", "b", BOUND).unwrap();
        wait_log(&seen, "room:v", 3, &format!("{kind:?} epoch"));
        ps.publish_wait("room:v", "c", BOUND).unwrap();
        wait_log(&seen, "room:v", 4, &format!("{kind:?} epoch"));
        assert_eq!(
            log_of(&seen, "room:v"),
            ["a", "!unrecoverable 1 1", "b", "c"],
            "{kind:?}"
        );
        let m = metrics_when(&ps, |m| m.unrecoverable >= 2);
        assert_eq!(m.unrecoverable, 2, "{kind:?}");
        ps.shutdown();
    }
}

#[test]
fn a_cluster_recovers_across_a_failover_and_a_migration() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 1).expect("cluster");
        let b = PubSub::builder().seeds(cluster.seed_addrs().iter().map(|a| a.to_string()));
        let (ps, seen) = build(b, 100_000);
        // The slot of the first channel's partition moves; a replica of
        // another master takes over.
        let parts = ps.partitions().unwrap().clone();
        let slot = parts.slot(parts.partition_of(b"room:k0"));
        let cluster = Mutex::new(cluster);
        let step = AtomicU64::new(0);
        let disrupt = || {
            let mut c = cluster.lock();
            let from = c.owner_of_slot(slot).expect("owner");
            let other = *c
                .masters()
                .iter()
                .find(|&&m| m != from)
                .expect("another master");
            match step.fetch_add(1, Ordering::Relaxed) {
                0 => c.migrate_slots(slot..=slot, from, other).expect("migrate"),
                _ => {
                    let replica = c.replicas_of(other)[0];
                    c.failover(replica).expect("failover");
                }
            }
        };
        let what = format!("{kind:?} cluster failover and migration");
        kill_while_publishing(ps, seen, disrupt, 2, &what);
    }
}

#[test]
fn a_full_queue_is_refilled_from_history() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let gate = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Seen::default());
        let (g, s1, s2) = (gate.clone(), seen.clone(), seen.clone());
        let handler = handler_fn(move |c, p| {
            // The first message waits at the gate while the queue fills.
            let start = std::time::Instant::now();
            while !g.load(Ordering::Acquire) && start.elapsed() < BOUND {
                std::thread::yield_now();
            }
            let text = String::from_utf8_lossy(p).into_owned();
            s1.log.lock().entry(c.to_vec()).or_default().push(text);
        })
        .on_event(move |e| {
            if let Event::Dropped { .. } = e {
                s2.gaps.fetch_add(1, Ordering::Relaxed);
            }
        });
        let caps = HistoryOptions {
            max_len: 10_000,
            max_age: Duration::from_secs(120),
        };
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .history("room:", caps)
            .handler(handler)
            .workers(1)
            .queue_capacity(8)
            .build()
            .expect("pubsub");
        ps.subscribe(["room:q"]).unwrap();
        ps.wait_active(&["room:q"], BOUND).unwrap();
        let n = 300;
        for i in 1..=n {
            ps.publish("room:q", i.to_string()).unwrap();
        }
        ps.publish_wait("room:q", (n + 1).to_string(), BOUND)
            .unwrap();
        testkit::wait_for("every message received, some dropped", BOUND, || {
            let m = ps.metrics();
            Ok((m.received > n && m.dropped.queue_full > 0).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        // The last ones were dropped too: only the drop event can bring
        // them back (no later live message shows a jump).
        assert!(!log_of(&seen, "room:q").contains(&(n + 1).to_string()));
        gate.store(true, Ordering::Release);
        wait_log(&seen, "room:q", n as usize + 1, &format!("{kind:?}"));
        assert_eq!(log_of(&seen, "room:q"), numbers(1, n + 1), "{kind:?}");
        assert!(
            seen.gaps.load(Ordering::Relaxed) > 0,
            "{kind:?}: a drop event"
        );
        ps.shutdown();
    }
}

/// A primary acknowledges writes its replica never gets, and dies: the
/// promoted replica's history ends before the last offsets the subscriber
/// had. Its next publishes begin a new epoch (another node wrote them), so
/// no offset of the lost writes is given again to another message, and
/// none of the new messages is passed over as a duplicate.
#[test]
fn a_failover_that_lost_acknowledged_writes_gives_no_offset_twice() {
    for kind in testkit::kinds() {
        let mut cluster = Cluster::start(kind, 3, 1).expect("cluster");
        let b = PubSub::builder().seeds(cluster.seed_addrs().iter().map(|a| a.to_string()));
        let (ps, seen) = build(b, 100_000);
        let ch = "room:f";
        ps.subscribe([ch]).unwrap();
        ps.wait_active(&[ch], BOUND).unwrap();
        let parts = ps.partitions().unwrap().clone();
        let primary = cluster
            .owner_of_slot(parts.slot(parts.partition_of(ch.as_bytes())))
            .expect("owner");
        let replica = cluster.replicas_of(primary)[0];
        let mut meta = parts.redis_channel(ch.as_bytes());
        meta.extend_from_slice(shardsub::history::META_SUFFIX);
        let publish = |from: u64, to: u64| {
            for i in from..=to {
                ps.publish_wait(ch, i.to_string(), BOUND).expect("publish");
            }
        };
        publish(1, 5);
        wait_log(&seen, ch, 5, "before");
        // The replica has the first five.
        let node = cluster.node(replica);
        node.cmd(&[b"READONLY"]).expect("READONLY");
        testkit::wait_for("the replica's offset", BOUND, || {
            let v = node.cmd(&[b"HGET", &meta, b"o"])?;
            Ok((testkit::values::text(&v).as_deref() == Some("5")).then_some(()))
        })
        .expect("replicated");
        cluster
            .kill_primary_losing_writes(primary, || {
                publish(6, 8);
                wait_log(&seen, ch, 8, "lost writes, delivered live");
            })
            .expect("failover");
        publish(9, 14);
        let what = format!("{kind:?} failover losing writes");
        wait_log(&seen, ch, 15, &what);
        let log = log_of(&seen, ch);
        let (signals, messages): (Vec<_>, Vec<_>) =
            log.iter().cloned().partition(|l| l.starts_with('!'));
        assert_eq!(messages, numbers(1, 14), "{what}: {log:?}");
        // The one event says the new primary lacks what came after 5 of
        // the old epoch; it comes after the last message of that epoch.
        assert_eq!(signals.len(), 1, "{what}: {log:?}");
        assert!(
            signals[0].starts_with("!unrecoverable 8 "),
            "{what}: {log:?}"
        );
        assert_eq!(log[8], signals[0], "{what}: {log:?}");
        ps.shutdown();
    }
}
