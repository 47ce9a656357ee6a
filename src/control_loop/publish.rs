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
//!   With the publish hold on, its slot's later publishes are held behind
//!   it, and when it is due it goes alone: they follow once the server
//!   took it (a node that refuses one publish and takes the next, its
//!   state changed between two reads, would reorder them). A second
//!   refused publish of that slot joins the held ones.
//!
//! Redirects are bounded by [`PubSubBuilder::max_redirects`] and retries
//! by [`PubSubBuilder::retry_window`]; past either bound the publish fails
//! with [`Error::Cluster`] (and is counted).
//!
//! A publish whose owner cannot be reached (its connection is down or
//! broke before the publish was written, or no owner is known) is held
//! ([`super::hold`]) up to [`PubSubBuilder::publish_hold`], and sent to
//! the slot's owner once one is reachable. A slot whose route moves is
//! gated until a `PING` on the old route has been answered, so publishes
//! sent there are acknowledged before any goes to the new owner, and until
//! a marker published through the old node has come back from the new
//! owner or was refused (an old node that became the owner's replica
//! forwards what it took over the cluster bus, later); with no new owner
//! known yet, the marker waits for one (see `gate`).
//!
//! A publish written whose connection then broke or was closed before its
//! reply may have run: it fails with [`Error::ConnectionLost`] and is not
//! sent again (a second run would deliver it twice).
//!
//! [`PubSubBuilder::max_redirects`]: crate::PubSubBuilder::max_redirects
//! [`PubSubBuilder::retry_window`]: crate::PubSubBuilder::retry_window
//! [`PubSubBuilder::publish_hold`]: crate::PubSubBuilder::publish_hold

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::control_loop::hold::Offer;
pub(crate) use crate::control_loop::outcome::{Done, Waiter};
use crate::control_loop::shared::{Retry, Shared};
use crate::engine::clock::Stamp;
use crate::engine::kept::{KeptItem, KeptSink, Staged};
use crate::engine::Engine;
use crate::error::Error;
use crate::metrics::add;

/// A publish on its way again (a redirect, a retry, the hold), or about to
/// be sent from a buffer of its own: its whole command, encoded (`SPUBLISH
/// name payload` in RESP, in one buffer), its slot, and how often it was
/// redirected or retried. A redirect or retry sends the same bytes again.
/// A new publish on the common path is a [`NewMsg`] until it needs these.
pub(crate) struct PubMsg {
    pub(crate) data: Vec<u8>,
    /// The length of the server's channel name.
    pub(crate) wire_len: u32,
    /// The payload's length (what the hold counts is name plus payload;
    /// past 4 GiB, 4 GiB).
    pub(crate) payload_len: u32,
    pub(crate) slot: u16,
    pub(crate) redirects: u32,
    pub(crate) retries: u32,
    /// When its first `TRYAGAIN`/`CLUSTERDOWN` (or no-owner) retry began:
    /// the start of its retry window (set then, so a publish that is never
    /// refused reads no clock).
    pub(crate) first: Stamp,
    /// Publish order (per instance): held publishes leave in this order.
    pub(crate) seq: u64,
    /// When it was first held.
    pub(crate) held_at: Stamp,
    /// A refused publish sent again alone: its slot stays parked (the
    /// slot's later publishes held) until its outcome, so none of them can
    /// be taken by a node that refuses this one a moment earlier.
    pub(crate) probe: bool,
    pub(crate) done: Option<Done>,
}

/// A publish kept with its request until its reply (see
/// [`Engine::submit_kept`]): a new one by where its bytes lie in the
/// staged bytes (small, since its connection's queue is as long as the
/// publishes in flight), or one sent again, whole.
pub(crate) enum KeptMsg {
    New(NewMsg),
    Again(Box<PubMsg>),
}

/// A new publish on its first send: what a [`PubMsg`] holds but its bytes
/// (they lie in the staged bytes, then in its I/O thread's copy of them)
/// and the counts and times of sends that have not happened.
pub(crate) struct NewMsg {
    pub(crate) staged: Staged,
    pub(crate) wire_len: u32,
    pub(crate) payload_len: u32,
    pub(crate) slot: u16,
    pub(crate) seq: u64,
    pub(crate) done: Option<Done>,
}

impl NewMsg {
    /// The whole message, with `data` its bytes.
    pub(crate) fn with_bytes(self, data: Vec<u8>) -> PubMsg {
        PubMsg {
            data,
            wire_len: self.wire_len,
            payload_len: self.payload_len,
            slot: self.slot,
            redirects: 0,
            retries: 0,
            first: Stamp::UNSET,
            seq: self.seq,
            held_at: Stamp::UNSET,
            probe: false,
            done: self.done,
        }
    }
}

impl KeptMsg {
    /// Where its bytes lie in the staged bytes, for a new one.
    pub(crate) fn staged(&self) -> Option<Staged> {
        match self {
            KeptMsg::New(n) => Some(n.staged),
            KeptMsg::Again(_) => None,
        }
    }

    pub(crate) fn is_probe(&self) -> bool {
        matches!(self, KeptMsg::Again(m) if m.probe)
    }

    pub(crate) fn take_done(&mut self) -> Option<Done> {
        match self {
            KeptMsg::New(n) => n.done.take(),
            KeptMsg::Again(m) => m.done.take(),
        }
    }

    /// The whole message; a new one's bytes copied out of `staged`, the
    /// bytes it was encoded into.
    pub(crate) fn into_msg(self, staged: &[u8]) -> PubMsg {
        match self {
            KeptMsg::New(n) => {
                let bytes = staged.get(n.staged.range()).unwrap_or_default();
                n.with_bytes(bytes.to_vec())
            }
            KeptMsg::Again(m) => *m,
        }
    }
}

impl PubMsg {
    /// What the publish hold counts: name plus payload bytes.
    pub(crate) fn cost(&self) -> usize {
        self.wire_len as usize + self.payload_len as usize
    }

    pub(crate) fn finish(mut self, shared: &Shared, r: Result<i64, Error>) {
        if std::mem::take(&mut self.probe) {
            shared.hold.unpark(self.slot);
        }
        if r.is_err() {
            add(&shared.counters.cluster.publish_failed, 1);
            add(&shared.counters.publish_errors, 1);
        }
        if let Some(done) = self.done.take() {
            done.run(r);
        }
    }

    /// Finishes it with `e`, and returns `e` (see [`send`]).
    pub(crate) fn finish_with(self, shared: &Shared, e: Error) -> Result<(), Error> {
        self.finish(shared, Err(e.clone()));
        Err(e)
    }

    /// Finishes it with `r`; an error is returned too (see [`send`]).
    fn finish_result(self, shared: &Shared, r: Result<i64, Error>) -> Result<(), Error> {
        match r {
            Ok(n) => {
                self.finish(shared, Ok(n));
                Ok(())
            }
            Err(e) => self.finish_with(shared, e),
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
///
/// # Errors
///
/// The error `msg` was finished with during this call, when it was not
/// taken at all (the hold full, the owner's connection down with no hold):
/// what a fire-and-forget publish returns. `Ok` when it was sent, held, or
/// handed to the control thread, or finished some other way.
#[inline]
pub(crate) fn send(
    shared: &Arc<Shared>,
    msg: PubMsg,
    engine: Option<Arc<Engine>>,
    asking: bool,
) -> Result<(), Error> {
    if let Some(e) = engine {
        return submit(shared, msg, &e, asking);
    }
    // Held under the read lock: a route change (write lock) cannot fall
    // between the hold check, the route lookup and the submission, so the
    // old route's barrier follows every publish sent on it.
    let routes = shared.routes.read_recursive();
    let msg = if shared.hold.busy() {
        match shared.hold.offer(msg) {
            Offer::Held(evicted) => {
                drop(routes);
                for m in evicted {
                    let _ = fail_full(shared, m);
                }
                return Ok(());
            }
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
            msg.finish_with(shared, Error::Shutdown)
        }
        None if !shared.config.publish_hold.is_zero() => {
            drop(routes);
            hold(shared, msg)
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
            Ok(())
        }
    }
}

/// Holds a publish whose owner is unreachable.
///
/// # Errors
///
/// [`Error::HoldFull`] when the hold had no room for it (it is finished).
pub(crate) fn hold(shared: &Arc<Shared>, msg: PubMsg) -> Result<(), Error> {
    match shared.hold.hold(msg) {
        Ok(offer) => held(shared, offer),
        // Drained for shutdown since the caller looked at `closing`.
        Err(msg) => msg.finish_result(shared, Err(Error::Shutdown)),
    }
}

/// Carries out what the hold made of a publish it was given (and whether
/// that opened an entry).
///
/// # Errors
///
/// [`Error::HoldFull`] when the hold had no room for it (it is finished).
pub(crate) fn held(shared: &Arc<Shared>, offer: (Offer, bool)) -> Result<(), Error> {
    match offer {
        (Offer::Held(evicted), new) => {
            add(&shared.counters.cluster.held, 1);
            if new {
                shared.post(|inbox| inbox.held = true);
            }
            for m in evicted {
                let _ = fail_full(shared, m);
            }
            Ok(())
        }
        (Offer::Full(m) | Offer::Free(m), _) => fail_full(shared, m),
    }
}

/// Finishes `msg` with [`Error::HoldFull`], and returns that error.
fn fail_full(shared: &Shared, msg: PubMsg) -> Result<(), Error> {
    add(&shared.counters.cluster.hold_full, 1);
    let h = &shared.hold;
    let (slot, messages, bytes) = (msg.slot, h.max_messages, h.max_bytes);
    msg.finish_with(
        shared,
        Error::HoldFull {
            slot,
            messages,
            bytes,
        },
    )
}

/// Writes `msg` to `engine`'s connection. It travels with its request
/// until its reply ([`crate::engine::Engine::submit_kept`]), which comes
/// back to it on the I/O thread: a plain reply ends it there, anything else
/// comes to [`Shared`]'s [`KeptSink`].
///
/// # Errors
///
/// As [`send`].
#[inline]
pub(crate) fn submit(
    shared: &Arc<Shared>,
    msg: PubMsg,
    engine: &Engine,
    asking: bool,
) -> Result<(), Error> {
    // `ASKING` and the publish are staged under one lock: another
    // thread's publish cannot fall between them.
    match engine.submit_kept(msg, asking, |buf, msg| {
        buf.extend_from_slice(&msg.data);
        KeptMsg::Again(Box::new(msg))
    }) {
        Ok(()) => Ok(()),
        Err((msg, e)) => on_reply(shared, msg, Err(e)),
    }
}

impl KeptItem for KeptMsg {
    type Whole = PubMsg;

    fn staged(&self) -> Option<Staged> {
        KeptMsg::staged(self)
    }

    /// A probe's reply unparks its slot: it goes to the sink.
    fn wants_reply(&self) -> bool {
        self.is_probe()
    }

    #[inline]
    fn complete(&mut self, n: i64) {
        if let Some(done) = self.take_done() {
            done.run(Ok(n));
        }
    }

    fn into_whole(self, staged: &[u8]) -> PubMsg {
        self.into_msg(staged)
    }

    fn orphan(mut whole: PubMsg) {
        if let Some(done) = whole.done.take() {
            done.run(Err(Error::Shutdown));
        }
    }
}

impl KeptSink<KeptMsg> for Shared {
    fn kept(self: Arc<Self>, msg: PubMsg, result: Result<i64, Error>) {
        match result {
            // A probe's reply: finishing it unparks its slot.
            Ok(n) => msg.finish(&self, Ok(n)),
            Err(e) => {
                let _ = on_reply(&self, msg, Err(e));
            }
        }
    }
}

/// A publish's reply, on the I/O thread (or the caller's, when it could not
/// be sent): cluster errors go to the control thread, the rest finish it.
///
/// # Errors
///
/// The error it finished `msg` with (see [`send`]).
fn on_reply(shared: &Arc<Shared>, mut msg: PubMsg, r: Result<i64, Error>) -> Result<(), Error> {
    // A node engine closed by a rewire before this publish was written
    // (`Shutdown` says nothing was sent): send it again wherever the slot
    // lives now. One written before the close may have run: it comes as
    // `ConnectionLost` (see `Completion::closed_error`), as when the
    // connection broke, and is handled below.
    let closing = shared.closing.load(Ordering::Acquire);
    if matches!(r, Err(Error::Shutdown)) && !closing && msg.redirects < shared.config.max_redirects
    {
        msg.redirects += 1;
        return send(shared, msg, None, false);
    }
    // A publish that was sent and may have run (its connection broke, or
    // was closed by a rewire or a shutdown, before the reply): sent again
    // it would run twice and its subscribers could get it twice (a
    // recoverable channel's under another offset), with nothing to tell
    // the copy from a new message. It fails with the error that says the
    // outcome is unknown; the caller decides.
    if matches!(r, Err(Error::ConnectionLost { .. })) {
        return msg.finish_result(shared, r);
    }
    // The owner could not be reached and nothing was sent (its connection
    // down, or it broke before this publish was written): held for the
    // slot's next reachable owner.
    if matches!(r, Err(Error::NotConnected { .. }))
        && !closing
        && !shared.config.publish_hold.is_zero()
    {
        return hold(shared, msg);
    }
    let Err(Error::Reply { addr, message }) = &r else {
        return msg.finish_result(shared, r);
    };
    // A node without the history script: the same command as `EVAL`
    // (never answered `NOSCRIPT`, so this happens once per publish).
    if crate::history::script::is_noscript(message) {
        if let Some((eval, _)) = crate::history::script::to_eval(&msg.data) {
            msg.data = eval;
            return send(shared, msg, None, false);
        }
    }
    let host = addr.host();
    let Some(error) = topology::parse_cluster_error(message.as_bytes(), host.as_deref()) else {
        return msg.finish_result(shared, r);
    };
    let c = &shared.counters.cluster;
    add(
        match error {
            topology::ClusterError::Moved { .. } => &c.moved,
            topology::ClusterError::Ask { .. } => &c.ask,
            topology::ClusterError::TryAgain => &c.try_again,
            topology::ClusterError::ClusterDown => &c.cluster_down,
        },
        1,
    );
    // Closing: the control loop may have taken its last turn, and nothing
    // it would retry is sent now (a redirect or refusal: it did not run).
    if closing {
        return msg.finish_result(shared, Err(Error::Shutdown));
    }
    let mut retry = Some(Retry {
        msg: Box::new(msg),
        error,
        message: message.clone(),
    });
    shared.post(|inbox| {
        if !inbox.closed {
            inbox.retries.extend(retry.take());
        }
    });
    match retry {
        // The loop closed between the check above and the post.
        Some(r) => (*r.msg).finish_result(shared, Err(Error::Shutdown)),
        None => Ok(()),
    }
}

/// A new publish, before it is encoded.
pub(crate) struct NewPub<'a> {
    channel: &'a [u8],
    payload: &'a [u8],
    /// Its partition.
    p: u32,
    done: Option<Done>,
}

/// Publishes `payload` to `channel` (user name); `done` gets the outcome.
/// On the common path (the slot's owner known and nothing held) its
/// command is encoded straight into the owner's staged bytes, and the
/// message travels with its request ([`submit`]): no allocation and no
/// table shared with the I/O thread. Otherwise it is encoded into a buffer
/// of its own and [`send`] holds or routes it.
///
/// # Errors
///
/// As [`send`].
#[inline]
pub(crate) fn publish(
    shared: &Arc<Shared>,
    channel: &[u8],
    payload: &[u8],
    done: Option<Done>,
) -> Result<(), Error> {
    let p = shared.parts.partition_of(channel);
    let new = NewPub {
        channel,
        payload,
        p,
        done,
    };
    let new = {
        // As in `send`: the hold check, the route lookup and the submission
        // under one read lock.
        let routes = shared.routes.read_recursive();
        match routes.engine_ref(shared.parts.slot(p)) {
            Some(e) if !shared.hold.busy() => {
                match e.submit_kept(new, false, |buf, new| encode(shared, buf, new)) {
                    Ok(()) => return Ok(()),
                    Err((new, err)) => {
                        drop(routes);
                        let msg = message(shared, new);
                        return on_reply(shared, msg, Err(err));
                    }
                }
            }
            _ => new,
        }
    };
    send(shared, message(shared, new), None, false)
}

/// A new publish's message with its command in a buffer of its own.
fn message(shared: &Shared, new: NewPub<'_>) -> PubMsg {
    let mut data = Vec::with_capacity(new.channel.len() + new.payload.len() + 64);
    match encode(shared, &mut data, new) {
        KeptMsg::New(n) => n.with_bytes(data),
        KeptMsg::Again(m) => *m,
    }
}

/// Appends a new publish's whole command to `out` and returns its message:
/// where its bytes lie (`out[start..]`), or past 4 GiB a copy of them.
#[inline]
fn encode(shared: &Shared, out: &mut Vec<u8>, new: NewPub<'_>) -> KeptMsg {
    let NewPub {
        channel,
        payload,
        p,
        done,
    } = new;
    let start = out.len();
    let head = shared.wire_head(p);
    let wire_len = head.len() + channel.len();
    if let Some(o) = shared.config.history.of(channel) {
        // Recoverable: the publish script, its keys in the partition's
        // slot (classic mode too), run where the publish would go.
        HISTORY_KEYS.with(|k| {
            let (base, meta, stream) = &mut *k.borrow_mut();
            base.clear();
            shared.parts.redis_channel_at(p, channel, base);
            meta.clear();
            stream.clear();
            crate::history::keys_into(base, meta, stream);
            base.clear();
            base.extend_from_slice(head);
            base.extend_from_slice(channel);
            let ttl = crate::history::ttl_arg(o.max_age);
            let args = crate::history::script::PublishArgs {
                meta,
                stream,
                wire: base,
                payload,
                envelope_us: shared.config.envelope.then(crate::workers::now_us),
                max_len: o.max_len,
                ttl: &ttl,
                sharded: shared.sharded(),
                cluster: true,
            };
            crate::history::script::encode_publish(out, &args);
        });
    } else {
        let kind = resp::PublishKind::of(shared.sharded());
        if shared.config.envelope {
            let header = crate::wire::envelope::header(crate::workers::now_us());
            resp::encode_publish(out, kind, &[head, channel], &[&header, payload]);
        } else {
            resp::encode_publish(out, kind, &[head, channel], &[payload]);
        }
    }
    let msg = NewMsg {
        staged: Staged::EMPTY,
        wire_len: u32::try_from(wire_len).unwrap_or(u32::MAX),
        payload_len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
        slot: shared.parts.slot(p),
        seq: shared.next_seq.fetch_add(1, Ordering::Relaxed),
        done,
    };
    match Staged::of(start..out.len()) {
        Some(staged) => KeptMsg::New(NewMsg { staged, ..msg }),
        // Staged past 4 GiB (never with the default backpressure): a copy.
        None => KeptMsg::Again(Box::new(
            msg.with_bytes(out.get(start..).unwrap_or_default().to_vec()),
        )),
    }
}

thread_local! {
    /// A history publish's key names (reused: no allocation per publish).
    static HISTORY_KEYS: std::cell::RefCell<(Vec<u8>, Vec<u8>, Vec<u8>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

#[cfg(test)]
mod tests {
    use super::KeptMsg;

    #[test]
    fn a_kept_publish_is_small() {
        // Its connection's queue is as long as the publishes in flight (tens
        // of thousands under load): every byte of it is moved twice.
        let n = std::mem::size_of::<KeptMsg>();
        assert!(n <= 56, "{n} bytes");
    }
}
