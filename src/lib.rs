//! shardsub: Redis and Valkey Pub/Sub at scale. One type, [`PubSub`], on one
//! server, on N client-side shards or on a Redis/Valkey Cluster with sharded
//! Pub/Sub; delivery is at most once, as Pub/Sub's own, but a possible loss
//! is never silent: the handler is told which channels may have missed
//! messages, in order with the messages.
//!
//! ```no_run
//! use std::time::Duration;
//! use shardsub::{Event, PubSub};
//!
//! # fn main() -> Result<(), shardsub::Error> {
//! let ps = PubSub::builder()
//!     .url("redis://127.0.0.1:6379")
//!     .on_message(|channel, payload| {
//!         // On a worker thread, in order per channel.
//!         println!("{}: {} bytes", String::from_utf8_lossy(channel), payload.len());
//!     })
//!     .on_event(|event| {
//!         if let Event::Gap { channels, .. } = event {
//!             // These channels may have lost messages: reload their state.
//!             println!("{} channels may have lost messages", channels.len());
//!         }
//!     })
//!     .build()?;
//! ps.subscribe(["room:1", "room:2"])?;
//! ps.wait_active(&["room:1", "room:2"], Duration::from_secs(10))?;
//! ps.publish("room:1", "hello")?;
//! # Ok(())
//! # }
//! ```
//!
//! # Placements
//!
//! The builder chooses the placement: one server or N client-side shards
//! ([`PubSubBuilder::address`], a channel on server `shard_of(channel, N)`),
//! or a cluster ([`PubSubBuilder::seed`], channels in app-level
//! [`partitions`](PubSubBuilder::partitions), one subscribe connection per
//! primary), also by URL ([`PubSubBuilder::url`]: `redis://user:password@host:port`,
//! `?cluster=true` for a seed). Everything else (handler, events, metrics,
//! errors, options) is the same in each.
//!
//! # Events
//!
//! [`Handler::on_event`] gets, on the channel's worker and in order with its
//! messages: [`Event::Gap`] (a connection lost or a slot moved: these
//! channels may have lost messages), [`Event::Dropped`] (a full worker
//! queue), [`Event::Unrecoverable`] (a recoverable channel's history could
//! not fill a loss), [`Event::Refused`] (the server refused a subscribe),
//! [`Event::Active`] (confirmed; with
//! [`active_events`](PubSubBuilder::active_events)), and
//! [`Event::Disconnected`] / [`Event::Connected`] for a server's
//! connections. [`PubSub::health`] and [`PubSub::metrics`] show the state
//! now; [`PubSub::render_prometheus`] writes the Prometheus text format.
//!
//! [`PubSubBuilder::history`] makes a prefix's channels recoverable: each
//! publish also appends to a capped stream beside the channel, and a worker
//! that sees a gap, a drop or an offset jump reads the missed messages back
//! and delivers them in order before the live ones (see [`history`]).
//!
//! # Async
//!
//! No runtime is needed or pulled in: [`Pending`] (any request's outcome)
//! is a plain [`std::future::Future`] woken through its
//! [`Waker`](std::task::Waker), and the library never calls `block_on`.
//! [`PubSubBuilder::build_pending`], [`PubSub::active`],
//! [`PubSub::publish_pending`], [`PubSub::command_pending`],
//! [`PubSub::history_pending`] and [`PubSub::close`] are the awaitable forms;
//! [`PubSubBuilder::receiver`] (or
//! [`receiver_for`](PubSubBuilder::receiver_for), one per channel prefix)
//! gives a bounded [`pubsub::Receiver`] that is a `futures_core::Stream` of
//! [`pubsub::Delivery`]. With the `tokio` feature, the low-level
//! `Engine::publish_async` writes and reads on the task's own worker.
//!
//! Which calls can block, and for how long (the rest return at once):
//!
//! | call | blocks | at most |
//! | --- | --- | --- |
//! | `publish`, `publish_pending` (the call, not the await) | only while the connection buffers [`Builder::max_buffered_bytes`](crate::engine::Builder::max_buffered_bytes) (backpressure) | the request timeout ([`PubSubBuilder::request_timeout`], 5 s) |
//! | `wait_active`, `wait_inactive`, `publish_wait`, `Pending::wait_timeout` | always | the timeout passed |
//! | `Pending::wait` | always | about the request timeout |
//! | `command`, `history`, `position` | always | the request timeout per round trip (on a cluster, per redirect, and the retry window while a slot has no owner) |
//! | `build` on servers | connecting, and reading what the servers allow (`INFO`, `CONFIG GET`) | the connect timeout per step (2 s) |
//! | `build` on a cluster | discovery, then the same reads | [`PubSubBuilder::discovery_timeout`] (10 s), then the connect timeout |
//! | `shutdown` | joining threads | the shutdown timeout (2 s) + 5 s, plus a handler call still running |
//!
//! On tokio: `.await` the async forms, and keep `wait_active`/`publish_wait`
//! for threads of your own. `examples/tokio_server.rs` is a TCP line server
//! written so.
//!
//! # Data flow
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
//!  driver: the one control thread per instance               │
//!   (control_loop::driver) carries each command out with     │
//!   a non-blocking call (a callback posts the answer back    │
//!   as an input), and carries out the publish side's         │
//!   decisions (control::Routes, Gates, Hold, RetryPolicy,    │
//!   Services)                                                │
//!          │ SUBSCRIBE / SSUBSCRIBE ...                      │ PUBLISH / SPUBLISH
//!          ▼                                                 ▼
//!  engines: pipelined connections (conn, sans-IO) on the Runtime's I/O
//!  threads (one mio::Poll per core, shared by every connection of every
//!  placement and, when given the same Runtime, by several instances)
//!          │ pushes (messages, confirmations, server unsubscribes)
//!          ▼
//!  lane's home worker ─► bounded queue ─► Handler (messages, gaps, drops, in order)
//! ```
//!
//! The engine underneath ([`engine::Engine`]) is a pipelined client for any
//! command: a runtime of I/O threads ([`Runtime`], one per core by default,
//! shared by every connection of an instance and, when given the same
//! runtime, by several instances), a write path that coalesces many
//! commands into one `write`, and replies matched to requests in order.
//! Parsing lives in [`resp`], hashing and partitions in [`shardcore`].
//!
//! Patterns ([`PubSub::psubscribe`]) are subscribed on every server of a
//! fixed placement, and on one node of a cluster in
//! [`cluster::Mode::Classic`] (sharded Pub/Sub has no patterns).
//!
//! What it does not do: persistence or redelivery of plain channels
//! (Pub/Sub is at most once; losses are signalled, and recoverable channels
//! read them back).
#![deny(missing_docs)]

mod addr;
pub mod cluster;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod conn;
#[cfg(not(feature = "internals"))]
pub(crate) mod conn;
mod control_loop;
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

/// The README's Rust blocks, compiled by `cargo test --doc` (this item
/// exists only then).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// GUIDE.md's Rust blocks, compiled by `cargo test --doc` likewise.
#[cfg(doctest)]
#[doc = include_str!("../GUIDE.md")]
struct GuideDoctests;

/// The unit tests' global allocator: testkit's counting one, so a test can
/// measure what its own thread keeps allocated while others run beside it
/// (`testkit::alloc::this_thread::live_bytes`).
#[cfg(test)]
#[global_allocator]
static ALLOC: testkit::alloc::CountingAlloc = testkit::alloc::CountingAlloc::new();

pub use addr::ServerAddr;
pub use conn::{ConnError, Protocol, Role};
pub use engine::resolve::Resolver;
pub use engine::{Pending, Runtime};
pub use error::Error;
pub use metrics::{Dropped, LagSnapshot, Metrics, ServerHealth};
pub use pubsub::{
    handler_fn, ChannelList, Channels, Event, FnHandler, Handler, PubSub, PubSubBuilder, Text,
};
pub use resp::Value;
#[cfg(feature = "tls")]
pub use transport::tls::TlsConfig;
