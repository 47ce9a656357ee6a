//! One type, one code path: the same function subscribes, publishes and
//! checks delivery (through the accounting checker) on one server, on
//! three client-side shards and on a three-primary cluster (Redis 7 and
//! Valkey 9); only the builder's placement differs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use shardsub::{PubSub, PubSubBuilder};
use testkit::accounting::Ledger;
use testkit::{Cluster, Server, Servers};

use crate::support::accounted;
use crate::support::accounted::Accounted;

const BOUND: Duration = Duration::from_secs(20);

/// What an application would write, whatever the deployment.
pub(crate) fn subscribe_publish_check(placement: PubSubBuilder, what: &str) -> shardsub::Metrics {
    let chans: Vec<Vec<u8>> = (0..500).map(|i| format!("p:{i}").into_bytes()).collect();
    let ledger = Arc::new(Ledger::new(&chans));
    let handler = Accounted::new(&ledger, what);
    let ps = placement
        .handler_arc(handler.clone())
        .workers(2)
        .queue_capacity(1 << 16)
        .active_events(true)
        .build()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let ps = Arc::new(ps);
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, BOUND)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let publish = accounted::via_cluster(ps.clone());
    for _ in 0..3 {
        accounted::round(&ledger, &*publish);
    }
    let report = accounted::settle_and_check(&ledger, BOUND, what);
    assert_eq!(report.counts.delivered, 3 * chans.len() as u64, "{what}");
    assert_eq!(report.counts.signals, 0, "{what}: {report}");
    testkit::wait_for("an active event per channel", BOUND, || {
        Ok((handler.active.lock().len() == chans.len()).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let r = ps.publish_wait(&chans[0], b"x", BOUND);
    assert_eq!(r.ok(), Some(1), "{what}: one receiver");
    ps.metrics()
}

#[test]
fn one_server_three_shards_and_a_cluster_run_the_same_code() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).unwrap();
        let one = PubSub::builder().address(server.addr().to_string());
        let m = subscribe_publish_check(one, &format!("{kind:?} one server"));
        assert_eq!(m.subscribe_errors, 0);

        let shards = Servers::start(kind, 3).unwrap();
        let three = PubSub::builder().addresses(shards.addrs().iter().map(|a| a.to_string()));
        subscribe_publish_check(three, &format!("{kind:?} three shards"));

        let cluster = Cluster::start(kind, 3, 0).unwrap();
        let seeds = cluster
            .seed_addrs()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>();
        let on_cluster = PubSub::builder().seeds(seeds);
        subscribe_publish_check(on_cluster, &format!("{kind:?} cluster"));
    }
}

/// An instance built without a handler publishes (every message reaches
/// another instance's subscribers, through the accounting checker) and
/// refuses to subscribe, on one server and on a cluster. It used to fail
/// to build ("no handler given").
#[test]
fn a_publish_only_instance_needs_no_handler() {
    let chans: Vec<Vec<u8>> = (0..200).map(|i| format!("po:{i}").into_bytes()).collect();
    let check = |placement: &dyn Fn() -> PubSubBuilder, what: &str| {
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, what);
        let sub = placement()
            .handler_arc(handler)
            .build()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        sub.subscribe(&chans).unwrap();
        sub.wait_active(&chans, BOUND)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let publisher = Arc::new(
            placement()
                .build()
                .unwrap_or_else(|e| panic!("{what}: a publish-only build: {e}")),
        );
        let e = publisher.subscribe(["po:x"]).unwrap_err();
        assert!(
            matches!(&e, shardsub::Error::InvalidArgument(w) if w.contains("without a handler")),
            "{what}: {e}"
        );
        let publish = accounted::via_cluster(publisher.clone());
        accounted::round(&ledger, &*publish);
        let report = accounted::settle_and_check(&ledger, BOUND, what);
        assert_eq!(report.counts.delivered, chans.len() as u64, "{what}");
        assert_eq!(publisher.metrics().publish_errors, 0, "{what}");
    };
    for kind in testkit::kinds() {
        let server = Server::start(kind).unwrap();
        let addr = server.addr().to_string();
        check(
            &|| PubSub::builder().address(addr.clone()),
            &format!("{kind:?} one server"),
        );
        let cluster = Cluster::start(kind, 3, 0).unwrap();
        let seeds: Vec<String> = cluster.seed_addrs().iter().map(|a| a.to_string()).collect();
        check(
            &|| PubSub::builder().seeds(seeds.clone()),
            &format!("{kind:?} cluster"),
        );
    }
}

/// A message the subscribers' output buffers cannot hold fails at publish
/// with `Error::TooLarge` (nothing sent; the limit read from the servers'
/// `client-output-buffer-limit` at build), on one server and on a
/// cluster, while the rest delivers. With the check off, the same
/// publish is taken (`Ok(1)`) and Redis cuts the subscriber off: all the
/// application saw before was the gap.
#[test]
fn a_message_over_the_subscribers_output_buffer_limit_fails_at_publish() {
    let limit = [
        "CONFIG",
        "SET",
        "client-output-buffer-limit",
        "pubsub 1mb 512kb 60",
    ];
    let big = vec![b'x'; 2 << 20];
    let too_large = |r: Result<(), shardsub::Error>, what: &str| match r {
        Err(shardsub::Error::TooLarge {
            limit: 1048576,
            source,
            ..
        }) if source.contains("client-output-buffer-limit") => {}
        other => panic!("{what}: {other:?}"),
    };
    for kind in testkit::kinds() {
        let what = format!("{kind:?} one server");
        let server = Server::start(kind).unwrap();
        server.cmd_str(&limit).unwrap();
        let addr = server.addr().to_string();
        let chans = [b"big".to_vec()];
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, &what);
        let ps = Arc::new(
            PubSub::builder()
                .address(addr.clone())
                .handler_arc(handler.clone())
                .build()
                .unwrap(),
        );
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        too_large(ps.publish("big", &big), &what);
        too_large(ps.publish_wait("big", &big, BOUND).map(drop), &what);
        accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(report.counts.delivered, 1, "{what}");
        assert_eq!(handler.gap_events.load(Ordering::Relaxed), 0, "{what}");

        let unchecked = PubSub::builder()
            .address(addr.clone())
            .max_message_size(0)
            .build()
            .unwrap();
        assert_eq!(
            unchecked.publish_wait("big", &big, BOUND).unwrap(),
            1,
            "{what}"
        );
        // Redis cuts the subscriber off at once (Valkey 9 delivered it in
        // this run: its large replies are not counted the same way).
        if kind == testkit::ServerKind::Redis {
            testkit::wait_for("the subscriber cut off", BOUND, || {
                Ok((handler.gap_events.load(Ordering::Relaxed) >= 1).then_some(()))
            })
            .unwrap_or_else(|e| panic!("{what}: {e}: {:?}", handler.timeline.lock()));
        }

        let what = format!("{kind:?} cluster");
        let cluster = Cluster::start(kind, 3, 0).unwrap();
        for &m in &cluster.masters() {
            cluster.node(m).cmd_str(&limit).unwrap();
        }
        let seeds: Vec<String> = cluster.seed_addrs().iter().map(|a| a.to_string()).collect();
        let ps = PubSub::builder().seeds(seeds).build().unwrap();
        too_large(ps.publish("big", &big), &what);
        assert_eq!(
            ps.publish_wait("big", b"small", BOUND).unwrap(),
            0,
            "{what}"
        );
    }
}
