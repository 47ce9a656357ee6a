//! The thread count is the runtime's, never the topology's nor the
//! instances': a cluster instance on 1, 3, 6 or 12 primaries, and one in
//! per-partition mode with 128 subscribe connections, runs exactly the I/O
//! threads its runtime was given; 50 instances on one shared runtime add
//! none; 200 instances on one runtime run on its I/O threads, its one
//! control thread and its shared workers, and add no thread at all. Each
//! instance also delivers an accounted round, so the threads really carry
//! the traffic.
//!
//! Threads are counted by name (`shardsub-io-*`, …) in `/proc/self/task`;
//! each test has its process to itself ([`testkit::alone`]) so it sees no
//! other test's threads.

use std::sync::Arc;
use std::time::Duration;

use shardsub::cluster::Mode;
use shardsub::PubSub;
use shardsub::Runtime;
use testkit::accounting::Ledger;
use testkit::threads::threads_named;
use testkit::{Cluster, ServerKind};

use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;
use crate::support::cluster::builder;

const BOUND: Duration = Duration::from_secs(30);

/// Waits (bounded) until exactly `expected` threads named `prefix…` run.
fn assert_threads(prefix: &str, expected: usize, what: &str) {
    let r = testkit::wait_for("the thread count", Duration::from_secs(5), || {
        Ok((threads_named(prefix) == expected).then_some(()))
    });
    assert!(
        r.is_ok(),
        "{what}: {} threads named {prefix}*, expected {expected}",
        threads_named(prefix)
    );
}

/// Waits (bounded) until exactly `expected` I/O threads run: a new thread
/// names itself as it starts, and a joined one leaves `/proc` a moment
/// after it ends.
fn assert_io_threads(expected: usize, what: &str) {
    assert_threads("shardsub-io", expected, what);
}

/// One acknowledged round to every channel; every tap gets all of it.
fn deliver(ps: &Arc<PubSub>, ledger: &Arc<Ledger>, what: &str) {
    let publish = accounted::via_cluster(ps.clone());
    accounted::round(ledger, &*publish);
    let report = accounted::settle_and_check(ledger, BOUND, what);
    assert_eq!(report.failed_total(), 0, "{what}: {report}");
}

/// An instance with `io_threads(2)` on `cluster`: two I/O threads while it
/// runs, whatever the node or connection count; none once it is dropped.
fn runs_two_threads(cluster: &Cluster, mode: Mode, partitions: u32, conns: usize, what: &str) {
    let before = threads_named("shardsub-io");
    let chans = channels("t", 256);
    let ledger = Arc::new(Ledger::new(&chans));
    let handler = Accounted::new(&ledger, "sub");
    let ps = builder(cluster, handler)
        .mode(mode)
        .partitions(partitions)
        .io_threads(2)
        .build()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let ps = Arc::new(ps);
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, BOUND)
        .unwrap_or_else(|e| panic!("{what}: {e}; {:?}", ps.cluster_metrics().unwrap()));
    deliver(&ps, &ledger, what);
    let m = ps.cluster_metrics().unwrap();
    assert_eq!(m.subscribe_connections, conns, "{what}: {m:?}");
    assert_io_threads(before + 2, &format!("{what}: while running"));
    ps.shutdown();
    drop(ps);
    assert_io_threads(before, &format!("{what}: after the drop"));
}

fn per_topology(kind: ServerKind) {
    for masters in [1, 3, 6, 12] {
        let cluster = Cluster::start(kind, masters, 0).expect("cluster");
        let what = format!("{kind:?} on {masters} primaries");
        runs_two_threads(&cluster, Mode::Sharded, 128, masters, &what);
        if masters == 3 {
            let what = format!("{kind:?} per-partition on 3 primaries");
            runs_two_threads(&cluster, Mode::PerPartition, 128, 128, &what);
        }
    }
}

#[test]
fn thread_count_is_set_by_the_runtime_not_by_the_topology() {
    if !testkit::alone() {
        return; // it ran, alone, in a child process
    }
    for kind in testkit::kinds() {
        per_topology(kind);
    }
}

#[test]
fn fifty_instances_on_one_runtime_add_no_io_threads() {
    if !testkit::alone() {
        return; // it ran, alone, in a child process
    }
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let before = threads_named("shardsub-io");
        let runtime = Runtime::new(2).unwrap();
        assert_io_threads(before + 2, &format!("{kind:?}: the runtime"));
        let chans = channels("fleet", 64);
        let ledger = Arc::new(Ledger::new(&chans));
        let fleet: Vec<Arc<PubSub>> = (0..50)
            .map(|n| {
                let handler = Accounted::new(&ledger, &format!("node{n}"));
                let ps = builder(&cluster, handler)
                    .workers(1)
                    .runtime(&runtime)
                    .build()
                    .unwrap_or_else(|e| panic!("{kind:?} instance {n}: {e}"));
                Arc::new(ps)
            })
            .collect();
        for ps in &fleet {
            ps.subscribe(&chans).unwrap();
        }
        for ps in &fleet {
            ps.wait_active(&chans, BOUND)
                .unwrap_or_else(|e| panic!("{kind:?}: {e}; {:?}", ps.cluster_metrics().unwrap()));
        }
        assert_io_threads(before + 2, &format!("{kind:?}: 50 instances on it"));
        // One instance publishes; all 50 taps get every message once.
        deliver(&fleet[0], &ledger, &format!("{kind:?} fleet of 50"));
        for ps in &fleet {
            ps.shutdown();
        }
        drop(fleet);
        assert_io_threads(before + 2, &format!("{kind:?}: the runtime outlives them"));
        drop(runtime);
        assert_io_threads(before, &format!("{kind:?}: its threads end with it"));
    }
}

/// 200 instances (one server each: a fleet's gateways in one process) on
/// one runtime with 2 I/O and 2 worker threads: 5 threads in all, the same
/// as for one instance, and each instance gets every message of the
/// round. An instance that asks for workers of its own gets them.
#[test]
fn two_hundred_instances_on_one_runtime_add_no_threads() {
    if !testkit::alone() {
        return; // it ran, alone, in a child process
    }
    for kind in testkit::kinds() {
        let server = testkit::Server::start(kind).expect("server");
        let before = threads_named("shardsub-");
        let runtime = Runtime::with_workers(2, 2).unwrap();
        assert_eq!(runtime.workers(), 2);
        let chans = channels("fleet", 8);
        let ledger = Arc::new(Ledger::new(&chans));
        let build = |n: usize| {
            let handler = Accounted::new(&ledger, &format!("node{n}"));
            let ps = PubSub::builder()
                .address(server.addr().to_string())
                .handler_arc(handler)
                .runtime(&runtime)
                .build()
                .unwrap_or_else(|e| panic!("{kind:?} instance {n}: {e}"));
            Arc::new(ps)
        };
        let first = build(0);
        first.subscribe(&chans).unwrap();
        first.wait_active(&chans, BOUND).unwrap();
        let what = format!("{kind:?}: one instance");
        assert_threads("shardsub-", before + 5, &what);
        // Thread names are cut to 15 bytes in `/proc`.
        assert_threads("shardsub-contro", 1, &what);
        assert_threads("shardsub-worker", 2, &what);
        let mut fleet = vec![first];
        fleet.extend((1..200).map(build));
        for ps in &fleet {
            ps.subscribe(&chans).unwrap();
        }
        for ps in &fleet {
            ps.wait_active(&chans, BOUND)
                .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        }
        assert_threads("shardsub-", before + 5, &format!("{kind:?}: 200 instances"));
        // One instance publishes; all 200 taps get every message once.
        deliver(&fleet[0], &ledger, &format!("{kind:?} fleet of 200"));
        // Workers of its own: one more thread, gone with it.
        let own = PubSub::builder()
            .address(server.addr().to_string())
            .on_message(|_, _| {})
            .runtime(&runtime)
            .workers(1)
            .build()
            .unwrap();
        assert_threads("shardsub-", before + 6, &format!("{kind:?}: workers(1)"));
        drop(own);
        assert_threads(
            "shardsub-",
            before + 5,
            &format!("{kind:?}: workers(1) gone"),
        );
        for ps in &fleet {
            ps.shutdown();
        }
        drop(fleet);
        drop(runtime);
        assert_threads(
            "shardsub-",
            before,
            &format!("{kind:?}: its threads end with it"),
        );
    }
}
