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

use control::publish::{Failure, Reply, Verdict};

pub(crate) use crate::control_loop::message::{KeptMsg, NewMsg, PubMsg};
pub(crate) use crate::control_loop::outcome::{Done, Waiter};
use crate::control_loop::shared::{Retry, Shared};
use crate::engine::kept::{KeptSink, Staged};
use crate::engine::{Engine, Room};
use crate::error::Error;
use crate::metrics::add;

impl PubMsg {
    /// Completes it with `r` (a probe's slot was unparked by the core's
    /// verdict that ended it).
    pub(crate) fn finish(mut self, shared: &Shared, r: Result<i64, Error>) {
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
}

/// Sends `msg` to `engine`, or as the publish core says when `engine` is
/// `None` (to the slot's owner, behind the slot's held publishes, held
/// while no owner is reachable, or kept for a retry while none is known);
/// `asking` sends `ASKING` first on the same connection. `room`: whether
/// this thread may wait for room in a connection's staged bytes (see
/// [`Room`]).
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
    room: Room,
) -> Result<(), Error> {
    match engine {
        Some(e) => submit(shared, msg, &e, asking, room),
        None => admit(shared, msg, None, Ok(0), room),
    }
}

/// Gives `msg` to the publish core (with the reply it got, if any:
/// `own` is that reply's result, what a failure the core leaves to the
/// caller reports), and carries out its verdict.
///
/// # Errors
///
/// As [`send`].
fn admit(
    shared: &Arc<Shared>,
    msg: PubMsg,
    reply: Option<Reply>,
    own: Result<i64, Error>,
    room: Room,
) -> Result<(), Error> {
    // Under the read lock: a route change (write lock, with the core's
    // gating of the slots it moves) cannot fall between the core's
    // verdict and the submission, so the old route's barrier follows every
    // publish sent on it.
    let routes = shared.routes.read_recursive();
    let (verdict, wake) = shared.hold.admit(msg, reply);
    if wake {
        shared.post(|inbox| inbox.held = true);
    }
    match verdict {
        Verdict::Owner(msg) => match routes.engine_ref(msg.slot) {
            Some(e) => submit(shared, msg, e, false, room),
            // The table follows the core under this lock: never.
            None => {
                drop(routes);
                let slot = msg.slot;
                msg.finish_with(
                    shared,
                    Error::Cluster {
                        slot,
                        reason: "no route for the slot in the publish table".into(),
                    },
                )
            }
        },
        verdict => {
            drop(routes);
            carry_out(shared, verdict, own, "", room)
        }
    }
}

/// Carries out the publish core's verdict on a publish (on any thread).
/// `own`: the result of the reply the core decided on (what a
/// [`Failure::Reported`] or [`Verdict::Done`] finishes it with);
/// `context`: the server's words, for a failure's reason.
///
/// # Errors
///
/// The error `msg` was finished with, as [`send`].
pub(crate) fn carry_out(
    shared: &Arc<Shared>,
    verdict: Verdict<PubMsg>,
    own: Result<i64, Error>,
    context: &str,
    room: Room,
) -> Result<(), Error> {
    match verdict {
        Verdict::Owner(msg) => send(shared, msg, None, false, room),
        Verdict::Send { node, msg, asking } => match shared.hold.engine(node) {
            Some(e) => submit(shared, msg, &e, asking, room),
            None => send(shared, msg, None, false, room),
        },
        Verdict::Done(msg) => msg.finish_result(shared, own),
        Verdict::Held { evicted, .. } => {
            add(&shared.counters.cluster.held, 1);
            if evicted.is_empty() {
                return Ok(());
            }
            let (messages, bytes) = shared.hold.limits();
            let why = Failure::HoldFull { messages, bytes };
            for m in evicted {
                let e = failure(shared, m.slot, why, &Ok(0), context);
                let _ = m.finish_with(shared, e);
            }
            Ok(())
        }
        Verdict::Waiting { .. } => Ok(()),
        Verdict::Fail { msg, why } => {
            let e = failure(shared, msg.slot, why, &own, context);
            msg.finish_with(shared, e)
        }
    }
}

/// The error a publish to `slot` fails with, for the core's `why`
/// (counted); `own` is the reply's own result, `context` the server's
/// words.
pub(crate) fn failure(
    shared: &Shared,
    slot: u16,
    why: Failure,
    own: &Result<i64, Error>,
    context: &str,
) -> Error {
    let c = &shared.counters.cluster;
    let cluster = |reason: String| Error::Cluster {
        slot,
        reason: reason.into(),
    };
    let with = |what: String| match context {
        "" => what,
        _ => format!("{what}, last: {context}"),
    };
    match why {
        Failure::HoldFull { messages, bytes } => {
            add(&c.hold_full, 1);
            Error::HoldFull {
                slot,
                messages,
                bytes,
            }
        }
        Failure::Expired { held } => {
            add(&c.hold_expired, 1);
            Error::OwnerUnreachable { slot, held }
        }
        Failure::Redirects { count } => {
            cluster(with(control::RetryFailure::Redirects { count }.to_string()))
        }
        Failure::Window { tries } => cluster(with(format!(
            "{} (refused for now, or no owner known)",
            control::RetryFailure::Window { tries }
        ))),
        Failure::NoOwner { waited } => cluster(with(format!("no known owner within {waited:?}"))),
        Failure::CannotConnect => cluster(with("cannot connect to the node named".into())),
        Failure::Shutdown => Error::Shutdown,
        Failure::Reported => match own {
            Err(e) => e.clone(),
            Ok(_) => cluster(with("failed".into())),
        },
    }
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
    room: Room,
) -> Result<(), Error> {
    match try_submit(msg, engine, asking, room) {
        Ok(()) => Ok(()),
        Err((msg, e)) => on_reply(shared, msg, Err(e), room),
    }
}

/// Writes `msg` to `engine`'s connection, or gives it back with the reason
/// it could not be (see [`submit`]).
///
/// # Errors
///
/// `msg` and why, when the connection cannot take it.
// The message comes back by value, as the engine gives it (boxing it
// would allocate where a failed publish moves on).
#[allow(clippy::result_large_err)]
pub(crate) fn try_submit(
    msg: PubMsg,
    engine: &Engine,
    asking: bool,
    room: Room,
) -> Result<(), (PubMsg, Error)> {
    // `ASKING` and the publish are staged under one lock: another
    // thread's publish cannot fall between them.
    engine.submit_kept(msg, asking, room, |buf, msg| {
        buf.extend_from_slice(&msg.data);
        KeptMsg::Again(Box::new(msg))
    })
}

impl KeptSink<KeptMsg> for Shared {
    fn kept(self: Arc<Self>, msg: PubMsg, result: Result<i64, Error>) {
        // On the I/O thread: it never waits for room (it may be the
        // thread that takes the staged bytes).
        let _ = on_reply(&self, msg, result, Room::Past);
    }
}

/// A publish's reply, on the I/O thread (or the caller's, when it could not
/// be sent), for a probe or anything but a plain success: the publish core
/// decides (a redirect or a refusal on the control thread, which opens the
/// node a redirect names), except that a node without the history script
/// gets the same command as `EVAL`.
///
/// # Errors
///
/// The error it finished `msg` with (see [`send`]).
pub(crate) fn on_reply(
    shared: &Arc<Shared>,
    mut msg: PubMsg,
    r: Result<i64, Error>,
    room: Room,
) -> Result<(), Error> {
    let reply = match &r {
        Ok(_) => Reply::Taken,
        // A node engine closed by a rewire before this publish was written
        // (`Shutdown` says nothing was sent): it goes again wherever the
        // slot lives now.
        Err(Error::Shutdown) => Reply::NotWritten,
        // Sent, and its connection broke or was closed before the reply:
        // it may have run, and sent again it could run twice (a
        // recoverable channel's copy under another offset, nothing to tell
        // it from a new message). It fails with the error that says the
        // outcome is unknown; the caller decides.
        Err(Error::ConnectionLost { .. }) => Reply::Lost,
        // The owner could not be reached and nothing was sent: held for
        // the slot's next reachable owner (the hold on).
        Err(Error::NotConnected { .. }) => Reply::NotConnected,
        Err(Error::Reply { addr, message }) => {
            // A node without the history script: the same command as
            // `EVAL` (never answered `NOSCRIPT`, so once per publish).
            if crate::history::script::is_noscript(message) {
                if let Some((eval, _)) = crate::history::script::to_eval(&msg.data) {
                    msg.data = eval;
                    return send(shared, msg, None, false, room);
                }
            }
            let host = addr.host();
            match topology::parse_cluster_error(message.as_bytes(), host.as_deref()) {
                Some(error) => return to_control(shared, msg, error, message.clone()),
                None => Reply::Other,
            }
        }
        Err(_) => Reply::Other,
    };
    admit(shared, msg, Some(reply), r, room)
}

/// A redirect or a refusal, for the control thread (counted).
fn to_control(
    shared: &Arc<Shared>,
    msg: PubMsg,
    error: topology::ClusterError,
    message: Arc<str>,
) -> Result<(), Error> {
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
    if shared.closing.load(Ordering::Acquire) {
        return msg.finish_result(shared, Err(Error::Shutdown));
    }
    let mut retry = Some(Retry {
        msg: Box::new(msg),
        error,
        message,
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
                match e.submit_kept(new, false, Room::Wait, |buf, new| encode(shared, buf, new)) {
                    Ok(()) => return Ok(()),
                    Err((new, err)) => {
                        drop(routes);
                        let msg = message(shared, new);
                        return on_reply(shared, msg, Err(err), Room::Wait);
                    }
                }
            }
            _ => new,
        }
    };
    send(shared, message(shared, new), None, false, Room::Wait)
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
