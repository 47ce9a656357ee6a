//! The async API against real servers (Redis 7 and Valkey 9), on tokio:
//! `active().await`, `patterns_active().await`, `publish_pending().await`, a [`Receiver`] read with
//! `recv().await`, and `shutdown_pending().await`, on one server, on two
//! client-side shards and on a 3-master cluster. Every delivery goes
//! through the accounting checker; a receiver whose queue is full must
//! signal the loss in order.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use shardsub::pubsub::{Delivery, Receiver};
use shardsub::{PubSub, PubSubBuilder};
use testkit::accounting::{Ledger, Signal, Tap};
use testkit::{kinds, Cluster, Server, Servers};

use crate::support;
use crate::support::accounted;
use crate::support::accounted::PAYLOAD_LEN;
use crate::support::channels;

const BOUND: Duration = Duration::from_secs(20);

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Awaits `f`, panicking when it is not ready within `bound`. The timer
/// is looked at first: a future that was never woken cannot pass when the
/// timer wakes the task (as it would under `tokio::time::timeout`, which
/// polls the inner future first).
async fn within<F: Future>(bound: Duration, what: &str, f: F) -> F::Output {
    let sleep = tokio::time::sleep(bound);
    tokio::pin!(f, sleep);
    tokio::select! {
        biased;
        () = &mut sleep => panic!("{what}: not ready within {bound:?} (never woken?)"),
        out = &mut f => out,
    }
}

/// Passes one item to the tap; returns it as text (`c0:5` for message 5 of
/// channel index 0, `dropped N` for a drop event).
fn account(ledger: &Ledger, tap: &Tap, d: &Delivery) -> String {
    match d {
        Delivery::Message { channel, payload } => {
            tap.message(channel, payload);
            let seq = u64::from_le_bytes(payload[..8].try_into().expect("stamped payload"));
            let c = ledger.index_of(channel).map_or(-1, |c| c as i64);
            format!("c{c}:{seq}")
        }
        Delivery::Dropped { channels, messages } => {
            for c in channels.iter() {
                tap.signal(c, Signal::Drop);
            }
            format!("dropped {messages}")
        }
        Delivery::Gap { channels, .. } => {
            for c in channels.iter() {
                tap.signal(c, Signal::Gap);
            }
            "gap".into()
        }
        other => format!("{other:?}"),
    }
}

/// Reads `rx` into `tap` on a thread of its own (the tap wants one
/// handler thread per channel) with a current-thread runtime, until
/// `want` messages were read or [`BOUND`] passes.
fn spawn_reader(
    mut rx: Receiver,
    ledger: Arc<Ledger>,
    tap: Arc<Tap>,
    want: u64,
) -> std::thread::JoinHandle<(Receiver, u64)> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("tokio runtime");
        rt.block_on(async move {
            let mut got = 0;
            let deadline = tokio::time::sleep(BOUND);
            tokio::pin!(deadline);
            while got < want {
                tokio::select! {
                    biased;
                    () = &mut deadline => break,
                    d = rx.recv() => match d {
                        Some(d) => {
                            got += u64::from(matches!(d, Delivery::Message { .. }));
                            account(&ledger, &tap, &d);
                        }
                        None => break,
                    },
                }
            }
            (rx, got)
        })
    })
}

/// Subscribes 64 channels, awaits them active, publishes 20 rounds from 4
/// tasks with `publish_pending().await` (each channel from one task, in
/// order), reads everything through the receiver, checks the accounting,
/// then shuts down with `shutdown_pending().await` and sees the receiver
/// end.
fn publish_and_receive(builder: PubSubBuilder, what: &str) {
    const ROUNDS: u64 = 20;
    const TASKS: usize = 4;
    let chans = channels("async", 64);
    let ledger = Arc::new(Ledger::new(&chans));
    let tap = ledger.tap("rx");
    let (builder, rx) = builder.workers(2).queue_capacity(1 << 16).receiver(1 << 16);
    let ps = Arc::new(builder.build().unwrap_or_else(|e| panic!("{what}: {e}")));
    let rt = multi_thread();
    rt.block_on(async {
        // Polled once before the subscribe: the confirmations must wake it.
        let mut active = std::pin::pin!(ps.active(&chans));
        assert!(futures_poll_once(active.as_mut()).await.is_none(), "{what}");
        ps.subscribe(&chans).unwrap();
        within(BOUND, what, active)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    });
    let total = ROUNDS * chans.len() as u64;
    let reader = spawn_reader(rx, ledger.clone(), tap, total);
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let (ps, ledger) = (ps.clone(), ledger.clone());
            tasks.push(tokio::spawn(async move {
                let mut payload = Vec::with_capacity(PAYLOAD_LEN);
                let mut receivers = Vec::new();
                for _ in 0..ROUNDS {
                    for c in (t..ledger.names().len()).step_by(TASKS) {
                        let stamp = ledger.stamp(c, &mut payload, PAYLOAD_LEN);
                        let r = ps.publish_pending(ledger.name(c), &payload).await;
                        accounted::record(&ledger, stamp, &r, true);
                        receivers.push(r.ok());
                    }
                }
                receivers
            }));
        }
        for t in tasks {
            let receivers = t.await.expect("publisher task");
            // Every publish reached this instance's subscription.
            assert!(
                receivers.iter().all(|r| matches!(r, Some(n) if *n >= 1)),
                "{what}: {receivers:?}"
            );
        }
    });
    let (mut rx, got) = reader.join().expect("reader thread");
    let report = accounted::settle_and_check(&ledger, BOUND, what);
    assert_eq!(report.acked, total, "{what}: {report}");
    assert_eq!(report.counts.delivered, total, "{what}: {report}");
    assert_eq!(report.counts.lost_signalled, 0, "{what}: {report}");
    assert_eq!(got, total, "{what}");
    rt.block_on(async {
        // The other awaitable calls, on this placement: a wait for
        // unsubscribes, and commands.
        let half = &chans[..32];
        ps.unsubscribe(half).unwrap();
        within(BOUND, what, ps.inactive(half))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(half.iter().all(|c| !ps.is_active(c)), "{what}");
        let set = ps.command_pending("async:key", ["SET", "async:key", "v"]);
        within(BOUND, what, set)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let get = ps.command_pending("async:key", ["GET", "async:key"]);
        let v = within(BOUND, what, get).await.unwrap();
        assert_eq!(v.as_str(), Some("v"), "{what}");
    });
    rt.block_on(async {
        let done = within(BOUND, what, ps.shutdown_pending()).await;
        done.expect("shutdown");
        // Nothing more was queued; the handler is gone with the workers.
        assert_eq!(within(BOUND, what, rx.recv()).await, None, "{what}");
        let r = ps.active(&chans[..1]).await;
        assert!(matches!(r, Err(shardsub::Error::Shutdown)), "{what}: {r:?}");
        let r = within(BOUND, what, ps.publish_pending(&chans[0], b"late")).await;
        assert!(matches!(r, Err(shardsub::Error::Shutdown)), "{what}: {r:?}");
    });
}

/// Polls `f` once: its output if it was ready.
async fn futures_poll_once<F: Future + Unpin>(mut f: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

#[test]
fn async_publish_and_receive_on_one_server_and_two_shards() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let b = PubSub::builder().address(server.addr().to_string());
        publish_and_receive(b, &format!("{kind:?} one server"));
        let servers = Servers::start(kind, 2).unwrap();
        let addrs = servers
            .addrs()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>();
        let b = PubSub::builder().addresses(addrs);
        publish_and_receive(b, &format!("{kind:?} two shards"));
    }
}

/// `patterns_active().await` on two shards: polled before the
/// `psubscribe`, it is woken once every server confirmed the pattern; a
/// pattern a server refuses (ACL) fails it with the refusal.
#[test]
fn patterns_active_is_ready_once_every_server_confirmed_or_one_refused() {
    for kind in kinds() {
        let what = format!("{kind:?}");
        let servers = Servers::start(kind, 2).unwrap();
        // User `app` may use the library's service channels and ok:*.
        for s in servers.iter() {
            support::pubsub::acl_app(s, &[b"&ok:*"]);
        }
        let addrs: Vec<String> = servers.addrs().iter().map(|a| a.to_string()).collect();
        let ps = PubSub::builder()
            .addresses(addrs)
            .username("app")
            .password("secret")
            .handler(shardsub::handler_fn(|_, _| {}))
            .build()
            .unwrap();
        multi_thread().block_on(async {
            let mut ok = std::pin::pin!(ps.patterns_active(&["ok:*"]));
            assert!(futures_poll_once(ok.as_mut()).await.is_none(), "{what}");
            ps.psubscribe(["ok:*", "no:*"]).unwrap();
            within(BOUND, &what, ok).await.unwrap();
            assert!(ps.is_pattern_active(b"ok:*"), "{what}");
            let r = within(BOUND, &what, ps.patterns_active(&["no:*"])).await;
            accounted::assert_refused(r, b"no:*", &what);
        });
        ps.shutdown();
    }
}

#[test]
fn async_publish_and_receive_on_a_cluster() {
    for kind in kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let seeds = cluster
            .seed_addrs()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>();
        let b = PubSub::builder().seeds(seeds);
        publish_and_receive(b, &format!("{kind:?} cluster"));
    }
}

#[test]
fn a_full_receiver_signals_the_loss_in_order() {
    const CAPACITY: usize = 8;
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let chans = channels("full", 2);
        let ledger = Arc::new(Ledger::new(&chans));
        let tap = ledger.tap("rx");
        // One worker: the receiver sees the server's order across channels.
        let (builder, mut rx) = PubSub::builder()
            .address(server.addr().to_string())
            .workers(1)
            .queue_capacity(1 << 16)
            .receiver(CAPACITY);
        let ps = Arc::new(builder.build().unwrap());
        let rt = multi_thread();
        let what = format!("{kind:?}");
        // Publishes `n` stamped messages to each channel in turn, awaited
        // one by one, then waits until the handler has had `delivered`.
        let publish = |n: u32, delivered: u64| {
            rt.block_on(async {
                let mut payload = Vec::with_capacity(PAYLOAD_LEN);
                for c in 0..chans.len() {
                    for _ in 0..n {
                        let stamp = ledger.stamp(c, &mut payload, PAYLOAD_LEN);
                        let r = ps.publish_pending(ledger.name(c), &payload).await;
                        accounted::record(&ledger, stamp, &r, true);
                    }
                }
            });
            testkit::wait_for("handler calls", BOUND, || {
                Ok((ps.metrics().delivered >= delivered).then_some(()))
            })
            .unwrap();
        };
        let mut log = Vec::new();
        // Up to `n` items, as many as are queued.
        let read = |rx: &mut Receiver, n: usize| -> Vec<String> {
            (0..n)
                .map_while(|_| rx.try_recv())
                .map(|d| account(&ledger, &tap, &d))
                .collect()
        };
        rt.block_on(async {
            ps.subscribe(&chans).unwrap();
            within(BOUND, &what, ps.active(&chans)).await.unwrap();
        });
        // 40 messages: 8 fit, 32 are dropped (12 of c0, all 20 of c1).
        publish(20, 40);
        assert_eq!((rx.len(), rx.dropped()), (CAPACITY, 32), "{what}");
        log.extend(read(&mut rx, 3));
        // 10 more: 3 fit after the drop event, 7 are dropped.
        publish(5, 50);
        assert_eq!(rx.dropped(), 39, "{what}");
        log.extend(read(&mut rx, 5 + 1 + 3 + 1));
        assert!(rx.try_recv().is_none(), "{what}");
        let want = [
            "c0:0",
            "c0:1",
            "c0:2",
            "c0:3",
            "c0:4",
            "c0:5",
            "c0:6",
            "c0:7",
            "dropped 32",
            "c0:20",
            "c0:21",
            "c0:22",
            "dropped 7",
        ];
        assert_eq!(log[..], want, "{what}");
        // The last message of each channel is owed to the checker: one
        // more each, with room for them.
        publish(1, 52);
        log.extend(read(&mut rx, 2));
        assert_eq!(log[want.len()..], ["c0:25", "c1:25"], "{what}");
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(report.counts.delivered, 13, "{what}: {report}");
        assert_eq!(report.counts.lost_signalled, 39, "{what}: {report}");
        // The worker queues dropped nothing: every loss was the receiver's.
        assert_eq!(ps.metrics().dropped.total(), 0, "{what}");
        ps.shutdown();
    }
}

#[test]
fn a_refused_channel_fails_its_active_future_and_reaches_the_receiver() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        // User `app` may use the library's service channels and ok:*.
        support::pubsub::acl_app(&server, &[b"&ok:*"]);
        let (builder, mut rx) = PubSub::builder()
            .address(server.addr().to_string())
            .username("app")
            .password("secret")
            .workers(1)
            .receiver(64);
        let ps = builder.build().unwrap();
        let what = format!("{kind:?}");
        let (ok, no) = (b"ok:1".to_vec(), b"no:1".to_vec());
        multi_thread().block_on(async {
            // Polled before the subscribe: the refusal must wake it.
            let mut refused = std::pin::pin!(ps.active(&[&no]));
            assert!(futures_poll_once(refused.as_mut()).await.is_none());
            ps.subscribe([&ok, &no]).unwrap();
            within(BOUND, &what, ps.active(&[&ok])).await.unwrap();
            let r = within(BOUND, &what, refused).await;
            accounted::assert_refused(r, &no, &what);
            // The handler's event, through the receiver.
            let d = within(BOUND, &what, rx.recv()).await;
            match d {
                Some(Delivery::Refused { channel, message }) => {
                    assert_eq!(channel, no, "{what}");
                    assert!(message.starts_with("NOPERM"), "{what}: {message}");
                }
                other => panic!("{what}: {other:?}"),
            }
        });
        ps.shutdown();
    }
}

/// Three receivers, each with its own bound: one per prefix
/// (`receiver_for`) and the instance's for the rest. The small one drops
/// and signals each loss in order (through the checker); the others get
/// every message of their channels and nothing of the others'.
#[test]
fn receivers_by_prefix_keep_their_own_bounds() {
    for kind in kinds() {
        let what = format!("{kind:?}");
        let server = Server::start(kind).unwrap();
        let sets = [
            channels("small", 2),
            channels("big", 2),
            channels("rest", 2),
        ];
        let ledgers: Vec<Arc<Ledger>> = sets.iter().map(|c| Arc::new(Ledger::new(c))).collect();
        let taps: Vec<Arc<Tap>> = ledgers.iter().map(|l| l.tap("rx")).collect();
        // One worker: each receiver sees the server's order.
        let (b, small) = PubSub::builder()
            .address(server.addr().to_string())
            .workers(1)
            .queue_capacity(1 << 16)
            .receiver_for("small:", 4);
        let (b, big) = b.receiver_for("big:", 1000);
        let (b, rest) = b.receiver(1000);
        let mut rxs = [small, big, rest];
        let ps = b.build().unwrap();
        let all: Vec<&Vec<u8>> = sets.iter().flatten().collect();
        ps.subscribe(&all).unwrap();
        ps.wait_active(&all, BOUND).unwrap();
        let mut delivered = 0;
        let mut publish = |n: usize| {
            let mut payload = Vec::with_capacity(PAYLOAD_LEN);
            for ledger in &ledgers {
                for c in 0..ledger.names().len() {
                    for _ in 0..n {
                        let stamp = ledger.stamp(c, &mut payload, PAYLOAD_LEN);
                        let r = ps.publish_wait(ledger.name(c), &payload, BOUND);
                        accounted::record(ledger, stamp, &r.map(drop), false);
                    }
                }
            }
            delivered += (n * all.len()) as u64;
            testkit::wait_for("handler calls", BOUND, || {
                Ok((ps.metrics().delivered >= delivered).then_some(()))
            })
            .unwrap();
        };
        let drain = |rxs: &mut [Receiver; 3]| {
            for ((rx, ledger), tap) in rxs.iter_mut().zip(&ledgers).zip(&taps) {
                while let Some(d) = rx.try_recv() {
                    account(ledger, tap, &d);
                }
            }
        };
        publish(20);
        assert_eq!(rxs[0].dropped(), 36, "{what}: 4 of 40 fit");
        assert_eq!((rxs[1].dropped(), rxs[2].dropped()), (0, 0), "{what}");
        drain(&mut rxs);
        // The last message of each channel, with room for it: what the
        // checker wants after a drop.
        publish(1);
        drain(&mut rxs);
        let counts: Vec<(u64, u64)> = ledgers
            .iter()
            .map(|l| {
                let r = accounted::settle_and_check(l, BOUND, &what);
                (r.counts.delivered, r.counts.lost_signalled)
            })
            .collect();
        assert_eq!(counts, [(6, 36), (42, 0), (42, 0)], "{what}");
        ps.shutdown();
    }
}
