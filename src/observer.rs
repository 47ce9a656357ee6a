//! Hooks for what happens on connections: pushes and connection changes.
//!
//! The Pub/Sub and cluster layers plug in here; so can an application that
//! wants to see `DEBUG PROTOCOL push` frames or count reconnects.

use resp::Parsed;

use crate::addr::ServerAddr;
use crate::conn::{Protocol, Role};
use crate::error::Error;

/// Which connection an event comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConnInfo {
    /// Index of the server in the builder's address list.
    pub server: usize,
    /// The server's address.
    pub addr: ServerAddr,
    /// Index of the connection among the server's connections of its role.
    pub index: usize,
    /// What the connection carries.
    pub role: Role,
}

/// Receives connection events, on the connection's I/O thread.
///
/// Every method has an empty default. Calls for one connection come in
/// order, from one thread; keep them short and never block in them (a
/// blocked I/O thread stops every connection it owns).
pub trait Observer: Send + Sync + 'static {
    /// A push frame arrived (RESP3 `>`, or a RESP2 Pub/Sub array on a
    /// subscribe connection). `push.attributes` holds any attribute that
    /// preceded it. The frame borrows the connection's buffer.
    fn on_push(&self, conn: &ConnInfo, push: &Parsed<'_>) {
        let _ = (conn, push);
    }

    /// [`Observer::on_push`] with the frame already classified as a Pub/Sub
    /// message, confirmation or the like (`None` when it is not one), so an
    /// observer that needs the class does not parse the frame again. The
    /// engine calls this one; by default it calls [`Observer::on_push`].
    fn on_classified_push(
        &self,
        conn: &ConnInfo,
        push: &Parsed<'_>,
        class: Option<&resp::PubSub<'_>>,
    ) {
        let _ = class;
        self.on_push(conn, push);
    }

    /// A connection finished its handshake (first connect or reconnect).
    fn on_connected(&self, conn: &ConnInfo, protocol: Protocol, fell_back: bool) {
        let _ = (conn, protocol, fell_back);
    }

    /// A connection ended; every request pending on it has failed with
    /// `error` (or an error derived from it). A reconnect follows unless the
    /// engine is shutting down.
    fn on_disconnected(&self, conn: &ConnInfo, error: &Error) {
        let _ = (conn, error);
    }

    /// The pushes passed to [`Observer::on_push`] since the last call are
    /// all there is for now: called at the end of each read, and before a
    /// reply or failure completes a request (so that a completion sees every
    /// push before it handed on). A place to flush work batched per read
    /// (the Pub/Sub layer queues a read's messages to its workers here,
    /// one lock and one wake per worker rather than per message).
    fn on_pushes_done(&self, conn: &ConnInfo) {
        let _ = conn;
    }
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub(crate) struct NoObserver;

impl Observer for NoObserver {}
