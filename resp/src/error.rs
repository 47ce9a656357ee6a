//! Parse outcomes, errors and limits.

use core::fmt;

/// The deepest nesting any [`Limits::max_depth`] can allow.
///
/// The validator keeps one small stack entry per open aggregate in a
/// fixed-size array, so a larger configured depth is clamped to this value.
pub const MAX_DEPTH: usize = 512;

/// Limits checked while parsing, before anything is sized from a length prefix.
///
/// Parsing never allocates, so the limits exist to bound work and to reject
/// hostile or corrupt streams early with a clear error.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk string, blob error, verbatim string, or streamed string
    /// (all chunks together), in bytes.
    pub max_bulk_len: usize,
    /// Longest simple string, simple error or big number line (`+`, `-`,
    /// `(`), in bytes, not counting its `\r\n`; the smaller of this and
    /// [`max_bulk_len`](Limits::max_bulk_len) applies. Nothing sizes a line
    /// in advance, so the input buffer holds it whole while its end is
    /// awaited: this limit is what bounds that buffer against a server that
    /// sends a line without end. Doubles, integers, booleans and length
    /// headers have fixed bounds of their own (512 and 32 bytes).
    pub max_line_len: usize,
    /// Largest element count of one aggregate (pairs for maps and attributes).
    pub max_elements: usize,
    /// Deepest nesting of aggregates, attributes and streamed strings;
    /// values above [`MAX_DEPTH`] act as [`MAX_DEPTH`].
    pub max_depth: usize,
}

impl Default for Limits {
    /// 512 MiB bulk strings (the server's own `proto-max-bulk-len`),
    /// 64 KiB lines (a server's status and error lines are short: the
    /// longest are error texts of a few hundred bytes), 2^24 elements per
    /// aggregate, 128 levels of nesting.
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 << 20,
            max_line_len: 64 << 10,
            max_elements: 1 << 24,
            max_depth: 128,
        }
    }
}

/// The outcome of a parse that did not fail.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status<T> {
    /// A whole frame was parsed.
    Complete(T),
    /// The input ends before the frame does: read more bytes and call again.
    /// Nothing was consumed; this is not an error.
    Incomplete,
}

impl<T> Status<T> {
    /// True for [`Status::Complete`].
    pub fn is_complete(&self) -> bool {
        matches!(self, Status::Complete(_))
    }

    /// The completed value, if any.
    pub fn complete(self) -> Option<T> {
        match self {
            Status::Complete(t) => Some(t),
            Status::Incomplete => None,
        }
    }
}

/// A fatal parse error: the stream is not valid RESP (or breaks a [`Limits`]).
///
/// After an error the byte stream cannot be resynchronised; close the connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset, from the start of the buffer, where the problem was found.
    pub offset: usize,
    /// What was wrong, and so what was expected.
    pub kind: ErrorKind,
}

/// What a [`ParseError`] found.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The first byte of a frame is not a RESP2/RESP3 type byte.
    UnknownType(u8),
    /// A length is not `-1`, `?` (where allowed) or decimal digits.
    BadLength,
    /// A length does not fit in 64 bits.
    LengthOverflow,
    /// An integer (`:`) is not an optionally signed decimal that fits in `i64`.
    BadInteger,
    /// A double (`,`) is not a decimal number, `inf`, `-inf` or `nan`.
    BadDouble,
    /// A boolean (`#`) is not `t` or `f`.
    BadBoolean,
    /// A big number (`(`) is not an optionally signed run of digits.
    BadBigNumber,
    /// A verbatim string (`=`) does not start with a three-byte format and `:`.
    BadVerbatim,
    /// A streamed string chunk does not start with `;` and a length.
    BadStreamChunk,
    /// A line or bulk body is not followed by `\r\n`.
    MissingCrlf,
    /// A length prefix (or a streamed string's total) exceeds
    /// [`Limits::max_bulk_len`].
    TooLong {
        /// The announced length.
        len: u64,
        /// The limit in force.
        limit: u64,
    },
    /// A simple string, simple error or big number line (`+`, `-`, `(`) runs
    /// past the line limit ([`Limits::max_line_len`], or
    /// [`Limits::max_bulk_len`] if smaller) without its `\r\n`.
    LineTooLong {
        /// The limit in force, in bytes.
        limit: u64,
    },
    /// An aggregate announces (or a streamed one reaches) more elements than
    /// [`Limits::max_elements`].
    TooManyElements {
        /// The announced (or reached) count.
        count: u64,
        /// The limit in force.
        limit: u64,
    },
    /// Nesting deeper than [`Limits::max_depth`].
    TooDeep {
        /// The limit in force.
        limit: usize,
    },
    /// A `.` end marker outside a streamed aggregate, or right after an
    /// attribute.
    UnexpectedEnd,
    /// A streamed map or attribute ended after a key, without its value.
    OddMapLength,
    /// An attribute followed directly by another attribute: an attribute must
    /// be followed by the value it describes.
    NestedAttribute,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ErrorKind::UnknownType(b) => write!(
                f,
                "unknown type byte 0x{b:02x}; expected one of + - : $ * _ , # ! = ( ~ % > | or `;`/`.` inside a stream"
            ),
            ErrorKind::BadLength => f.write_str("bad length; expected decimal digits, `-1` or `?`"),
            ErrorKind::LengthOverflow => f.write_str("length does not fit in 64 bits"),
            ErrorKind::BadInteger => {
                f.write_str("bad integer; expected an optionally signed decimal fitting in i64")
            }
            ErrorKind::BadDouble => {
                f.write_str("bad double; expected a decimal number, `inf`, `-inf` or `nan`")
            }
            ErrorKind::BadBoolean => f.write_str("bad boolean; expected `t` or `f`"),
            ErrorKind::BadBigNumber => {
                f.write_str("bad big number; expected an optionally signed run of digits")
            }
            ErrorKind::BadVerbatim => {
                f.write_str("bad verbatim string; expected a three-byte format and `:`")
            }
            ErrorKind::BadStreamChunk => {
                f.write_str("bad streamed string chunk; expected `;` and a length")
            }
            ErrorKind::MissingCrlf => f.write_str("expected `\\r\\n`"),
            ErrorKind::TooLong { len, limit } => {
                write!(f, "length {len} exceeds the limit of {limit} bytes")
            }
            ErrorKind::LineTooLong { limit } => write!(
                f,
                "line longer than the limit of {limit} bytes without `\\r\\n`"
            ),
            ErrorKind::TooManyElements { count, limit } => {
                write!(f, "{count} elements exceed the limit of {limit}")
            }
            ErrorKind::TooDeep { limit } => write!(f, "nesting deeper than the limit of {limit}"),
            ErrorKind::UnexpectedEnd => f.write_str(
                "unexpected `.`; expected a value (`.` only ends a streamed aggregate)",
            ),
            ErrorKind::OddMapLength => {
                f.write_str("streamed map ended after a key; expected its value")
            }
            ErrorKind::NestedAttribute => {
                f.write_str("attribute follows an attribute; expected the attributed value")
            }
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RESP parse error at byte {}: {}", self.offset, self.kind)
    }
}

impl core::error::Error for ParseError {}
