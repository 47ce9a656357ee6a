//! shardsub: Redis and Valkey Pub/Sub at scale.
//!
//! This crate is the engine: a runtime of I/O threads that host pipelined
//! connections to one or more servers, a write path that coalesces many commands into one
//! `write`, and replies matched to requests in order. Parsing lives in
//! [`resp`], hashing and partitions in [`shardcore`]; the connection
//! protocol itself is the sans-IO state machine in `src/conn` (internal).
//!
//! # Pub/Sub: one type, three placements
//!
//! [`PubSub`] is the type applications use. Its builder chooses the
//! placement: one server, N client-side shards
//! ([`PubSubBuilder::address`]), or a Redis/Valkey Cluster
//! ([`PubSubBuilder::seed`]), also by URL ([`PubSubBuilder::url`]:
//! `redis://user:password@host:port`, `?cluster=true` for a seed);
//! everything else (handler, events, metrics, errors, options) is the same
//! in each. [`PubSub::render_prometheus`] writes the metrics in the
//! Prometheus text format.
//!
//! ```text
//!  subscribe / unsubscribe / wait_active              publish(ch, payload)
//!          │                                                  │
//!          ▼                                                  ▼
//!  front (src/front): the registry of wanted         placement: channel → lane
//!  channels per lane, worker queues, refusals,       → node, and its wire name
//!  active waits (one for every placement)            (servers: shard_of → server;
//!          │ dirty lanes (mailbox)                    cluster: partition → slot →
//!          ▼                                          owner from the core's map)
//!  control core (shardsub-control, sans-IO):                 │
//!   handle_want / unwant / conn_up / down /                  │
//!   subscribe_reply / sunsubscribe / pong /                  │
//!   version / topology / probe / redirect / timeout(now)     │
//!   ─► poll_command: Open, Close, Subscribe,                 │
//!      Unsubscribe, Gap, Refused, Ping, AskVersion,          │
//!      FetchTopology, ProbeSlot; poll_timeout                │
//!   (modes: fixed servers, node-grouped cluster,             │
//!    per-partition, classic; one implementation of           │
//!    rewire = topology::plan_rewire, resubscribe by          │
//!    partition, gaps, refusal bisection, backoff, pings)     │
//!          │ commands                  ▲ inputs              │
//!          ▼                           │                     │
//!  driver: the one control thread per instance (cluster::    │
//!   driver) carries each command out with a non-blocking     │
//!   call (a callback posts the answer back as an input),     │
//!   and carries out the publish side's decisions (control::  │
//!   Routes, Gates, Hold, RetryPolicy, Services)              │
//!          │ SUBSCRIBE / SSUBSCRIBE ...                      │ PUBLISH / SPUBLISH
//!          ▼                                                 ▼
//!  engines: pipelined connections (conn, sans-IO) on the Runtime's I/O
//!  threads (one mio::Poll per core, shared by every connection of every
//!  placement and, when given the same Runtime, by several instances)
//!          │ pushes (messages, confirmations, server unsubscribes)
//!          ▼
//!  worker_of(channel) ─► bounded queue ─► Handler (messages, gaps, drops, in order)
//! ```
//!
//! # Recoverable channels
//!
//! [`PubSubBuilder::history`] makes a prefix's channels recoverable: each
//! publish also appends to a capped stream beside the channel, in one
//! server-side script, and carries an epoch and offset; a worker that sees
//! a gap, a drop or an offset jump reads the missed messages back and
//! delivers them in order before the live ones, or reports
//! [`Event::Unrecoverable`]. [`PubSub::history`] and [`PubSub::position`]
//! read the stream. See [`history`].
//!
//! # Async
//!
//! No runtime is needed or pulled in: the futures are plain
//! [`std::future::Future`]s woken through their [`Waker`](std::task::Waker),
//! so they run on any executor, and the library never calls `block_on`.
//!
//! - [`Pending`] (any request's outcome) is a future:
//!   [`PubSub::publish_pending`]`(ch, payload).await` gives the receiver
//!   count, in every placement.
//! - [`PubSub::active`]`(&channels).await` is the awaitable
//!   [`PubSub::wait_active`] (ready when confirmed, or with a refusal or
//!   shutdown; it has no deadline of its own, so wrap it in the executor's
//!   timeout).
//! - [`pubsub::receiver`] (or [`PubSubBuilder::receiver`]) gives a handler
//!   and a [`pubsub::Receiver`]: one bounded queue that an async task reads
//!   with `recv().await` (or `poll_recv`, `try_recv`). When it is full a
//!   message is dropped and a [`pubsub::Delivery::Dropped`] naming its
//!   channel comes before that channel's next message: never silent.
//! - [`PubSub::shutdown_pending`]`().await` shuts down on a helper thread
//!   the library starts, so no executor thread waits for the joins.
//!
//! Which calls can block, and for how long (the rest return at once):
//!
//! | call | blocks | at most |
//! | --- | --- | --- |
//! | `publish`, `publish_then`, `publish_pending` (the call, not the await) | only while the connection buffers [`Builder::max_buffered_bytes`](crate::engine::Builder::max_buffered_bytes) (backpressure) | the request timeout ([`PubSubBuilder::request_timeout`], 5 s) |
//! | `wait_active`, `publish_wait`, `Pending::wait_timeout` | always | the timeout passed |
//! | `Pending::wait` | always | about the request timeout |
//! | `PubSubBuilder::build` | connecting | the connect timeout per attempt (2 s) |
//! | `shutdown`, and dropping the last `PubSub` | joins the threads | the shutdown timeout (2 s) plus 5 s margin, plus a handler call still running |
//!
//! On tokio: build in `spawn_blocking` (or before serving), `.await` the
//! rest, await `shutdown_pending` before the last handle drops, and keep
//! `wait_active`/`publish_wait` for threads of your own.
//! `examples/tokio_server.rs` is a TCP line server written so (its smoke
//! test is `tests/suite/examples/tokio_server.rs`).
//!
//! # Engine data flow
//!
//! ```text
//!  app threads                     Runtime: I/O threads (one mio::Poll per
//!  ───────────                     core), shared by every engine on it
//!                                  ─────────────────────────────────────
//!  publish(ch, payload)
//!   │ shard_of(ch) → server,
//!   │ hash(ch) → connection
//!   ▼
//!  staging buffer ──(first submitter  ──► Waker ──► swap staging ⇄ spare
//!  (mutex held only    after a drain            │   (double buffer, no alloc)
//!   to encode)         wakes the thread)        ▼
//!                                          conn::Connection (sans-IO)
//!                                           out buffer ── flush delay:
//!                                           │  held ≤ 100 µs while earlier
//!                                           │  requests await replies
//!                                           ▼
//!                                          one write() per batch ──► server
//!                                                                      │
//!  Pending / callback ◄── replies matched FIFO ◄── parse in place ◄── read()
//!  Observer::on_push  ◄── pushes (never take a reply)
//! ```
//!
//! Commands are held only behind a real pipeline (two or more written
//! requests awaiting replies) and only while the pending batch is small
//! (under 16 KiB): so a caller that waits for each reply is never slowed by
//! the flush delay, and held commands leave as soon as the pipeline drains
//! or the batch fills (the delay is an upper bound, kept with epoll's
//! millisecond resolution).
//! Each connection buffers at most [`Builder::max_buffered_bytes`](crate::engine::Builder::max_buffered_bytes) of
//! commands; beyond that, submitters wait for the server to catch up
//! (backpressure), for at most the request timeout.
//! Every request completes: with its reply, or with an [`Error`] when its
//! connection breaks, its reply is late (the connection then restarts,
//! since replies are matched in order), or the engine shuts down.
//! Connections come back with exponential backoff and jitter.
//!
//! The I/O threads belong to a [`Runtime`]: a fixed set, one per core by
//! default. An [`Engine`](crate::engine::Engine) or a [`PubSub`] (in any placement) builds
//! its own unless it is given one, and puts all of its connections on it
//! (publish and subscribe, every server, every cluster node or partition),
//! so the thread count never follows the topology. Several instances can
//! share one runtime (a fleet in one process); a thread that panics is
//! reported, and its connections fail with [`Error::RuntimeStopped`]
//! instead of leaving requests waiting.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use shardsub::Value;
//! use shardsub::engine::{Engine, PublishOptions};
//!
//! # fn main() -> Result<(), shardsub::Error> {
//! let engine = Engine::builder()
//!     .address("127.0.0.1:6379")
//!     .flush_delay(Duration::from_micros(100))
//!     .build()?;
//!
//! // Fire-and-forget: no allocation, leaves with the next batch.
//! engine.publish(b"news", b"hello")?;
//!
//! // With an outcome: how many subscribers got it.
//! let receivers = engine
//!     .publish_pending(b"news", b"hello again", PublishOptions::sharded())
//!     .wait_timeout(Duration::from_secs(1))?;
//! println!("{receivers} subscribers got it");
//!
//! // Any command, with its owned reply.
//! assert_eq!(engine.command(["PING"])?, Value::Simple(b"PONG".to_vec()));
//! engine.shutdown();
//! # Ok(())
//! # }
//! ```
//!
//! (`tests/suite/engine/basic.rs` runs the same calls against real servers.)
#![deny(missing_docs)]

pub mod cluster;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod conn;
#[cfg(not(feature = "internals"))]
pub(crate) mod conn;
pub mod engine;
mod error;
mod front;
pub mod history;
pub mod metrics;
mod observer;
pub mod pubsub;
mod threads;
mod transport;
mod url;
mod wire;
mod workers;

/// The unit tests' global allocator: testkit's counting one, so a test can
/// measure what its own thread keeps allocated while others run beside it
/// (`testkit::alloc::this_thread::live_bytes`).
#[cfg(test)]
#[global_allocator]
static ALLOC: testkit::alloc::CountingAlloc = testkit::alloc::CountingAlloc::new();

pub use conn::{ConnError, Protocol, Role};
pub use engine::resolve::Resolver;
pub use engine::{Pending, Runtime};
pub use error::Error;
pub use metrics::{Dropped, LagSnapshot, Metrics, ServerHealth};
pub use pubsub::{
    handler_fn, ChannelList, Channels, Event, FnHandler, Handler, PubSub, PubSubBuilder,
};
pub use resp::Value;
#[cfg(feature = "tls")]
pub use transport::tls::TlsConfig;
