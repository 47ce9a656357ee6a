//! Zero-copy RESP2 / RESP3 parser and encoder for shardsub.
//!
//! (API contract below is fixed; the parser fills in the bodies.)
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)
)]

extern crate alloc;

mod frame;
pub use frame::{Aggregate, AggregateKind, Chunks, Elements, Frame, Pairs};
