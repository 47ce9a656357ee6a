//! The RESP parser: whole buffers frame after frame, and a `Decoder` fed in
//! chunks, agree with each other and with re-encoding.

use resp::{encode_value, parse, Decoder, Frame, Limits, ParseError, Status, Value};

/// Most frames to take from one input.
const MAX_FRAMES: usize = 64;

/// Parses `data` frame after frame and checks every invariant.
pub fn check_whole(data: &[u8]) {
    let limits = Limits::default();
    let mut rest = data;
    for _ in 0..MAX_FRAMES {
        let Ok(Status::Complete(p)) = parse(rest, &limits) else {
            return;
        };
        assert!(p.consumed > 0 && p.consumed <= rest.len());
        check_views(&p.frame);
        if let Some(a) = p.attributes {
            check_views(&Frame::Aggregate(a));
        }
        let value = p.to_value();
        let mut wire = Vec::new();
        encode_value(&mut wire, &value);
        match parse(&wire, &limits) {
            Ok(Status::Complete(q)) => {
                assert_eq!(q.consumed, wire.len());
                assert_eq!(q.to_value(), value);
            }
            other => panic!("re-encoded {value:?} did not parse: {other:?}"),
        }
        rest = &rest[p.consumed..];
    }
}

/// Lazy views yield exactly as many elements (and chunk bytes) as announced.
fn check_views(f: &Frame<'_>) {
    match f {
        Frame::Aggregate(a) => {
            let mut n = 0;
            for (attrs, e) in a.iter().with_attributes() {
                if let Some(attrs) = attrs {
                    check_views(&Frame::Aggregate(attrs));
                }
                check_views(&e);
                n += 1;
            }
            let expected = match a.kind() {
                resp::AggregateKind::Map | resp::AggregateKind::Attribute => a.len() * 2,
                _ => a.len(),
            };
            assert_eq!(n, expected, "{a:?}");
        }
        Frame::Streamed(c) => {
            assert_eq!(c.iter().map(<[u8]>::len).sum::<usize>(), c.len());
            assert!(c.iter().all(|chunk| !chunk.is_empty()));
        }
        _ => {}
    }
}

/// One step's outcome, owned so that results can be compared.
#[derive(Debug, PartialEq)]
enum Outcome {
    Frame(Value, usize),
    Incomplete,
    Error(ParseError),
}

fn outcome(r: Result<Status<resp::Parsed<'_>>, ParseError>) -> Outcome {
    match r {
        Ok(Status::Complete(p)) => Outcome::Frame(p.to_value(), p.consumed),
        Ok(Status::Incomplete) => Outcome::Incomplete,
        Err(e) => Outcome::Error(e),
    }
}

/// Feeds `data` to a [`Decoder`] `size` bytes at a time and checks that it
/// agrees with whole-buffer parsing, frame for frame.
pub fn check_chunked(data: &[u8], size: usize) {
    let limits = Limits::default();
    let mut d = Decoder::new(limits);
    let mut start = 0;
    for _ in 0..MAX_FRAMES {
        let whole = outcome(parse(&data[start..], &limits));
        let mut end = start;
        let fed = loop {
            end = (end + size).min(data.len());
            match outcome(d.decode(&data[start..end])) {
                Outcome::Incomplete if end < data.len() => {}
                other => break other,
            }
        };
        assert_eq!(fed, whole);
        match fed {
            Outcome::Frame(_, consumed) => start += consumed,
            _ => return,
        }
    }
}
