//! The `redis` crate 1.8.1: its synchronous `redis::Parser::parse_value`
//! (the parser its blocking connections use, RESP2 and RESP3), reading from
//! `std::io::Read`. Values are owned (`Vec<u8>`, `String`, `Vec<Value>`).

use std::io::Read;

use redis::{PushKind, Value};

use crate::{push_sum, Input, Tally, Touch, CHUNK};

fn bytes_of(v: &Value) -> &[u8] {
    match v {
        Value::BulkString(b) => b,
        Value::SimpleString(s) => s.as_bytes(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn tree(v: &Value) -> u64 {
    let all = |v: &[Value]| {
        v.iter()
            .fold(v.len() as u64, |s, e| s.wrapping_add(tree(e)))
    };
    match v {
        Value::BulkString(_) | Value::SimpleString(_) => bytes_of(v).len() as u64,
        Value::Okay => 2,
        Value::Int(i) => *i as u64,
        Value::Nil => 0,
        Value::Array(v) | Value::Set(v) => all(v),
        Value::Map(m) => m.iter().fold(m.len() as u64, |s, (k, v)| {
            s.wrapping_add(tree(k)).wrapping_add(tree(v))
        }),
        other => panic!("unexpected value {other:?}"),
    }
}

#[inline]
fn touch(v: &Value, t: Touch) -> u64 {
    match t {
        Touch::Push => {
            let Value::Push { kind, data } = v else {
                panic!("expected a push, got {v:?}")
            };
            // The parser has already matched the kind string into an enum.
            assert_eq!(*kind, PushKind::SMessage);
            push_sum(bytes_of(&data[0]), bytes_of(&data[1]))
        }
        Touch::Tree => tree(v),
    }
}

/// A reader that returns at most `chunk` bytes per `read`, like a socket.
struct Reads<'a> {
    rest: &'a [u8],
    chunk: usize,
}

impl Read for Reads<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = out.len().min(self.chunk).min(self.rest.len());
        out[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        Ok(n)
    }
}

fn run(input: &Input, t: Touch, chunk: usize) -> Tally {
    let mut parser = redis::Parser::new();
    let mut reader = Reads {
        rest: &input.raw,
        chunk,
    };
    let mut tally = Tally::default();
    // The parser buffers internally, so the reader running dry does not mean
    // the frames have all been parsed: parse the known number of frames.
    for _ in 0..input.frames {
        let v = parser.parse_value(&mut reader).expect("valid input");
        tally.add(touch(&v, t));
    }
    assert!(reader.rest.is_empty());
    tally
}

/// `Parser::parse_value` over a reader that hands over as much as asked.
pub fn whole(input: &Input, t: Touch) -> Tally {
    run(input, t, usize::MAX)
}

/// `Parser::parse_value` over a reader that returns [`CHUNK`] bytes per read.
pub fn chunked(input: &Input, t: Touch) -> Tally {
    run(input, t, CHUNK)
}
