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
///
/// A nested aggregate is found without walking its elements: iterating its
/// parent skips them only when stepping past it to a later sibling.
#[derive(Copy, Clone)]
pub struct Aggregate<'a> {
    pub(crate) kind: AggregateKind,
    /// Number of elements; for maps and attributes, number of pairs.
    pub(crate) len: usize,
    /// The validated bytes from the first element on. They end at the end of
    /// the last element for a top-level frame, an attribute or a streamed
    /// aggregate; for an aggregate nested in a counted one they may run on
    /// past it (to the end of the enclosing frame): the element count bounds
    /// every read. [`Aggregate::body`] finds the exact end.
    pub(crate) body: &'a [u8],
}

impl core::fmt::Debug for Aggregate<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Aggregate")
            .field("kind", &self.kind)
            .field("len", &self.len)
            .field("body", &self.body())
            .finish()
    }
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
    /// Starts at the next element once `skip` values are skipped.
    pub(crate) rest: &'a [u8],
    pub(crate) remaining: usize,
    /// Values to skip before the next element: the elements of the nested
    /// aggregate yielded last, skipped only if iteration goes on past it.
    pub(crate) skip: u64,
}

/// Iterator over the pairs of a map or attribute [`Aggregate`].
#[derive(Clone, Debug)]
pub struct Pairs<'a> {
    pub(crate) inner: Elements<'a>,
}

impl<'a> Aggregate<'a> {
    /// The aggregate's kind.
    pub fn kind(&self) -> AggregateKind {
        self.kind
    }

    /// Number of elements; for maps and attributes, number of key-value pairs.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the aggregate has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements in order (a map yields key, value, key, value …).
    /// Attributes attached to elements are skipped; see
    /// [`Elements::with_attributes`].
    pub fn iter(&self) -> Elements<'a> {
        Elements {
            rest: self.body,
            remaining: self.element_count(),
            skip: 0,
        }
    }

    /// The key-value pairs of a map or attribute (for other kinds, elements
    /// taken two at a time).
    pub fn pairs(&self) -> Pairs<'a> {
        Pairs { inner: self.iter() }
    }

    /// The element at `index` (counting every element, keys and values alike
    /// for maps). The ones before it are skipped in one pass, without
    /// building frames for them.
    pub fn get(&self, index: usize) -> Option<Frame<'a>> {
        self.iter().nth(index)
    }

    /// The raw bytes of the elements, as they arrived (without the header).
    ///
    /// For an aggregate nested in another, this walks the elements once to
    /// find where the last one ends.
    pub fn body(&self) -> &'a [u8] {
        let end = crate::read::skip_items(self.body, 0, self.element_count() as u64);
        end.and_then(|e| self.body.get(..e)).unwrap_or(self.body)
    }

    fn element_count(&self) -> usize {
        match self.kind {
            AggregateKind::Map | AggregateKind::Attribute => self.len.saturating_mul(2),
            _ => self.len,
        }
    }
}

impl<'a> IntoIterator for Aggregate<'a> {
    type Item = Frame<'a>;
    type IntoIter = Elements<'a>;
    fn into_iter(self) -> Elements<'a> {
        self.iter()
    }
}

impl<'a> Elements<'a> {
    /// Turns this iterator into one that also yields the attribute, if any,
    /// attached to each element.
    pub fn with_attributes(self) -> WithAttributes<'a> {
        WithAttributes { inner: self }
    }

    /// Elements not yet yielded.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    fn next_with_attributes(&mut self) -> Option<(Option<Aggregate<'a>>, Frame<'a>)> {
        if self.remaining == 0 {
            return None;
        }
        if self.skip > 0 {
            self.skip_yielded()?;
        }
        match crate::read::read_element(self.rest) {
            Some((attrs, frame, next, skip)) => {
                self.rest = self.rest.get(next..).unwrap_or_default();
                self.skip = skip;
                self.remaining -= 1;
                Some((attrs, frame))
            }
            None => self.stop(),
        }
    }

    /// Steps over the elements of the aggregate yielded last.
    #[inline(never)]
    fn skip_yielded(&mut self) -> Option<()> {
        let end = crate::read::skip_items(self.rest, 0, self.skip);
        match end.and_then(|e| self.rest.get(e..)) {
            Some(rest) => self.rest = rest,
            None => return self.stop(),
        }
        self.skip = 0;
        Some(())
    }

    /// Unreachable for validated input: ends the iteration.
    #[cold]
    fn stop<T>(&mut self) -> Option<T> {
        self.remaining = 0;
        None
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = Frame<'a>;
    #[inline]
    fn next(&mut self) -> Option<Frame<'a>> {
        if self.remaining == 0 {
            return None;
        }
        if self.skip > 0 {
            self.skip_yielded()?;
        }
        if self.rest.first() == Some(&b'|') {
            return self.next_with_attributes().map(|(_, f)| f);
        }
        match crate::read::read_value(self.rest, 0) {
            Some((frame, next, skip)) => {
                self.rest = self.rest.get(next..).unwrap_or_default();
                self.skip = skip;
                self.remaining -= 1;
                Some(frame)
            }
            None => self.stop(),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
    /// Skips the first `n` elements in one pass, without reading them.
    fn nth(&mut self, n: usize) -> Option<Frame<'a>> {
        if n >= self.remaining {
            return self.stop();
        }
        match self.skip.checked_add(n as u64) {
            Some(skip) => self.skip = skip,
            None => return self.stop(),
        }
        self.remaining -= n;
        self.next()
    }
}

/// Iterator over the elements of an [`Aggregate`] together with the attribute
/// (a `|` map) attached to each, if any. From [`Elements::with_attributes`].
#[derive(Clone, Debug)]
pub struct WithAttributes<'a> {
    inner: Elements<'a>,
}

impl<'a> Iterator for WithAttributes<'a> {
    type Item = (Option<Aggregate<'a>>, Frame<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next_with_attributes()
    }
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (Frame<'a>, Frame<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        let k = self.inner.next()?;
        let v = self.inner.next()?;
        Some((k, v))
    }
}

impl<'a> Chunks<'a> {
    /// Total length of the string, all chunks together, in bytes.
    pub fn len(&self) -> usize {
        self.total_len
    }

    /// True when the string is empty.
    pub fn is_empty(&self) -> bool {
        self.total_len == 0
    }

    /// The chunks' data, in order (never an empty chunk).
    pub fn iter(&self) -> ChunkIter<'a> {
        ChunkIter { rest: self.body }
    }

    /// Appends the whole string to `out`.
    pub fn copy_to(&self, out: &mut alloc::vec::Vec<u8>) {
        out.reserve(self.total_len);
        for c in self.iter() {
            out.extend_from_slice(c);
        }
    }
}

/// Iterator over the data of each chunk of a streamed string. From [`Chunks::iter`].
#[derive(Clone, Debug)]
pub struct ChunkIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for ChunkIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let (data, end) = crate::read::read_chunk(self.rest)?;
        self.rest = self.rest.get(end..).unwrap_or_default();
        Some(data)
    }
}

impl<'a> Frame<'a> {
    /// The bytes of a simple string, bulk string, verbatim string (its text)
    /// or big number (its digits).
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Frame::Simple(b) | Frame::Bulk(b) | Frame::BigNumber(b) => Some(b),
            Frame::Verbatim { text, .. } => Some(text),
            _ => None,
        }
    }

    /// The value of an integer frame.
    pub fn as_int(&self) -> Option<i64> {
        match *self {
            Frame::Integer(i) => Some(i),
            _ => None,
        }
    }

    /// The aggregate, if this is one.
    pub fn as_aggregate(&self) -> Option<Aggregate<'a>> {
        match *self {
            Frame::Aggregate(a) => Some(a),
            _ => None,
        }
    }

    /// True for a simple error or a blob error.
    pub fn is_error(&self) -> bool {
        matches!(self, Frame::Error(_) | Frame::BlobError(_))
    }

    /// True for a null (`_`, `$-1` or `*-1`).
    pub fn is_null(&self) -> bool {
        matches!(self, Frame::Null)
    }

    /// An owned copy of the frame and everything inside it. Attributes on
    /// elements become [`Value::Attributed`](crate::Value::Attributed);
    /// streamed strings become bulk strings.
    pub fn to_value(&self) -> crate::Value {
        crate::value::frame_to_value(self)
    }
}
