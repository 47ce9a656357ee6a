//! Reading frames out of bytes that the validator has already accepted.
//!
//! Everything here runs on validated input, so every `None` below is
//! unreachable in practice; it exists so that no path can panic. Callers end
//! their iteration on `None`.

use crate::frame::{Aggregate, AggregateKind, Chunks, Frame};

/// The line starting at `start`, up to (not including) the next `\r\n`, and
/// the offset just past the `\r\n`.
#[inline]
pub(crate) fn line(buf: &[u8], start: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(start..)?;
    let i = rest.iter().position(|&b| b == b'\r')?;
    if rest.get(i + 1) != Some(&b'\n') {
        return None;
    }
    Some((rest.get(..i)?, start + i + 2))
}

/// The common header: digits then `\r` (at most 19 digits, so no
/// overflow). Returns the number and the offset past the line, assuming a
/// `\n` follows the `\r` (callers on unvalidated input check it); `None` for
/// anything else (`?`, `-1`, longer numbers), which callers read the general
/// way.
#[inline(always)]
pub(crate) fn digits_crlf(buf: &[u8], start: usize) -> Option<(u64, usize)> {
    let rest = buf.get(start..)?;
    let mut n = u64::from(rest.first()?.wrapping_sub(b'0'));
    if n > 9 {
        return None;
    }
    let mut i = 1;
    while let Some(&b) = rest.get(i) {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return if b == b'\r' {
                Some((n, start + i + 2))
            } else {
                None
            };
        }
        // 19 digits at most: no overflow.
        if i == 19 {
            return None;
        }
        n = n * 10 + u64::from(d);
        i += 1;
    }
    None
}

/// An integer line `[-]digits\r` starting at `start` (at most 18 digits, so
/// no overflow): the value and the offset past the line, assuming a `\n`
/// follows the `\r`. `None` for anything else (a `+` sign, longer numbers),
/// which callers read the general way.
#[inline(always)]
pub(crate) fn int_crlf(buf: &[u8], start: usize) -> Option<(i64, usize)> {
    let neg = buf.get(start) == Some(&b'-');
    let from = start + usize::from(neg);
    let rest = buf.get(from..)?;
    let mut n = i64::from(rest.first()?.wrapping_sub(b'0'));
    if n > 9 {
        return None;
    }
    let mut i = 1;
    while let Some(&b) = rest.get(i) {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            if b != b'\r' {
                return None;
            }
            return Some((if neg { -n } else { n }, from + i + 2));
        }
        if i == 18 {
            return None;
        }
        n = n * 10 + i64::from(d);
        i += 1;
    }
    None
}

/// Parses unsigned decimal digits (no sign, at least one digit).
/// `Err(true)` on overflow, `Err(false)` on anything else.
#[inline]
pub(crate) fn parse_u64(digits: &[u8]) -> Result<u64, bool> {
    if digits.is_empty() {
        return Err(false);
    }
    let mut n: u64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(false);
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d)))
            .ok_or(true)?;
    }
    Ok(n)
}

/// Parses an optionally signed (`+` or `-`) decimal that fits in `i64`.
#[inline]
pub(crate) fn parse_i64(line: &[u8]) -> Option<i64> {
    let (neg, digits) = match line.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, line),
    };
    let m = parse_u64(digits).ok()?;
    if neg {
        0i64.checked_sub_unsigned(m)
    } else {
        i64::try_from(m).ok()
    }
}

/// Parses a RESP3 double: a decimal number (optional sign, digits, optional
/// fraction and exponent), or `inf`, `-inf`, `+inf`, `nan`, `-nan`
/// (ASCII case-insensitive).
pub(crate) fn parse_double(line: &[u8]) -> Option<f64> {
    let unsigned = match line.split_first() {
        Some((b'-' | b'+', rest)) => rest,
        _ => line,
    };
    if unsigned.eq_ignore_ascii_case(b"inf") {
        return Some(if line.first() == Some(&b'-') {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if unsigned.eq_ignore_ascii_case(b"nan") {
        return Some(f64::NAN);
    }
    // Only digits, sign, point and exponent reach the float parser, so words
    // like `infinity` are rejected; the parser checks the rest of the grammar.
    if !unsigned
        .first()
        .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
        || !line
            .iter()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
    {
        return None;
    }
    core::str::from_utf8(line).ok()?.parse().ok()
}

/// True for an optionally `-`-signed, non-empty run of digits.
pub(crate) fn is_big_number(line: &[u8]) -> bool {
    let digits = match line.split_first() {
        Some((b'-' | b'+', rest)) => rest,
        _ => line,
    };
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

/// Reads one element, with the attribute attached to it if any: returns the
/// attribute, the frame, and where the next element starts (see
/// [`read_value`]).
#[inline]
pub(crate) fn read_element(buf: &[u8]) -> Option<(Option<Aggregate<'_>>, Frame<'_>, usize, u64)> {
    if buf.first() == Some(&b'|') {
        let (hdr, after) = line(buf, 1)?;
        let n = parse_u64(hdr).ok()?;
        let end = skip_items(buf, after, n.checked_mul(2)?)?;
        let attrs = Aggregate {
            kind: AggregateKind::Attribute,
            len: usize::try_from(n).ok()?,
            body: buf.get(after..end)?,
        };
        let (frame, next, skip) = read_value(buf, end)?;
        Some((Some(attrs), frame, next, skip))
    } else {
        let (frame, next, skip) = read_value(buf, 0)?;
        Some((None, frame, next, skip))
    }
}

pub(crate) fn aggregate_kind(t: u8) -> Option<AggregateKind> {
    Some(match t {
        b'*' => AggregateKind::Array,
        b'~' => AggregateKind::Set,
        b'%' => AggregateKind::Map,
        b'>' => AggregateKind::Push,
        b'|' => AggregateKind::Attribute,
        _ => return None,
    })
}

/// Reads the (non-attribute) value at `pos` of validated bytes. Returns the
/// frame and where the element after it starts: at the returned offset,
/// once the returned number of values has been skipped. That number is
/// non-zero for a counted aggregate, whose elements are not walked here:
/// its [`Aggregate`] view starts at its first element and is bounded by its
/// element count, and whoever iterates past it skips its elements then
/// (never, when it was the last one).
#[inline(always)]
pub(crate) fn read_value(buf: &[u8], pos: usize) -> Option<(Frame<'_>, usize, u64)> {
    let t = *buf.get(pos)?;
    match t {
        b'$' => {
            if let Some((len, after)) = digits_crlf(buf, pos + 1) {
                let end = after.checked_add(usize::try_from(len).ok()?)?;
                return Some((Frame::Bulk(buf.get(after..end)?), end.checked_add(2)?, 0));
            }
        }
        b':' => {
            if let Some((n, after)) = int_crlf(buf, pos + 1) {
                return Some((Frame::Integer(n), after, 0));
            }
        }
        b'*' | b'~' | b'>' | b'%' => {
            if let Some((n, after)) = digits_crlf(buf, pos + 1) {
                let (kind, items) = match t {
                    b'*' => (AggregateKind::Array, n),
                    b'~' => (AggregateKind::Set, n),
                    b'>' => (AggregateKind::Push, n),
                    _ => (AggregateKind::Map, n.checked_mul(2)?),
                };
                let agg = Aggregate {
                    kind,
                    len: usize::try_from(n).ok()?,
                    body: buf.get(after..)?,
                };
                return Some((Frame::Aggregate(agg), after, items));
            }
        }
        _ => {}
    }
    read_value_slow(buf, pos, t)
}

/// [`read_value`] for everything but the common headers.
#[inline(never)]
fn read_value_slow(buf: &[u8], pos: usize, t: u8) -> Option<(Frame<'_>, usize, u64)> {
    let (hdr, after) = line(buf, pos.checked_add(1)?)?;
    let frame = match t {
        b'+' => Frame::Simple(hdr),
        b'-' => Frame::Error(hdr),
        b':' => Frame::Integer(parse_i64(hdr)?),
        b'_' => Frame::Null,
        b',' => Frame::Double(parse_double(hdr)?),
        b'#' => Frame::Boolean(hdr == b"t"),
        b'(' => Frame::BigNumber(hdr),
        b'$' | b'!' | b'=' => {
            if hdr == b"?" {
                let (total, chunks_end, end) = skip_chunks(buf, after)?;
                let body = buf.get(after..chunks_end)?;
                return Some((
                    Frame::Streamed(Chunks {
                        body,
                        total_len: total,
                    }),
                    end,
                    0,
                ));
            }
            if hdr == b"-1" {
                return Some((Frame::Null, after, 0));
            }
            let len = usize::try_from(parse_u64(hdr).ok()?).ok()?;
            let data_end = after.checked_add(len)?;
            let data = buf.get(after..data_end)?;
            let frame = match t {
                b'$' => Frame::Bulk(data),
                b'!' => Frame::BlobError(data),
                _ => {
                    let format = data.get(..3)?.try_into().ok()?;
                    Frame::Verbatim {
                        format,
                        text: data.get(4..)?,
                    }
                }
            };
            return Some((frame, data_end.checked_add(2)?, 0));
        }
        _ => {
            let kind = aggregate_kind(t)?;
            if hdr == b"-1" {
                return Some((Frame::Null, after, 0));
            }
            if hdr == b"?" {
                // The element count of a streamed aggregate is known only by
                // walking it: do it now, once, and bound the view exactly.
                let (end, count) = skip_streamed(buf, after)?;
                let len = if kind == AggregateKind::Map {
                    count / 2
                } else {
                    count
                };
                let agg = Aggregate {
                    kind,
                    len: usize::try_from(len).ok()?,
                    body: buf.get(after..end.checked_sub(3)?)?,
                };
                return Some((Frame::Aggregate(agg), end, 0));
            }
            let n = parse_u64(hdr).ok()?;
            let items = if kind == AggregateKind::Map {
                n.checked_mul(2)?
            } else {
                n
            };
            let agg = Aggregate {
                kind,
                len: usize::try_from(n).ok()?,
                body: buf.get(after..)?,
            };
            return Some((Frame::Aggregate(agg), after, items));
        }
    };
    Some((frame, after, 0))
}

/// Reads one chunk of a streamed string body: its data and the offset past it.
/// `None` at the end (the body excludes the `;0` terminator).
pub(crate) fn read_chunk(buf: &[u8]) -> Option<(&[u8], usize)> {
    if buf.first() != Some(&b';') {
        return None;
    }
    let (hdr, after) = line(buf, 1)?;
    let len = usize::try_from(parse_u64(hdr).ok()?).ok()?;
    let end = after.checked_add(len)?;
    Some((buf.get(after..end)?, end.checked_add(2)?))
}

/// Skips the chunks of a streamed string starting at `pos`: returns the total
/// length, the offset of the `;0` terminator and the offset past it.
fn skip_chunks(buf: &[u8], mut pos: usize) -> Option<(usize, usize, usize)> {
    let mut total = 0usize;
    loop {
        let (hdr, after) = line(buf, pos.checked_add(1)?)?;
        let len = usize::try_from(parse_u64(hdr).ok()?).ok()?;
        if len == 0 {
            return Some((total, pos, after));
        }
        total = total.checked_add(len)?;
        pos = after.checked_add(len)?.checked_add(2)?;
    }
}

/// Skips the elements of a streamed aggregate starting at `pos`: returns the
/// offset past the `.` terminator and the number of elements.
fn skip_streamed(buf: &[u8], mut pos: usize) -> Option<(usize, u64)> {
    let mut count = 0u64;
    loop {
        if buf.get(pos) == Some(&b'.') {
            let (_, after) = line(buf, pos.checked_add(1)?)?;
            return Some((after, count));
        }
        pos = skip_items(buf, pos, 1)?;
        count = count.checked_add(1)?;
    }
}

/// Skips `count` values (an attribute and the value it precedes count as one)
/// starting at `pos`; returns the offset past the last. Counted aggregates are
/// flattened into the running count, so this needs no stack; only streamed
/// aggregates recurse, to a depth the validator bounded.
#[inline]
pub(crate) fn skip_items(buf: &[u8], mut pos: usize, count: u64) -> Option<usize> {
    let mut pending = count;
    while pending > 0 {
        let t = *buf.get(pos)?;
        // The common tokens: a length header, or a line.
        match t {
            b'$' | b'*' | b'~' | b'>' | b'%' | b'|' => {
                if let Some((n, after)) = digits_crlf(buf, pos + 1) {
                    pos = after;
                    match t {
                        b'$' => {
                            pos = pos.checked_add(usize::try_from(n).ok()?)?.checked_add(2)?;
                            pending -= 1;
                        }
                        // An attribute does not take the place of a value:
                        // the value it precedes still counts.
                        b'%' => pending = pending.checked_add(n.checked_mul(2)?)? - 1,
                        b'|' => pending = pending.checked_add(n.checked_mul(2)?)?,
                        _ => pending = pending.checked_add(n)? - 1,
                    }
                    continue;
                }
            }
            b':' | b'+' | b'-' | b'_' | b'#' | b',' | b'(' => {
                let rest = buf.get(pos + 1..)?;
                let i = rest.iter().position(|&b| b == b'\r')?;
                pos += i + 3;
                pending -= 1;
                continue;
            }
            _ => {}
        }
        let (hdr, after) = line(buf, pos.checked_add(1)?)?;
        pos = after;
        match t {
            b'$' | b'!' | b'=' => {
                if hdr == b"?" {
                    pos = skip_chunks(buf, after)?.2;
                } else if hdr != b"-1" {
                    let len = usize::try_from(parse_u64(hdr).ok()?).ok()?;
                    pos = after.checked_add(len)?.checked_add(2)?;
                }
                pending -= 1;
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                if hdr == b"?" {
                    pos = skip_streamed(buf, after)?.0;
                    pending -= 1;
                } else if hdr == b"-1" {
                    pending -= 1;
                } else {
                    let n = parse_u64(hdr).ok()?;
                    let items = if matches!(t, b'%' | b'|') {
                        n.checked_mul(2)?
                    } else {
                        n
                    };
                    let done = u64::from(t != b'|');
                    pending = pending.checked_add(items)?.checked_sub(done)?;
                }
            }
            _ => pending -= 1,
        }
    }
    Some(pos)
}
