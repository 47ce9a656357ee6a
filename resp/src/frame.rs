//! Borrowed frames. (API contract; bodies to be written by the parser work.)

/// The kind of an aggregate frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum AggregateKind {
    /// `*` array (RESP2 and RESP3).
    Array,
    /// `~` set.
    Set,
    /// `%` map: elements come in key, value pairs.
    Map,
    /// `>` push: out-of-band data such as Pub/Sub messages.
    Push,
    /// `|` attribute: a map of metadata attached to the frame that follows it.
    Attribute,
}

/// A complete, already-validated aggregate whose elements are parsed lazily,
/// on iteration, from the borrowed input. Copying it is free.
#[derive(Copy, Clone, Debug)]
pub struct Aggregate<'a> {
    pub(crate) kind: AggregateKind,
    /// Number of elements; for maps and attributes, number of pairs.
    pub(crate) len: usize,
    /// The bytes of the elements (after the header, up to the end of the last
    /// element; for a streamed aggregate, before the `.` terminator).
    pub(crate) body: &'a [u8],
}

/// The chunks of a streamed string (`$?` followed by `;n` chunks and `;0`).
#[derive(Copy, Clone, Debug)]
pub struct Chunks<'a> {
    pub(crate) body: &'a [u8],
    pub(crate) total_len: usize,
}

/// One RESP frame, borrowing from the input buffer.
#[derive(Copy, Clone, Debug)]
pub enum Frame<'a> {
    /// `+` simple string.
    Simple(&'a [u8]),
    /// `-` simple error.
    Error(&'a [u8]),
    /// `:` integer.
    Integer(i64),
    /// `$` bulk string.
    Bulk(&'a [u8]),
    /// `_` null, or RESP2 `$-1` / `*-1`.
    Null,
    /// `,` double (including `inf`, `-inf`, `nan`).
    Double(f64),
    /// `#` boolean.
    Boolean(bool),
    /// `!` blob error.
    BlobError(&'a [u8]),
    /// `=` verbatim string: a three-byte format (`txt`, `mkd`) and the text.
    Verbatim {
        /// The format, such as `txt`.
        format: [u8; 3],
        /// The text after `fmt:`.
        text: &'a [u8],
    },
    /// `(` big number, as its decimal digits (with an optional leading `-`).
    BigNumber(&'a [u8]),
    /// `$?` streamed string.
    Streamed(Chunks<'a>),
    /// `*`, `~`, `%`, `>` aggregate (attributes are never returned as a frame
    /// of their own: see [`Aggregate`] and the parser's output).
    Aggregate(Aggregate<'a>),
}

/// Iterator over the elements of an [`Aggregate`] (maps yield key, value, key, value …).
#[derive(Clone, Debug)]
pub struct Elements<'a> {
    pub(crate) rest: &'a [u8],
    pub(crate) remaining: usize,
}

/// Iterator over the pairs of a map or attribute [`Aggregate`].
#[derive(Clone, Debug)]
pub struct Pairs<'a> {
    pub(crate) inner: Elements<'a>,
}
