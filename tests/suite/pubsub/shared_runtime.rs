//! Instances on one runtime share its control thread, I/O threads and
//! workers: one instance shutting down (from a callback on one of those
//! threads) or blocking in a handler must not stall the others. Real
//! servers (Redis 7 and Valkey 9); delivery through the accounting checker.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use shardsub::{PubSub, Runtime};
use testkit::accounting::Ledger;
use testkit::{kinds, Server};

use crate::support::accounted;
use crate::support::accounted::Accounted;

const BOUND: Duration = Duration::from_secs(20);

/// How long the other instance may wait for its control thread, its I/O
/// thread and its worker while the first shuts down. The first's shutdown
/// on the frozen server takes its shutdown timeout (2 s) per subscribe
/// connection when the control thread waits for it: 16 s for 8.
const OTHERS_BOUND: Duration = Duration::from_secs(5);

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
                .on_message(|_, _| {})
                .build()
                .unwrap(),
        );
        let ledger = Arc::new(Ledger::new((0..8).map(|i| format!("b:{i}"))));
        let handler = Accounted::new(&ledger, "b");
        let b = Arc::new(
            PubSub::builder()
                .address(other.addr().to_string())
                .runtime(&runtime)
                .handler_arc(handler.clone())
                .build()
                .unwrap(),
        );
        b.subscribe(ledger.names()).unwrap();
        b.wait_active(ledger.names(), BOUND).unwrap();
        let a_chans: Vec<String> = (0..32).map(|i| format!("a:{i}")).collect();
        a.subscribe(&a_chans).unwrap();
        a.wait_active(&a_chans, BOUND).unwrap();
        let publisher = accounted::publishing(
            &ledger,
            accounted::via_pubsub(b.clone()),
            &handler,
            Duration::from_millis(2),
            BOUND,
        );
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
        publisher.stop();
        accounted::round(&ledger, &*accounted::via_pubsub(b.clone()));
        accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}: b"));
        // From a thread of its own, `shutdown` waits for the end of the
        // one the callback started (the frozen server's replies awaited up
        // to the shutdown timeout, 2 s).
        a.shutdown();
        frozen.thaw();
        b.shutdown();
    }
}
