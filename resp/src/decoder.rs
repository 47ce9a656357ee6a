//! The resumable decoder.

use alloc::boxed::Box;

use crate::error::{ErrorKind, Limits, ParseError, Status, MAX_DEPTH};
use crate::flat::validate_fast;
use crate::parse::{finish, Parsed};
use crate::validate::{Fail, Validator};

/// Fast-path tries per frame (see [`Decoder::decode`]).
const FAST_TRIES: u8 = 2;

/// A resumable parser for a byte stream that arrives in pieces.
///
/// Call [`decode`](Decoder::decode) with the bytes received so far. On
/// [`Status::Incomplete`], read more, append them to the same buffer and call
/// again: the decoder remembers how far it validated (and how far it searched
/// a line for its `\r\n`), so a large reply or a long line that arrives in
/// small reads costs time linear in its size. On
/// [`Status::Complete`], use the frame, then remove
/// [`consumed`](Parsed::consumed) bytes from the front of the buffer; the
/// decoder is then ready for the next frame.
///
/// The decoder never allocates after [`Decoder::new`]. An error is fatal for
/// the stream: the decoder resets, but the connection should be closed.
///
/// ```
/// use resp::{Decoder, Status, Value};
///
/// let mut decoder = Decoder::default();
/// let mut buf = b"*2\r\n$1\r\na".to_vec(); // the first read
/// assert!(matches!(decoder.decode(&buf)?, Status::Incomplete));
///
/// buf.extend_from_slice(b"\r\n:7\r\n+OK\r\n"); // the next read, appended
/// let Status::Complete(reply) = decoder.decode(&buf)? else { unreachable!() };
/// assert_eq!(reply.to_value(), Value::Array(vec![Value::Bulk(b"a".to_vec()), Value::Integer(7)]));
/// let consumed = reply.consumed;
/// buf.drain(..consumed); // then the next frame
///
/// let Status::Complete(ok) = decoder.decode(&buf)? else { unreachable!() };
/// assert_eq!(ok.frame.as_bytes(), Some(&b"OK"[..]));
/// # Ok::<(), resp::ParseError>(())
/// ```
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    /// Boxed: the stack has room for [`MAX_DEPTH`] levels (8 KiB), allocated
    /// once here and never during decoding.
    state: Box<Validator<MAX_DEPTH>>,
    /// Fast-path tries on the current frame, at most [`FAST_TRIES`]: a
    /// frame whose first token is an incomplete line stays at offset 0, and
    /// trying again on every read would rescan that line each time.
    fast_tries: u8,
    /// Bytes the fast path examined (tests only).
    #[cfg(test)]
    fast_work: u64,
}

impl Decoder {
    /// A decoder that enforces `limits`.
    pub fn new(limits: Limits) -> Self {
        Decoder {
            limits,
            state: Box::new(Validator::new()),
            fast_tries: 0,
            #[cfg(test)]
            fast_work: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Forgets any partly validated frame (for a new connection).
    pub fn reset(&mut self) {
        self.state.reset();
        self.fast_tries = 0;
    }

    /// Bytes of the current, incomplete frame validated so far.
    pub fn validated(&self) -> usize {
        self.state.pos()
    }

    /// Bytes examined since the last reset (tests only).
    #[cfg(test)]
    pub(crate) fn work(&self) -> u64 {
        self.state.work + self.fast_work
    }

    /// Parses the next frame from the start of `buf`, resuming the
    /// validation of an incomplete frame where the last call stopped.
    ///
    /// # Errors
    ///
    /// A [`ParseError`] when the stream is not valid RESP or breaks the
    /// limits; the decoder is reset, but the stream cannot be resynchronised.
    pub fn decode<'a>(&mut self, buf: &'a [u8]) -> Result<Status<Parsed<'a>>, ParseError> {
        if buf.len() < self.state.pos() {
            // The caller removed bytes it had not consumed: start over rather
            // than trust a position past the end.
            self.reset();
        }
        // At the start of a frame, try the fast path first, and once more
        // after an incomplete first token (most often a header line cut by
        // the read). Not again: until the general validator passes the first
        // token the frame stays at offset 0, and a retry on every read would
        // rescan a long line from its start each time (quadratic).
        if self.state.pos() == 0 && self.fast_tries < FAST_TRIES {
            self.fast_tries += 1;
            #[cfg(test)]
            let before = crate::flat::examined();
            let fast = validate_fast(buf, &self.limits);
            #[cfg(test)]
            {
                self.fast_work += crate::flat::examined() - before;
            }
            if let Some(end) = fast {
                // Forget the hints an earlier, incomplete try left.
                self.reset();
                return Ok(finish(buf, Status::Complete(end), 0, 0));
            }
        }
        match self.state.run(buf, &self.limits) {
            Ok(Status::Incomplete) => Ok(Status::Incomplete),
            Ok(status) => {
                let parsed = finish(buf, status, self.state.value_start, self.state.top_count);
                self.reset();
                Ok(parsed)
            }
            Err(fail) => {
                self.reset();
                Err(match fail {
                    Fail::Invalid(e) => e,
                    // The stack holds MAX_DEPTH levels, the most any limit allows.
                    Fail::Capacity => ParseError {
                        offset: 0,
                        kind: ErrorKind::TooDeep { limit: MAX_DEPTH },
                    },
                })
            }
        }
    }
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(Limits::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::Validator;
    use alloc::vec::Vec;

    /// `*n` of `$5 hello` elements.
    fn big_array(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        crate::encode_command(&mut out, core::iter::repeat_n("hello", n));
        out
    }

    /// Feeds `wire` in `chunk`-byte reads; returns the work the decoder did.
    fn chunked_work(wire: &[u8], chunk: usize) -> u64 {
        let mut d = Decoder::default();
        let mut end = 0;
        loop {
            end = (end + chunk).min(wire.len());
            match d.decode(&wire[..end]) {
                Ok(Status::Incomplete) => assert!(end < wire.len()),
                Ok(Status::Complete(p)) => {
                    assert_eq!(p.consumed, wire.len());
                    return d.work();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// What a parser that restarts on every read would examine.
    fn restarting_work(wire: &[u8], chunk: usize) -> u64 {
        let mut total = 0;
        let mut end = 0;
        loop {
            end = (end + chunk).min(wire.len());
            let mut v = Validator::<MAX_DEPTH>::new();
            let r = v.run(&wire[..end], &Limits::default());
            total += v.work;
            if matches!(r, Ok(Status::Complete(_))) {
                return total;
            }
        }
    }

    fn whole_work(wire: &[u8]) -> u64 {
        let mut v = Validator::<MAX_DEPTH>::new();
        assert!(matches!(
            v.run(wire, &Limits::default()),
            Ok(Status::Complete(_))
        ));
        v.work
    }

    #[test]
    fn chunked_decoding_is_linear() {
        let wire = big_array(100_000);
        let whole = whole_work(&wire);
        let chunked = chunked_work(&wire, 1460);
        std::println!(
            "100k elements, {} bytes: whole {whole}, 1460-byte chunks {chunked} bytes examined",
            wire.len()
        );
        // Each read re-examines at most the one partial token it stopped in.
        let reads = wire.len().div_ceil(1460) as u64;
        assert!(chunked <= whole + reads * 16, "{chunked} vs {whole}");

        // A restarting parser is quadratic: doubling the input quadruples its
        // work, while the decoder's doubles.
        let (a, b) = (big_array(5_000), big_array(10_000));
        let (ra, rb) = (restarting_work(&a, 1460), restarting_work(&b, 1460));
        let (da, db) = (chunked_work(&a, 1460), chunked_work(&b, 1460));
        std::println!("restarting: 5k {ra}, 10k {rb}; decoder: 5k {da}, 10k {db}");
        assert!(rb as f64 / ra as f64 > 3.5, "{ra} -> {rb}");
        assert!((db as f64 / da as f64) < 2.1, "{da} -> {db}");
        // Extrapolated to 100k elements (10x the input, 100x the work),
        // restarting costs over 100x what the decoder did.
        let extrapolated = rb * 100;
        assert!(extrapolated > 100 * chunked, "{extrapolated} vs {chunked}");
    }

    /// `head`, then `fill` repeated `n` times, then `tail`.
    fn wire_of(head: &str, fill: u8, n: usize, tail: &str) -> Vec<u8> {
        let mut w = head.as_bytes().to_vec();
        w.extend(core::iter::repeat_n(fill, n));
        w.extend_from_slice(tail.as_bytes());
        w
    }

    #[test]
    fn long_lines_in_small_reads_are_linear() {
        // Every line-based token, at the top of a frame and inside one, as
        // long as its limit allows (60,000 bytes for text lines, 512 for a
        // double, 32 for numbers and lengths), fed in small reads.
        let text = 60_000;
        let cases: &[(&str, Vec<u8>, usize)] = &[
            ("simple string", wire_of("+", b'a', text, "\r\n"), 64),
            ("error", wire_of("-ERR ", b'a', text, "\r\n"), 64),
            ("big number", wire_of("(", b'7', text, "\r\n"), 64),
            ("double", wire_of(",1.", b'0', 500, "1\r\n"), 4),
            ("integer", wire_of(":-", b'0', 29, "7\r\n"), 1),
            ("boolean", wire_of("#", b't', 1, "\r\n"), 1),
            ("null", wire_of("_", b'_', 0, "\r\n"), 1),
            ("bulk length", wire_of("$", b'0', 30, "1\r\nx\r\n"), 1),
            ("blob error length", wire_of("!", b'0', 30, "1\r\nx\r\n"), 1),
            (
                "verbatim length",
                wire_of("=", b'0', 30, "5\r\ntxt:x\r\n"),
                1,
            ),
            ("array length", wire_of("*", b'0', 30, "1\r\n:1\r\n"), 1),
            ("map length", wire_of("%", b'0', 30, "1\r\n:1\r\n:2\r\n"), 1),
            ("set length", wire_of("~", b'0', 30, "1\r\n:1\r\n"), 1),
            ("push length", wire_of(">", b'0', 30, "1\r\n:1\r\n"), 1),
            (
                "attribute length",
                wire_of("|", b'0', 30, "1\r\n:1\r\n:2\r\n:3\r\n"),
                1,
            ),
            (
                "chunk length",
                wire_of("$?\r\n;", b'0', 30, "1\r\nx\r\n;0\r\n"),
                1,
            ),
            (
                "nested simple string",
                wire_of("*2\r\n+", b'a', text, "\r\n:1\r\n"),
                64,
            ),
            (
                "nested error",
                wire_of("%1\r\n+k\r\n-E", b'a', text, "\r\n"),
                64,
            ),
            (
                "nested big number",
                wire_of(">1\r\n(", b'1', text, "\r\n"),
                64,
            ),
            (
                "attributed simple string",
                wire_of("|1\r\n+k\r\n+v\r\n+", b'a', text, "\r\n"),
                64,
            ),
        ];
        for (name, wire, chunk) in cases {
            let (whole, chunked) = (whole_work(wire), chunked_work(wire, *chunk));
            let reads = wire.len().div_ceil(*chunk) as u64;
            std::println!(
                "{name}: {} bytes in {reads} reads: whole {whole}, chunked {chunked} bytes examined",
                wire.len()
            );
            // Each read examines again at most the few bytes around where
            // the last one stopped: never the line so far.
            assert!(
                chunked <= whole + reads * 16,
                "{name}: {chunked} vs {whole} + {reads} * 16"
            );
        }
    }

    #[test]
    fn a_big_bulk_waits_without_rescanning() {
        let mut wire = Vec::new();
        crate::encode_command(&mut wire, [&[b'x'; 1 << 20][..]]);
        let chunked = chunked_work(&wire, 1460);
        // Header lines and the final CRLF only: the body is never scanned,
        // and each read costs O(1) while the decoder waits for `need`.
        assert!(chunked < 64, "{chunked}");
    }

    #[test]
    fn a_header_is_read_once_while_its_body_arrives() {
        // Elements larger than a read: nearly every read ends inside a body.
        let mut wire = Vec::new();
        let big = [b'x'; 1024];
        crate::encode_command(&mut wire, core::iter::repeat_n(&big[..], 1000));
        let (whole, chunked) = (whole_work(&wire), chunked_work(&wire, 1460));
        let reads = wire.len().div_ceil(1460) as u64;
        // Per read at most the awaited body's `\r\n` (2) is examined again.
        assert!(
            chunked <= whole + 2 * reads,
            "{chunked} vs {whole} + 2 * {reads}"
        );
    }

    #[test]
    fn a_frame_the_fast_path_finishes_leaves_no_stale_hints() {
        let mut d = Decoder::default();
        // The general validator waits for the bulk's body (`need`) ...
        assert!(matches!(d.decode(b"$5\r\nhel"), Ok(Status::Incomplete)));
        // ... and for the end of a line (`scan_from`).
        assert!(matches!(d.decode(b"$5\r\nhello\r"), Ok(Status::Incomplete)));
        let wire = b"$5\r\nhello\r\n_\r\n";
        let Ok(Status::Complete(p)) = d.decode(wire) else {
            panic!()
        };
        assert_eq!((p.frame.as_bytes(), p.consumed), (Some(&b"hello"[..]), 11));
        // The next frame, for the general validator and shorter than the
        // last one's `need`, is complete.
        let Ok(Status::Complete(p)) = d.decode(&wire[11..]) else {
            panic!()
        };
        assert!(p.frame.is_null());
    }

    #[test]
    fn decoder_restarts_when_the_buffer_shrinks() {
        let mut d = Decoder::default();
        assert!(matches!(d.decode(b"*2\r\n:1\r\n"), Ok(Status::Incomplete)));
        assert_eq!(d.validated(), 8);
        let Ok(Status::Complete(p)) = d.decode(b"+OK\r\n") else {
            panic!()
        };
        assert_eq!(p.consumed, 5);
    }
}
