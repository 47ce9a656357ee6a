//! Zero-copy RESP2 / RESP3 parser and encoder for shardsub.
//!
//! # What it does
//!
//! - **Parses** every RESP2 and RESP3 type — simple string, error, integer,
//!   bulk string, null (`_`, and RESP2 `$-1` / `*-1`), double (with `inf`,
//!   `-inf`, `nan`), boolean, blob error, verbatim string, big number, array,
//!   set, map, push, attribute (attached to the value that follows it),
//!   streamed strings (`$?` `;n` … `;0`) and streamed aggregates (`*?` `~?`
//!   `%?` `>?` … `.`) — into [`Frame`]s that borrow the input buffer.
//! - Returns three distinct outcomes: [`Status::Complete`] (a frame and the
//!   bytes it took), [`Status::Incomplete`] (read more; nothing consumed) and
//!   a [`ParseError`] (fatal, with the byte offset and what was expected).
//! - **Never allocates while parsing.** A first pass validates the frame with
//!   an explicit, fixed-size stack; aggregates are then lazy views
//!   ([`Aggregate::iter`]) over the validated bytes, parsed as you iterate.
//! - Checks [`Limits`] (bulk length, line length, element count, nesting
//!   depth) before anything is sized from a length prefix, so hostile input
//!   (a line that never ends included) is rejected early and cheaply.
//! - **Resumes**: a [`Decoder`] remembers how far it validated, so a large
//!   reply arriving in small reads costs time linear in its size.
//! - **Encodes** commands ([`encode_command`], [`encode_command_with`], or
//!   [`encode_command_header`] then one [`encode_bulk`] per argument),
//!   every publish shardsub sends ([`encode_publish`] for `PUBLISH` and
//!   `SPUBLISH`, [`encode_script_head`] for a publish run as a script),
//!   owned [`Value`]s, borrowed [`Frame`]s and the streamed forms,
//!   appending to a caller's `Vec<u8>`. This is the library's only RESP
//!   encoder.
//! - **Classifies** Pub/Sub pushes and their RESP2 array form
//!   ([`pubsub::classify`]) without copying channel or payload.
//!
//! # What it does not do
//!
//! No I/O, no buffering policy, no connection state (which reply belongs to
//! which command), no `HELLO` negotiation: the caller owns the socket and the
//! buffer. It is `no_std` (with `alloc`, needed only for [`Value`] and the
//! encoders' output) and has no unsafe code.
//!
//! # Data flow
//!
//! ```text
//!  socket ──read──▶ caller's Vec<u8> ──▶ Decoder::decode / parse
//!                        ▲                  │ validate (no allocation; resumes on Incomplete)
//!                        │                  ▼
//!    drain(..consumed) ──┘        Parsed { frame: Frame<'buf>, attributes, consumed }
//!                                           │ lazy views: Aggregate::iter / pairs / get
//!                                           ▼
//!                      pubsub::classify ─▶ PubSub::SMessage { channel: &'buf [u8], payload, .. }
//!                      Frame::to_value  ─▶ Value (owned, when a frame must outlive the buffer)
//!
//!  command args ──encode_command──▶ caller's Vec<u8> ──write──▶ socket
//! ```
//!
//! # Example
//!
//! A Pub/Sub push that arrives in two reads:
//!
//! ```
//! use resp::{pubsub::PubSub, Decoder, Status};
//!
//! let wire = b">3\r\n$8\r\nsmessage\r\n$3\r\n{a}\r\n$5\r\nhello\r\n+OK\r\n";
//! let mut buf = Vec::new();
//! let mut decoder = Decoder::default();
//!
//! buf.extend_from_slice(&wire[..20]);
//! assert!(matches!(decoder.decode(&buf)?, Status::Incomplete));
//!
//! buf.extend_from_slice(&wire[20..]);
//! let Status::Complete(parsed) = decoder.decode(&buf)? else { unreachable!() };
//! assert_eq!(
//!     resp::classify(&parsed.frame),
//!     Some(PubSub::SMessage { channel: b"{a}", payload: b"hello" })
//! );
//! let consumed = parsed.consumed;
//! buf.drain(..consumed);
//! assert_eq!(buf, b"+OK\r\n");
//! # Ok::<(), resp::ParseError>(())
//! ```
//!
//! Encoding a command and reading a RESP3 map lazily:
//!
//! ```
//! use resp::{parse, Frame, Limits, Status};
//!
//! let mut out = Vec::new();
//! resp::encode_command(&mut out, ["HELLO", "3"]);
//! assert_eq!(out, b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n");
//!
//! let reply = b"%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n";
//! let Status::Complete(p) = parse(reply, &Limits::default())? else { unreachable!() };
//! let map = p.frame.as_aggregate().unwrap();
//! let proto = map.pairs().find(|(k, _)| k.as_bytes() == Some(b"proto"));
//! assert_eq!(proto.and_then(|(_, v)| v.as_int()), Some(3));
//! # Ok::<(), resp::ParseError>(())
//! ```
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
pub mod display;
mod encode;
mod error;
mod flat;
mod frame;
mod parse;
mod publish;
pub mod pubsub;
mod read;
mod validate;
mod value;

pub use decoder::Decoder;
pub use encode::{
    encode_aggregate_header, encode_bulk, encode_bulk_header, encode_bulk_u64, encode_command,
    encode_command_header, encode_command_with, encode_frame, encode_streamed_aggregate_end,
    encode_streamed_aggregate_start, encode_streamed_string, encode_value,
};
pub use error::{ErrorKind, Limits, ParseError, Status, MAX_DEPTH};
pub use frame::{
    Aggregate, AggregateKind, ChunkIter, Chunks, Elements, Frame, Pairs, WithAttributes,
};
pub use parse::{parse, Parsed};
pub use publish::{encode_bulk_parts, encode_publish, encode_script_head, PublishKind, Script};
pub use pubsub::{classify, PubSub};
pub use value::{Value, WrongType};
