//! The stateless entry point and its output.

use crate::error::{ErrorKind, Limits, ParseError, Status, MAX_DEPTH};
use crate::flat::validate_fast;
use crate::frame::{Aggregate, AggregateKind, Frame};
use crate::read::{aggregate_kind, digits_crlf, line, parse_u64, read_value};
use crate::validate::{Fail, Validator};
use crate::value::Value;

/// A parsed frame and how many bytes it took.
#[derive(Copy, Clone, Debug)]
pub struct Parsed<'a> {
    /// The frame.
    pub frame: Frame<'a>,
    /// The attribute (`|` map) that preceded the frame, if any.
    pub attributes: Option<Aggregate<'a>>,
    /// Bytes taken from the front of the buffer, attributes included.
    pub consumed: usize,
}

impl Parsed<'_> {
    /// An owned copy; attributes wrap the value in [`Value::Attributed`].
    pub fn to_value(&self) -> Value {
        crate::value::attributed(self.attributes, self.frame.to_value())
    }
}

/// Parses one frame from the start of `buf`.
///
/// Stateless: an incomplete frame is validated again from the start on the
/// next call. To parse a stream that arrives in pieces, use
/// [`Decoder`](crate::Decoder), which resumes where it stopped.
///
/// # Errors
///
/// A [`ParseError`] when `buf` does not start with valid RESP, or a frame
/// breaks `limits`. Its offset points at the offending byte.
///
/// ```
/// use resp::{parse, Frame, Limits, Status};
/// let buf = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\nrest";
/// let Status::Complete(p) = parse(buf, &Limits::default())? else { panic!() };
/// assert_eq!(p.consumed, buf.len() - 4);
/// let push = p.frame.as_aggregate().unwrap();
/// assert_eq!(push.get(2).and_then(|f| f.as_bytes()), Some(&b"hi"[..]));
/// assert!(matches!(parse(&buf[..10], &Limits::default()), Ok(Status::Incomplete)));
/// # Ok::<(), resp::ParseError>(())
/// ```
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Result<Status<Parsed<'a>>, ParseError> {
    if let Some(end) = validate_fast(buf, limits) {
        return Ok(finish(buf, Status::Complete(end), 0, 0));
    }
    // Most frames nest only a few levels: try with a small stack that costs
    // nothing to set up, and redo deep frames with the full one.
    let mut small = Validator::<SMALL_DEPTH>::new();
    match small.run(buf, limits) {
        Ok(status) => Ok(finish(buf, status, small.value_start, small.top_count)),
        Err(Fail::Invalid(e)) => Err(e),
        Err(Fail::Capacity) => {
            let mut big = Validator::<MAX_DEPTH>::new();
            match big.run(buf, limits) {
                Ok(status) => Ok(finish(buf, status, big.value_start, big.top_count)),
                Err(Fail::Invalid(e)) => Err(e),
                // The big stack holds MAX_DEPTH levels, the most any limit allows.
                Err(Fail::Capacity) => Err(ParseError {
                    offset: 0,
                    kind: ErrorKind::TooDeep { limit: MAX_DEPTH },
                }),
            }
        }
    }
}

/// Nesting handled by the cheap first attempt in [`parse`].
const SMALL_DEPTH: usize = 8;

/// Builds the output for a validated frame occupying `buf[..end]`.
pub(crate) fn finish(
    buf: &[u8],
    status: Status<usize>,
    value_start: usize,
    top_count: u64,
) -> Status<Parsed<'_>> {
    let Status::Complete(end) = status else {
        return Status::Incomplete;
    };
    match build(buf, end, value_start, top_count) {
        Some(p) => Status::Complete(p),
        // Unreachable for validated input; report a frame-less Null rather
        // than panic, still consuming what was validated.
        None => Status::Complete(Parsed {
            frame: Frame::Null,
            attributes: None,
            consumed: end,
        }),
    }
}

fn build(buf: &[u8], end: usize, value_start: usize, top_count: u64) -> Option<Parsed<'_>> {
    let buf = buf.get(..end)?;
    let attributes = if value_start > 0 {
        let (hdr, after) = line(buf, 1)?;
        Some(Aggregate {
            kind: AggregateKind::Attribute,
            len: usize::try_from(parse_u64(hdr).ok()?).ok()?,
            body: buf.get(after..value_start)?,
        })
    } else {
        None
    };
    let t = *buf.get(value_start)?;
    let frame = match aggregate_kind(t) {
        // The validator already found the end: do not walk the elements again.
        Some(kind) => {
            if let Some((n, after)) = digits_crlf(buf, value_start + 1) {
                let agg = Aggregate {
                    kind,
                    len: usize::try_from(n).ok()?,
                    body: buf.get(after..)?,
                };
                return Some(Parsed {
                    frame: Frame::Aggregate(agg),
                    attributes,
                    consumed: end,
                });
            }
            let (hdr, after) = line(buf, value_start + 1)?;
            if hdr == b"-1" {
                Frame::Null
            } else if hdr == b"?" {
                let len = if kind == AggregateKind::Map {
                    top_count / 2
                } else {
                    top_count
                };
                Frame::Aggregate(Aggregate {
                    kind,
                    len: usize::try_from(len).ok()?,
                    body: buf.get(after..end.checked_sub(3)?)?,
                })
            } else {
                Frame::Aggregate(Aggregate {
                    kind,
                    len: usize::try_from(parse_u64(hdr).ok()?).ok()?,
                    body: buf.get(after..)?,
                })
            }
        }
        None => read_value(buf, value_start)?.0,
    };
    Some(Parsed {
        frame,
        attributes,
        consumed: end,
    })
}
