//! Publishing on a cluster: `SPUBLISH {tag}.channel` to the owner of the
//! partition's slot over that node's pipelined connection, and what happens
//! when the server says the slot is elsewhere.
//!
//! A reply of `MOVED`, `ASK`, `TRYAGAIN` or `CLUSTERDOWN` is posted to the
//! control thread (never handled on the I/O thread, which must not block):
//!
//! - `MOVED slot addr`: the slot's route is updated (a connection to a new
//!   node is opened), the publish is sent again there, and a topology
//!   refresh is scheduled;
//! - `ASK slot addr`: `ASKING` and the publish go to that node, in one
//!   write, without changing the route;
//! - `TRYAGAIN` / `CLUSTERDOWN`: the publish is retried after a backoff.
//!
//! Redirects are bounded by [`PubSubBuilder::max_redirects`] and retries
//! by [`PubSubBuilder::retry_window`]; past either bound the publish fails
//! with [`Error::Cluster`] (and is counted).
//!
//! A publish whose owner cannot be reached (its connection is down or
//! broke before the reply, or no owner is known) is held
//! ([`super::hold`]) up to [`PubSubBuilder::publish_hold`], and sent to
//! the slot's owner once one is reachable. A slot whose route moves is
//! gated until a `PING` on the old route has been answered, so publishes
//! sent there are acknowledged before any goes to the new owner.
//!
//! [`PubSubBuilder::max_redirects`]: crate::PubSubBuilder::max_redirects
//! [`PubSubBuilder::retry_window`]: crate::PubSubBuilder::retry_window
//! [`PubSubBuilder::publish_hold`]: crate::PubSubBuilder::publish_hold

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::cluster::hold::Offer;
use crate::cluster::shared::{Retry, Shared};
use crate::engine::{Engine, PublishOptions, TokenSink};
use crate::error::Error;
use crate::metrics::add;

/// Called with a publish's outcome.
pub(crate) type Done = Box<dyn FnOnce(Result<i64, Error>) + Send>;

/// A publish in flight: the server's channel name and the payload in one
/// buffer (empty once the outcome is known), its slot, and how often it was
/// redirected or retried.
pub(crate) struct PubMsg {
    pub(crate) data: Vec<u8>,
    pub(crate) wire_len: usize,
    pub(crate) slot: u16,
    pub(crate) redirects: u32,
    pub(crate) retries: u32,
    pub(crate) first: Instant,
    /// Publish order (per instance): held publishes leave in this order.
    pub(crate) seq: u64,
    /// When it was first held.
    pub(crate) held_at: Option<Instant>,
    pub(crate) done: Option<Done>,
}

impl PubMsg {
    pub(crate) fn finish(mut self, shared: &Shared, r: Result<i64, Error>) {
        if r.is_err() {
            add(&shared.cluster.publish_failed, 1);
            add(&shared.counters.publish_errors, 1);
        }
        if let Some(done) = self.done.take() {
            done(r);
        }
    }

    pub(crate) fn fail(self, shared: &Shared, reason: String) {
        let slot = self.slot;
        self.finish(
            shared,
            Err(Error::Cluster {
                slot,
                reason: reason.into(),
            }),
        );
    }
}

/// Sends `msg` to `engine`, or to the slot's owner when `engine` is
/// `None` (held instead while the slot holds publishes, or has no owner
/// and the hold is on); `asking` sends `ASKING` first on the same
/// connection.
pub(crate) fn send(shared: &Arc<Shared>, msg: PubMsg, engine: Option<Arc<Engine>>, asking: bool) {
    if let Some(e) = engine {
        return submit(shared, msg, &e, asking);
    }
    // Held under the read lock: a route change (write lock) cannot fall
    // between the hold check, the route lookup and the submission, so the
    // old route's barrier follows every publish sent on it.
    let routes = shared.routes.read_recursive();
    let msg = if shared.hold.busy() {
        match shared.hold.offer(msg) {
            Offer::Held => return,
            Offer::Full(m) => {
                drop(routes);
                return fail_full(shared, m);
            }
            Offer::Free(m) => m,
        }
    } else {
        msg
    };
    match routes.engine_ref(msg.slot) {
        Some(e) => submit(shared, msg, e, false),
        None if shared.closing.load(Ordering::Acquire) => {
            drop(routes);
            msg.finish(shared, Err(Error::Shutdown));
        }
        None if !shared.config.publish_hold.is_zero() => {
            drop(routes);
            hold(shared, msg);
        }
        None => {
            drop(routes);
            // No owner known yet: the control thread retries it after a
            // backoff and schedules a (coalesced) refresh.
            let retry = Retry {
                msg: Box::new(msg),
                error: topology::ClusterError::ClusterDown,
                message: "no known owner for the slot".into(),
            };
            shared.post(|inbox| inbox.retries.push(retry));
        }
    }
}

/// Holds a publish whose owner is unreachable.
fn hold(shared: &Arc<Shared>, msg: PubMsg) {
    match shared.hold.hold(msg) {
        (Offer::Held, new) => {
            add(&shared.cluster.held, 1);
            if new {
                shared.post(|inbox| inbox.held = true);
            }
        }
        (Offer::Full(m) | Offer::Free(m), _) => fail_full(shared, m),
    }
}

fn fail_full(shared: &Shared, msg: PubMsg) {
    add(&shared.cluster.hold_full, 1);
    let h = &shared.hold;
    let (slot, messages, bytes) = (msg.slot, h.max_messages, h.max_bytes);
    msg.finish(
        shared,
        Err(Error::HoldFull {
            slot,
            messages,
            bytes,
        }),
    );
}

/// Writes `msg` to `engine`'s connection. It waits in the in-flight table
/// for its reply (see [`super::inflight`]); the engine hands the reply back
/// with its index, to [`Shared`]'s [`TokenSink`].
pub(crate) fn submit(shared: &Arc<Shared>, msg: PubMsg, engine: &Engine, asking: bool) {
    let options = if shared.sharded() {
        PublishOptions::sharded()
    } else {
        PublishOptions::classic()
    };
    if asking {
        engine.command_then(0, [&b"ASKING"[..]], |_| {});
    }
    // The bytes are encoded from a copy: the message itself may be taken
    // (by its reply) as soon as it is in the table. Taken out of the
    // thread's slot, so a failure completing at once (and sending the
    // message again from here) finds its own.
    let mut bytes = SCRATCH.with(|b| std::mem::take(&mut *b.borrow_mut()));
    bytes.clear();
    bytes.extend_from_slice(&msg.data);
    let wire_len = msg.wire_len.min(bytes.len());
    match shared.inflight.insert(msg) {
        Ok(token) => {
            let (wire, payload) = bytes.split_at(wire_len);
            engine.publish_token(wire, payload, options, shared.clone(), token);
        }
        Err(msg) => msg.fail(shared, "too many publishes in flight".into()),
    }
    if bytes.capacity() <= 64 * 1024 {
        SCRATCH.with(|b| *b.borrow_mut() = bytes); // else: not pinned
    }
}

impl TokenSink for Shared {
    fn complete(self: Arc<Self>, token: u32, result: Result<i64, Error>) {
        // An ordinary reply is final: the buffer goes back to the pool.
        if let Some(msg) = self.inflight.remove(token, result.is_ok()) {
            on_reply(&self, msg, result);
        }
    }
}

/// A publish's reply, on the I/O thread (or the caller's, when it could not
/// be sent): cluster errors go to the control thread, the rest finish it.
fn on_reply(shared: &Arc<Shared>, mut msg: PubMsg, r: Result<i64, Error>) {
    // A node engine closed by a rewire while this publish was on its way:
    // send it again wherever the slot lives now.
    let closing = shared.closing.load(Ordering::Acquire);
    if matches!(r, Err(Error::Shutdown)) && !closing && msg.redirects < shared.config.max_redirects
    {
        msg.redirects += 1;
        return send(shared, msg, None, false);
    }
    // The owner could not be reached (nothing sent, or the connection broke
    // before the reply): held for the slot's next reachable owner.
    if matches!(
        r,
        Err(Error::NotConnected { .. } | Error::ConnectionLost { .. })
    ) && !closing
        && !shared.config.publish_hold.is_zero()
    {
        return hold(shared, msg);
    }
    let Err(Error::Reply { addr, message }) = &r else {
        return msg.finish(shared, r);
    };
    let host = addr.ip().to_string();
    let Some(error) = topology::parse_cluster_error(message.as_bytes(), Some(&host)) else {
        return msg.finish(shared, r);
    };
    let c = &shared.cluster;
    add(
        match error {
            topology::ClusterError::Moved { .. } => &c.moved,
            topology::ClusterError::Ask { .. } => &c.ask,
            topology::ClusterError::TryAgain => &c.try_again,
            topology::ClusterError::ClusterDown => &c.cluster_down,
        },
        1,
    );
    let retry = Retry {
        msg: Box::new(msg),
        error,
        message: message.clone(),
    };
    shared.post(|inbox| inbox.retries.push(retry));
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Builds a message for `channel` (user name) and `payload`: the server
/// name and the payload in one buffer from the pool (allocated only while
/// the pool has none).
pub(crate) fn message(
    shared: &Shared,
    channel: &[u8],
    payload: &[u8],
    done: Option<Done>,
) -> PubMsg {
    let mut data = shared.inflight.buffer();
    // A new buffer is rounded up, so one reused for a slightly longer
    // channel or payload need not grow.
    data.reserve((channel.len() + payload.len() + 32).next_power_of_two());
    shared.wire_into(channel, &mut data);
    let wire_len = data.len();
    data.extend_from_slice(payload);
    let slot = shared.parts.slot(shared.parts.partition_of(channel));
    PubMsg {
        data,
        wire_len,
        slot,
        redirects: 0,
        retries: 0,
        first: Instant::now(),
        seq: shared.next_seq.fetch_add(1, Ordering::Relaxed),
        held_at: None,
        done,
    }
}
