//! Identical input streams and equivalent per-parser work for the peer
//! benchmarks in `benches/parsers.rs`.
//!
//! Every parser module exposes the same four functions: parse a whole buffer
//! or a buffer fed in [`CHUNK`]-byte reads, touching either the channel and
//! payload of each `smessage` push ([`Touch::Push`]) or every value of the
//! frame tree ([`Touch::Tree`]). Each returns a [`Tally`]; the tests check that
//! all parsers return the same tally on every stream, so they did the same work.

#![deny(missing_docs)]

pub mod parsers;
pub mod streams;
pub mod syscalls;

/// Bytes per simulated TCP read (a typical Ethernet MSS).
pub const CHUNK: usize = 1460;

/// What to do with each parsed frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Touch {
    /// The frame is a `>3 smessage <channel> <payload>` push: add the lengths
    /// of channel and payload and their first bytes.
    Push,
    /// Walk the whole frame: strings add their length, integers their value,
    /// aggregates their element count (pairs for maps).
    Tree,
}

/// Frames parsed and the checksum of what was touched.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Complete frames parsed.
    pub frames: u64,
    /// Sum over the touched contents (see [`Touch`]).
    pub sum: u64,
}

impl Tally {
    /// Adds one frame whose touched contents sum to `sum`.
    #[inline]
    pub fn add(&mut self, sum: u64) {
        self.frames += 1;
        self.sum = self.sum.wrapping_add(std::hint::black_box(sum));
    }
}

/// The checksum contribution of a push's channel and payload.
#[inline]
pub fn push_sum(channel: &[u8], payload: &[u8]) -> u64 {
    let first = |b: &[u8]| b.first().copied().unwrap_or(0) as u64;
    (channel.len() + payload.len()) as u64 + first(channel) + first(payload)
}

/// One way of parsing a stream: see [`Parser`].
pub type ParseFn = fn(&Input, Touch) -> Tally;

/// The two ways each parser is measured: the whole stream in one buffer, and
/// the stream arriving in [`CHUNK`]-byte reads.
pub const MODES: [&str; 2] = ["whole", "chunked_1460"];

/// A parser under test: each function parses all of `input` and panics on
/// anything but a clean parse of whole frames (inputs are fixed and valid).
#[derive(Copy, Clone)]
pub struct Parser {
    /// Name in benchmark ids and tables.
    pub name: &'static str,
    /// Parse a buffer that holds the whole stream.
    pub whole: ParseFn,
    /// Parse the stream arriving in [`CHUNK`]-byte reads, with the parser's
    /// own incremental API.
    pub chunked: ParseFn,
}

impl Parser {
    /// The function for a mode named in [`MODES`].
    pub fn mode(&self, mode: &str) -> Option<ParseFn> {
        match mode {
            "whole" => Some(self.whole),
            "chunked_1460" => Some(self.chunked),
            _ => None,
        }
    }
}

/// A stream, held both as plain bytes and as a shared [`bytes::Bytes`] so
/// that `Bytes`-based parsers get their input without a copy.
pub struct Input {
    /// The wire bytes.
    pub raw: Vec<u8>,
    /// The same bytes, shared.
    pub shared: bytes::Bytes,
    /// Frames in the stream (a parser that buffers internally needs it).
    pub frames: u64,
}

impl Input {
    /// Wraps `raw`, which holds `frames` frames.
    pub fn new(raw: Vec<u8>, frames: u64) -> Self {
        let shared = bytes::Bytes::from(raw.clone());
        Input {
            raw,
            shared,
            frames,
        }
    }
}

#[cfg(test)]
mod tests;
