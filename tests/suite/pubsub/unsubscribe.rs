//! Giving channels up: once `unsubscribe` returns no message of theirs
//! reaches the handler (those already queued are passed over and
//! counted), the others keep every message in order, and `wait_inactive`
//! returns once the server no longer counts the subscription (its own
//! receiver count says 0), on one server and on a cluster.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use shardsub::{Error, Handler, PubSub, PubSubBuilder};
use testkit::{Client, Cluster, FaultProxy, Server, ServerKind};

const PER_CHANNEL: u64 = 50;
const T: Duration = Duration::from_secs(20);

/// Blocks the worker on the `gate` channel's message until released;
/// records every other message (channel → payloads in order).
#[derive(Default)]
struct Gated {
    blocked: AtomicBool,
    open: Mutex<bool>,
    cond: Condvar,
    seen: Mutex<BTreeMap<Vec<u8>, Vec<u64>>>,
}

impl Gated {
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cond.notify_all();
    }
}

impl Handler for Gated {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        if channel == b"gate" {
            self.blocked.store(true, Ordering::Release);
            let g = self.open.lock().unwrap();
            let _g = self.cond.wait_while(g, |open| !*open).unwrap();
            return;
        }
        let n = std::str::from_utf8(payload).unwrap().parse().unwrap();
        let mut seen = self.seen.lock().unwrap();
        seen.entry(channel.to_vec()).or_default().push(n);
    }
}

fn names(prefix: &str) -> Vec<String> {
    (0..10).map(|i| format!("{prefix}:{i}")).collect()
}

fn check(kind: ServerKind, what: &str, b: PubSubBuilder) {
    let h = Arc::new(Gated::default());
    let ps = b
        .handler_arc(h.clone())
        .workers(1)
        .queue_capacity(1 << 16)
        .build()
        .expect("pubsub");
    let (gone, kept) = (names("gone"), names("kept"));
    let all: Vec<&String> = gone.iter().chain(&kept).collect();
    ps.subscribe(&all).expect("subscribe");
    ps.subscribe(["gate"]).expect("subscribe");
    ps.wait_active(&all, T).expect("active");
    ps.wait_active(&["gate"], T).expect("active");
    // The worker is held on the gate's message while the others queue up.
    ps.publish_wait("gate", "0", T).expect("publish");
    testkit::wait_for("the worker held", T, || {
        Ok(h.blocked.load(Ordering::Acquire).then_some(()))
    })
    .expect("held");
    for n in 0..PER_CHANNEL {
        for c in &all {
            let r = ps.publish_wait(c, n.to_string(), T).expect("publish");
            assert_eq!(r, 1, "{kind:?} {what}: receivers of {c}");
        }
    }
    let total = 1 + PER_CHANNEL * all.len() as u64;
    testkit::wait_for("every message received", T, || {
        Ok((ps.metrics().received >= total).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{kind:?} {what}: {e}"));
    // Every message of `gone` is queued behind the gate now.
    ps.unsubscribe(&gone).expect("unsubscribe");
    h.release();
    testkit::wait_for("every message handled or passed over", T, || {
        let m = ps.metrics();
        Ok((m.delivered + m.unwanted >= total).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{kind:?} {what}: {e}"));
    let m = ps.metrics();
    {
        let seen = h.seen.lock().unwrap();
        for c in &gone {
            assert!(
                !seen.contains_key(c.as_bytes()),
                "{kind:?} {what}: {c} reached the handler after unsubscribe: {:?}",
                seen.get(c.as_bytes()).map(Vec::len)
            );
        }
        let want: Vec<u64> = (0..PER_CHANNEL).collect();
        for c in &kept {
            assert_eq!(seen.get(c.as_bytes()), Some(&want), "{kind:?} {what}: {c}");
        }
    }
    assert_eq!(
        m.unwanted,
        PER_CHANNEL * gone.len() as u64,
        "{kind:?} {what}: {m:?}"
    );
    // Confirmed: the server counts no subscriber for them any more.
    ps.wait_inactive(&gone, T)
        .unwrap_or_else(|e| panic!("{kind:?} {what}: {e}"));
    for c in &gone {
        let r = ps.publish_wait(c, "late", T).expect("publish");
        assert_eq!(r, 0, "{kind:?} {what}: {c} still has a subscriber");
    }
    for c in &kept {
        let r = ps
            .publish_wait(c, PER_CHANNEL.to_string(), T)
            .expect("publish");
        assert_eq!(r, 1, "{kind:?} {what}: {c}");
    }
    let r = ps.wait_inactive(&kept, Duration::from_millis(10));
    assert!(
        matches!(r, Err(Error::InvalidArgument(_))),
        "{kind:?} {what}: {r:?}"
    );
    // A channel never subscribed is inactive at once.
    ps.wait_inactive(&["never"], T).expect("inactive");
    ps.shutdown();
    let r = ps.wait_inactive(&gone, T);
    assert!(matches!(r, Err(Error::Shutdown)), "{kind:?} {what}: {r:?}");
}

#[test]
fn given_up_channels_never_reach_the_handler_and_their_unsubscribe_is_confirmed() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        check(
            kind,
            "one server",
            PubSub::builder().address(server.addr().to_string()),
        );
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let seeds = cluster
            .seed_addrs()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>();
        check(kind, "cluster", PubSub::builder().seeds(seeds));
    }
}

/// How long the proxy holds each chunk the server sends.
const HELD: Duration = Duration::from_millis(300);
/// A message the handler got: channel and payload.
type Seen = (Vec<u8>, Vec<u8>);

/// Messages of `gone` published before its unsubscribe, still on their
/// way from the server when `unsubscribe` returns (a slow link holds
/// them), must be passed over, not handed to the handler: the fence's
/// `PING` comes back behind them. Without the `PING` the leave would
/// complete at once and the workers would stop looking messages up
/// before these arrive.
#[test]
fn messages_sent_before_an_unsubscribe_and_read_after_it_are_passed_over() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).unwrap();
        let proxy = FaultProxy::start(server.addr()).unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = seen.clone();
        let ps = PubSub::builder()
            .address(proxy.addr().to_string())
            .workers(1)
            .handler(move |c: &[u8], p: &[u8]| {
                record.lock().unwrap().push((c.to_vec(), p.to_vec()))
            })
            .build()
            .unwrap();
        ps.subscribe(["gone", "kept"]).unwrap();
        ps.wait_active(&["gone", "kept"], T).unwrap();

        proxy.delay(HELD);
        let mut direct = Client::connect(server.addr()).unwrap();
        for i in 0..20u32 {
            direct
                .cmd(&[b"PUBLISH", b"gone", i.to_string().as_bytes()])
                .unwrap();
        }
        // Behind them on the same subscribe connection: once it reaches
        // the handler, every message of `gone` has been read.
        direct.cmd(&[b"PUBLISH", b"kept", b"last"]).unwrap();
        ps.unsubscribe(["gone"]).unwrap();
        ps.wait_inactive(&["gone"], T).unwrap();
        proxy.delay(Duration::ZERO);
        testkit::wait_for("the message behind them", T, || {
            Ok(seen
                .lock()
                .unwrap()
                .iter()
                .any(|(c, p)| c == b"kept" && p == b"last")
                .then_some(()))
        })
        .unwrap();
        let leaked = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(c, _)| c == b"gone")
            .count();
        assert_eq!(
            leaked, 0,
            "{kind:?}: messages of an unsubscribed channel reached the handler"
        );
        // A worker adds its turn's counts when the turn ends, after the
        // handler has seen `kept`: wait for them, then for exactly 20.
        testkit::wait_for("the passed-over messages counted", T, || {
            Ok((ps.metrics().unwanted >= 20).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}: {:?}", ps.metrics()));
        assert_eq!(
            ps.metrics().unwanted,
            20,
            "{kind:?}: each passed over and counted"
        );
        ps.shutdown();
    }
}
