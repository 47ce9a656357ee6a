//! Fast paths for the most common frames: one counted aggregate of bulk
//! strings and integers (Pub/Sub pushes, command replies), and counted
//! aggregates of those nested a few levels deep (`CLUSTER SLOTS`, `HELLO`,
//! most RESP3 replies). They accept only what the general validator accepts,
//! with the same result, and give up (`None`) on anything else, including an
//! incomplete frame, leaving that to the general validator.

use crate::error::{Limits, MAX_DEPTH};
use crate::frame::AggregateKind;
use crate::read::{aggregate_kind, digits_crlf, int_crlf, parse_i64};

#[cfg(test)]
std::thread_local! {
    /// Bytes the fast paths examined on this thread (tests only).
    static EXAMINED: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// Bytes the fast paths examined on this thread so far (tests only): the
/// decoder's work count includes them, to prove that retrying the fast path
/// on an incomplete frame does not rescan it.
#[cfg(test)]
pub(crate) fn examined() -> u64 {
    EXAMINED.with(core::cell::Cell::get)
}

/// Counts `n` bytes examined (tests only; nothing otherwise).
#[inline(always)]
fn examine(n: usize) {
    #[cfg(test)]
    EXAMINED.with(|c| c.set(c.get() + n as u64));
    #[cfg(not(test))]
    let _ = n;
}

/// [`digits_crlf`], counting the bytes it reads: up to the `\r` and the
/// `\n` the callers check, or at most 21 when it gives up.
#[inline(always)]
fn header(buf: &[u8], start: usize) -> Option<(u64, usize)> {
    let r = digits_crlf(buf, start);
    examine(match r {
        Some((_, after)) => after - start,
        None => buf.len().saturating_sub(start).min(21),
    });
    r
}

/// The end of a frame at the start of `buf` that one of the fast paths
/// validates whole.
#[inline]
pub(crate) fn validate_fast(buf: &[u8], limits: &Limits) -> Option<usize> {
    validate_flat(buf, limits).or_else(|| validate_nested(buf, limits))
}

/// The end of a flat aggregate at the start of `buf`, if it is one and whole.
#[inline]
pub(crate) fn validate_flat(buf: &[u8], limits: &Limits) -> Option<usize> {
    examine(1);
    let kind = aggregate_kind(*buf.first()?)?;
    if kind == AggregateKind::Attribute || limits.max_depth.min(MAX_DEPTH) == 0 {
        return None;
    }
    let (n, mut pos) = header(buf, 1)?;
    if n == 0 || n > limits.max_elements as u64 || buf.get(pos - 1) != Some(&b'\n') {
        return None;
    }
    let items = if kind == AggregateKind::Map { n * 2 } else { n };
    for _ in 0..items {
        examine(1);
        match buf.get(pos)? {
            b'$' => pos = bulk_end(buf, pos, limits)?,
            b':' => pos = integer_end(buf, pos)?,
            _ => return None,
        }
    }
    Some(pos)
}

/// The end of a valid, whole `$<len>\r\n<data>\r\n` at `pos`.
#[inline]
fn bulk_end(buf: &[u8], pos: usize, limits: &Limits) -> Option<usize> {
    let (len, after) = header(buf, pos + 1)?;
    if len > limits.max_bulk_len as u64 || buf.get(after - 1) != Some(&b'\n') {
        return None;
    }
    let end = after.checked_add(usize::try_from(len).ok()?)?;
    examine(2);
    if buf.get(end..end.checked_add(2)?)? != b"\r\n" {
        return None;
    }
    Some(end + 2)
}

/// The end of a valid, whole `:<integer>\r\n` at `pos` (no longer than 21
/// bytes between `:` and `\r`).
#[inline]
fn integer_end(buf: &[u8], pos: usize) -> Option<usize> {
    if let Some((_, after)) = int_crlf(buf, pos + 1) {
        examine(after - pos - 1);
        return (buf.get(after - 1) == Some(&b'\n')).then_some(after);
    }
    let line = buf.get(pos + 1..)?;
    // Both tries read at most 21 bytes each.
    examine(2 * line.len().min(21));
    let cr = line.iter().take(21).position(|&b| b == b'\r')?;
    parse_i64(line.get(..cr)?)?;
    if line.get(cr + 1) != Some(&b'\n') {
        return None;
    }
    Some(pos + cr + 3)
}

/// Nesting the nested fast path handles; deeper frames go the general way.
const NESTED_DEPTH: usize = 8;

/// The end of a whole frame at the start of `buf` made only of counted
/// arrays, sets, maps and pushes (at most [`NESTED_DEPTH`] deep), bulk
/// strings, integers, simple strings and simple errors.
pub(crate) fn validate_nested(buf: &[u8], limits: &Limits) -> Option<usize> {
    let max_depth = limits.max_depth.min(MAX_DEPTH).min(NESTED_DEPTH);
    // Items still to come in each open aggregate.
    let mut open = [0u64; NESTED_DEPTH];
    let mut depth = 0;
    let mut pos = 0;
    loop {
        examine(1);
        let t = *buf.get(pos)?;
        match t {
            b'$' => pos = bulk_end(buf, pos, limits)?,
            b':' => pos = integer_end(buf, pos)?,
            b'*' | b'~' | b'%' | b'>' => {
                let (n, after) = header(buf, pos + 1)?;
                if n > limits.max_elements as u64 || buf.get(after - 1) != Some(&b'\n') {
                    return None;
                }
                pos = after;
                if n > 0 {
                    if depth >= max_depth {
                        return None;
                    }
                    *open.get_mut(depth)? = if t == b'%' { n * 2 } else { n };
                    depth += 1;
                    continue;
                }
            }
            b'+' | b'-' => {
                let max_line = limits.max_line_len.min(limits.max_bulk_len);
                let line = buf.get(pos + 1..)?;
                // Past the limit the general validator reports the error.
                let window = line.get(..max_line.saturating_add(1)).unwrap_or(line);
                let cr = window.iter().position(|&b| b == b'\r');
                examine(cr.map_or(window.len(), |cr| cr + 2));
                let cr = cr?;
                if cr > max_line || line.get(cr + 1) != Some(&b'\n') {
                    return None;
                }
                pos += cr + 3;
            }
            _ => return None,
        }
        // A value ended: count it in the aggregates it closes.
        loop {
            let Some(left) = depth.checked_sub(1).and_then(|d| open.get_mut(d)) else {
                return Some(pos);
            };
            *left -= 1;
            if *left > 0 {
                break;
            }
            depth -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_flat_aggregates_and_leaves_the_rest() {
        let l = Limits::default();
        let push = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n:12\r\nrest";
        assert_eq!(validate_flat(push, &l), Some(push.len() - 4));
        assert_eq!(validate_flat(b"%1\r\n$1\r\nk\r\n:-1\r\n", &l), Some(16));
        for other in [
            &b"*0\r\n"[..],
            b"*1\r\n+OK\r\n",
            b"*1\r\n$-1\r\n",
            b"*2\r\n$1\r\nx\r\n",
            b"*1\r\n$1\r\nxy\r\n",
            b"*1\r\n:1x\r\n",
            b"*1\n\n$1\r\nx\r\n",
            b"*1\r\n$1\n\nx\r\n",
            b"*1\r\n:99999999999999999999\r\n",
            b"|1\r\n$1\r\nx\r\n$1\r\nx\r\n",
            b"$1\r\nx\r\n",
        ] {
            assert_eq!(validate_flat(other, &l), None, "{other:?}");
        }
        let tight = Limits {
            max_elements: 1,
            ..l
        };
        assert_eq!(validate_flat(b"*2\r\n:1\r\n:2\r\n", &tight), None);
        let short = Limits {
            max_bulk_len: 1,
            ..l
        };
        assert_eq!(validate_flat(b"*1\r\n$2\r\nab\r\n", &short), None);
        let flat = Limits { max_depth: 0, ..l };
        assert_eq!(validate_flat(b"*1\r\n:1\r\n", &flat), None);
    }

    #[test]
    fn nested_path_accepts_nested_counted_frames_and_leaves_the_rest() {
        let l = Limits::default();
        let slots =
            b"*1\r\n*3\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n%0\r\nrest";
        assert_eq!(validate_nested(slots, &l), Some(slots.len() - 4));
        let maps = b"%1\r\n+k\r\n%1\r\n-ERR x\r\n~0\r\n";
        assert_eq!(validate_nested(maps, &l), Some(maps.len()));
        assert_eq!(validate_nested(b"+OK\r\n", &l), Some(5));
        assert_eq!(validate_nested(b"$2\r\nab\r\n:1\r\n", &l), Some(8));
        assert_eq!(validate_nested(b"*1\r\n:+1\r\n", &l), Some(9));
        for other in [
            &b"*2\r\n*1\r\n:1\r\n"[..],
            b"*1\r\n*?\r\n.\r\n",
            b"*1\r\n|0\r\n:1\r\n",
            b"*1\r\n*-1\r\n",
            b"*1\r\n_\r\n",
            b"*1\r\n+a\rb\r\n",
            b"*1\r\n*1\n\n:1\r\n",
        ] {
            assert_eq!(validate_nested(other, &l), None, "{other:?}");
        }
        // Deeper than the fast path's stack or the limit: the general way.
        let deep = b"*1\r\n"
            .repeat(NESTED_DEPTH)
            .into_iter()
            .chain(*b":1\r\n")
            .collect::<alloc::vec::Vec<u8>>();
        assert_eq!(validate_nested(&deep, &l), Some(deep.len()));
        let deeper = [&b"*1\r\n"[..], &deep].concat();
        assert_eq!(validate_nested(&deeper, &l), None);
        let shallow = Limits { max_depth: 1, ..l };
        assert_eq!(validate_nested(b"*1\r\n*1\r\n:1\r\n", &shallow), None);
        assert_eq!(validate_nested(b"*1\r\n*0\r\n", &shallow), Some(8));
        let short = Limits {
            max_bulk_len: 1,
            ..l
        };
        assert_eq!(validate_nested(b"*1\r\n+ab\r\n", &short), None);
        let short_lines = Limits {
            max_line_len: 1,
            ..l
        };
        assert_eq!(validate_nested(b"*1\r\n+ab\r\n", &short_lines), None);
        assert_eq!(validate_nested(b"*1\r\n+a\r\n", &short_lines), Some(8));
    }

    proptest::proptest! {
        /// Wherever the nested fast path answers, the general validator agrees.
        #[test]
        fn nested_path_agrees_with_the_general_validator(
            tokens in proptest::collection::vec(proptest::sample::select(&[
                "*2\r\n", "*1\r\n", ">3\r\n", "%1\r\n", "~1\r\n", "|1\r\n", "*0\r\n",
                "%0\r\n", "*?\r\n", ".\r\n", "$1\r\nx\r\n", "$0\r\n\r\n", "$2\r\nab\r\n",
                ":1\r\n", ":-5\r\n", ":+5\r\n", "+OK\r\n", "-E\r\n", "+\r\n", "$-1\r\n",
                "_\r\n", "$1\r\n", "x", "\r\n", "\n", "\r", "9", "$", ":", "-", "+",
            ][..]), 0..14),
            max_elements in 1usize..4,
            max_bulk_len in 0usize..3,
            max_line_len in 0usize..3,
            max_depth in 0usize..4,
        ) {
            let buf: std::string::String = tokens.concat();
            let limits = Limits { max_elements, max_bulk_len, max_line_len, max_depth };
            if let Some(end) = validate_fast(buf.as_bytes(), &limits) {
                let mut v = crate::validate::Validator::<8>::new();
                let general = v.run(buf.as_bytes(), &limits);
                proptest::prop_assert!(
                    matches!(general, Ok(crate::Status::Complete(e)) if e == end),
                    "{:?}: fast {} general {:?}", buf, end, general
                );
            }
        }

        /// Wherever the fast path answers, the general validator agrees.
        #[test]
        fn agrees_with_the_general_validator(
            tokens in proptest::collection::vec(proptest::sample::select(&[
                "*2\r\n", ">3\r\n", "%1\r\n", "~1\r\n", "|1\r\n", "*0\r\n", "$1\r\nx\r\n",
                "$0\r\n\r\n", "$2\r\nab\r\n", ":1\r\n", ":-5\r\n", "+OK\r\n", "$-1\r\n",
                "$1\r\n", "x", "\r\n", "\n", "9", "$", ":", "*1\r\n",
            ][..]), 0..12),
            max_elements in 1usize..4,
            max_bulk_len in 0usize..3,
        ) {
            let buf: std::string::String = tokens.concat();
            let limits = Limits { max_elements, max_bulk_len, max_line_len: 2, max_depth: 8 };
            if let Some(end) = validate_flat(buf.as_bytes(), &limits) {
                let mut v = crate::validate::Validator::<8>::new();
                let general = v.run(buf.as_bytes(), &limits);
                proptest::prop_assert!(
                    matches!(general, Ok(crate::Status::Complete(e)) if e == end),
                    "{:?}: fast {} general {:?}", buf, end, general
                );
            }
        }
    }
}
