//! [`PubSub`], the one type applications use, in every placement (one
//! server, N client-side shards, a Redis/Valkey Cluster), with its builder,
//! the [`Handler`] and its [`Event`]s, and the async [`Receiver`]. A channel
//! lives on server `shard_of(channel, N)` or, on a cluster, in partition
//! `partition_of(channel)` on that partition's slot owner; subscribe calls
//! close in time coalesce into commands of at most
//! [`PubSubBuilder::batch_size`] channels; messages reach the handler on
//! the worker of the subscribe connection that first carried the channel
//! (its lane's home; see [`PubSubBuilder::subscribe_connections`]), in
//! order per channel; a full worker queue
//! drops, counts and says so ([`Event::Dropped`]); after a reconnect every
//! wanted channel is resubscribed and [`Event::Gap`] names the channels that
//! may have lost messages; an idle subscribe connection gets a `PING` after
//! [`PubSubBuilder::probe_interval`] of silence and is reopened when it does
//! not answer. Patterns ([`PubSub::psubscribe`]) go to every server of a
//! fixed placement, and to one node of a cluster in classic mode; their
//! losses are signalled per pattern ([`Event::PatternGap`]). It does not
//! do persistence or redelivery of plain channels (see [`crate::history`]
//! for recoverable ones).
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
mod build;
pub(crate) mod builder;
mod builder_cluster;
mod builder_url;
mod channels;
pub use crate::wire::envelope;
mod fixed;
mod history_reads;
mod instance;
pub(crate) mod limits;
mod receiver;
mod replica_opts;
mod router;
pub(crate) mod sentinel;

pub use crate::workers::{handler_fn, ChannelList, Event, FnHandler, Handler, Text};
pub use awaiting::Active;
pub use builder::PubSubBuilder;
pub use channels::Channels;
pub(crate) use fixed::Fixed;
pub use instance::PubSub;
pub use receiver::{receiver, Delivery, Receiver, ReceiverHandler};
