//! `resp` (this project): stateless `parse` on a whole buffer, the resumable
//! `Decoder` on a buffer fed in reads. Frames borrow; aggregates are walked
//! lazily.

use resp::{AggregateKind, Decoder, Frame, Limits, Status};

use crate::{push_sum, Input, Tally, Touch, CHUNK};

fn tree(f: Frame<'_>) -> u64 {
    match f {
        Frame::Simple(b) | Frame::Bulk(b) => b.len() as u64,
        Frame::Integer(i) => i as u64,
        Frame::Null => 0,
        Frame::Aggregate(a) => a
            .iter()
            .fold(a.len() as u64, |s, e| s.wrapping_add(tree(e))),
        other => panic!("unexpected frame {other:?}"),
    }
}

#[inline]
fn touch(f: Frame<'_>, t: Touch) -> u64 {
    match t {
        Touch::Push => {
            let a = f.as_aggregate().expect("push");
            assert_eq!(a.kind(), AggregateKind::Push);
            let mut it = a.iter();
            let mut next = || it.next().and_then(|e| e.as_bytes()).expect("bulk");
            assert_eq!(next(), b"smessage");
            let (channel, payload) = (next(), next());
            push_sum(channel, payload)
        }
        Touch::Tree => tree(f),
    }
}

/// `resp::parse` frame after frame over the whole buffer.
pub fn whole(input: &Input, t: Touch) -> Tally {
    let limits = Limits::default();
    let mut buf = &input.raw[..];
    let mut tally = Tally::default();
    while !buf.is_empty() {
        match resp::parse(buf, &limits) {
            Ok(Status::Complete(p)) => {
                tally.add(touch(p.frame, t));
                buf = &buf[p.consumed..];
            }
            other => panic!("{other:?}"),
        }
    }
    tally
}

/// Reads appended to a `Vec`, `Decoder::decode` until incomplete, consumed
/// bytes drained once per read.
pub fn chunked(input: &Input, t: Touch) -> Tally {
    let mut decoder = Decoder::new(Limits::default());
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut tally = Tally::default();
    for chunk in input.raw.chunks(CHUNK) {
        buf.extend_from_slice(chunk);
        let mut start = 0;
        loop {
            match decoder.decode(&buf[start..]) {
                Ok(Status::Complete(p)) => {
                    tally.add(touch(p.frame, t));
                    start += p.consumed;
                }
                Ok(Status::Incomplete) => break,
                Err(e) => panic!("{e}"),
            }
        }
        buf.drain(..start);
    }
    assert!(buf.is_empty());
    tally
}
