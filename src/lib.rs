//! shardsub: Redis and Valkey Pub/Sub at scale.
#![deny(missing_docs)]

pub mod conn;
