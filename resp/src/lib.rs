//! Zero-copy RESP2 / RESP3 parser and encoder for shardsub.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)
)]

extern crate alloc;
#[cfg(test)]
extern crate std;

mod decoder;
mod encode;
mod error;
mod frame;
mod parse;
pub mod pubsub;
mod read;
mod validate;
mod value;

pub use decoder::Decoder;
pub use encode::{
    encode_aggregate_header, encode_command, encode_frame, encode_streamed_aggregate_end,
    encode_streamed_aggregate_start, encode_streamed_string, encode_value,
};
pub use error::{ErrorKind, Limits, ParseError, Status, MAX_DEPTH};
pub use frame::{
    Aggregate, AggregateKind, ChunkIter, Chunks, Elements, Frame, Pairs, WithAttributes,
};
pub use parse::{parse, Parsed};
pub use pubsub::{classify, PubSub};
pub use value::Value;
