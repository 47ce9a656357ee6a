//! shardsub: Redis and Valkey Pub/Sub at scale.
#![deny(missing_docs)]

pub mod conn;
pub mod display;
mod engine;
mod error;
pub mod observer;

pub use conn::Protocol;
pub use engine::{Builder, Engine, Pending, PublishOptions, Stats};
pub use error::Error;
pub use observer::{ConnInfo, Observer};
pub use resp::Value;
