//! Commands on an engine's connections: one reply each, waited for,
//! awaited or handed to a callback.

use resp::Value;

use crate::conn::{ReplyKind, Request};
use crate::engine::handle::Engine;
#[cfg(feature = "tokio")]
use crate::engine::lend_async;
use crate::engine::pending::{Completion, Pending, SlotRef};
use crate::engine::shared::{stage_asking, Room};
use crate::error::Error;

/// A request for one reply of any kind, its handle and its cell.
fn value_request() -> (Pending<Value>, SlotRef<Value>, Request<Completion>) {
    let (pending, slot) = Pending::new();
    let request = Request {
        user: Completion::Value(slot.clone()),
        kind: ReplyKind::Single,
    };
    (pending, slot, request)
}

impl Engine {
    /// Sends any command to the first server and waits for its reply.
    ///
    /// A sequential caller: like [`Engine::publish_wait`], it may write and
    /// read on this thread while the connection is lent to it. A blocking
    /// command (`BLPOP`) holds the lent connection only until another
    /// request needs it; that request then waits for the blocking one's
    /// reply, since replies come in order.
    ///
    /// Do not call this from an [`Observer`](crate::engine::Observer) or a [`Pending::then`]
    /// callback: those run on the I/O thread that would deliver the reply.
    ///
    /// # Errors
    ///
    /// [`Error::Reply`] for an error reply; otherwise the connection's
    /// failure ([`Error::Timeout`], [`Error::ConnectionLost`],
    /// [`Error::NotConnected`], [`Error::Shutdown`], …).
    pub fn command<I>(&self, args: I) -> Result<Value, Error>
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        // A sequential caller: the lend of `publish_wait` applies.
        let conn = self.route_server(0)?;
        let (pending, slot, request) = value_request();
        let encode = |buf: &mut Vec<u8>| resp::encode_command(buf, args);
        if let Err((encode, request)) =
            conn.call_lent(&self.inner.settings, encode, request, None, || {
                slot.is_done()
            })
        {
            drop(slot);
            if let Err((req, e)) = conn.submit(encode, request) {
                req.user.fail_unstaged(e);
            }
        }
        pending.wait()
    }

    /// [`Engine::command`] as a task on tokio (feature `tokio`): any
    /// command to the first server, its reply awaited. Like
    /// [`Engine::publish_async`], a task that awaits each reply writes and
    /// reads the connection on its own worker while it is lent; the first
    /// call after a pause, calls meeting other traffic and calls outside a
    /// tokio runtime go through the I/O thread. A blocking command
    /// (`BLPOP`) holds up the requests behind it on the connection, since
    /// replies come in order.
    ///
    /// # Errors
    ///
    /// As [`Engine::command`].
    #[cfg(feature = "tokio")]
    pub async fn command_async<I>(&self, args: I) -> Result<Value, Error>
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        let conn = self.route_server(0)?;
        let (pending, _, request) = value_request();
        let encode = |buf: &mut Vec<u8>| resp::encode_command(buf, args);
        lend_async::call_async(conn, &self.inner.settings, encode, request, pending).await
    }

    /// Sends any command to server `server` (index in the builder's list)
    /// and returns a handle to its reply. Connections of that server are
    /// used in turn.
    ///
    /// # Errors
    ///
    /// The handle yields [`Error::InvalidArgument`] when there is no server
    /// `server`; otherwise as [`Engine::command`].
    pub fn command_pending<I>(&self, server: usize, args: I) -> Pending<Value>
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        let (pending, slot) = Pending::new();
        self.submit_value(server, args, slot, false);
        pending
    }

    /// Sends any command to server `server` and runs `f` with its outcome
    /// on the I/O thread, in order with that connection's
    /// [`Observer::on_push`](crate::engine::Observer::on_push) calls (a push that arrives before the reply is
    /// seen before `f` runs). Keep `f` short; never block in it. If the
    /// command cannot be sent, `f` runs at once on this thread.
    ///
    /// # Errors
    ///
    /// `f` gets the errors [`Engine::command_pending`] yields.
    pub fn command_then<I, F>(&self, server: usize, args: I, f: F)
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
        F: FnOnce(Result<Value, Error>) + Send + 'static,
    {
        self.then_value(server, args, false, f);
    }

    /// [`Engine::command_then`] on server 0, with `ASKING` before it when
    /// `asking` (an `ASK` redirect's retry), both staged under one lock on
    /// one connection: no other submission falls between them, so
    /// `ASKING` applies to this command and no other.
    pub(crate) fn command_then_asking<I, F>(&self, args: I, asking: bool, f: F)
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
        F: FnOnce(Result<Value, Error>) + Send + 'static,
    {
        self.then_value(0, args, asking, f);
    }

    /// Submits a command to `server` (`ASKING` first when `asking`) whose
    /// outcome runs `f`.
    fn then_value<I, F>(&self, server: usize, args: I, asking: bool, f: F)
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
        F: FnOnce(Result<Value, Error>) + Send + 'static,
    {
        let (pending, slot) = Pending::new();
        pending.then(f);
        self.submit_value(server, args, slot, asking);
    }

    /// [`Engine::command_pending`] on server 0 with `ASKING` before it, as
    /// [`Engine::command_then_asking`] stages them.
    #[cfg(test)]
    pub(crate) fn asking_command_pending<I>(&self, args: I) -> Pending<Value>
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        let (pending, slot) = Pending::new();
        self.submit_value(0, args, slot, true);
        pending
    }

    /// Stages one command whose reply completes `slot`, with `ASKING` right
    /// before it under the same lock when `asking`.
    fn submit_value<I>(&self, server: usize, args: I, slot: SlotRef<Value>, asking: bool)
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        let conn = match self.route_server(server) {
            Ok(c) => c,
            Err(e) => return slot.complete(Err(e)),
        };
        let staged = conn.submit_with(slot, Room::Wait, |staging, slot| {
            if asking {
                stage_asking(staging);
            }
            resp::encode_command(&mut staging.buf, args);
            Request {
                user: Completion::Value(slot),
                kind: ReplyKind::Single,
            }
        });
        if let Err((slot, e)) = staged {
            slot.complete(Err(e));
        }
    }

    /// Seam for the Pub/Sub layer: encodes commands straight into connection
    /// `index` of server `server`, whose replies `kind` describes; the reply
    /// is only counted (errors in [`EngineStats::error_replies`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a connection that does not exist,
    /// [`Error::NotConnected`] while it reconnects, [`Error::Shutdown`].
    pub(crate) fn submit_to<F>(
        &self,
        server: usize,
        index: usize,
        encode: F,
        kind: ReplyKind,
    ) -> Result<(), Error>
    where
        F: FnOnce(&mut Vec<u8>),
    {
        let conn = self.conn_at(server, index)?;
        conn.submit(
            encode,
            Request {
                user: Completion::Discard,
                kind,
            },
        )
        .map_err(|(_, e)| e)
    }

    /// Seam for the cluster layer: as [`Engine::submit_to`], but `then`
    /// gets the reply (or the failure) on the I/O thread; when the command
    /// cannot be sent, `then` runs at once on this thread with the error,
    /// which is also returned.
    ///
    /// # Errors
    ///
    /// As [`Engine::submit_to`].
    pub(crate) fn submit_to_then<F, G>(
        &self,
        server: usize,
        index: usize,
        encode: F,
        kind: ReplyKind,
        then: G,
    ) -> Result<(), Error>
    where
        F: FnOnce(&mut Vec<u8>),
        G: FnOnce(Result<Value, Error>) + Send + 'static,
    {
        let (pending, slot) = Pending::new();
        pending.then(then);
        let conn = match self.conn_at(server, index) {
            Ok(c) => c,
            Err(e) => {
                slot.complete(Err(e.clone()));
                return Err(e);
            }
        };
        conn.submit(
            encode,
            Request {
                user: Completion::Value(slot),
                kind,
            },
        )
        .map_err(|(req, e)| {
            req.user.fail_unstaged(e.clone());
            e
        })
    }
}
