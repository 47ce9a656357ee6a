//! `resp-rs` 0.3.0: `resp3::parse_frame` on a whole `Bytes`, and its
//! `resp3::Parser` (`feed` + `next_frame`) for reads. Frames hold `Bytes`
//! slices of the input; aggregates are `Vec`s.

use bytes::Bytes;
use resp_rs::resp3::{self, Frame};

use crate::{push_sum, Input, Tally, Touch, CHUNK};

fn bytes_of(f: &Frame) -> &Bytes {
    match f {
        Frame::BulkString(Some(b)) | Frame::SimpleString(b) => b,
        other => panic!("expected a string, got {other:?}"),
    }
}

fn tree(f: &Frame) -> u64 {
    let all = |v: &[Frame]| {
        v.iter()
            .fold(v.len() as u64, |s, e| s.wrapping_add(tree(e)))
    };
    match f {
        Frame::SimpleString(b) | Frame::BulkString(Some(b)) => b.len() as u64,
        Frame::Integer(i) => *i as u64,
        Frame::Null | Frame::BulkString(None) | Frame::Array(None) => 0,
        Frame::Array(Some(v)) | Frame::Set(v) | Frame::Push(v) => all(v),
        Frame::Map(m) => m.iter().fold(m.len() as u64, |s, (k, v)| {
            s.wrapping_add(tree(k)).wrapping_add(tree(v))
        }),
        other => panic!("unexpected frame {other:?}"),
    }
}

#[inline]
fn touch(f: &Frame, t: Touch) -> u64 {
    match t {
        Touch::Push => {
            let Frame::Push(v) = f else {
                panic!("expected a push, got {f:?}")
            };
            assert_eq!(&bytes_of(&v[0])[..], b"smessage");
            push_sum(bytes_of(&v[1]), bytes_of(&v[2]))
        }
        Touch::Tree => tree(f),
    }
}

/// `resp3::parse_frame` frame after frame over the whole (shared) buffer.
pub fn whole(input: &Input, t: Touch) -> Tally {
    let mut rest = input.shared.clone();
    let mut tally = Tally::default();
    while !rest.is_empty() {
        let (f, r) = resp3::parse_frame(rest).expect("valid input");
        tally.add(touch(&f, t));
        rest = r;
    }
    tally
}

/// `resp3::Parser`: `feed` each read (a zero-copy `Bytes` slice of the
/// input), then `next_frame` until it has none.
pub fn chunked(input: &Input, t: Touch) -> Tally {
    let mut parser = resp3::Parser::new();
    let mut tally = Tally::default();
    let len = input.shared.len();
    let mut at = 0;
    while at < len {
        let end = (at + CHUNK).min(len);
        parser.feed(input.shared.slice(at..end));
        at = end;
        while let Some(f) = parser.next_frame().expect("valid input") {
            tally.add(touch(&f, t));
        }
    }
    assert_eq!(parser.buffered_bytes(), 0);
    tally
}
