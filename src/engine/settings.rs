//! What an engine is built with: the settings every connection and I/O
//! thread reads, and the options of one publish.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use crate::addr::ServerAddr;
use crate::conn::ConnConfig;
use crate::engine::resolve;
use crate::engine::stats::EngineCounters;
use crate::observer::Observer;
use crate::transport::tls::TlsTarget;

/// Settings every connection and I/O thread reads.
pub(crate) struct Settings {
    pub(crate) conn: ConnConfig,
    /// Buffered bytes per connection beyond which submitters wait.
    pub(crate) max_buffered: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) counters: EngineCounters,
    /// A failed first attempt does not end the connection (it reconnects).
    pub(crate) degraded: bool,
    /// Where kept publishes' outcomes go (a cluster's publish engines).
    pub(crate) kept: Option<AnySink>,
    /// Idle connections may be lent to sequential callers (see `lend.rs`):
    /// no observer, no kept publishes (TLS is checked per connection).
    pub(crate) lendable: bool,
    /// How long a lend may go unused ([`LEASE`](crate::engine::lent::LEASE); longer in tests).
    pub(crate) lease: Duration,
    /// After a read turn that took at least [`BUSY_READ`](crate::engine::driver::BUSY_READ) bytes
    /// and left the socket empty, the connection stops reading for this
    /// long, so the next turn finds more to read: one wake-up of the I/O
    /// thread (and of the workers) per pause instead of one per arriving
    /// segment. Smaller read turns less than a quarter of it apart on
    /// average pause for half of it. Zero: never (every connection but the Pub/Sub
    /// subscribers', which take
    /// [`PubSubBuilder::delivery_delay`](crate::PubSubBuilder::delivery_delay)).
    pub(crate) read_pause: Duration,
}

/// How to publish one message.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishOptions {
    /// `SPUBLISH` (sharded Pub/Sub, Redis 7+) instead of `PUBLISH`.
    pub sharded: bool,
}

impl PublishOptions {
    /// Classic `PUBLISH`.
    pub fn classic() -> Self {
        PublishOptions { sharded: false }
    }

    /// Sharded `SPUBLISH`.
    pub fn sharded() -> Self {
        PublishOptions { sharded: true }
    }
}

/// A server as an engine starts it: its address now, its TLS target, and
/// its name when it was given by name (looked up again before reconnects).
pub(crate) type Target = (
    ServerAddr,
    Option<Arc<TlsTarget>>,
    Option<Arc<resolve::Named>>,
);

/// An engine's sink, type-erased for its settings: a
/// `Weak<dyn KeptSink<M>>` (see [`any_sink`]).
pub(crate) type AnySink = Arc<dyn Any + Send + Sync>;
