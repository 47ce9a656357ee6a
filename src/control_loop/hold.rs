//! The publish core ([`control::publish::PublishCore`]: where a publish
//! goes, what is held while a slot's owner is unreachable, bounded in time
//! by [`PubSubBuilder::publish_hold`] and in memory by
//! [`PubSubBuilder::publish_hold_limit`], while its route moves, or behind
//! a refused publish) and the publish engines its node ids name, shared by
//! the application's threads, the I/O threads (replies that need it) and
//! the control thread behind one lock, with a flag read without the lock
//! on every publish: whether anything is held.
//!
//! [`PubSubBuilder::publish_hold`]: crate::PubSubBuilder::publish_hold
//! [`PubSubBuilder::publish_hold_limit`]: crate::PubSubBuilder::publish_hold_limit

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use control::publish::{NodeId, PublishConfig, PublishCore, Reply, Verdict};
use control::{Held, Time};
use parking_lot::Mutex;

use crate::control_loop::message::PubMsg;
use crate::engine::{clock, Engine};

impl Held for PubMsg {
    fn seq(&self) -> u64 {
        self.seq
    }

    fn slot(&self) -> u16 {
        self.slot
    }

    fn cost(&self) -> usize {
        PubMsg::cost(self)
    }

    fn held_since(&self) -> Option<Time> {
        self.held_at.get()
    }

    fn mark_held(&mut self, now: Time) {
        self.held_at.set_once(now);
    }

    fn probe(&self) -> bool {
        self.probe
    }

    fn set_probe(&mut self, on: bool) {
        self.probe = on;
    }

    fn refusals(&mut self) -> &mut u32 {
        &mut self.retries
    }

    fn first_refused(&mut self, now: Time) -> Time {
        self.first.set_once(now);
        self.first.get().unwrap_or(now)
    }

    fn redirects(&mut self) -> &mut u32 {
        &mut self.redirects
    }
}

/// The publish core, and the engines its nodes are.
pub(crate) struct PubState {
    pub(crate) core: PublishCore<SocketAddr, PubMsg>,
    /// Publish engines by the core's node id (those kept for a gate
    /// included), until the core retires them.
    pub(crate) engines: BTreeMap<NodeId, Arc<Engine>>,
}

/// The publish core behind its lock.
pub(crate) struct Publishing {
    state: Mutex<PubState>,
    /// Whether any slot holds publishes, read without the lock on every
    /// publish (written under it).
    busy: AtomicBool,
}

impl Publishing {
    pub(crate) fn new(cfg: PublishConfig) -> Self {
        Publishing {
            state: Mutex::new(PubState {
                core: PublishCore::new(cfg),
                engines: BTreeMap::new(),
            }),
            busy: AtomicBool::new(false),
        }
    }

    /// Whether any slot holds something (a hint; the lock decides).
    pub(crate) fn busy(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    /// Runs `f` under the lock, then publishes whether anything is held.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut PubState) -> R) -> R {
        let mut p = self.state.lock();
        let r = f(&mut p);
        self.busy.store(p.core.holds_any(), Ordering::Release);
        r
    }

    /// A publish the fast path did not send (`reply` `None`), or a reply
    /// the core decides on, given to the core now; also whether the
    /// control thread should look (outputs wait for it).
    pub(crate) fn admit(&self, msg: PubMsg, reply: Option<Reply>) -> (Verdict<PubMsg>, bool) {
        // The caller's thread reads the clock only here, off the fast
        // path: the core stamps a publish that joins the hold, and times
        // a refused one's retry (the control thread decides the rest).
        let now = clock::now();
        self.with(|p| {
            let v = match reply {
                None => p.core.handle_publish(now, msg),
                Some(r) => p.core.handle_reply(now, msg, r),
            };
            let wake = match &v {
                Verdict::Held { wake, .. } | Verdict::Waiting { wake, .. } => *wake,
                _ => false,
            };
            (v, wake || p.core.has_output())
        })
    }

    /// The publish engine of node `id`.
    pub(crate) fn engine(&self, id: NodeId) -> Option<Arc<Engine>> {
        self.state.lock().engines.get(&id).cloned()
    }

    /// Held publishes and bytes now.
    pub(crate) fn size(&self) -> (usize, usize) {
        let s = self.state.lock().core.stats();
        (s.held_messages, s.held_bytes)
    }

    /// The core's bounds on the hold: publishes and bytes.
    pub(crate) fn limits(&self) -> (usize, usize) {
        let p = self.state.lock();
        let c = p.core.config();
        (c.hold_messages, c.hold_bytes)
    }
}
