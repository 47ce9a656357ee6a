//! Pattern subscriptions (`psubscribe`) on Redis 7 and Valkey 9: on one
//! server and on client-side shards every message matching a pattern is
//! delivered once and in order through the accounting checker, with its
//! pattern; a pattern is subscribed on every shard; a killed connection
//! gives a gap event naming the pattern, in order with its messages, and
//! no loss is silent; keyspace notifications arrive through a pattern; on
//! a cluster, patterns are refused in sharded mode and work in classic
//! mode.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use shardsub::cluster::Mode;
use shardsub::pubsub::Event;
use shardsub::{ChannelList, Error, Handler, PubSub, PubSubBuilder};
use testkit::accounting::{Ledger, Signal};
use testkit::{Cluster, Server, Servers, Value};

use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;

const BOUND: Duration = Duration::from_secs(20);

/// The patterns of these tests: a prefix and `*`.
const PATTERNS: [&str; 2] = ["pa:*", "pb:*"];

/// Whether `channel` matches `pattern` (`prefix*` only, as the tests use).
fn matches(pattern: &[u8], channel: &[u8]) -> bool {
    pattern
        .strip_suffix(b"*")
        .is_some_and(|prefix| channel.starts_with(prefix))
}

/// The accounting handler for pattern subscriptions: a message counts for
/// its channel (after checking the pattern it came with); a pattern's gap
/// or drop is a signal for every channel of the ledger it matches, in
/// order with the pattern's messages (they share its worker).
struct PatternAccounted {
    inner: Arc<Accounted>,
    names: Vec<Vec<u8>>,
    /// Messages whose pattern did not match their channel.
    mismatched: AtomicU64,
    /// Messages that came through `on_message` (not as a pattern's).
    plain: AtomicU64,
    /// Pattern gap events, and the patterns they named.
    gaps: AtomicU64,
    gap_patterns: Mutex<Vec<Vec<u8>>>,
    active: Mutex<Vec<Vec<u8>>>,
    /// Events that must not come (a pattern named by a channel's gap),
    /// in words: a wait fails on the first instead of at its bound.
    wrong: Mutex<Vec<String>>,
}

impl PatternAccounted {
    fn new(ledger: &Ledger, name: &str) -> Arc<PatternAccounted> {
        Arc::new(PatternAccounted {
            inner: Accounted::new(ledger, name),
            names: ledger.names().to_vec(),
            mismatched: AtomicU64::new(0),
            plain: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            gap_patterns: Mutex::default(),
            active: Mutex::default(),
            wrong: Mutex::default(),
        })
    }

    /// Panics with the first wrong event seen, if any.
    fn no_wrong_event(&self, what: &str) {
        if let Some(first) = self.wrong.lock().first() {
            panic!("{what}: {first}");
        }
    }

    fn signal(&self, patterns: &ChannelList, signal: Signal) {
        for c in &self.names {
            if patterns.iter().any(|p| matches(p, c)) {
                self.inner.tap.signal(c, signal);
            }
        }
    }
}

impl Handler for PatternAccounted {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        self.plain.fetch_add(1, Ordering::Relaxed);
        self.inner.on_message(channel, payload);
    }

    fn on_pattern_message(&self, pattern: &[u8], channel: &[u8], payload: &[u8]) {
        if !matches(pattern, channel) {
            self.mismatched.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.tap.message(channel, payload);
    }

    fn on_event(&self, event: Event<'_>) {
        match event {
            Event::PatternGap { patterns, .. } => {
                self.gaps.fetch_add(1, Ordering::Relaxed);
                self.gap_patterns
                    .lock()
                    .extend(patterns.iter().map(<[u8]>::to_vec));
                self.signal(patterns, Signal::Gap);
            }
            Event::PatternDropped { patterns, .. } => self.signal(patterns, Signal::Drop),
            Event::PatternActive { pattern } => self.active.lock().push(pattern.to_vec()),
            Event::Gap { channels, .. } => {
                let named = channels
                    .iter()
                    .find(|c| PATTERNS.iter().any(|p| p.as_bytes() == *c));
                if let Some(p) = named {
                    let p = String::from_utf8_lossy(p);
                    self.wrong
                        .lock()
                        .push(format!("a channel gap named the pattern {p}"));
                }
                self.inner.on_event(event)
            }
            e => self.inner.on_event(e),
        }
    }
}

/// Channels of both patterns, `n` each.
fn pattern_channels(n: usize) -> Vec<Vec<u8>> {
    let mut chans = channels("pa", n);
    chans.extend(channels("pb", n));
    chans
}

fn built(placement: PubSubBuilder, handler: &Arc<PatternAccounted>, what: &str) -> Arc<PubSub> {
    let ps = placement
        .handler_arc(handler.clone())
        .workers(2)
        .active_events(true)
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
        .build()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    Arc::new(ps)
}

/// Subscribes the patterns, publishes three rounds and checks every
/// message arrived once, in order, through its pattern.
fn patterns_deliver(placement: PubSubBuilder, servers: &[&Server], what: &str) {
    let chans = pattern_channels(300);
    let ledger = Arc::new(Ledger::new(&chans));
    let handler = PatternAccounted::new(&ledger, what);
    let ps = built(placement, &handler, what);
    ps.psubscribe(PATTERNS).unwrap();
    ps.wait_patterns_active(&PATTERNS, BOUND)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(ps.is_pattern_active(b"pa:*"), "{what}");
    assert!(!ps.is_active(b"pa:*"), "{what}: a pattern is not a channel");
    // Every server holds both patterns, once (one connection each).
    for (i, s) in servers.iter().enumerate() {
        let n = s.cmd(&[b"PUBSUB", b"NUMPAT"]).unwrap();
        assert_eq!(n, Value::Integer(2), "{what}: server {i} NUMPAT");
    }
    let publish = accounted::via_pubsub(ps.clone());
    for _ in 0..3 {
        accounted::round(&ledger, &*publish);
    }
    let report = accounted::settle_and_check(&ledger, BOUND, what);
    assert_eq!(report.counts.delivered, 3 * chans.len() as u64, "{what}");
    assert_eq!(report.counts.signals, 0, "{what}: {report}");
    assert_eq!(handler.mismatched.load(Ordering::Relaxed), 0, "{what}");
    assert_eq!(handler.plain.load(Ordering::Relaxed), 0, "{what}");
    // One active event per pattern per server.
    let mut active = handler.active.lock().clone();
    active.sort();
    let want: Vec<Vec<u8>> = PATTERNS
        .iter()
        .flat_map(|p| std::iter::repeat_n(p.as_bytes().to_vec(), servers.len()))
        .collect();
    assert_eq!(active, want, "{what}: active events");
    assert_eq!(
        ps.metrics().channels,
        0,
        "{what}: patterns are not channels"
    );
    // Given up: the servers drop them, and a publish reaches no one.
    ps.punsubscribe(PATTERNS).unwrap();
    testkit::wait_for("patterns given up", BOUND, || {
        let left: i64 = servers
            .iter()
            .map(|s| match s.cmd(&[b"PUBSUB", b"NUMPAT"]) {
                Ok(Value::Integer(n)) => n,
                _ => -1,
            })
            .sum();
        Ok((left == 0).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(!ps.is_pattern_active(b"pa:*"), "{what}");
    assert_eq!(
        ps.publish_wait(&chans[0], b"x", BOUND).ok(),
        Some(0),
        "{what}"
    );
}

#[test]
fn patterns_deliver_everything_on_one_server_and_on_every_shard() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).unwrap();
        let one = PubSub::builder().address(server.addr().to_string());
        patterns_deliver(one, &[&server], &format!("{kind:?} one server"));
        let shards = Servers::start(kind, 3).unwrap();
        let three = PubSub::builder().addresses(shards.addrs().iter().map(|a| a.to_string()));
        let servers: Vec<&Server> = shards.iter().collect();
        patterns_deliver(three, &servers, &format!("{kind:?} three shards"));
    }
}

/// A killed subscribe connection under load: a gap event names each
/// pattern (in order with its messages), every loss is signalled for the
/// channels it matches, and delivery goes on.
#[test]
fn a_killed_connection_gives_a_gap_naming_each_pattern_and_no_silent_loss() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).unwrap();
        let what = format!("{kind:?} patterns, connection killed");
        let chans = pattern_channels(100);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = PatternAccounted::new(&ledger, &what);
        let placement = PubSub::builder().address(server.addr().to_string());
        let ps = built(placement, &handler, &what);
        // A channel subscribed by name too: its messages arrive twice (once
        // per subscription), so it is outside the ledger.
        ps.subscribe("other").unwrap();
        ps.psubscribe(PATTERNS).unwrap();
        ps.wait_patterns_active(&PATTERNS, BOUND).unwrap();
        ps.wait_active(&["other"], BOUND).unwrap();
        let publisher = accounted::publishing(
            &ledger,
            accounted::via_pubsub(ps.clone()),
            &handler.inner,
            Duration::from_millis(2),
            BOUND,
        );
        let n = server
            .cmd(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"])
            .unwrap();
        assert_eq!(n, Value::Integer(1), "{what}: one subscribe connection");
        testkit::wait_for("a gap for each pattern", BOUND, || {
            handler.no_wrong_event(&what);
            Ok((handler.gap_patterns.lock().len() >= PATTERNS.len()).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        ps.wait_patterns_active(&PATTERNS, BOUND).unwrap();
        accounted::delivered_more(&ledger, &handler.inner, 2, BOUND, &what);
        let rounds = publisher.stop();
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert!(rounds >= 3, "{what}: {rounds} rounds");
        let mut named = handler.gap_patterns.lock().clone();
        named.sort();
        assert_eq!(named, [b"pa:*".to_vec(), b"pb:*".to_vec()], "{what}");
        // Each channel got exactly its pattern's gap.
        assert_eq!(
            report.counts.signals,
            chans.len() as u64,
            "{what}: {report}"
        );
        // The channel subscribed by name has its own gap.
        assert!(
            handler
                .inner
                .gap_channels
                .lock()
                .contains(&b"other".to_vec()),
            "{what}"
        );
        assert_eq!(handler.mismatched.load(Ordering::Relaxed), 0, "{what}");
        handler.no_wrong_event(&what);
    }
}

/// Pattern, channel and payload, as delivered.
type Notification = (Vec<u8>, Vec<u8>, Vec<u8>);

/// A real use: keyspace notifications (`notify-keyspace-events`) through
/// a pattern, every key's events in the order the commands ran.
#[test]
fn keyspace_notifications_arrive_through_a_pattern_in_order() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).unwrap();
        let what = format!("{kind:?} keyspace notifications");
        server
            .cmd(&[b"CONFIG", b"SET", b"notify-keyspace-events", b"K$g"])
            .unwrap();
        let seen: Arc<Mutex<Vec<Notification>>> = Arc::default();
        let log = seen.clone();
        struct Keyspace(Arc<Mutex<Vec<Notification>>>);
        impl Handler for Keyspace {
            fn on_message(&self, _: &[u8], _: &[u8]) {}
            fn on_pattern_message(&self, pattern: &[u8], channel: &[u8], payload: &[u8]) {
                self.0
                    .lock()
                    .push((pattern.to_vec(), channel.to_vec(), payload.to_vec()));
            }
        }
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .handler(Keyspace(log))
            .build()
            .unwrap();
        let pattern = b"__keyspace@0__:user:*";
        ps.psubscribe([&pattern[..]]).unwrap();
        ps.wait_patterns_active(&[&pattern[..]], BOUND).unwrap();
        // Per key: set, set, del; a key outside the pattern too.
        let keys = 50;
        for i in 0..keys {
            let key = format!("user:{i}").into_bytes();
            ps.command(&key, &[b"SET".to_vec(), key.clone(), b"1".to_vec()])
                .unwrap();
            ps.command(&key, &[b"SET".to_vec(), key.clone(), b"2".to_vec()])
                .unwrap();
            ps.command(&key, &[b"DEL".to_vec(), key.clone()]).unwrap();
            let other = format!("order:{i}").into_bytes();
            ps.command(&other, &[b"SET".to_vec(), other.clone(), b"1".to_vec()])
                .unwrap();
        }
        testkit::wait_for("every notification", BOUND, || {
            Ok((seen.lock().len() >= 3 * keys).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let seen = seen.lock().clone();
        assert_eq!(seen.len(), 3 * keys, "{what}: nothing outside the pattern");
        for i in 0..keys {
            let channel = format!("__keyspace@0__:user:{i}").into_bytes();
            let events: Vec<&[u8]> = seen
                .iter()
                .filter(|(p, c, _)| p == pattern && *c == channel)
                .map(|(_, _, e)| &e[..])
                .collect();
            assert_eq!(events, [&b"set"[..], b"set", b"del"], "{what}: key {i}");
        }
        assert_eq!(ps.metrics().delivered, 3 * keys as u64, "{what}");
    }
}

/// On a cluster, sharded mode (the default) refuses patterns with a clear
/// error; classic mode takes them and delivers through the checker.
#[test]
fn a_cluster_refuses_patterns_unless_classic() {
    for kind in testkit::kinds() {
        let cluster = Arc::new(Cluster::start(kind, 3, 0).unwrap());
        let seed = cluster.node(0).addr().to_string();
        let sharded = PubSub::builder()
            .seed(&seed)
            .handler(|_: &[u8], _: &[u8]| {})
            .build()
            .unwrap();
        let e = sharded.psubscribe("pa:*").unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("Mode::Classic")),
            "{kind:?}: {e}"
        );
        let what = format!("{kind:?} classic cluster patterns");
        let chans = pattern_channels(200);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = PatternAccounted::new(&ledger, &what);
        let placement = PubSub::builder().seed(&seed).mode(Mode::Classic);
        let ps = built(placement, &handler, &what);
        ps.psubscribe(PATTERNS).unwrap();
        ps.wait_patterns_active(&PATTERNS, BOUND)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(report.counts.delivered, chans.len() as u64, "{what}");
        assert_eq!(handler.mismatched.load(Ordering::Relaxed), 0, "{what}");
    }
}
