//! Pub/Sub delivery against real servers: order per channel under load with
//! 8 workers, client-side sharding over 3 servers, and the
//! subscribe/unsubscribe race ending in the last-asked state.

use std::sync::Arc;
use std::time::Duration;

use shardsub::{Handler, Protocol, PubSub};
use testkit::accounting::Ledger;
use testkit::{kinds, Server, Servers};

use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;
use crate::support::pubsub::numsub;

const BOUND: Duration = Duration::from_secs(20);

fn build(addrs: Vec<String>, handler: Arc<impl Handler>, workers: usize) -> PubSub {
    PubSub::builder()
        .addresses(addrs)
        .workers(workers)
        .queue_capacity(1 << 16)
        .io_threads(1)
        .handler_arc(handler)
        .build()
        .expect("pubsub connects")
}

#[test]
fn order_per_channel_under_load_with_8_workers() {
    for kind in kinds() {
        for protocol in [Protocol::Resp3, Protocol::Resp2] {
            let server = Server::start(kind).unwrap();
            let chans = channels("order", 500);
            let ledger = Arc::new(Ledger::new(&chans));
            let handler = Accounted::new(&ledger, "sub");
            let ps = Arc::new(
                PubSub::builder()
                    .address(server.addr().to_string())
                    .workers(8)
                    .queue_capacity(1 << 16)
                    // A connection's channels are handled on one worker:
                    // 8 connections keep the 8 workers busy.
                    .subscribe_connections(8)
                    .protocol(protocol)
                    .io_threads(1)
                    .handler_arc(handler.clone())
                    .build()
                    .unwrap(),
            );
            ps.subscribe(&chans).unwrap();
            ps.wait_active(&chans, BOUND).unwrap();
            let rounds = 100u64;
            let publish = accounted::via_pubsub(ps.clone());
            for _ in 0..rounds {
                accounted::round(&ledger, &*publish);
            }
            let total = rounds * chans.len() as u64;
            let what = format!("{kind:?} {protocol:?}");
            let report = accounted::settle_and_check(&ledger, BOUND, &what);
            assert_eq!(report.counts.delivered, total, "{what}");
            assert_eq!(report.counts.signals, 0, "{what}");
            // `delivered` is counted once the handler has returned.
            let m = testkit::wait_for("delivered count", BOUND, || {
                let m = ps.metrics();
                Ok((m.delivered >= total).then_some(m))
            })
            .unwrap();
            assert_eq!(
                handler.threads.lock().len(),
                8,
                "channels spread over all 8 workers"
            );
            assert_eq!(m.delivered, total, "{m:?}");
            assert_eq!(m.received, total, "{m:?}");
            assert_eq!(m.dropped.total(), 0, "{m:?}");
            assert_eq!(m.channels, 500);
            assert_eq!(m.active_connections, vec![8]);
            assert!(m.subscribe_commands >= 8, "{m:?}");
            assert!(m.confirmations >= 500, "{m:?}");
            ps.shutdown();
        }
    }
}

#[test]
fn sharded_over_three_servers_delivers_everything() {
    for kind in kinds() {
        let servers = Servers::start(kind, 3).unwrap();
        let addrs: Vec<String> = servers.addrs().iter().map(|a| a.to_string()).collect();
        let chans = channels("shard", 3000);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let sub = build(addrs.clone(), handler, 4);
        // A separate publisher instance: agreement comes from shard_of alone.
        let publisher = Arc::new(build(addrs, Accounted::new(&Ledger::new([""]), "-"), 1));
        sub.subscribe(&chans).unwrap();
        sub.wait_active(&chans, BOUND).unwrap();
        // Each server holds exactly the channels shard_of gives it.
        for (i, server) in servers.iter().enumerate() {
            let mine: Vec<Vec<u8>> = chans
                .iter()
                .filter(|c| sub.server_of(c) == Some(i))
                .cloned()
                .collect();
            let others: Vec<Vec<u8>> = chans
                .iter()
                .filter(|c| sub.server_of(c) != Some(i))
                .take(50)
                .cloned()
                .collect();
            assert!(mine.len() > 700, "server {i} has {} channels", mine.len());
            assert!(numsub(server, &mine).iter().all(|&n| n == 1), "{kind:?}");
            assert!(numsub(server, &others).iter().all(|&n| n == 0), "{kind:?}");
        }
        let publish = accounted::via_pubsub(publisher.clone());
        for _ in 0..5 {
            accounted::round(&ledger, &*publish);
        }
        let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
        assert_eq!(report.counts.delivered, 15_000);
        let m = sub.metrics();
        assert_eq!(m.active_connections, vec![1, 1, 1], "{m:?}");
        assert_eq!(publisher.metrics().published, 15_000);
    }
}

#[test]
fn subscribe_unsubscribe_race_ends_in_last_asked_state() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let chans = Arc::new(channels("race", 200));
        // The last word: even channels wanted, odd ones not.
        let (want_idx, not_idx): (Vec<usize>, Vec<usize>) =
            (0..chans.len()).partition(|i| i % 2 == 0);
        let want: Vec<Vec<u8>> = want_idx.iter().map(|&i| chans[i].clone()).collect();
        let not: Vec<Vec<u8>> = not_idx.iter().map(|&i| chans[i].clone()).collect();
        let ledger = Arc::new(Ledger::new(chans.iter()));
        let handler = Accounted::with_tap(ledger.tap_for("sub", &want_idx));
        let ps = Arc::new(
            PubSub::builder()
                .address(server.addr().to_string())
                .workers(2)
                .batch_size(7) // many small commands interleave with the race
                .io_threads(1)
                .handler_arc(handler)
                .build()
                .unwrap(),
        );
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
        // Messages reach exactly the wanted channels: two rounds to every
        // channel; once every wanted channel has its second message, the
        // first round to the unwanted ones (published before it, on the
        // same connections) would have arrived too: the tap counts them as
        // unwanted.
        let publish = accounted::via_pubsub(ps.clone());
        accounted::round(&ledger, &*publish);
        accounted::round(&ledger, &*publish);
        let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
        assert_eq!(report.counts.delivered, 200, "{kind:?}");
    }
}

#[test]
fn subscribe_calls_coalesce_into_commands_of_at_most_the_batch_size() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let handler = Accounted::new(&Ledger::new([""]), "sub");
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .subscribe_connections(1)
            .workers(1)
            .batch_size(100)
            .subscribe_delay(Duration::from_millis(20))
            .io_threads(1)
            .handler_arc(handler)
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
        // The server saw exactly those (liveness is a PING, not a
        // subscription of its own).
        assert_eq!(
            server.command_calls("subscribe").unwrap(),
            m.subscribe_commands,
            "{kind:?}"
        );
        ps.unsubscribe(&chans).unwrap();
        // The last channels leave in the last command: once the server has
        // dropped them, every command has been sent (and counted).
        let last = &chans[chans.len() - 10..];
        testkit::wait_for("unsubscribed", BOUND, || {
            Ok(
                (ps.metrics().channels == 0 && numsub(&server, last).iter().all(|&n| n == 0))
                    .then_some(()),
            )
        })
        .unwrap();
        let m = ps.metrics();
        assert!((10..=30).contains(&m.unsubscribe_commands), "{m:?}");
    }
}
