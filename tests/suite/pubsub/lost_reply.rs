//! On N shards (Redis 7 and Valkey 9, two servers): a publish that ran
//! but whose reply was lost when its connection broke fails with
//! `ConnectionLost` (counted for a fire-and-forget one) and is not sent
//! again, as on a cluster (`cluster::lost_reply`): no subscriber gets it
//! twice.
//!
//! The publisher reaches each server through a [`FaultProxy`], the
//! subscriber directly. The proxies swallow the replies, every publish of
//! a round is seen delivered, then every connection through the proxies
//! is cut.

use std::sync::Arc;
use std::time::Duration;

use shardsub::PubSub;
use testkit::accounting::Ledger;
use testkit::{Direction, FaultProxy, ServerKind, Servers};

use crate::support::accounted::{self, Accounted};
use crate::support::channels;

const BOUND: Duration = Duration::from_secs(30);

fn no_resend_after_a_cut(kind: ServerKind) {
    let servers = Servers::start(kind, 2).expect("servers");
    let proxies: Vec<FaultProxy> = servers
        .addrs()
        .iter()
        .map(|&a| FaultProxy::start(a).expect("proxy"))
        .collect();
    let chans = channels("lost", 12);
    let n = chans.len() as u64;
    let ledger = Arc::new(Ledger::new(&chans));
    let handler = Accounted::new(&ledger, "subscriber");
    let sub = PubSub::builder()
        .addresses(servers.addrs().iter().map(|a| a.to_string()))
        .handler_arc(handler.clone())
        .build()
        .expect("subscriber");
    sub.subscribe(&chans).unwrap();
    sub.wait_active(&chans, BOUND).unwrap();
    let publ = Arc::new(
        PubSub::builder()
            .addresses(proxies.iter().map(|p| p.addr().to_string()))
            .handler(|_: &[u8], _: &[u8]| {})
            .request_timeout(Duration::from_secs(120))
            .build()
            .expect("publisher"),
    );
    accounted::acked_round(&ledger, &publ, BOUND);

    // The servers run what the publisher sends; the replies are lost.
    for p in &proxies {
        p.blackhole_toward(Direction::ToClient, true);
    }
    let (stalled, waiting) = accounted::publish_unanswered(&ledger, &publ, &handler, BOUND);

    // The connections break with the replies still out.
    for p in &proxies {
        p.heal();
    }
    let waited = waiting.join().expect("publish_wait thread");
    ledger
        .wait_outcomes(BOUND)
        .unwrap_or_else(|e| panic!("{kind:?}: {e}\n{}", ledger.report()));
    // Once the publisher has reconnected, delivery goes on.
    // One channel outside the ledger per server, for the probes.
    let probes: Vec<Vec<u8>> = (0..proxies.len())
        .map(|i| {
            (0..1000)
                .map(|j| format!("probe:{j}").into_bytes())
                .find(|c| publ.server_of(c) == Some(i))
                .expect("a channel on each server")
        })
        .collect();
    let refused = std::cell::Cell::new(0u64);
    testkit::wait_for("the publisher reconnected", BOUND, || {
        let up = probes.iter().all(|c| {
            let ok = publ.publish_wait(c.as_slice(), b"", BOUND).is_ok();
            refused.set(refused.get() + u64::from(!ok));
            ok
        });
        Ok(up.then_some(()))
    })
    .unwrap();
    accounted::acked_round(&ledger, &publ, BOUND);
    let report = ledger.report();
    eprintln!("{kind:?}: {report}");
    let what = format!("{kind:?}");
    accounted::assert_not_sent_again(&what, &report, &waited);
    // Those with a handle failed with the error that says their outcome
    // is unknown (above); the fire-and-forget ones were counted.
    assert_eq!(report.failed_total(), n + 1, "{kind:?}: {report}");
    // The probes' refusals while reconnecting are counted too.
    let errors = publ.metrics().publish_errors - refused.get();
    assert_eq!(errors, stalled, "{kind:?}: publish_errors");
    publ.shutdown();
    sub.shutdown();
}

#[test]
fn a_publish_that_ran_before_its_connection_broke_is_not_sent_again() {
    for kind in testkit::kinds() {
        no_resend_after_a_cut(kind);
    }
}
