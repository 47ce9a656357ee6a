//! Servers behind a name: when what the name resolves to changes (a
//! restarted container or pod at a new address), the instance follows it
//! at its next reconnect, subscribe and publish connections both, with a
//! gap event for the channels that moved and every message of the rounds
//! before and after accounted (Redis 7 and Valkey 9). The name is moved by
//! a resolver the test injects.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use shardsub::{PubSub, Resolver};
use testkit::accounting::Ledger;
use testkit::Server;

use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;

const BOUND: Duration = Duration::from_secs(20);

/// A name service with one name, `app-redis`, pointing where the test says.
struct Switch(Mutex<SocketAddr>);

impl Resolver for Switch {
    fn resolve(&self, host: &str, _port: u16) -> std::io::Result<Vec<SocketAddr>> {
        match host {
            "app-redis" => Ok(vec![*self.0.lock()]),
            _ => Err(std::io::Error::other(format!("unknown host {host}"))),
        }
    }
}

#[test]
fn a_server_whose_name_moves_is_followed_at_the_next_reconnect() {
    for kind in testkit::kinds() {
        let what = format!("{kind:?}");
        let mut a = Server::start(kind).expect("server a");
        let b = Server::start(kind).expect("server b");
        let names = Arc::new(Switch(Mutex::new(a.addr())));
        let chans = channels("moved", 50);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let ps = Arc::new(
            PubSub::builder()
                .address("app-redis:6379")
                .resolver(names.clone())
                .connect_timeout(Duration::from_millis(500))
                .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100))
                .handler_arc(handler.clone())
                .build()
                .unwrap_or_else(|e| panic!("{what}: {e}")),
        );
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        accounted::settle_and_check(&ledger, BOUND, &format!("{what} on a"));

        // The name now points at b, and a goes away.
        *names.0.lock() = b.addr();
        a.kill();
        testkit::wait_for("the loss seen", BOUND, || {
            let t = handler.timeline.lock();
            Ok(t.iter()
                .any(|e| e.starts_with("down app-redis:6379"))
                .then_some(()))
        })
        .unwrap();
        ps.wait_active(&chans, BOUND)
            .unwrap_or_else(|e| panic!("{what}: the channels on b: {e}"));
        testkit::wait_for("publishes through b", BOUND, || {
            Ok(ps
                .publish_wait("moved:probe", b"x", BOUND)
                .is_ok()
                .then_some(()))
        })
        .unwrap();
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        let report = accounted::settle_and_check(&ledger, BOUND, &format!("{what} on b"));
        assert_eq!(
            report.counts.delivered,
            2 * chans.len() as u64,
            "{what}: {report}"
        );
        let health = ps.health();
        assert!(
            health.len() == 1
                && health[0].server == "app-redis:6379"
                && health[0].addr == Some(b.addr().into())
                && health[0].connected,
            "{what}: {health:?}"
        );
        ps.shutdown();
    }
}

/// A name service whose one name, `slow-redis`, answers only after a
/// pause once `slow` is set (the lookups at build are quick).
struct Slow {
    at: SocketAddr,
    slow: std::sync::atomic::AtomicBool,
    /// A slow lookup has started.
    started: std::sync::atomic::AtomicBool,
}

impl Resolver for Slow {
    fn resolve(&self, host: &str, _port: u16) -> std::io::Result<Vec<SocketAddr>> {
        if host != "slow-redis" {
            return Err(std::io::Error::other(format!("unknown host {host}")));
        }
        if self.slow.load(std::sync::atomic::Ordering::Relaxed) {
            self.started
                .store(true, std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(Duration::from_secs(3));
        }
        Ok(vec![self.at])
    }
}

/// The control thread never waits for a lookup: while the first shard's
/// name takes 3 s to resolve, the second shard's channels (an IP address)
/// are subscribed at once; the first shard's follow when its lookup
/// answers, and every message delivers. (The lookup used to run on the
/// control thread, holding up every other server's subscribes.)
#[test]
fn a_slow_lookup_holds_up_no_other_server() {
    for kind in testkit::kinds() {
        let what = format!("{kind:?}");
        let a = Server::start(kind).expect("server a");
        let b = Server::start(kind).expect("server b");
        let names = Arc::new(Slow {
            at: a.addr(),
            slow: false.into(),
            started: false.into(),
        });
        let chans = channels("slow", 100);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let ps = Arc::new(
            PubSub::builder()
                .addresses(["slow-redis:6379".to_string(), b.addr().to_string()])
                .resolver(names.clone())
                .handler_arc(handler.clone())
                .build()
                .unwrap_or_else(|e| panic!("{what}: {e}")),
        );
        names.slow.store(true, std::sync::atomic::Ordering::Relaxed);
        let (on_a, on_b): (Vec<Vec<u8>>, Vec<Vec<u8>>) = chans
            .iter()
            .cloned()
            .partition(|c| ps.server_of(c) == Some(0));
        assert!(!on_a.is_empty() && !on_b.is_empty(), "{what}: both shards");
        ps.subscribe(&on_a).unwrap();
        testkit::wait_for("a's lookup under way", BOUND, || {
            Ok(names
                .started
                .load(std::sync::atomic::Ordering::Relaxed)
                .then_some(()))
        })
        .unwrap();
        let start = std::time::Instant::now();
        ps.subscribe(&on_b).unwrap();
        ps.wait_active(&on_b, Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("{what}: b held up by a's lookup: {e}"));
        let took = start.elapsed();
        assert!(took < Duration::from_secs(2), "{what}: {took:?}");
        ps.wait_active(&on_a, BOUND).unwrap();
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        accounted::settle_and_check(&ledger, BOUND, &what);
    }
}
