//! Hostile input: huge length prefixes, deep nesting, huge element counts.
//! Each is rejected with a clear error, without panicking and without
//! allocating (a counting allocator proves it).

use resp::{parse, Decoder, ErrorKind, Limits, ParseError, Status, MAX_DEPTH};
use testkit::alloc::{this_thread, CountingAlloc};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::new();

/// Parses with `limits` (statelessly, and through a decoder fed in 7-byte
/// reads), asserting that neither allocates; returns the stateless result.
fn reject(wire: &[u8], limits: Limits) -> ParseError {
    let mut d = Decoder::new(limits);
    let before = this_thread::allocations();
    let whole = parse(wire, &limits);
    let mut fed = Ok(Status::Incomplete);
    let mut end = 0;
    while end < wire.len() && matches!(fed, Ok(Status::Incomplete)) {
        end = (end + 7).min(wire.len());
        fed = d.decode(&wire[..end]).map(|s| s.map(|p| p.consumed));
    }
    let allocations = this_thread::allocations() - before;
    assert_eq!(allocations, 0, "parsing allocated {allocations} times");
    let e = whole.map(|s| s.map(|p| p.consumed)).unwrap_err();
    assert_eq!(fed, Err(e), "decoder and parse disagree");
    println!("{e}");
    e
}

trait MapStatus<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Status<U>;
}

impl<T> MapStatus<T> for Status<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Status<U> {
        match self {
            Status::Complete(t) => Status::Complete(f(t)),
            Status::Incomplete => Status::Incomplete,
        }
    }
}

#[test]
fn bulk_length_two_to_the_63() {
    let e = reject(b"$9223372036854775808\r\nxx", Limits::default());
    assert_eq!(e.offset, 0);
    assert_eq!(
        e.kind,
        ErrorKind::TooLong {
            len: 1 << 63,
            limit: 512 << 20
        }
    );
    // Even with no limit at all, nothing is allocated: the decoder just waits.
    let unlimited = Limits {
        max_bulk_len: usize::MAX,
        ..Limits::default()
    };
    assert!(matches!(
        parse(b"$9223372036854775808\r\nxx", &unlimited),
        Ok(Status::Incomplete)
    ));
}

#[test]
fn bulk_length_two_to_the_64_overflows() {
    let e = reject(b"$18446744073709551616\r\n", Limits::default());
    assert_eq!((e.offset, e.kind), (1, ErrorKind::LengthOverflow));
    let e = reject(b"*99999999999999999999999\r\n", Limits::default());
    assert_eq!((e.offset, e.kind), (1, ErrorKind::LengthOverflow));
}

#[test]
fn ten_thousand_nested_arrays() {
    let wire = b"*1\r\n".repeat(10_000);
    let e = reject(&wire, Limits::default());
    assert_eq!(
        (e.offset, e.kind),
        (128 * 4, ErrorKind::TooDeep { limit: 128 })
    );
    // A huge configured depth is clamped to MAX_DEPTH.
    let deep = Limits {
        max_depth: 1 << 20,
        ..Limits::default()
    };
    let e = reject(&wire, deep);
    assert_eq!(
        (e.offset, e.kind),
        (MAX_DEPTH * 4, ErrorKind::TooDeep { limit: MAX_DEPTH })
    );
    // Nested streamed aggregates and attributes count too.
    let e = reject(&b"*?\r\n|1\r\n".repeat(100), Limits::default());
    assert_eq!(e.kind, ErrorKind::TooDeep { limit: 128 });
    // Exactly at the limit is fine.
    let mut ok = b"*1\r\n".repeat(127);
    ok.extend_from_slice(b":1\r\n");
    assert!(
        matches!(parse(&ok, &Limits::default()), Ok(Status::Complete(p)) if p.consumed == ok.len())
    );
}

#[test]
fn map_announcing_two_to_the_31_entries() {
    let e = reject(b"%2147483648\r\n+k\r\n", Limits::default());
    assert_eq!(
        (e.offset, e.kind),
        (
            0,
            ErrorKind::TooManyElements {
                count: 1 << 31,
                limit: 1 << 24
            }
        )
    );
    // Unlimited: still no allocation; the parser waits for the entries.
    let unlimited = Limits {
        max_elements: usize::MAX,
        ..Limits::default()
    };
    assert!(matches!(
        parse(b"%2147483648\r\n+k\r\n", &unlimited),
        Ok(Status::Incomplete)
    ));
    // A streamed aggregate reaching the limit fails as it crosses it.
    let small = Limits {
        max_elements: 3,
        ..Limits::default()
    };
    let e = reject(b"*?\r\n:1\r\n:2\r\n:3\r\n:4\r\n.\r\n", small);
    assert_eq!(e.kind, ErrorKind::TooManyElements { count: 4, limit: 3 });
}

#[test]
fn endless_lines_and_streams_are_bounded() {
    let small = Limits {
        max_bulk_len: 64,
        ..Limits::default()
    };
    // A line is bounded by the smaller of the line and bulk limits.
    let e = reject(&[b'+'; 200], small);
    assert_eq!(e.kind, ErrorKind::LineTooLong { limit: 64 }, "{e}");
    let short_lines = Limits {
        max_line_len: 16,
        ..Limits::default()
    };
    for t in [b'+', b'-', b'('] {
        let mut line = vec![t];
        line.extend_from_slice(&[b'1'; 17]);
        let e = reject(&line, short_lines);
        assert_eq!(e.kind, ErrorKind::LineTooLong { limit: 16 }, "{e}");
        // Exactly at the limit is fine.
        line.truncate(17);
        line.extend_from_slice(b"\r\n");
        let p = parse(&line, &short_lines).unwrap();
        assert!(matches!(p, Status::Complete(p) if p.consumed == line.len()));
    }
    // The default: 64 KiB, whatever the bulk limit.
    assert_eq!(Limits::default().max_line_len, 64 << 10);
    let e = reject(&[b'+'; (64 << 10) + 2], Limits::default());
    assert_eq!(e.kind, ErrorKind::LineTooLong { limit: 64 << 10 });
    assert!(e.to_string().contains("line longer than"), "{e}");
    let mut long_int = b":".to_vec();
    long_int.extend_from_slice(&[b'1'; 100]);
    let e = reject(&long_int, small);
    assert_eq!(e.kind, ErrorKind::BadInteger);
    let mut stream = b"$?\r\n".to_vec();
    for _ in 0..10 {
        stream.extend_from_slice(b";10\r\n0123456789\r\n");
    }
    let e = reject(&stream, small);
    assert_eq!(e.kind, ErrorKind::TooLong { len: 70, limit: 64 });
}
