//! Pub/Sub at scale on one server or on N client-side shards.
//!
//! [`PubSub`] on servers owns a publish engine (pipelined connections),
//! subscribe connections, one control thread and a pool of worker threads.
//! The control thread drives the same sans-IO control core as a cluster's
//! ([`control::Core`] in its fixed mode: the servers are its nodes), so the
//! two placements share every subscribe, resubscribe, gap, refusal and
//! liveness decision:
//!
//! ```text
//! subscribe()/unsubscribe() ─► registry (wanted state per channel, by lane)
//!                                 │ dirty lanes
//!                                 ▼
//!                   control thread: core ─► commands ── SUBSCRIBE ≤512 ─► subscribe conns
//!                   (resubscribe + gap, refusals, PING)      ▲ replies,     │ pushes
//!                                                            └─ up / down ◄─┤
//!                                                                           ▼
//!   handler ◄── worker w ◄── bounded queue w ◄── worker_of(channel) ◄── I/O thread
//! ```
//!
//! - A channel lives on server `shard_of(channel, N)` (publisher and
//!   subscriber agree without talking) and on one of that server's
//!   subscribe connections, chosen by a hash of the channel.
//! - Calls close in time coalesce into commands of at most
//!   [`PubSubBuilder::batch_size`] channels; a subscribe racing an
//!   unsubscribe ends in the state asked for last.
//! - Messages reach the [`Handler`] on worker `worker_of(channel, W)`, in
//!   order per channel. A full worker queue drops and counts; the reader
//!   never blocks.
//! - After a reconnect every wanted channel is resubscribed and the handler
//!   gets [`Event::Gap`] naming the channels that may have lost messages.
//! - An idle subscribe connection gets a `PING` after
//!   [`PubSubBuilder::probe_interval`] of silence; one that does not answer
//!   within another interval is closed and reopened (a gap for its
//!   channels).
//!
//! What it does not do: patterns, Redis Cluster (see the cluster mode),
//! persistence or redelivery (Pub/Sub is at most once; gaps are signalled).
//!
//! ```no_run
//! use shardsub::PubSub;
//! let ps = PubSub::builder()
//!     .address("127.0.0.1:6379")
//!     .handler(|channel: &[u8], payload: &[u8]| {
//!         println!("{}: {} bytes", String::from_utf8_lossy(channel), payload.len());
//!     })
//!     .build()?;
//! ps.subscribe(["news", "sports"])?;
//! ps.wait_active(&["news", "sports"], std::time::Duration::from_secs(2))?;
//! ps.publish(b"news", b"hello")?;
//! # Ok::<(), shardsub::Error>(())
//! ```

pub(crate) mod awaiting;
pub(crate) mod builder;
mod builder_cluster;
mod builder_url;
mod channels;
pub use crate::wire::envelope;
mod fixed;
mod instance;
pub(crate) mod limits;
mod receiver;
mod replica_opts;
mod router;

pub use crate::workers::{handler_fn, ChannelList, Event, FnHandler, Handler};
pub use awaiting::Active;
pub use builder::PubSubBuilder;
pub use channels::Channels;
pub(crate) use fixed::Fixed;
pub use instance::PubSub;
pub use receiver::{receiver, Delivery, Receiver, ReceiverHandler};
