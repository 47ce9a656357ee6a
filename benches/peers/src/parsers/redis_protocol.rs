//! `redis-protocol` 6.0.0, RESP3 decoder, two of its APIs:
//! - range-based (`resp3::decode::complete::decode_range`): frames hold byte
//!   ranges into the caller's buffer, aggregates are `Vec`s / `HashMap`s;
//! - `Bytes`-based (`decode_bytes` on a whole `Bytes`, `decode_bytes_mut`
//!   on a `BytesMut` read buffer, its codec-style API): frames hold `Bytes`.
//!
//! Neither resumes an incomplete frame: each read re-parses it from its start.

use bytes::BytesMut;
use redis_protocol::resp3::decode::complete::{decode_bytes, decode_bytes_mut, decode_range};
use redis_protocol::resp3::types::{BytesFrame, RangeFrame};

use crate::{push_sum, Input, Tally, Touch, CHUNK};

fn range_bytes<'b>(buf: &'b [u8], f: &RangeFrame) -> &'b [u8] {
    match f {
        RangeFrame::BlobString { data: (s, e), .. }
        | RangeFrame::SimpleString { data: (s, e), .. } => &buf[*s..*e],
        other => panic!("expected a string, got {other:?}"),
    }
}

fn range_tree(buf: &[u8], f: &RangeFrame) -> u64 {
    let all = |v: &[RangeFrame]| {
        v.iter()
            .fold(v.len() as u64, |s, e| s.wrapping_add(range_tree(buf, e)))
    };
    match f {
        RangeFrame::BlobString { .. } | RangeFrame::SimpleString { .. } => {
            range_bytes(buf, f).len() as u64
        }
        RangeFrame::Number { data, .. } => *data as u64,
        RangeFrame::Null => 0,
        RangeFrame::Array { data, .. } | RangeFrame::Push { data, .. } => all(data),
        RangeFrame::Set { data, .. } => data
            .iter()
            .fold(data.len() as u64, |s, e| s.wrapping_add(range_tree(buf, e))),
        RangeFrame::Map { data, .. } => data.iter().fold(data.len() as u64, |s, (k, v)| {
            s.wrapping_add(range_tree(buf, k))
                .wrapping_add(range_tree(buf, v))
        }),
        other => panic!("unexpected frame {other:?}"),
    }
}

#[inline]
fn range_touch(buf: &[u8], f: &RangeFrame, t: Touch) -> u64 {
    match t {
        Touch::Push => {
            let RangeFrame::Push { data: v, .. } = f else {
                panic!("expected a push, got {f:?}")
            };
            assert_eq!(range_bytes(buf, &v[0]), b"smessage");
            push_sum(range_bytes(buf, &v[1]), range_bytes(buf, &v[2]))
        }
        Touch::Tree => range_tree(buf, f),
    }
}

fn frame_bytes(f: &BytesFrame) -> &[u8] {
    match f {
        BytesFrame::BlobString { data, .. } | BytesFrame::SimpleString { data, .. } => data,
        other => panic!("expected a string, got {other:?}"),
    }
}

fn bytes_tree(f: &BytesFrame) -> u64 {
    let all = |v: &[BytesFrame]| {
        v.iter()
            .fold(v.len() as u64, |s, e| s.wrapping_add(bytes_tree(e)))
    };
    match f {
        BytesFrame::BlobString { .. } | BytesFrame::SimpleString { .. } => {
            frame_bytes(f).len() as u64
        }
        BytesFrame::Number { data, .. } => *data as u64,
        BytesFrame::Null => 0,
        BytesFrame::Array { data, .. } | BytesFrame::Push { data, .. } => all(data),
        BytesFrame::Set { data, .. } => data
            .iter()
            .fold(data.len() as u64, |s, e| s.wrapping_add(bytes_tree(e))),
        BytesFrame::Map { data, .. } => data.iter().fold(data.len() as u64, |s, (k, v)| {
            s.wrapping_add(bytes_tree(k)).wrapping_add(bytes_tree(v))
        }),
        other => panic!("unexpected frame {other:?}"),
    }
}

#[inline]
fn bytes_touch(f: &BytesFrame, t: Touch) -> u64 {
    match t {
        Touch::Push => {
            let BytesFrame::Push { data: v, .. } = f else {
                panic!("expected a push, got {f:?}")
            };
            assert_eq!(frame_bytes(&v[0]), b"smessage");
            push_sum(frame_bytes(&v[1]), frame_bytes(&v[2]))
        }
        Touch::Tree => bytes_tree(f),
    }
}

/// `decode_range` frame after frame over the whole buffer.
pub fn whole_range(input: &Input, t: Touch) -> Tally {
    let mut buf = &input.raw[..];
    let mut tally = Tally::default();
    while !buf.is_empty() {
        let (f, used) = decode_range(buf).expect("valid").expect("complete");
        tally.add(range_touch(buf, &f, t));
        buf = &buf[used..];
    }
    tally
}

/// Reads appended to a `Vec`, `decode_range` until incomplete, consumed bytes
/// drained once per read (the same buffer handling as `resp`'s).
pub fn chunked_range(input: &Input, t: Touch) -> Tally {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut tally = Tally::default();
    for chunk in input.raw.chunks(CHUNK) {
        buf.extend_from_slice(chunk);
        let mut start = 0;
        while let Some((f, used)) = decode_range(&buf[start..]).expect("valid") {
            tally.add(range_touch(&buf[start..], &f, t));
            start += used;
        }
        buf.drain(..start);
    }
    assert!(buf.is_empty());
    tally
}

/// `decode_bytes` frame after frame over zero-copy slices of the whole
/// shared buffer.
pub fn whole_bytes(input: &Input, t: Touch) -> Tally {
    let mut at = 0;
    let mut tally = Tally::default();
    while at < input.shared.len() {
        let rest = input.shared.slice(at..);
        let (f, used) = decode_bytes(&rest).expect("valid").expect("complete");
        tally.add(bytes_touch(&f, t));
        at += used;
    }
    tally
}

/// Reads appended to a `BytesMut`, `decode_bytes_mut` (which splits each
/// frame off the front) until incomplete.
pub fn chunked_bytes(input: &Input, t: Touch) -> Tally {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut tally = Tally::default();
    for chunk in input.raw.chunks(CHUNK) {
        buf.extend_from_slice(chunk);
        while let Some((f, _, _)) = decode_bytes_mut(&mut buf).expect("valid") {
            tally.add(bytes_touch(&f, t));
        }
    }
    assert!(buf.is_empty());
    tally
}
