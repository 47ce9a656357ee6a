//! Instances on one runtime share its control thread, I/O threads and
//! workers: one instance shutting down (from a callback on one of those
//! threads) or blocking in a handler must not stall the others. Real
//! servers (Redis 7 and Valkey 9); delivery through the accounting checker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use shardsub::{PubSub, Runtime};
use testkit::accounting::Ledger;
use testkit::{kinds, Server, ServerKind};

use crate::support::accounted;
use crate::support::accounted::Accounted;

const BOUND: Duration = Duration::from_secs(20);

/// How long the other instance may wait for its control thread, its I/O
/// thread and its worker while the first shuts down. The first's shutdown
/// on the frozen server takes its shutdown timeout (2 s) per subscribe
/// connection when the control thread waits for each: 16 s for 8.
const OTHERS_BOUND: Duration = Duration::from_secs(5);

/// The other instance on the runtime: 8 accounted channels, published
/// to in the background (a round every 2 ms) and delivered.
struct Other {
    ledger: Arc<Ledger>,
    handler: Arc<Accounted>,
    b: Arc<PubSub>,
    publisher: accounted::Background,
}

impl Other {
    fn start(server: &Server, runtime: &Runtime) -> Other {
        let ledger = Arc::new(Ledger::new((0..8).map(|i| format!("b:{i}"))));
        let handler = Accounted::new(&ledger, "b");
        let b = Arc::new(
            PubSub::builder()
                .address(server.addr().to_string())
                .runtime(runtime)
                .client_name("other")
                .handler_arc(handler.clone())
                // Room for what queues while the first instance holds a
                // shared thread on a loaded machine (drops would be
                // signalled, but none is expected).
                .queue_capacity(1 << 16)
                .build()
                .unwrap(),
        );
        b.subscribe(ledger.names()).unwrap();
        b.wait_active(ledger.names(), BOUND).unwrap();
        let publisher = accounted::publishing(
            &ledger,
            accounted::via_pubsub(b.clone()),
            &handler,
            Duration::from_millis(2),
            BOUND,
        );
        Other {
            ledger,
            handler,
            b,
            publisher,
        }
    }
}

/// Stops the background publishing, publishes one more round and checks
/// the other instance's accounting clean.
fn settle(
    ledger: &Arc<Ledger>,
    b: &Arc<PubSub>,
    publisher: accounted::Background,
    kind: ServerKind,
) {
    publisher.stop();
    accounted::round(ledger, &*accounted::via_pubsub(b.clone()));
    accounted::settle_and_check(ledger, BOUND, &format!("{kind:?}: b"));
}

#[test]
fn shutdown_from_a_callback_does_not_stall_the_other_instances_on_the_runtime() {
    for kind in kinds() {
        let mut frozen = Server::start(kind).unwrap();
        let other = Server::start(kind).unwrap();
        // One thread of each kind: every instance shares all of them.
        let runtime = Runtime::with_workers(1, 1).unwrap();
        let a = Arc::new(
            PubSub::builder()
                .address(frozen.addr().to_string())
                .runtime(&runtime)
                .subscribe_connections(8)
                // Longer than the whole stall: nothing in flight ends
                // before the shutdown timeout does.
                .request_timeout(Duration::from_secs(30))
                .on_message(|_, _| {})
                .build()
                .unwrap(),
        );
        let a_chans: Vec<String> = (0..32).map(|i| format!("a:{i}")).collect();
        a.subscribe(&a_chans).unwrap();
        a.wait_active(&a_chans, BOUND).unwrap();
        let Other {
            ledger,
            handler,
            b,
            publisher,
        } = Other::start(&other, &runtime);
        // Every subscribe connection of `a` gets a request it never hears
        // back from: an unsubscribe's fence, a `PING` on each, sent in the
        // round that sends the `UNSUBSCRIBE`s.
        frozen.freeze();
        let before = a.metrics().unsubscribe_commands;
        a.unsubscribe(&a_chans).unwrap();
        testkit::wait_for("a's unsubscribes sent", BOUND, || {
            Ok((a.metrics().unsubscribe_commands > before).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        // `a` is shut down from a callback on the shared I/O thread: a
        // command of `b`'s that the server answers 100 ms later, so the
        // callback is in place before.
        let took: Arc<Mutex<Option<(Duration, String)>>> = Arc::default();
        let (weak, t) = (Arc::downgrade(&a), took.clone());
        let late = b.command_pending("k", ["BLPOP", "stall:none", "0.1"]);
        late.then(move |_| {
            let start = Instant::now();
            if let Some(a) = Weak::upgrade(&weak) {
                a.shutdown();
            }
            let thread = std::thread::current().name().unwrap_or("").to_string();
            *t.lock() = Some((start.elapsed(), thread));
        });
        testkit::wait_for("the callback's shutdown returned", OTHERS_BOUND, || {
            Ok(took.lock().is_some().then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let (_, thread) = took.lock().clone().unwrap();
        assert!(
            thread.starts_with("shardsub-io"),
            "{kind:?}: ran on {thread}"
        );
        assert!(a.publish("a:0", "x").is_err(), "{kind:?}: a is shut down");
        // Meanwhile `b` subscribes (the control thread) and receives (the
        // I/O thread and the worker) as usual.
        let t = Instant::now();
        b.subscribe("b:late").unwrap();
        b.wait_active(&["b:late"], OTHERS_BOUND)
            .unwrap_or_else(|e| panic!("{kind:?}: b's subscribe while a shuts down: {e}"));
        accounted::delivered_more(
            &ledger,
            &handler,
            3,
            OTHERS_BOUND,
            &format!("{kind:?}: b's delivery while a shuts down"),
        );
        assert!(
            t.elapsed() < OTHERS_BOUND,
            "{kind:?}: b waited {:?}",
            t.elapsed()
        );
        settle(&ledger, &b, publisher, kind);
        // From a thread of its own, `shutdown` waits for the end of the
        // one the callback started (the frozen server's replies awaited up
        // to the shutdown timeout, 2 s).
        a.shutdown();
        frozen.thaw();
        b.shutdown();
    }
}

/// A handler that blocks once, for 300 ms, on the message `block`.
struct BlocksOnce {
    blocked: AtomicU64,
}

impl shardsub::Handler for BlocksOnce {
    fn on_message(&self, _channel: &[u8], payload: &[u8]) {
        if payload == b"block" && self.blocked.fetch_add(1, Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// The library's warnings, kept for the test to read.
struct Captured(Mutex<Vec<String>>);

impl log::Log for Captured {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) && record.target().starts_with("shardsub") {
            self.0.lock().push(record.args().to_string());
        }
    }

    fn flush(&self) {}
}

static CAPTURED: Captured = Captured(Mutex::new(Vec::new()));

/// On one runtime (one worker thread, one I/O thread) an instance's
/// handler blocks for 300 ms on one message: the turn is logged once,
/// naming the instance and the handler, and counted in its metrics; the
/// other instance's messages, on the same worker thread, wait behind it
/// (that long at most: they queue meanwhile) and none is lost. Then a
/// `then` callback blocks the I/O thread for 300 ms: logged and counted
/// on the runtime, and again nothing is lost.
#[test]
fn a_blocking_handler_is_logged_and_counted_once_and_the_other_instance_loses_nothing() {
    // nextest runs each test in a process of its own.
    log::set_logger(&CAPTURED).expect("the only logger in this process");
    log::set_max_level(log::LevelFilter::Warn);
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let runtime = Runtime::with_workers(1, 1).unwrap();
        let a = PubSub::builder()
            .address(server.addr().to_string())
            .runtime(&runtime)
            .client_name(format!("blocker-{kind:?}"))
            .handler(BlocksOnce {
                blocked: AtomicU64::new(0),
            })
            .build()
            .unwrap();
        a.subscribe("a:block").unwrap();
        a.wait_active(&["a:block"], BOUND).unwrap();
        let Other {
            ledger,
            handler,
            b,
            publisher,
        } = Other::start(&server, &runtime);
        a.publish("a:block", "block").unwrap();
        testkit::wait_for("the blocked turn counted", BOUND, || {
            Ok((a.metrics().slow_turns >= 1).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        accounted::delivered_more(
            &ledger,
            &handler,
            3,
            BOUND,
            &format!("{kind:?}: b after a's blocked turn"),
        );
        // A `then` callback that blocks the shared I/O thread (`b`'s
        // messages are read there): counted on the runtime.
        b.command_pending("k", ["BLPOP", "stall:none", "0.1"])
            .then(|_| std::thread::sleep(Duration::from_millis(300)));
        testkit::wait_for("the blocked I/O turn counted", BOUND, || {
            Ok((runtime.slow_turns() >= 1).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        accounted::delivered_more(
            &ledger,
            &handler,
            3,
            BOUND,
            &format!("{kind:?}: b after its blocked I/O turn"),
        );
        settle(&ledger, &b, publisher, kind);
        assert_eq!(b.metrics().dropped.total(), 0, "{kind:?}: b dropped");
        // The handler's turn, counted and logged once; on a busy machine a
        // control turn preempted for 200 ms may be counted beside it.
        let slow = a.metrics().slow_turns;
        assert!(slow >= 1, "{kind:?}: counted");
        let name = format!("instance blocker-{kind:?}:");
        let lines: Vec<String> = CAPTURED
            .0
            .lock()
            .iter()
            .filter(|l| l.starts_with(&name))
            .cloned()
            .collect();
        assert_eq!(
            lines.len() as u64,
            slow,
            "{kind:?}: each logged once: {lines:?}"
        );
        let handler_turns = lines
            .iter()
            .filter(|l| l.contains("the handler") && l.contains("shardsub-worker-0"))
            .count();
        assert_eq!(handler_turns, 1, "{kind:?}: the handler's turn: {lines:?}");
        let io = CAPTURED
            .0
            .lock()
            .iter()
            .filter(|l| l.starts_with("shardsub-io-0: a turn took"))
            .count();
        assert!(io >= 1, "{kind:?}: the I/O turn logged");
        // The handler's turn ran inside the worker thread's I/O loop: that
        // loop does not count it again as a turn of its own.
        let worker_loop = CAPTURED
            .0
            .lock()
            .iter()
            .filter(|l| l.starts_with("shardsub-worker-0: a turn took"))
            .count();
        assert_eq!(worker_loop, 0, "{kind:?}: the handler's turn counted twice");
        CAPTURED.0.lock().clear();
        a.shutdown();
        b.shutdown();
    }
}
