//! A master found through Sentinel (Redis 7 and Valkey 9, each in Sentinel
//! mode too), with one replica: the instance follows a `SENTINEL
//! FAILOVER` and then a `kill -9` of the new master while publishing all
//! along; every channel gets a gap event at each move, and the accounting
//! checker finds nothing lost silently, duplicated or reordered.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::{PubSub, ServerAddr};
use testkit::accounting::Ledger;
use testkit::{kinds, FakeSentinel, Sentinel, Server, ServerKind};

use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;

const BOUND: Duration = Duration::from_secs(30);
const NAME: &str = "mymaster";

/// A replica of `master`, synced.
fn replica_of(kind: ServerKind, master: &Server) -> Server {
    let port = master.port().to_string();
    let replica = Server::builder(kind)
        .args(["--replicaof", "127.0.0.1", port.as_str()])
        .start()
        .unwrap();
    synced(&replica);
    replica
}

/// Waits until `server` is a replica whose link to its master is up.
fn synced(server: &Server) {
    testkit::wait_for("a replica in sync", BOUND, || {
        let info = server.cmd(&[b"INFO", b"replication"])?;
        let text = testkit::values::text(&info).unwrap_or_default();
        Ok((text.contains("role:slave") && text.contains("master_link_status:up")).then_some(()))
    })
    .unwrap();
}

/// `SENTINEL FAILOVER name`, asked again until taken (refused while the
/// Sentinel finds no replica ready).
fn fail_over(sentinel: &Sentinel, name: &str) {
    testkit::wait_for("SENTINEL FAILOVER accepted", BOUND, || {
        Ok(sentinel.failover(name).ok())
    })
    .unwrap();
}

/// Waits until the Sentinel names `to` as the master.
fn master_is(sentinel: &Sentinel, to: SocketAddr, what: &str) {
    testkit::wait_for(what, BOUND, || {
        Ok((sentinel.master(NAME)? == to).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// An instance of `builder` with `handler`, its `chans` active.
fn subscribed(
    builder: shardsub::PubSubBuilder,
    handler: &Arc<Accounted>,
    chans: &[Vec<u8>],
) -> Arc<PubSub> {
    let ps = builder
        .workers(2)
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(200))
        .handler_arc(handler.clone())
        .build()
        .unwrap();
    ps.subscribe(chans).unwrap();
    ps.wait_active(chans, BOUND).unwrap();
    Arc::new(ps)
}

/// Waits until the instance's subscribe side is on `to`, every channel
/// had `gaps` gap events, and every channel is active again.
fn followed(ps: &PubSub, handler: &Accounted, chans: &[Vec<u8>], gaps: u64, to: SocketAddr) {
    let what = format!("the instance on {to} with {gaps} gaps per channel");
    testkit::wait_for(&what, BOUND, || {
        let per = handler.per_channel.lock();
        let all = chans
            .iter()
            .all(|c| per.get(c).is_some_and(|e| e.gaps >= gaps));
        let health = ps.health();
        let on = health.first().and_then(|h| h.addr) == Some(ServerAddr::from(to));
        Ok((all && on).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", ps.health()));
    ps.wait_active(chans, BOUND).unwrap();
}

#[test]
fn a_sentinel_failover_and_a_killed_master_are_followed_with_every_loss_signalled() {
    for kind in kinds() {
        let master = Server::start(kind).unwrap();
        let mut replica = replica_of(kind, &master);
        let sentinel = Sentinel::start(kind, NAME, master.addr()).unwrap();
        testkit::wait_for("the Sentinel to see the replica", BOUND, || {
            let v = sentinel.cmd(&[b"SENTINEL", b"REPLICAS", NAME.as_bytes()])?;
            Ok(matches!(v, testkit::Value::Array(r) if !r.is_empty()).then_some(()))
        })
        .unwrap();

        let chans = channels("sn", 200);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sentinel");
        let url = format!("redis+sentinel://{}/{NAME}", sentinel.addr());
        let ps = subscribed(PubSub::builder().url(&url), &handler, &chans);
        let health = ps.health();
        assert_eq!(health.len(), 1, "{health:?}");
        assert_eq!(health[0].server, format!("sentinel:{NAME}"), "{health:?}");
        assert_eq!(health[0].addr, Some(master.addr().into()), "{health:?}");
        let publisher = accounted::publishing(
            &ledger,
            accounted::via_pubsub(ps.clone()),
            &handler,
            Duration::from_millis(5),
            BOUND,
        );

        // A failover asked of the Sentinel: the replica becomes the master.
        fail_over(&sentinel, NAME);
        master_is(&sentinel, replica.addr(), "the replica promoted");
        followed(&ps, &handler, &chans, 1, replica.addr());
        accounted::delivered_more(
            &ledger,
            &handler,
            2,
            BOUND,
            "rounds delivered on the new master",
        );

        // The new master dies (kill -9): the old one, now its replica, is
        // promoted once the Sentinel finds the master down.
        synced(&master);
        replica.kill();
        master_is(&sentinel, master.addr(), "the old master promoted again");
        followed(&ps, &handler, &chans, 2, master.addr());
        accounted::delivered_more(
            &ledger,
            &handler,
            2,
            BOUND,
            "rounds delivered after the kill",
        );

        let rounds = publisher.stop();
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        let what = format!("{kind:?} through Sentinel");
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert!(rounds >= 7, "{what}: {rounds} rounds");
        assert!(report.counts.signals >= 400, "{what}: {report}");
        let m = ps.metrics();
        assert!(m.reconnects >= 2, "{what}: {m:?}");
        eprintln!(
            "{what}: {rounds} rounds, {} gap events, {report}",
            handler.gap_events.load(Ordering::Relaxed)
        );
    }
}

/// Connections of `server` named `name` (`CLIENT LIST`).
fn named_clients(server: &Server, name: &str) -> usize {
    let v = server.cmd(&[b"CLIENT", b"LIST"]).unwrap();
    let text = testkit::values::text(&v).unwrap_or_default();
    text.lines()
        .filter(|l| l.split(' ').any(|f| f == format!("name={name}")))
        .count()
}

/// A Sentinel's answer can be stale during a failover: it can name as
/// the master a server that is a replica by then. A fake Sentinel names
/// the replica: the build fails naming it (`ROLE` there says `slave`);
/// started degraded, the instance asks again until the Sentinel names
/// the master, and every message then goes there. Without the `ROLE`
/// check the build succeeds on the replica, which this fails.
#[test]
fn a_replica_a_sentinel_names_as_master_is_refused_and_asked_again() {
    for kind in kinds() {
        let master = Server::start(kind).unwrap();
        let replica = replica_of(kind, &master);
        let fake = FakeSentinel::start(NAME, replica.addr()).unwrap();
        let e = PubSub::builder()
            .sentinel([fake.addr().to_string()], NAME)
            .on_message(|_, _| {})
            .build()
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("is not a primary (ROLE says slave)")
                && text.contains(&replica.addr().to_string()),
            "{kind:?}: {text}"
        );
        let what = format!("{kind:?} a replica named as the master");
        let chans = channels("stale", 20);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, &what);
        let ps = PubSub::builder()
            .sentinel([fake.addr().to_string()], NAME)
            .require_all_servers(false)
            .workers(2)
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(200))
            .handler_arc(handler.clone())
            .build()
            .unwrap();
        ps.subscribe(&chans).unwrap();
        let asked = fake.questions();
        testkit::wait_for("the Sentinel asked again", BOUND, || {
            Ok((fake.questions() > asked).then_some(()))
        })
        .unwrap();
        assert_eq!(named_clients(&replica, "shardsub-sub"), 0, "{what}");
        fake.set_master(master.addr());
        ps.wait_active(&chans, BOUND).unwrap();
        let ps = Arc::new(ps);
        testkit::wait_for("a publish taken by the master", BOUND, || {
            Ok(ps.publish_wait("stale-probe", "x", BOUND).ok())
        })
        .unwrap();
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(report.counts.delivered, 20, "{what}: {report}");
        assert_eq!(named_clients(&replica, "shardsub-sub"), 0, "{what}");
    }
}

/// Sentinels that ask their clients for a password (`requirepass`): the
/// build fails without it, saying so, and with a wrong one, saying the
/// Sentinel refused it; with it, the master is found, messages flow, and
/// the watcher is subscribed on the Sentinel (its `CLIENT LIST` shows a
/// subscriber). With `AUTH` not sent the last build fails like the first.
#[test]
fn sentinels_that_ask_for_a_password_are_asked_with_it() {
    for kind in kinds() {
        let master = Server::start(kind).unwrap();
        let sentinel = Sentinel::start_with_password(kind, NAME, master.addr(), "s3cret").unwrap();
        let at = sentinel.addr().to_string();
        for (password, says) in [(None, "NOAUTH"), (Some("wrong"), "refused the credentials")] {
            let mut b = PubSub::builder()
                .sentinel([at.clone()], NAME)
                .on_message(|_, _| {});
            if let Some(p) = password {
                b = b.sentinel_password(p);
            }
            let e = b.build().unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains(&at),
                "{kind:?} {password:?}: {e}"
            );
        }
        let what = format!("{kind:?} Sentinels with a password");
        let chans = channels("spw", 20);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, &what);
        let builder = PubSub::builder()
            .sentinel([at.clone()], NAME)
            .sentinel_password("s3cret");
        let ps = subscribed(builder, &handler, &chans);
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(report.counts.delivered, 20, "{what}: {report}");
        testkit::wait_for("the watcher subscribed on the Sentinel", BOUND, || {
            let list = sentinel.cmd(&[b"CLIENT", b"LIST"])?;
            let text = testkit::values::text(&list).unwrap_or_default();
            Ok(text.lines().any(|l| l.contains(" sub=1 ")).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        // An ACL user needs a password; without Sentinel, neither applies.
        let e = PubSub::builder()
            .sentinel([at.clone()], NAME)
            .sentinel_username("app")
            .on_message(|_, _| {})
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("sentinel_password"), "{e}");
        let e = PubSub::builder()
            .address(master.addr().to_string())
            .sentinel_password("s3cret")
            .on_message(|_, _| {})
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("PubSubBuilder::sentinel"), "{e}");
    }
}

#[test]
fn a_master_no_sentinel_knows_fails_build_naming_every_sentinel() {
    for kind in kinds() {
        let master = Server::start(kind).unwrap();
        let sentinel = Sentinel::start(kind, NAME, master.addr()).unwrap();
        let e = PubSub::builder()
            .sentinel([sentinel.addr().to_string(), "127.0.0.1:1".into()], "other")
            .require_all_servers(true)
            .build()
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("does not know a master named \"other\""),
            "{text}"
        );
        assert!(text.contains("127.0.0.1:1"), "{text}");
        let e = PubSub::builder()
            .sentinel([sentinel.addr().to_string()], "bad name")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("Sentinel master name"), "{e}");
    }
}

/// The Sentinel is told to watch another server under the same name (no
/// failover, so nobody disconnects the clients of the first): the
/// instance's own checks of the master (every few seconds) move it. With
/// the watcher off it stays on the first server, which this fails.
#[test]
fn a_master_moved_behind_the_old_ones_back_is_followed() {
    for kind in kinds() {
        let a = Server::start(kind).unwrap();
        let b = Server::start(kind).unwrap();
        let sentinel = Sentinel::start(kind, NAME, a.addr()).unwrap();
        let chans = channels("sm", 50);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sentinel move");
        let builder = PubSub::builder().sentinel([sentinel.addr().to_string()], NAME);
        let ps = subscribed(builder, &handler, &chans);
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        let (ip, port) = (b.addr().ip().to_string(), b.port().to_string());
        sentinel
            .cmd(&[b"SENTINEL", b"REMOVE", NAME.as_bytes()])
            .unwrap();
        sentinel
            .cmd(&[
                b"SENTINEL",
                b"MONITOR",
                NAME.as_bytes(),
                ip.as_bytes(),
                port.as_bytes(),
                b"1",
            ])
            .unwrap();
        followed(&ps, &handler, &chans, 1, b.addr());
        // Publishes follow too: the round reaches the subscribers, who are
        // on b now (a publish to a would reach none of them).
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        let what = format!("{kind:?} moved behind the old master's back");
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(report.counts.delivered, 2 * 50, "{what}: {report}");
    }
}

/// How long after a `+switch-master` the instance must be on the new
/// master: well under the watcher's re-check interval (about 5 s).
const FOLLOW_SWITCH: Duration = Duration::from_secs(2);

/// A `+switch-master` message is followed at once, not at the watcher's
/// next re-check: a fake Sentinel pushes it right after the watcher's
/// re-check asked where the master is (so the next one is about 5 s away),
/// having named the old master until then, and nobody kills the old
/// master's clients. With the message ignored the instance stays on `a`
/// until that re-check, which this fails.
#[test]
fn a_switch_master_message_is_followed_well_before_the_next_recheck() {
    for kind in kinds() {
        let a = Server::start(kind).unwrap();
        let b = Server::start(kind).unwrap();
        let sentinel = FakeSentinel::start(NAME, a.addr()).unwrap();
        let chans = channels("sw", 50);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "switch-master");
        let builder = PubSub::builder().sentinel([sentinel.addr().to_string()], NAME);
        let ps = subscribed(builder, &handler, &chans);
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        testkit::wait_for("the watcher subscribed", BOUND, || {
            Ok((sentinel.subscribers() >= 1).then_some(()))
        })
        .unwrap();
        // Right after the watcher's next re-check (no connection of the
        // instance is down, so no one else asks).
        let asked = sentinel.questions();
        testkit::wait_for("the watcher's re-check", BOUND, || {
            Ok((sentinel.questions() > asked).then_some(()))
        })
        .unwrap();
        let pushed = Instant::now();
        assert!(sentinel.switch_master(b.addr()) >= 1, "{kind:?}: pushed");
        sentinel.set_master(b.addr());
        let on_b = || ps.health().first().and_then(|h| h.addr) == Some(ServerAddr::from(b.addr()));
        testkit::wait_for("the instance on the new master", FOLLOW_SWITCH, || {
            Ok(on_b().then_some(()))
        })
        .unwrap_or_else(|e| {
            panic!(
                "{kind:?}: +switch-master not followed within {FOLLOW_SWITCH:?}: {e}: {:?}",
                ps.health()
            )
        });
        let took = pushed.elapsed();
        followed(&ps, &handler, &chans, 1, b.addr());
        // Publishes moved too: the round reaches the subscribers on b.
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        let what = format!("{kind:?} +switch-master followed in {took:?}");
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(report.counts.delivered, 2 * 50, "{what}: {report}");
        assert!(a.cmd(&[b"PING"]).is_ok(), "{what}: the old master still up");
        eprintln!("{what}: {report}");
    }
}

/// Two shards, each a master behind its own Sentinel: a failover of the
/// first moves only its connections, and exactly its channels get a gap
/// event (those of the other shard none), with every message accounted.
#[test]
fn a_shard_behind_sentinel_moves_alone_with_gaps_for_exactly_its_channels() {
    for kind in kinds() {
        let one = Server::start(kind).unwrap();
        let one_replica = replica_of(kind, &one);
        let two = Server::start(kind).unwrap();
        let s1 = Sentinel::start(kind, "one", one.addr()).unwrap();
        let s2 = Sentinel::start(kind, "two", two.addr()).unwrap();
        testkit::wait_for("the Sentinel to see the replica", BOUND, || {
            let v = s1.cmd(&[b"SENTINEL", b"REPLICAS", b"one"])?;
            Ok(matches!(v, testkit::Value::Array(r) if !r.is_empty()).then_some(()))
        })
        .unwrap();
        let chans = channels("ss", 200);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sentinel shards");
        let builder = PubSub::builder()
            .sentinel([s1.addr().to_string()], "one")
            .sentinel([s2.addr().to_string()], "two");
        let ps = subscribed(builder, &handler, &chans);
        let first: std::collections::HashSet<Vec<u8>> = chans
            .iter()
            .filter(|c| ps.server_of(c) == Some(0))
            .cloned()
            .collect();
        assert!(
            !first.is_empty() && first.len() < chans.len(),
            "both shards hold channels"
        );
        let publisher = accounted::publishing(
            &ledger,
            accounted::via_pubsub(ps.clone()),
            &handler,
            Duration::from_millis(5),
            BOUND,
        );
        fail_over(&s1, "one");
        testkit::wait_for("shard one on its replica", BOUND, || {
            let moved = ps
                .health()
                .iter()
                .any(|h| h.server == "sentinel:one" && h.addr == Some(one_replica.addr().into()));
            let gaps = handler.gap_channels.lock().len() >= first.len();
            Ok((moved && gaps).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{e}: {:?}", ps.health()));
        ps.wait_active(&chans, BOUND).unwrap();
        accounted::delivered_more(
            &ledger,
            &handler,
            2,
            BOUND,
            "rounds delivered after the move",
        );
        publisher.stop();
        accounted::round(&ledger, &*accounted::via_pubsub(ps.clone()));
        let what = format!("{kind:?} two shards behind Sentinels");
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(
            *handler.gap_channels.lock(),
            first,
            "{what}: exactly shard one's"
        );
        assert_eq!(
            report.counts.signals,
            first.len() as u64,
            "{what}: {report}"
        );
        let health = ps.health();
        let two_at = health
            .iter()
            .find(|h| h.server == "sentinel:two")
            .map(|h| h.addr);
        assert_eq!(two_at, Some(Some(two.addr().into())), "{what}: {health:?}");
    }
}
