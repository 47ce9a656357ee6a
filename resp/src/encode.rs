//! Encoders: append RESP bytes to a caller's `Vec<u8>`.
//!
//! Nothing here allocates except by growing `out`.

use alloc::vec::Vec;
use core::fmt::Write as _;

use crate::frame::{AggregateKind, Frame};
use crate::value::Value;

/// The decimal form of `n`, written at the end of `buf`.
pub(crate) fn digits(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        if let Some(slot) = buf.get_mut(i) {
            // `n % 10` is below 10, so the cast cannot truncate.
            *slot = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || i == 0 {
            break;
        }
    }
    buf.get(i..).unwrap_or_default()
}

/// Appends the decimal form of `n` without allocating.
#[inline]
pub(crate) fn push_u64(out: &mut Vec<u8>, n: u64) {
    let mut buf = [0u8; 20];
    out.extend_from_slice(digits(n, &mut buf));
}

#[inline]
fn push_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_u64(out, n.unsigned_abs());
}

#[inline]
fn push_len(out: &mut Vec<u8>, type_byte: u8, len: usize) {
    out.push(type_byte);
    push_u64(out, len as u64);
    out.extend_from_slice(b"\r\n");
}

#[inline]
fn push_blob(out: &mut Vec<u8>, type_byte: u8, data: &[u8]) {
    push_len(out, type_byte, data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

fn push_line(out: &mut Vec<u8>, type_byte: u8, line: &[u8]) {
    out.push(type_byte);
    out.extend_from_slice(line);
    out.extend_from_slice(b"\r\n");
}

struct VecWriter<'v>(&'v mut Vec<u8>);

impl core::fmt::Write for VecWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Appends a double's text: `inf`, `-inf`, `nan`, or the shortest decimal
/// that parses back to exactly the same `f64` (an exponent is used for very
/// large or small magnitudes).
fn push_double(out: &mut Vec<u8>, d: f64) {
    if d.is_nan() {
        out.extend_from_slice(b"nan");
    } else if d.is_infinite() {
        out.extend_from_slice(if d > 0.0 { b"inf" } else { b"-inf" });
    } else {
        let a = d.abs();
        // Writing into a Vec cannot fail.
        let _ = if a == 0.0 || (1e-5..1e16).contains(&a) {
            write!(VecWriter(out), "{d}")
        } else {
            write!(VecWriter(out), "{d:e}")
        };
    }
}

fn type_byte(kind: AggregateKind) -> u8 {
    match kind {
        AggregateKind::Array => b'*',
        AggregateKind::Set => b'~',
        AggregateKind::Map => b'%',
        AggregateKind::Push => b'>',
        AggregateKind::Attribute => b'|',
    }
}

/// Appends a command: an array of bulk strings, `*N\r\n$len\r\narg\r\n…`.
///
/// ```
/// let mut out = Vec::new();
/// resp::encode_command(&mut out, ["SPUBLISH", "chan", "hi"]);
/// assert_eq!(out, b"*3\r\n$8\r\nSPUBLISH\r\n$4\r\nchan\r\n$2\r\nhi\r\n");
/// ```
pub fn encode_command<I>(out: &mut Vec<u8>, args: I)
where
    I: IntoIterator,
    I::IntoIter: ExactSizeIterator,
    I::Item: AsRef<[u8]>,
{
    let args = args.into_iter();
    encode_command_header(out, args.len());
    for a in args {
        encode_bulk(out, a.as_ref());
    }
}

/// Appends the command `cmd args…`, the name kept apart from its arguments
/// (a subscribe command over a slice of channel names, say): the same bytes
/// as [`encode_command`] with `cmd` first.
///
/// ```
/// let mut out = Vec::new();
/// resp::encode_command_with(&mut out, b"SUBSCRIBE", &["a", "bc"]);
/// assert_eq!(out, b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$2\r\nbc\r\n");
/// ```
pub fn encode_command_with<A: AsRef<[u8]>>(out: &mut Vec<u8>, cmd: &[u8], args: &[A]) {
    encode_command_header(out, args.len().saturating_add(1));
    encode_bulk(out, cmd);
    for a in args {
        encode_bulk(out, a.as_ref());
    }
}

/// Appends the header of a command of `argc` arguments, `*argc\r\n`; the
/// caller then appends exactly `argc` arguments with [`encode_bulk`]. For
/// arguments made one at a time (each rewritten into a scratch buffer, say)
/// that are not worth collecting first.
///
/// ```
/// let mut out = Vec::new();
/// resp::encode_command_header(&mut out, 2);
/// resp::encode_bulk(&mut out, b"PING");
/// resp::encode_bulk(&mut out, b"hi");
/// assert_eq!(out, b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n");
/// ```
pub fn encode_command_header(out: &mut Vec<u8>, argc: usize) {
    push_len(out, b'*', argc);
}

/// Appends one bulk string, `$len\r\nbytes\r\n`: a command argument after
/// [`encode_command_header`], or a bulk string anywhere else.
pub fn encode_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    push_blob(out, b'$', bytes);
}

/// Appends `n` in decimal as a bulk string (a count or a length as a
/// command argument), without allocating.
///
/// ```
/// let mut out = Vec::new();
/// resp::encode_bulk_u64(&mut out, 100);
/// assert_eq!(out, b"$3\r\n100\r\n");
/// ```
pub fn encode_bulk_u64(out: &mut Vec<u8>, n: u64) {
    let mut buf = [0u8; 20];
    encode_bulk(out, digits(n, &mut buf));
}

/// Appends a bulk string's header, `$len\r\n`: the caller then appends
/// exactly `len` bytes and `\r\n` (a bulk string written in pieces).
///
/// ```
/// let mut out = Vec::new();
/// resp::encode_bulk_header(&mut out, 5);
/// out.extend_from_slice(b"{a}.b\r\n");
/// let mut whole = Vec::new();
/// resp::encode_bulk(&mut whole, b"{a}.b");
/// assert_eq!(out, whole);
/// ```
#[inline]
pub fn encode_bulk_header(out: &mut Vec<u8>, len: usize) {
    // Most names are short: one fixed-size copy for up to 3 digits (each
    // digit below 10, so the casts cannot truncate).
    let d = |n: usize| b'0' + (n % 10) as u8;
    match len {
        0..=9 => out.extend_from_slice(&[b'$', d(len), b'\r', b'\n']),
        10..=99 => out.extend_from_slice(&[b'$', d(len / 10), d(len), b'\r', b'\n']),
        100..=999 => {
            out.extend_from_slice(&[b'$', d(len / 100), d(len / 10), d(len), b'\r', b'\n']);
        }
        _ => push_len(out, b'$', len),
    }
}

/// Appends an aggregate header: `*n`, `~n`, `%n` (n pairs), `>n` or `|n`
/// (n pairs). The caller then appends the elements.
pub fn encode_aggregate_header(out: &mut Vec<u8>, kind: AggregateKind, len: usize) {
    push_len(out, type_byte(kind), len);
}

/// Appends the start of a streamed aggregate (`*?`, `~?`, `%?`, `>?`); the
/// caller appends elements, then [`encode_streamed_aggregate_end`].
/// An attribute cannot be streamed: `Attribute` writes `|?`, which the
/// parser rejects.
pub fn encode_streamed_aggregate_start(out: &mut Vec<u8>, kind: AggregateKind) {
    out.push(type_byte(kind));
    out.extend_from_slice(b"?\r\n");
}

/// Appends the `.` that ends a streamed aggregate.
pub fn encode_streamed_aggregate_end(out: &mut Vec<u8>) {
    out.extend_from_slice(b".\r\n");
}

/// Appends a streamed string: `$?`, one `;len` chunk per non-empty item of
/// `chunks`, and the `;0` terminator.
///
/// ```
/// let mut out = Vec::new();
/// resp::encode_streamed_string(&mut out, ["hel", "", "lo"]);
/// assert_eq!(out, b"$?\r\n;3\r\nhel\r\n;2\r\nlo\r\n;0\r\n");
/// ```
pub fn encode_streamed_string<I>(out: &mut Vec<u8>, chunks: I)
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    out.extend_from_slice(b"$?\r\n");
    for c in chunks {
        let c = c.as_ref();
        if !c.is_empty() {
            push_blob(out, b';', c);
        }
    }
    out.extend_from_slice(b";0\r\n");
}

/// Appends a value. Simple strings, errors and big numbers are written as
/// they are: the caller must keep `\r` and `\n` out of them. An
/// [`Value::Attributed`] whose value is itself `Attributed` encodes two
/// attributes in a row, which [`parse`](crate::parse) rejects
/// ([`ErrorKind::NestedAttribute`](crate::ErrorKind::NestedAttribute)).
///
/// ```
/// use resp::Value;
/// let mut out = Vec::new();
/// resp::encode_value(&mut out, &Value::Map(vec![(Value::Simple(b"x".to_vec()), Value::Double(1.5))]));
/// assert_eq!(out, b"%1\r\n+x\r\n,1.5\r\n");
/// ```
pub fn encode_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Simple(s) => push_line(out, b'+', s),
        Value::Error(s) => push_line(out, b'-', s),
        Value::Integer(i) => {
            out.push(b':');
            push_i64(out, *i);
            out.extend_from_slice(b"\r\n");
        }
        Value::Bulk(b) => push_blob(out, b'$', b),
        Value::Null => out.extend_from_slice(b"_\r\n"),
        Value::Double(d) => {
            out.push(b',');
            push_double(out, *d);
            out.extend_from_slice(b"\r\n");
        }
        Value::Boolean(b) => out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
        Value::BlobError(b) => push_blob(out, b'!', b),
        Value::Verbatim { format, text } => {
            push_len(out, b'=', text.len().saturating_add(4));
            out.extend_from_slice(format);
            out.push(b':');
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        }
        Value::BigNumber(b) => push_line(out, b'(', b),
        Value::Array(items) | Value::Set(items) | Value::Push(items) => {
            let t = match value {
                Value::Array(_) => b'*',
                Value::Set(_) => b'~',
                _ => b'>',
            };
            push_len(out, t, items.len());
            for v in items {
                encode_value(out, v);
            }
        }
        Value::Map(pairs) => encode_pairs(out, b'%', pairs),
        Value::Attributed { attributes, value } => {
            encode_pairs(out, b'|', attributes);
            encode_value(out, value);
        }
    }
}

fn encode_pairs(out: &mut Vec<u8>, t: u8, pairs: &[(Value, Value)]) {
    push_len(out, t, pairs.len());
    for (k, v) in pairs {
        encode_value(out, k);
        encode_value(out, v);
    }
}

/// Appends a frame. Aggregates are copied as their validated bytes under a
/// counted header (a streamed aggregate becomes a counted one); a streamed
/// string is written streamed, chunk for chunk.
pub fn encode_frame(out: &mut Vec<u8>, frame: &Frame<'_>) {
    match *frame {
        Frame::Simple(s) => push_line(out, b'+', s),
        Frame::Error(s) => push_line(out, b'-', s),
        Frame::Integer(i) => {
            out.push(b':');
            push_i64(out, i);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Bulk(b) => push_blob(out, b'$', b),
        Frame::Null => out.extend_from_slice(b"_\r\n"),
        Frame::Double(d) => {
            out.push(b',');
            push_double(out, d);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Boolean(b) => out.extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" }),
        Frame::BlobError(b) => push_blob(out, b'!', b),
        Frame::Verbatim { format, text } => {
            push_len(out, b'=', text.len().saturating_add(4));
            out.extend_from_slice(&format);
            out.push(b':');
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        }
        Frame::BigNumber(b) => push_line(out, b'(', b),
        Frame::Streamed(c) => encode_streamed_string(out, c.iter()),
        Frame::Aggregate(a) => {
            push_len(out, type_byte(a.kind()), a.len());
            out.extend_from_slice(a.body());
        }
    }
}
