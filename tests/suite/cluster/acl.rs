//! A subscribe the cluster refuses for another reason than routing (an ACL
//! denial) on real clusters (Redis 7 and Valkey 9): the refused channels
//! are isolated and reported (an event, `wait_active`'s error, a metric),
//! the other channels of the same partition's command are subscribed and
//! deliver every message, and no topology refresh or gap follows. An ACL
//! user, its password and a connection name reach every node connection,
//! and a refused password fails the build at once with the server's text.

use std::sync::Arc;
use std::time::Duration;

use shardsub::Error;
use testkit::accounting::Ledger;
use testkit::{Cluster, ServerKind};

use crate::support;
use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;
use crate::support::cluster::builder;

const BOUND: Duration = Duration::from_secs(20);

fn refused(kind: ServerKind) {
    let cluster = Cluster::start(kind, 3, 0).expect("cluster");
    // The default user may use the channels named *ok:* and the library's
    // own service channels, nothing else.
    for &i in &cluster.masters() {
        cluster
            .node(i)
            .cmd_str(&[
                "ACL",
                "SETUSER",
                "default",
                "resetchannels",
                "&*ok:*",
                "&__shardsub:*",
            ])
            .unwrap();
    }
    let ok = channels("ok", 300);
    let ledger = Arc::new(Ledger::new(&ok));
    let handler = Accounted::new(&ledger, "sub");
    let ps = Arc::new(builder(&cluster, handler.clone()).build().unwrap());
    // Two refused channels, each in the partition of an allowed one: the
    // same SSUBSCRIBE carries both.
    let parts = ps.partitions().expect("a cluster").clone();
    let no: Vec<Vec<u8>> = [&ok[0], &ok[1]]
        .iter()
        .map(|c| {
            (0..100_000)
                .map(|i| format!("no:{i}").into_bytes())
                .find(|n| parts.partition_of(n) == parts.partition_of(c))
                .expect("a refused channel in that partition")
        })
        .collect();
    let mut all = ok.clone();
    all.extend(no.iter().cloned());
    ps.subscribe(&all).unwrap();
    ps.wait_active(&ok, BOUND).unwrap_or_else(|e| {
        panic!(
            "{kind:?}: the allowed channels: {e}; {:?}",
            ps.cluster_metrics().unwrap()
        )
    });
    for c in &no {
        accounted::assert_refused(ps.wait_active(&[c], BOUND), c, &format!("{kind:?}"));
    }
    testkit::wait_for("refused events", BOUND, || {
        Ok((handler.refused.lock().len() >= 2).then_some(()))
    })
    .unwrap();
    let mut named: Vec<Vec<u8>> = handler
        .refused
        .lock()
        .iter()
        .map(|(c, _)| c.clone())
        .collect();
    named.sort();
    let mut want = no.clone();
    want.sort();
    assert_eq!(named, want, "{kind:?}");
    let all = ps.metrics();
    let m = all.cluster.as_ref().unwrap();
    assert_eq!(all.refused_channels, 2, "{kind:?} {m:?}");
    assert_eq!(
        m.rebuilds.subscribe_error, 0,
        "{kind:?}: an ACL refusal is no routing news: {m:?}"
    );
    assert_eq!(all.gaps, 0, "{kind:?}: {m:?}");
    let publish = accounted::via_cluster(ps.clone());
    for _ in 0..3 {
        accounted::round(&ledger, &*publish);
    }
    let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
    assert_eq!(report.counts.delivered, 900, "{kind:?}");
    assert_eq!(report.failed_total(), 0, "{kind:?}");
    // Still refused a while later: no retry storm, no gap.
    assert!(matches!(
        ps.wait_active(&[&no[0]], Duration::from_millis(50)),
        Err(Error::SubscribeRefused { .. })
    ));
    let all2 = ps.metrics();
    let m2 = all2.cluster.as_ref().unwrap();
    assert_eq!(all2.gaps, 0, "{kind:?}: {m2:?}");
    assert_eq!(m2.rebuilds.subscribe_error, 0, "{kind:?}: {m2:?}");
    ps.shutdown();
}

#[test]
fn a_refused_channel_is_isolated_and_the_rest_of_its_partition_delivers() {
    for kind in testkit::kinds() {
        refused(kind);
    }
}

/// Every option of the node connections reaches every node: an ACL user
/// with its password and a connection name (on the publish and subscribe
/// connections of every primary), and a refused password fails the build
/// with the server's reason instead of starting degraded without a word.
#[test]
fn an_acl_user_and_a_client_name_reach_every_node() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        for &i in &cluster.masters() {
            cluster
                .node(i)
                .cmd_str(&[
                    "ACL", "SETUSER", "app", "on", ">s3cret", "~*", "&*", "+@all",
                ])
                .unwrap();
        }
        let chans = channels("acl", 100);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let ps = builder(&cluster, handler.clone())
            .username("app")
            .password("s3cret")
            .client_name("app-node-7")
            .request_timeout(Duration::from_secs(3))
            .build()
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let ps = Arc::new(ps);
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
        accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?} as app"));
        for &i in &cluster.masters() {
            let named = support::cluster::named_clients(&cluster, i, "app-node-7");
            assert_eq!(named, 2, "{kind:?} master {i}: one subscribe, one publish");
            let users = cluster.node(i).cmd(&[b"CLIENT", b"LIST"]).unwrap();
            let text = testkit::values::text(&users).unwrap_or_default();
            let as_app = text
                .lines()
                .filter(|l| l.contains("name=app-node-7") && l.contains(" user=app "))
                .count();
            assert_eq!(as_app, 2, "{kind:?} master {i}: {text}");
        }
        drop(ps);
        let asked = std::time::Instant::now();
        let denied = builder(&cluster, Accounted::new(&ledger, "denied"))
            .username("app")
            .password("wrong")
            .build();
        match denied {
            Err(Error::Auth { message, .. }) => {
                assert!(message.starts_with("WRONGPASS"), "{kind:?}: {message}")
            }
            Err(e) => panic!("{kind:?}: not the server's refusal: {e}"),
            Ok(_) => panic!("{kind:?}: a refused password started an instance"),
        }
        // At once, not after the 10 s a cluster gets to come up.
        let waited = asked.elapsed();
        assert!(waited < Duration::from_secs(8), "{kind:?}: {waited:?}");
        let half = builder(&cluster, Accounted::new(&ledger, "half"))
            .username("app")
            .build();
        assert!(matches!(half, Err(Error::Config(_))), "{kind:?}: {half:?}");
    }
}
