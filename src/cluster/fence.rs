//! The fence that completes a leave (see [`crate::front::leaving`]): a
//! `PING` on every subscribe connection that is up, then a marker through
//! every worker queue; and the filter the workers ask while a leave is
//! incomplete.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use crate::cluster::shared::Shared;
use crate::front::leaving::Leaving;
use crate::front::registry::WANT;
use crate::workers::{Passes, Queue};

/// One fence in flight: `PING`s unanswered, then workers yet to pass its
/// marker.
pub(crate) struct Fence {
    upto: u64,
    pings: AtomicUsize,
    workers: AtomicUsize,
    shared: Weak<Shared>,
}

impl Fence {
    /// A fence for the leaves up to `upto`, holding one `PING` slot for the
    /// starter (released by [`Fence::ping_done`] once every `PING` is
    /// submitted, so none completes it early).
    pub(crate) fn new(upto: u64, shared: &Arc<Shared>) -> Arc<Fence> {
        Arc::new(Fence {
            upto,
            pings: AtomicUsize::new(1),
            workers: AtomicUsize::new(shared.queues.len()),
            shared: Arc::downgrade(shared),
        })
    }

    /// One more `PING` to wait for.
    pub(crate) fn add_ping(&self) {
        self.pings.fetch_add(1, Ordering::AcqRel);
    }

    /// A `PING` answered or failed (or the starter done): after the last,
    /// the marker goes through every worker queue.
    pub(crate) fn ping_done(self: &Arc<Self>) {
        if self.pings.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let Some(s) = self.shared.upgrade() else {
            return;
        };
        if s.queues.is_empty() {
            return self.finish(&s);
        }
        for q in &s.queues {
            let f = self.clone();
            q.push_marker(Box::new(move || f.worker_passed()));
        }
    }

    fn worker_passed(&self) {
        if self.workers.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(s) = self.shared.upgrade() {
                self.finish(&s);
            }
        }
    }

    fn finish(&self, s: &Shared) {
        s.leaving.complete(self.upto);
        s.post(|inbox| inbox.fence_done = true);
    }
}

/// What the workers ask before handing a message on: while a leave is
/// incomplete, whether its channel is still wanted.
pub(crate) struct WantedFilter {
    pub(crate) leaving: Arc<Leaving>,
    pub(crate) shared: Weak<Shared>,
}

impl Passes for WantedFilter {
    fn passes(&self, channel: &[u8]) -> bool {
        if !self.leaving.filtering() {
            return true;
        }
        match self.shared.upgrade() {
            Some(s) => s.registry.flags(s.lane_of(channel), channel) & WANT != 0,
            None => true,
        }
    }
}

/// Installs the filter on every worker queue of `shared`.
pub(crate) fn install(shared: &Arc<Shared>) {
    let f: Arc<dyn Passes> = Arc::new(WantedFilter {
        leaving: shared.leaving.clone(),
        shared: Arc::downgrade(shared),
    });
    for q in &shared.queues {
        Queue::set_filter(q, f.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use parking_lot::Mutex;
    use testkit::{kinds, Client, FaultProxy, Server};

    use crate::PubSub;

    const T: Duration = Duration::from_secs(20);
    /// A message the handler got: channel and payload.
    type Seen = (Vec<u8>, Vec<u8>);
    /// How long the proxy holds each chunk the server sends.
    const HELD: Duration = Duration::from_millis(300);

    /// Messages of `gone` published before its unsubscribe, still on their
    /// way from the server when `unsubscribe` returns (a slow link holds
    /// them), must be passed over, not handed to the handler: the fence's
    /// `PING` comes back behind them. Without the `PING` the leave would
    /// complete at once and the workers would stop looking messages up
    /// before these arrive.
    #[test]
    fn messages_sent_before_an_unsubscribe_and_read_after_it_are_passed_over() {
        for kind in kinds() {
            let server = Server::start(kind).unwrap();
            let proxy = FaultProxy::start(server.addr()).unwrap();
            let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
            let record = seen.clone();
            let ps = PubSub::builder()
                .address(proxy.addr().to_string())
                .workers(1)
                .handler(move |c: &[u8], p: &[u8]| record.lock().push((c.to_vec(), p.to_vec())))
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
                    .iter()
                    .any(|(c, p)| c == b"kept" && p == b"last")
                    .then_some(()))
            })
            .unwrap();
            let leaked = seen.lock().iter().filter(|(c, _)| c == b"gone").count();
            assert_eq!(
                leaked, 0,
                "{kind:?}: messages of an unsubscribed channel reached the handler"
            );
            assert_eq!(
                ps.metrics().unwanted,
                20,
                "{kind:?}: each passed over and counted"
            );
            ps.shutdown();
        }
    }
}
