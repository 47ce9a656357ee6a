//! The validating pass: an explicit-stack state machine that checks one frame
//! without allocating and can stop at any token boundary and resume later.
//!
//! It keeps, per open aggregate, how many elements remain (or, for a streamed
//! one, how many were seen), plus the offset validated so far. A token (a
//! header line, a whole bulk string, a chunk) is either validated whole or not
//! at all, so `Incomplete` leaves the state at a token boundary. Three hints
//! make resuming cheap: `need` (the buffer length below which nothing can
//! progress, set while waiting for a bulk body), `bulk_end` (where that bulk
//! string ends, so its header is not read again) and `scan_from` (where the
//! search for the current line's `\r` resumes).

use crate::error::{ErrorKind, Limits, ParseError, Status, MAX_DEPTH};
use crate::read::{digits_crlf, is_big_number, parse_double, parse_i64, parse_u64};

/// Longest header line for a length or an integer (`-9223372036854775808`
/// is 20 bytes; leading zeros beyond this are rejected).
const NUMBER_LINE_MAX: usize = 32;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum LevelKind {
    /// Counted aggregate; `n` = items still to come.
    Counted,
    /// Attribute; `n` = items still to come. When done, the value it
    /// precedes is still owed to the parent.
    Attribute,
    /// Streamed aggregate (ends with `.`); `n` = items seen so far.
    Streamed { map: bool },
    /// Streamed string (ends with `;0`); `n` = bytes so far.
    StreamedString,
}

#[derive(Copy, Clone, Debug)]
struct Level {
    kind: LevelKind,
    n: u64,
}

const EMPTY: Level = Level {
    kind: LevelKind::Counted,
    n: 0,
};

/// A length-prefixed type's header line.
#[derive(Copy, Clone, Debug)]
enum Header {
    /// A length, and the offset past the line.
    Len(u64, usize),
    /// `?`: streamed.
    Streamed(usize),
    /// `-1`: RESP2 null.
    Null(usize),
}

/// Why a run stopped without a result.
#[derive(Debug)]
pub(crate) enum Fail {
    /// Invalid input.
    Invalid(ParseError),
    /// Valid so far, but deeper than this validator's stack; retry with a
    /// bigger one.
    Capacity,
}

impl From<ParseError> for Fail {
    fn from(e: ParseError) -> Self {
        Fail::Invalid(e)
    }
}

fn err(offset: usize, kind: ErrorKind) -> Fail {
    Fail::Invalid(ParseError { offset, kind })
}

/// For a valid, whole `$<len>\r\n` header at `pos` with `len <= max_bulk`,
/// the offset past its body's `\r\n` (which may lie past the end of `buf`);
/// `None` for anything else.
#[inline(always)]
fn plain_bulk_header(buf: &[u8], pos: usize, max_bulk: usize) -> Option<usize> {
    if buf.get(pos) != Some(&b'$') {
        return None;
    }
    let (len, after) = digits_crlf(buf, pos + 1)?;
    if buf.get(after - 1) != Some(&b'\n') || len > max_bulk as u64 {
        return None;
    }
    after
        .checked_add(usize::try_from(len).ok()?)?
        .checked_add(2)
}

/// A validator with room for `N` open levels.
#[derive(Debug, Clone)]
pub(crate) struct Validator<const N: usize> {
    stack: [Level; N],
    depth: usize,
    /// Offset validated so far (always at a token boundary).
    pos: usize,
    /// An attribute was just completed: a value (not `|`, not `.`) must follow.
    after_attr: bool,
    /// Offset of the top-level value (after its attribute, if any).
    pub(crate) value_start: usize,
    /// Element count of a top-level streamed aggregate, once it is done.
    pub(crate) top_count: u64,
    need: usize,
    /// Non-zero while the header of a bulk string value at `pos` is
    /// validated and its body is awaited: the offset past the body's `\r\n`.
    bulk_end: usize,
    scan_from: usize,
    /// Bytes examined, to prove resumption is linear (tests only).
    #[cfg(test)]
    pub(crate) work: u64,
}

impl<const N: usize> Validator<N> {
    pub(crate) const fn new() -> Self {
        Validator {
            stack: [EMPTY; N],
            depth: 0,
            pos: 0,
            after_attr: false,
            value_start: 0,
            top_count: 0,
            need: 0,
            bulk_end: 0,
            scan_from: 0,
            #[cfg(test)]
            work: 0,
        }
    }

    /// Back to the start of a frame.
    pub(crate) fn reset(&mut self) {
        self.depth = 0;
        self.pos = 0;
        self.after_attr = false;
        self.value_start = 0;
        self.top_count = 0;
        self.need = 0;
        self.bulk_end = 0;
        self.scan_from = 0;
    }

    /// Offset validated so far.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Finds the `\r\n` ending the line that starts at `start`; returns the
    /// line and the offset past the `\r\n`. `Ok(None)`: incomplete.
    #[inline]
    fn line<'b>(
        &mut self,
        buf: &'b [u8],
        start: usize,
        max: usize,
        too_long: ErrorKind,
    ) -> Result<Option<(&'b [u8], usize)>, Fail> {
        let from = self.scan_from.max(start);
        let rest = buf.get(from..).unwrap_or_default();
        match rest.iter().position(|&b| b == b'\r') {
            Some(i) => {
                #[cfg(test)]
                {
                    self.work += i as u64 + 1;
                }
                let cr = from + i;
                if cr - start > max {
                    return Err(err(start, too_long));
                }
                match buf.get(cr + 1) {
                    None => {
                        self.scan_from = cr;
                        Ok(None)
                    }
                    Some(b'\n') => Ok(Some((buf.get(start..cr).unwrap_or_default(), cr + 2))),
                    Some(_) => Err(err(cr + 1, ErrorKind::MissingCrlf)),
                }
            }
            None => {
                #[cfg(test)]
                {
                    self.work += rest.len() as u64;
                }
                if buf.len().saturating_sub(start) > max {
                    return Err(err(start, too_long));
                }
                self.scan_from = buf.len().max(start);
                Ok(None)
            }
        }
    }

    fn push(&mut self, at: usize, limits: &Limits, level: Level) -> Result<(), Fail> {
        let limit = limits.max_depth.min(MAX_DEPTH);
        if self.depth >= limit {
            return Err(err(at, ErrorKind::TooDeep { limit }));
        }
        match self.stack.get_mut(self.depth) {
            Some(slot) => *slot = level,
            None => return Err(Fail::Capacity),
        }
        self.depth += 1;
        // Whatever an attribute preceded has now begun.
        self.after_attr = false;
        Ok(())
    }

    /// A value ended at the current position: count it in its parents.
    /// Returns true when the top-level value is complete.
    fn value_done(&mut self, limits: &Limits) -> Result<bool, Fail> {
        self.after_attr = false;
        loop {
            let Some(top) = self
                .depth
                .checked_sub(1)
                .and_then(|i| self.stack.get_mut(i))
            else {
                return Ok(true);
            };
            match top.kind {
                LevelKind::Counted | LevelKind::Attribute => {
                    top.n = top.n.saturating_sub(1);
                    if top.n > 0 {
                        return Ok(false);
                    }
                    let was_attr = top.kind == LevelKind::Attribute;
                    self.depth -= 1;
                    if was_attr {
                        self.after_attr = true;
                        return Ok(false);
                    }
                }
                LevelKind::Streamed { map } => {
                    top.n = top.n.saturating_add(1);
                    let count = if map { top.n.div_ceil(2) } else { top.n };
                    let limit = limits.max_elements as u64;
                    if count > limit {
                        return Err(err(self.pos, ErrorKind::TooManyElements { count, limit }));
                    }
                    return Ok(false);
                }
                LevelKind::StreamedString => return Ok(false),
            }
        }
    }

    /// Validates from where the last call stopped. `Complete(end)`: one whole
    /// frame occupies `buf[..end]`.
    pub(crate) fn run(&mut self, buf: &[u8], limits: &Limits) -> Result<Status<usize>, Fail> {
        if buf.len() < self.need {
            return Ok(Status::Incomplete);
        }
        if self.bulk_end != 0 {
            // The bulk string whose body was awaited is now whole.
            let end = core::mem::take(&mut self.bulk_end);
            #[cfg(test)]
            {
                self.work += 2;
            }
            if buf.get(end - 2..end) != Some(b"\r\n") {
                return Err(err(end - 2, ErrorKind::MissingCrlf));
            }
            self.pos = end;
            if self.value_done(limits)? {
                return Ok(Status::Complete(self.pos));
            }
        }
        let max_bulk = limits.max_bulk_len;
        loop {
            let pos = self.pos;
            let top = self
                .depth
                .checked_sub(1)
                .and_then(|i| self.stack.get(i))
                .copied();
            let Some(&t) = buf.get(pos) else {
                return Ok(Status::Incomplete);
            };
            #[cfg(test)]
            {
                self.work += 1;
            }
            // Inside a streamed string only chunks may come.
            if let Some(Level {
                kind: LevelKind::StreamedString,
                n: total,
            }) = top
            {
                if t != b';' {
                    return Err(err(pos, ErrorKind::BadStreamChunk));
                }
                let Some((hdr, after)) =
                    self.line(buf, pos + 1, NUMBER_LINE_MAX, ErrorKind::BadStreamChunk)?
                else {
                    return Ok(Status::Incomplete);
                };
                let len = parse_u64(hdr).map_err(|_| err(pos, ErrorKind::BadStreamChunk))?;
                if len == 0 {
                    self.pos = after;
                    self.depth -= 1;
                    if self.value_done(limits)? {
                        return Ok(Status::Complete(self.pos));
                    }
                    continue;
                }
                let total = total.saturating_add(len);
                if total > max_bulk as u64 {
                    return Err(err(
                        pos,
                        ErrorKind::TooLong {
                            len: total,
                            limit: max_bulk as u64,
                        },
                    ));
                }
                let end = self.body_end(buf, after, len)?;
                let Some(end) = end else {
                    return Ok(Status::Incomplete);
                };
                if let Some(lvl) = self
                    .depth
                    .checked_sub(1)
                    .and_then(|i| self.stack.get_mut(i))
                {
                    lvl.n = total;
                }
                self.pos = end;
                continue;
            }
            // Fast lane: a run of plain bulk strings inside a counted
            // aggregate, all but its last element (whose completion the
            // general path below handles). It stops at the first token that
            // is anything else, incomplete or invalid, at a token boundary,
            // and leaves that token to the general path.
            if let (
                b'$',
                Some(Level {
                    kind: LevelKind::Counted,
                    n,
                }),
            ) = (t, top)
            {
                let (mut left, mut at) = (n, pos);
                let mut waiting = false;
                while left > 1 {
                    let Some(end) = plain_bulk_header(buf, at, max_bulk) else {
                        break;
                    };
                    if buf.len() < end {
                        // Wait for the body without reading the header again.
                        self.need = end;
                        self.bulk_end = end;
                        waiting = true;
                        break;
                    }
                    if buf.get(end - 2) != Some(&b'\r') || buf.get(end - 1) != Some(&b'\n') {
                        break;
                    }
                    #[cfg(test)]
                    {
                        self.work += 8;
                    }
                    at = end;
                    left -= 1;
                }
                if at != pos {
                    if let Some(lvl) = self
                        .depth
                        .checked_sub(1)
                        .and_then(|i| self.stack.get_mut(i))
                    {
                        lvl.n = left;
                    }
                    self.pos = at;
                    // The value an attribute preceded, if any, is done.
                    self.after_attr = false;
                }
                if waiting {
                    return Ok(Status::Incomplete);
                }
                if at != pos {
                    continue;
                }
            }
            if self.depth == 0 && t != b'|' {
                self.value_start = pos;
            }
            match t {
                b'+' | b'-' | b'(' | b',' => {
                    let max_line = limits.max_line_len.min(max_bulk);
                    let (max, too_long) = if t == b',' {
                        (512.min(max_line), ErrorKind::BadDouble)
                    } else {
                        let limit = max_line as u64;
                        (max_line, ErrorKind::LineTooLong { limit })
                    };
                    let Some((line, after)) = self.line(buf, pos + 1, max, too_long)? else {
                        return Ok(Status::Incomplete);
                    };
                    if t == b'(' && !is_big_number(line) {
                        return Err(err(pos + 1, ErrorKind::BadBigNumber));
                    }
                    if t == b',' && parse_double(line).is_none() {
                        return Err(err(pos + 1, ErrorKind::BadDouble));
                    }
                    self.pos = after;
                }
                b':' | b'#' | b'_' => {
                    let kind = match t {
                        b':' => ErrorKind::BadInteger,
                        b'#' => ErrorKind::BadBoolean,
                        _ => ErrorKind::MissingCrlf,
                    };
                    let Some((line, after)) = self.line(buf, pos + 1, NUMBER_LINE_MAX, kind)?
                    else {
                        return Ok(Status::Incomplete);
                    };
                    let ok = match t {
                        b':' => parse_i64(line).is_some(),
                        b'#' => line == b"t" || line == b"f",
                        _ => line.is_empty(),
                    };
                    if !ok {
                        return Err(err(pos + 1, kind));
                    }
                    self.pos = after;
                }
                b'$' | b'!' | b'=' => {
                    let Some(hdr) = self.header(buf, pos)? else {
                        return Ok(Status::Incomplete);
                    };
                    match hdr {
                        Header::Streamed(after) if t == b'$' => {
                            self.push(
                                pos,
                                limits,
                                Level {
                                    kind: LevelKind::StreamedString,
                                    n: 0,
                                },
                            )?;
                            self.pos = after;
                            continue;
                        }
                        Header::Null(after) if t == b'$' => self.pos = after,
                        Header::Len(len, after) => {
                            if len > max_bulk as u64 {
                                return Err(err(
                                    pos,
                                    ErrorKind::TooLong {
                                        len,
                                        limit: max_bulk as u64,
                                    },
                                ));
                            }
                            if t == b'=' && len < 4 {
                                return Err(err(pos, ErrorKind::BadVerbatim));
                            }
                            let Some(end) = self.body_end(buf, after, len)? else {
                                if t == b'$' {
                                    self.bulk_end = self.need;
                                }
                                return Ok(Status::Incomplete);
                            };
                            if t == b'=' && buf.get(after + 3) != Some(&b':') {
                                return Err(err(after + 3, ErrorKind::BadVerbatim));
                            }
                            self.pos = end;
                        }
                        _ => return Err(err(pos + 1, ErrorKind::BadLength)),
                    }
                }
                b'*' | b'~' | b'%' | b'>' | b'|' => {
                    if t == b'|' && self.after_attr {
                        return Err(err(pos, ErrorKind::NestedAttribute));
                    }
                    let Some(hdr) = self.header(buf, pos)? else {
                        return Ok(Status::Incomplete);
                    };
                    let map = matches!(t, b'%' | b'|');
                    match hdr {
                        Header::Streamed(after) if t != b'|' => {
                            self.push(
                                pos,
                                limits,
                                Level {
                                    kind: LevelKind::Streamed { map },
                                    n: 0,
                                },
                            )?;
                            self.pos = after;
                            continue;
                        }
                        Header::Null(after) if t == b'*' => self.pos = after,
                        Header::Len(n, after) => {
                            let limit = limits.max_elements as u64;
                            if n > limit {
                                return Err(err(
                                    pos,
                                    ErrorKind::TooManyElements { count: n, limit },
                                ));
                            }
                            self.pos = after;
                            if n > 0 {
                                let kind = if t == b'|' {
                                    LevelKind::Attribute
                                } else {
                                    LevelKind::Counted
                                };
                                let items = if map { n.saturating_mul(2) } else { n };
                                // (For an attribute, its own entries come first.)
                                self.push(pos, limits, Level { kind, n: items })?;
                                continue;
                            }
                            if t == b'|' {
                                // An empty attribute: the value it describes follows.
                                self.after_attr = true;
                                continue;
                            }
                        }
                        _ => return Err(err(pos + 1, ErrorKind::BadLength)),
                    }
                }
                b'.' => {
                    let Some(Level {
                        kind: LevelKind::Streamed { map },
                        n,
                    }) = top
                    else {
                        return Err(err(pos, ErrorKind::UnexpectedEnd));
                    };
                    if self.after_attr {
                        return Err(err(pos, ErrorKind::UnexpectedEnd));
                    }
                    let Some((line, after)) = self.line(buf, pos + 1, 0, ErrorKind::MissingCrlf)?
                    else {
                        return Ok(Status::Incomplete);
                    };
                    if !line.is_empty() {
                        return Err(err(pos + 1, ErrorKind::MissingCrlf));
                    }
                    if map && n % 2 == 1 {
                        return Err(err(pos, ErrorKind::OddMapLength));
                    }
                    self.depth -= 1;
                    if self.depth == 0 {
                        self.top_count = n;
                    }
                    self.pos = after;
                }
                _ => return Err(err(pos, ErrorKind::UnknownType(t))),
            }
            if self.value_done(limits)? {
                return Ok(Status::Complete(self.pos));
            }
        }
    }

    /// Reads the header line of the length-prefixed type at `pos`. The common
    /// case, digits and `\r\n`, takes one pass; anything else goes through
    /// the general line reader. `Ok(None)`: incomplete.
    #[inline]
    fn header(&mut self, buf: &[u8], pos: usize) -> Result<Option<Header>, Fail> {
        let start = pos + 1;
        if let Some((n, after)) = digits_crlf(buf, start) {
            if buf.get(after - 1) == Some(&b'\n') {
                #[cfg(test)]
                {
                    self.work += (after - start) as u64;
                }
                return Ok(Some(Header::Len(n, after)));
            }
        }
        let Some((hdr, after)) = self.line(buf, start, NUMBER_LINE_MAX, ErrorKind::BadLength)?
        else {
            return Ok(None);
        };
        Ok(Some(match hdr {
            b"?" => Header::Streamed(after),
            b"-1" => Header::Null(after),
            _ => Header::Len(self.length(hdr, pos)?, after),
        }))
    }

    fn length(&self, hdr: &[u8], pos: usize) -> Result<u64, Fail> {
        parse_u64(hdr).map_err(|overflow| {
            err(
                pos + 1,
                if overflow {
                    ErrorKind::LengthOverflow
                } else {
                    ErrorKind::BadLength
                },
            )
        })
    }

    /// The offset past `len` bytes of data at `start` and their `\r\n`, or
    /// `None` (with `need` set) if the buffer is too short.
    fn body_end(&mut self, buf: &[u8], start: usize, len: u64) -> Result<Option<usize>, Fail> {
        // `len` is at most `max_bulk_len`, a usize, so this cannot wrap on
        // any buffer that fits in memory; checked anyway.
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| start.checked_add(l))
            .and_then(|e| e.checked_add(2))
            .ok_or_else(|| err(start, ErrorKind::LengthOverflow))?;
        if buf.len() < end {
            self.need = end;
            return Ok(None);
        }
        #[cfg(test)]
        {
            self.work += 2;
        }
        if buf.get(end - 2..end) != Some(b"\r\n") {
            return Err(err(end - 2, ErrorKind::MissingCrlf));
        }
        Ok(Some(end))
    }
}
