//! Publishing on an engine's connections: fire and forget, with a handle,
//! waited for, awaited, or with its outcome kept for a cluster's driver.

use std::time::{Duration, Instant};

use crate::conn::Request;
use crate::engine::handle::Engine;
use crate::engine::kept;
#[cfg(feature = "tokio")]
use crate::engine::lend_async;
use crate::engine::pending::{Completion, Pending};
use crate::engine::settings::PublishOptions;
use crate::engine::shared::{stage_asking, Room};
use crate::error::Error;
use crate::metrics::add;

/// Appends the publish command `options` ask for.
fn encode_publish(buf: &mut Vec<u8>, options: PublishOptions, channel: &[u8], payload: &[u8]) {
    let kind = resp::PublishKind::of(options.sharded);
    resp::encode_publish(buf, kind, &[channel], &[payload]);
}

impl Engine {
    /// Publishes `payload` to `channel` with `PUBLISH`, fire-and-forget.
    /// Allocates nothing in steady state; the message leaves with the next
    /// write of its connection. An error reply is counted in
    /// [`EngineStats::error_replies`](crate::engine::EngineStats::error_replies).
    ///
    /// When the connection already buffers
    /// [`Builder::max_buffered_bytes`](crate::engine::Builder::max_buffered_bytes) (the server is not keeping up), the
    /// call waits for room, at most the request timeout.
    ///
    /// # Errors
    ///
    /// Only what is known at once: [`Error::NotConnected`] while the
    /// channel's server is reconnecting, [`Error::Backpressure`] when no
    /// room came in time, [`Error::Shutdown`] after shutdown.
    pub fn publish(&self, channel: &[u8], payload: &[u8]) -> Result<(), Error> {
        self.publish_with(channel, payload, PublishOptions::classic())
    }

    /// [`Engine::publish`] with options (`SPUBLISH` with
    /// [`PublishOptions::sharded`]).
    ///
    /// # Errors
    ///
    /// As [`Engine::publish`].
    pub fn publish_with(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
    ) -> Result<(), Error> {
        self.submit_publish(channel, payload, options, Completion::Publish)
    }

    /// Publishes and returns a handle to the outcome: the number of
    /// subscribers that received the message, or why it failed.
    pub fn publish_pending(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
    ) -> Pending<i64> {
        self.publish_handle(channel, payload, options, false)
    }

    /// [`Engine::publish_pending`]; with `counted`, every failure is also
    /// counted in [`EngineStats::publish_failed`](crate::engine::EngineStats::publish_failed) (a refusal at once
    /// included): the Pub/Sub layer's acknowledged publish. The handle's
    /// slot is pooled.
    pub(crate) fn publish_handle(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
        counted: bool,
    ) -> Pending<i64> {
        let (pending, slot) = Pending::pooled();
        let completion = match counted {
            true => Completion::Acked(slot),
            false => Completion::Integer(slot),
        };
        let refused = self
            .submit_publish(channel, payload, options, completion)
            .is_err();
        if refused && counted {
            add(&self.inner.settings.counters.publish_failed, 1);
        }
        pending
    }

    /// Publishes and waits for the reply: the number of subscribers that
    /// received the message (`SPUBLISH` with [`PublishOptions::sharded`]).
    ///
    /// This is the call for a caller that awaits each publish before its
    /// next. While such callers leave the channel's connection idle, its
    /// I/O thread lends it to them: the caller writes its request and reads
    /// the reply on its own thread (one `write`, one `epoll_wait` and one
    /// `read`, where handing both to the I/O thread costs three context
    /// switches). The first call after a pause, and calls that meet other
    /// traffic on the connection, go through the I/O thread as
    /// [`Engine::publish_pending`] does; order and request timeouts are the
    /// same either way. Engines with an [`Builder::observer`](crate::engine::Builder::observer) and TLS
    /// connections always go through the I/O thread.
    ///
    /// Do not call this from an [`Observer`](crate::engine::Observer) or a [`Pending::then`]
    /// callback.
    ///
    /// # Errors
    ///
    /// As [`Engine::publish_pending`]'s handle: [`Error::Reply`] for an
    /// error reply, [`Error::Timeout`], [`Error::ConnectionLost`],
    /// [`Error::NotConnected`], [`Error::Shutdown`], ….
    pub fn publish_wait(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
    ) -> Result<i64, Error> {
        self.publish_wait_within(channel, payload, options, None)
    }

    /// Publishes and awaits the reply, as a task on tokio (feature
    /// `tokio`): the number of subscribers that received the message
    /// (`SPUBLISH` with [`PublishOptions::sharded`]).
    ///
    /// This is [`Engine::publish_wait`] for a task that awaits each
    /// publish before its next. While such callers leave the channel's
    /// connection idle, its I/O thread lends it to them: the task writes
    /// its request on its own worker and, when the runtime's reactor says
    /// the reply is in, reads it there (the lend's epoll instance is
    /// registered in the reactor, once per connection); no lock is held
    /// across an await. That is one `write` and one wake of the worker per
    /// publish, where [`Engine::publish_pending`]`.await` hands the write
    /// and the read to the I/O thread (two eventfd wakes, about four
    /// context switches). The first call after a pause, calls that meet
    /// other traffic on the connection, and calls outside a tokio runtime
    /// go through the I/O thread as [`Engine::publish_pending`] does; order
    /// and request timeouts are the same either way. Engines with an
    /// [`Builder::observer`](crate::engine::Builder::observer) and TLS connections always go through the I/O
    /// thread. The publish is submitted at the future's first poll:
    /// dropped after that, it stays in flight (its outcome is lost to the
    /// caller); dropped before, nothing is sent. On a lent connection a
    /// request timeout shorter than the lend's lease (20 ms) may fire up to
    /// the lease late: the thread runs it when it takes an unused lend
    /// back. The connection's registration stays with the runtime that
    /// made it (one per connection); tasks of a second runtime are woken
    /// through it while that one is driven, and take the thread's path
    /// once it is gone.
    ///
    /// # Errors
    ///
    /// As [`Engine::publish_wait`].
    #[cfg(feature = "tokio")]
    pub async fn publish_async(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
    ) -> Result<i64, Error> {
        let conn = self.route_channel(channel);
        let (pending, slot) = Pending::pooled();
        let request = Request::single(Completion::Integer(slot));
        let encode = |buf: &mut Vec<u8>| encode_publish(buf, options, channel, payload);
        lend_async::call_async(conn, &self.inner.settings, encode, request, pending).await
    }

    /// [`Engine::publish_wait`], waiting at most `timeout` when given
    /// ([`Error::WaitTimeout`] after it).
    pub(crate) fn publish_wait_within(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
        timeout: Option<Duration>,
    ) -> Result<i64, Error> {
        let conn = self.route_channel(channel);
        let until = timeout.map(|t| (Instant::now() + t, t));
        let (pending, slot) = Pending::pooled();
        let request = Request::single(Completion::Integer(slot.clone()));
        let encode = |buf: &mut Vec<u8>| encode_publish(buf, options, channel, payload);
        let lent = conn.call_lent(
            &self.inner.settings,
            encode,
            request,
            until.map(|(at, _)| at),
            || slot.is_done(),
        );
        if let Err((encode, request)) = lent {
            drop(slot);
            if let Err((req, e)) = conn.submit(encode, request) {
                req.user.fail_unstaged(e);
            }
        }
        match until {
            None => pending.wait(),
            Some((at, t)) => {
                match pending.wait_timeout(at.saturating_duration_since(Instant::now())) {
                    Err(Error::WaitTimeout { .. }) => Err(Error::WaitTimeout { after: t }),
                    other => other,
                }
            }
        }
    }

    /// [`Engine::publish_pending`] with a callback instead of a handle: `f`
    /// gets the receiver count or the error, on the I/O thread (or at once on
    /// this thread if the message cannot be sent).
    pub fn publish_then<F>(&self, channel: &[u8], payload: &[u8], options: PublishOptions, f: F)
    where
        F: FnOnce(Result<i64, Error>) + Send + 'static,
    {
        let (pending, slot) = Pending::pooled();
        pending.then(f);
        let _ = self.submit_publish(channel, payload, options, Completion::Integer(slot));
    }

    /// Sends a request kept with its bytes until its reply
    /// ([`Completion::Kept`], see [`kept`]): `encode` appends the whole
    /// command to the connection's staged bytes and returns what the layer
    /// above keeps with it (its bytes copied out by the I/O thread when it
    /// takes them, unless it has them already). The outcome completes it,
    /// or goes to the engine's [`KeptSink`](kept::KeptSink). No allocation
    /// in steady state, and nothing shared with the I/O thread but the
    /// staging lock. At the staged-bytes bound it waits or not as `room`
    /// says.
    ///
    /// # Errors
    ///
    /// When the connection cannot take it: `state`, unused, with the
    /// reason.
    pub(crate) fn submit_kept<S, M, F>(
        &self,
        state: S,
        asking: bool,
        room: Room,
        encode: F,
    ) -> Result<(), (S, Error)>
    where
        M: kept::KeptItem,
        F: FnOnce(&mut Vec<u8>, S) -> M,
    {
        // An engine keeps one kind of request, its sink's (the one user
        // is the cluster's publish path): checked in debug builds only.
        debug_assert!(
            kept::is_sink_of::<M>(self.inner.settings.kept.as_ref()),
            "a kept request of a kind this engine has no sink for"
        );
        // One connection per publish engine. With more, every publish
        // routes by the same (empty) name: one connection while it is up.
        self.route_channel(&[])
            .submit_with(state, room, |staging, s| {
                if asking {
                    stage_asking(staging);
                }
                let msg = encode(&mut staging.buf, s);
                match staging.kept.stage(msg) {
                    Ok(()) => Request::single(Completion::Kept),
                    // Not reached: every kept request of an engine is of one
                    // kind, so its staged queue is too.
                    Err(msg) => {
                        debug_assert!(false, "kept requests of two kinds on one engine");
                        M::orphan(msg.into_whole(&staging.buf));
                        Request::single(Completion::Discard)
                    }
                }
            })
    }

    /// Sends `encoded`, one whole command already in RESP whose reply is
    /// an integer (a history publish script), on the connection a publish
    /// to `channel` would take (so it keeps that channel's order), and runs
    /// `f` with the outcome on the I/O thread.
    ///
    /// # Errors
    ///
    /// What is known at once, as [`Engine::publish`]; `f` has then run
    /// with the same error.
    pub(crate) fn submit_encoded_then<F>(
        &self,
        channel: &[u8],
        encoded: &[u8],
        f: F,
    ) -> Result<(), Error>
    where
        F: FnOnce(Result<i64, Error>) + Send + 'static,
    {
        let (pending, slot) = Pending::pooled();
        pending.then(f);
        let conn = self.route_channel(channel);
        conn.submit(
            |buf| buf.extend_from_slice(encoded),
            Request::single(Completion::Integer(slot)),
        )
        .map_err(|(req, e)| {
            req.user.fail_unstaged(e.clone());
            e
        })
    }

    fn submit_publish(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
        completion: Completion,
    ) -> Result<(), Error> {
        let conn = self.route_channel(channel);
        conn.submit(
            |buf| encode_publish(buf, options, channel, payload),
            Request::single(completion),
        )
        .map_err(|(req, e)| {
            req.user.fail_unstaged(e.clone());
            e
        })
    }
}
