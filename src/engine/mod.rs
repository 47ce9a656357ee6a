//! The low-level client: [`Engine`], pipelined connections to one or more
//! servers on a [`Runtime`]'s I/O threads, for any command, with
//! [`Observer`] hooks on every connection. [`PubSub`](crate::PubSub) is
//! built on it; use the engine directly for commands beside Pub/Sub, or to
//! publish with explicit [`PublishOptions`] (it does not follow a cluster:
//! see [`PubSub`](crate::PubSub) for that).
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

mod backoff;
mod builder;
pub(crate) mod clock;
mod command;
mod dispatch;
mod driver;
mod handle;
pub(crate) mod host;
mod io_thread;
pub(crate) mod kept;
mod lend;
#[cfg(feature = "tokio")]
mod lend_async;
#[cfg(all(test, feature = "tokio"))]
mod lend_async_tests;
#[cfg(test)]
mod lend_tests;
mod lent;
mod pending;
pub(crate) mod poller;
mod publish;
mod ready;
pub(crate) mod resolve;
mod runtime;
mod settings;
mod shared;
mod stats;
#[cfg(test)]
mod tests;
mod thread;
pub(crate) mod wait;

pub use crate::observer::{ConnInfo, Observer};
pub use builder::Builder;
pub use handle::Engine;
pub use pending::Pending;
pub use runtime::Runtime;
pub use settings::PublishOptions;
pub use stats::EngineStats;

pub(crate) use host::on_runtime_thread;
pub(crate) use pending::SlotRef;
pub(crate) use shared::Room;
pub(crate) use wait::Closing;
