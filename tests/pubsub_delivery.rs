//! Pub/Sub delivery against real servers: order per channel under load with
//! 8 workers, client-side sharding over 3 servers, and the
//! subscribe/unsubscribe race ending in the last-asked state.

mod pubsub_support;

use std::sync::Arc;
use std::time::Duration;

use pubsub_support::{channels, numsub, payload, Recorder};
use shardsub::{Protocol, PubSub};
use testkit::{kinds, Server, Servers};

const BOUND: Duration = Duration::from_secs(20);

fn build(addrs: Vec<String>, rec: &Arc<Recorder>, workers: usize) -> PubSub {
    PubSub::builder()
        .addresses(addrs)
        .workers(workers)
        .queue_capacity(1 << 16)
        .io_threads(1)
        .handler_arc(rec.clone())
        .build()
        .expect("pubsub connects")
}

#[test]
fn order_per_channel_under_load_with_8_workers() {
    for kind in kinds() {
        for protocol in [Protocol::Resp3, Protocol::Resp2] {
            let server = Server::start(kind).unwrap();
            let rec = Recorder::new();
            let ps = PubSub::builder()
                .address(server.addr().to_string())
                .workers(8)
                .queue_capacity(1 << 16)
                .subscribe_connections(3)
                .protocol(protocol)
                .io_threads(1)
                .handler_arc(rec.clone())
                .build()
                .unwrap();
            let chans = channels("order", 500);
            ps.subscribe(&chans).unwrap();
            ps.wait_active(&chans, BOUND).unwrap();
            let rounds = 100u64;
            for seq in 0..rounds {
                for c in &chans {
                    ps.publish(c, &payload(seq, 64)).unwrap();
                }
            }
            let total = rounds * chans.len() as u64;
            rec.wait("every message", BOUND, |s| s.total >= total);
            // `delivered` is counted once the handler has returned.
            let m = testkit::wait_for("delivered count", BOUND, || {
                let m = ps.metrics();
                Ok((m.delivered >= total).then_some(m))
            })
            .unwrap();
            let s = rec.seen.lock();
            assert_eq!(s.total, total, "{kind:?} {protocol:?}");
            assert_eq!(s.out_of_order, 0, "{kind:?} {protocol:?}");
            assert_eq!(s.thread_switches, 0, "one channel, one worker");
            assert!(s.count.values().all(|&n| n == rounds));
            let threads: std::collections::HashSet<_> = s.thread_of.values().collect();
            assert_eq!(threads.len(), 8, "channels spread over all 8 workers");
            assert_eq!(m.delivered, total, "{m:?}");
            assert_eq!(m.received, total, "{m:?}");
            assert_eq!(m.dropped.total(), 0, "{m:?}");
            assert_eq!(m.channels, 500);
            assert_eq!(m.active_connections, vec![3]);
            assert!(m.subscribe_commands >= 3, "{m:?}");
            assert!(m.confirmations >= 500, "{m:?}");
            drop(s);
            ps.shutdown();
        }
    }
}

#[test]
fn sharded_over_three_servers_delivers_everything() {
    for kind in kinds() {
        let servers = Servers::start(kind, 3).unwrap();
        let addrs: Vec<String> = servers.addrs().iter().map(|a| a.to_string()).collect();
        let rec = Recorder::new();
        let sub = build(addrs.clone(), &rec, 4);
        // A separate publisher instance: agreement comes from shard_of alone.
        let publisher = build(addrs, &Recorder::new(), 1);
        let chans = channels("shard", 3000);
        sub.subscribe(&chans).unwrap();
        sub.wait_active(&chans, BOUND).unwrap();
        // Each server holds exactly the channels shard_of gives it.
        for (i, server) in servers.iter().enumerate() {
            let mine: Vec<Vec<u8>> = chans
                .iter()
                .filter(|c| sub.server_of(c) == i)
                .cloned()
                .collect();
            let others: Vec<Vec<u8>> = chans
                .iter()
                .filter(|c| sub.server_of(c) != i)
                .take(50)
                .cloned()
                .collect();
            assert!(mine.len() > 700, "server {i} has {} channels", mine.len());
            assert!(numsub(server, &mine).iter().all(|&n| n == 1), "{kind:?}");
            assert!(numsub(server, &others).iter().all(|&n| n == 0), "{kind:?}");
        }
        for seq in 0..5 {
            for c in &chans {
                publisher.publish(c, &payload(seq, 32)).unwrap();
            }
        }
        rec.wait("every sharded message", BOUND, |s| s.total >= 15_000);
        let s = rec.seen.lock();
        assert_eq!(s.total, 15_000);
        assert_eq!(s.out_of_order, 0);
        assert_eq!(s.count.len(), 3000);
        drop(s);
        let m = sub.metrics();
        assert_eq!(m.active_connections, vec![2, 2, 2], "{m:?}");
        assert_eq!(publisher.metrics().published, 15_000);
    }
}

#[test]
fn subscribe_unsubscribe_race_ends_in_last_asked_state() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let rec = Recorder::new();
        let ps = Arc::new(
            PubSub::builder()
                .address(server.addr().to_string())
                .workers(2)
                .batch_size(7) // many small commands interleave with the race
                .io_threads(1)
                .handler_arc(rec.clone())
                .build()
                .unwrap(),
        );
        let chans = Arc::new(channels("race", 200));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (ps, chans) = (ps.clone(), chans.clone());
                std::thread::spawn(move || {
                    for round in 0..50 {
                        if (round + t) % 2 == 0 {
                            ps.subscribe(chans.iter()).unwrap();
                        } else {
                            ps.unsubscribe(chans.iter()).unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // The last word: even channels wanted, odd ones not.
        let (want, not): (Vec<_>, Vec<_>) = chans
            .iter()
            .cloned()
            .enumerate()
            .partition(|(i, _)| i % 2 == 0);
        let want: Vec<Vec<u8>> = want.into_iter().map(|(_, c)| c).collect();
        let not: Vec<Vec<u8>> = not.into_iter().map(|(_, c)| c).collect();
        ps.unsubscribe(&not).unwrap();
        ps.subscribe(&want).unwrap();
        ps.wait_active(&want, BOUND).unwrap();
        testkit::wait_for("server state = last asked", BOUND, || {
            let ok = numsub(&server, &want).iter().all(|&n| n == 1)
                && numsub(&server, &not).iter().all(|&n| n == 0);
            Ok(ok.then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert!(not.iter().all(|c| !ps.is_active(c)));
        assert_eq!(ps.metrics().channels, 100);
        // Messages reach exactly the wanted channels.
        for c in want.iter().chain(&not) {
            ps.publish(c, &payload(1, 8)).unwrap();
        }
        rec.wait("wanted channels deliver", BOUND, |s| {
            want.iter().all(|c| s.last.get(c) == Some(&1))
        });
        // A marker published after the unwanted ones, on a wanted channel
        // of the same connection, proves nothing more is coming for them.
        ps.publish(&want[0], &payload(2, 8)).unwrap();
        rec.wait("marker", BOUND, |s| s.last.get(&want[0]) == Some(&2));
        let s = rec.seen.lock();
        assert!(not.iter().all(|c| s.last.get(c) != Some(&1)), "{kind:?}");
    }
}

/// `cmdstat_<name>` `calls=` from `INFO commandstats`.
fn command_calls(server: &Server, name: &str) -> u64 {
    let text = match server.cmd(&[b"INFO", b"commandstats"]).unwrap() {
        testkit::Value::Bulk(b) | testkit::Value::Verbatim { text: b, .. } => b,
        other => panic!("INFO reply {other:?}"),
    };
    let text = String::from_utf8_lossy(&text).to_string();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn subscribe_calls_coalesce_into_commands_of_at_most_the_batch_size() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let rec = Recorder::new();
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .subscribe_connections(1)
            .workers(1)
            .batch_size(100)
            .subscribe_delay(Duration::from_millis(20))
            .io_threads(1)
            .handler_arc(rec.clone())
            .build()
            .unwrap();
        // 1000 single-channel calls in a burst: they share commands.
        let chans = channels("batch", 1000);
        for c in &chans {
            ps.subscribe([c]).unwrap();
        }
        ps.wait_active(&chans, BOUND).unwrap();
        let m = ps.metrics();
        // ≥ 10 because no command carries more than 100 channels; far
        // fewer than 1000 because calls close in time were coalesced.
        assert!((10..=30).contains(&m.subscribe_commands), "{kind:?}: {m:?}");
        // The server saw exactly those, plus the service channel's.
        assert_eq!(
            command_calls(&server, "subscribe"),
            m.subscribe_commands + 1,
            "{kind:?}"
        );
        ps.unsubscribe(&chans).unwrap();
        testkit::wait_for("unsubscribed", BOUND, || {
            Ok((ps.metrics().channels == 0
                && numsub(&server, &chans[..10]).iter().all(|&n| n == 0))
            .then_some(()))
        })
        .unwrap();
        let m = ps.metrics();
        assert!((10..=30).contains(&m.unsubscribe_commands), "{m:?}");
    }
}
