//! A connection while it is lent to a caller (see `lend.rs`): the data the
//! caller and the I/O thread hand back and forth.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use parking_lot::{Mutex, MutexGuard};

use crate::conn::{Connection, Request};
use crate::engine::backoff::Reconnect;
use crate::engine::pending::Completion;
use crate::error::Error;
use crate::transport::Transport;

/// How long a lend may go unused before the thread takes it back (so it
/// watches an idle connection's socket itself again).
pub(crate) const LEASE: Duration = Duration::from_millis(20);

/// How long the thread waits before it lends again after it had to cut a
/// lend short for another submitter (so that contention costs at most one
/// lend and reclaim, four `epoll_ctl` calls, per this interval).
pub(crate) const RELEND: Duration = Duration::from_millis(1);

/// A lend's epoll instance in a tokio reactor.
#[cfg(feature = "tokio")]
pub(crate) type LendFd = std::sync::Arc<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>;

/// The waker's token in the lend's epoll instance.
const WAKE: Token = Token(0);
/// The socket's token there.
const SOCKET: Token = Token(1);

/// The epoll instance a caller waits on, with room for its events. Made
/// once per connection (at its first lend) and kept by the driver between
/// lends.
pub(crate) struct LendPoll {
    pub(crate) poll: Poll,
    pub(crate) events: Events,
    /// This instance's descriptor in an async runtime's reactor, for
    /// async callers (made at the first one's call).
    #[cfg(feature = "tokio")]
    pub(crate) async_fd: Option<LendFd>,
    /// Registering in a reactor failed (no I/O driver): async callers
    /// take the thread's path.
    #[cfg(feature = "tokio")]
    pub(crate) async_fd_failed: bool,
}

impl LendPoll {
    /// A new instance, with the waker the thread uses to cut a wait short
    /// stored in `lend`.
    pub(crate) fn new(lend: &Lend) -> io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKE)?;
        // A connection makes one instance; a second (after a failed
        // registration) keeps the first waker, which then wakes nobody:
        // the thread's lock still ends the wait within the caller's
        // deadline, so do not lend with it.
        if lend.waker.set(waker).is_err() {
            return Err(io::Error::other("lend waker already set"));
        }
        Ok(LendPoll {
            poll,
            events: Events::with_capacity(4),
            #[cfg(feature = "tokio")]
            async_fd: None,
            #[cfg(feature = "tokio")]
            async_fd_failed: false,
        })
    }

    /// Registers the socket's descriptor (the thread keeps the socket's
    /// own registration, so this one goes by descriptor).
    pub(crate) fn watch(&self, socket: &Transport) -> io::Result<()> {
        let fd = socket.raw_fd();
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), SOCKET, Interest::READABLE)
    }

    /// Drops the socket's registration.
    pub(crate) fn unwatch(&self, socket: &Transport) {
        let fd = socket.raw_fd();
        let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
    }
}

/// A caller's try for the lent connection ([`ConnShared::try_turn`]).
pub(crate) enum Turn<'a> {
    /// Its turn: the guard holds the lent connection, with what was staged
    /// moved into its core.
    Mine(MutexGuard<'a, Option<Lent>>),
    /// Another caller holds the lend's lock.
    Busy,
    /// The thread's to send (it was asked to).
    Thread,
}

/// A connection while it is lent.
pub(crate) struct Lent {
    pub(crate) core: Connection<Completion>,
    pub(crate) socket: Transport,
    pub(crate) poll: LendPoll,
    /// The staged request bytes a caller takes to send (kept for its
    /// capacity).
    pub(crate) scratch: Vec<u8>,
    /// The staged requests a caller takes to send (kept for its capacity).
    pub(crate) requests: VecDeque<Request<Completion>>,
    /// The core reported the connection closed during a caller's turn: the
    /// thread tears it down when it takes the lend back.
    pub(crate) closed: Option<Error>,
    /// A read failed with this (the thread runs it through the core).
    pub(crate) io_error: Option<io::ErrorKind>,
    /// The end of the last call.
    pub(crate) used_at: Instant,
    /// The driver's reconnect schedule while lent: a reply read here
    /// marks the connection healthy, as on the thread.
    pub(crate) backoff: Reconnect,
    /// The last read filled its room: the socket may hold more.
    pub(crate) maybe_more: bool,
}

impl Lent {
    pub(crate) fn new(
        core: Connection<Completion>,
        socket: Transport,
        poll: LendPoll,
        (scratch, requests): (Vec<u8>, VecDeque<Request<Completion>>),
        backoff: Reconnect,
        now: Instant,
    ) -> Self {
        Lent {
            core,
            socket,
            poll,
            scratch,
            requests,
            closed: None,
            io_error: None,
            used_at: now,
            backoff,
            maybe_more: false,
        }
    }

    /// The request bytes buffer and queue (empty), for the driver to keep
    /// for the next lend.
    pub(crate) fn take_scratch(&mut self) -> (Vec<u8>, VecDeque<Request<Completion>>) {
        debug_assert!(self.requests.is_empty(), "a caller sends all it takes");
        (
            std::mem::take(&mut self.scratch),
            std::mem::take(&mut self.requests),
        )
    }
}

/// A connection's lend, as callers and its I/O thread see it.
#[derive(Default)]
pub(crate) struct Lend {
    /// The lent connection (`None` while the thread has it).
    pub(crate) slot: Mutex<Option<Lent>>,
    /// Lock-free hint that `slot` holds a lent connection.
    pub(crate) lent: AtomicBool,
    /// A caller found the connection not lent: lend it when it is idle.
    pub(crate) wanted: AtomicBool,
    /// The thread is taking the lend back: no caller starts a request, and
    /// one that waits stops waiting.
    pub(crate) reclaim: AtomicBool,
    /// A caller met something only the thread handles (a short write, the
    /// end of the stream, a read error, a timeout, a closed core, its own
    /// wait ending) and handed the lend back: take it now.
    pub(crate) handback: AtomicBool,
    /// Wakes a caller waiting on the lend's epoll instance.
    pub(crate) waker: OnceLock<Waker>,
}
