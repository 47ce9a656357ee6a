//! The engine's own counters, and the snapshot [`Engine::stats`](crate::engine::Engine::stats) gives.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::threads::PanicCount;

/// Engine-wide counters (relaxed atomics, bumped per batch, not per call,
/// with [`crate::metrics::add`]): what [`Engine::stats`](crate::engine::Engine::stats)
/// reads, the low-level engine's own, apart from the Pub/Sub metrics.
#[derive(Default, Debug)]
pub(crate) struct EngineCounters {
    pub(crate) requests: AtomicU64,
    pub(crate) replies: AtomicU64,
    pub(crate) error_replies: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) publish_failed: AtomicU64,
    pub(crate) pushes: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) write_would_block: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) reads: AtomicU64,
    pub(crate) read_pauses: AtomicU64,
    pub(crate) lent: AtomicU64,
    pub(crate) connects: AtomicU64,
    pub(crate) disconnects: AtomicU64,
    /// The I/O threads that panicked (shared with the Pub/Sub layer above,
    /// when there is one).
    pub(crate) thread_panics: PanicCount,
}

/// A snapshot of the engine's counters.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Requests handed to connections (publishes and commands).
    pub requests: u64,
    /// Replies received.
    pub replies: u64,
    /// Replies that were errors (including fire-and-forget publishes).
    pub error_replies: u64,
    /// Requests that failed without a reply (connection lost, timeout…).
    pub failed: u64,
    /// Fire-and-forget publishes ([`Engine::publish`](crate::engine::Engine::publish))
    /// that were taken and then failed: an error reply, or no reply (their
    /// connection broke, the engine shut down). A publish refused at once
    /// returned its error instead. The publish engine of a
    /// [`PubSub`](crate::PubSub) counts its acknowledged publishes'
    /// failures here too (its [`Metrics::publish_errors`](crate::Metrics::publish_errors)).
    pub publish_failed: u64,
    /// Push frames received.
    pub pushes: u64,
    /// `write` system calls that wrote something.
    pub writes: u64,
    /// `write` system calls that found the socket full (`WouldBlock`).
    pub write_would_block: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// `read` system calls that returned data.
    pub reads: u64,
    /// Read pauses begun: a subscribe connection that read a busy turn,
    /// or a steady stream of small ones, stopped reading for a while so
    /// that its next turn reads more at once (one wake-up per pause; see
    /// [`PubSubBuilder::delivery_delay`](crate::PubSubBuilder::delivery_delay)).
    pub read_pauses: u64,
    /// Requests a sequential caller sent on a connection its I/O thread
    /// had lent ([`Engine::publish_wait`], [`Engine::command`]): its own
    /// and those of the callers it sent along with it, each counted once
    /// when it is handed to the lent connection (the thread reads the
    /// replies of those whose callers hand the lend back); included in
    /// `requests`.
    ///
    /// [`Engine::publish_wait`]: crate::engine::Engine::publish_wait
    /// [`Engine::command`]: crate::engine::Engine::command
    pub lent: u64,
    /// Successful handshakes (first connects and reconnects).
    pub connects: u64,
    /// Connections lost or closed.
    pub disconnects: u64,
    /// I/O threads that panicked (each also logged with `log::error!`). A
    /// panicked thread's connections stop; alert on any non-zero value.
    pub thread_panics: u64,
}

impl EngineCounters {
    pub(crate) fn snapshot(&self) -> EngineStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EngineStats {
            requests: g(&self.requests),
            replies: g(&self.replies),
            error_replies: g(&self.error_replies),
            failed: g(&self.failed),
            publish_failed: g(&self.publish_failed),
            pushes: g(&self.pushes),
            writes: g(&self.writes),
            write_would_block: g(&self.write_would_block),
            bytes_written: g(&self.bytes_written),
            reads: g(&self.reads),
            read_pauses: g(&self.read_pauses),
            lent: g(&self.lent),
            connects: g(&self.connects),
            disconnects: g(&self.disconnects),
            thread_panics: self.thread_panics.get(),
        }
    }
}
