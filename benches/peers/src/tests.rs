//! Every parser, whole and chunked, must do the same work on every stream.

use crate::{parsers, streams, Input, Touch};

#[test]
fn all_parsers_agree_on_every_stream() {
    for s in streams::all() {
        let input = Input::new(s.bytes.clone(), s.frames);
        let reference = (parsers::ours::whole)(&input, s.touch);
        assert_eq!(reference.frames, s.frames, "{}", s.name);
        assert_ne!(reference.sum, 0, "{}", s.name);
        for p in parsers::all() {
            assert_eq!(
                (p.whole)(&input, s.touch),
                reference,
                "{} whole {}",
                p.name,
                s.name
            );
            assert_eq!(
                (p.chunked)(&input, s.touch),
                reference,
                "{} chunked {}",
                p.name,
                s.name
            );
        }
    }
}

#[test]
fn push_stream_checksum_is_independent_of_the_parsers() {
    let wire = streams::smessage_pushes(50, 256);
    // Recompute channel + payload lengths by splitting on CRLF by hand.
    let text = &wire[..];
    let mut expected = 0u64;
    let mut frames = 0;
    let mut at = 0;
    while at < text.len() {
        let mut fields = Vec::new();
        at += 4; // ">3\r\n"
        for _ in 0..3 {
            let crlf = text[at..].windows(2).position(|w| w == b"\r\n").unwrap();
            let len: usize = std::str::from_utf8(&text[at + 1..at + crlf])
                .unwrap()
                .parse()
                .unwrap();
            let start = at + crlf + 2;
            fields.push(&text[start..start + len]);
            at = start + len + 2;
        }
        assert_eq!(fields[0], b"smessage");
        expected += crate::push_sum(fields[1], fields[2]);
        frames += 1;
    }
    let input = Input::new(wire.clone(), frames);
    let got = (parsers::ours::whole)(&input, Touch::Push);
    assert_eq!((got.frames, got.sum), (frames, expected));
    // Channel names vary in length.
    let lens: std::collections::BTreeSet<usize> = (0..8)
        .map(|i| streams::smessage_pushes(i + 1, 256).len() / (i + 1))
        .collect();
    assert!(lens.len() > 1);
}

#[test]
fn cluster_slots_fixtures_are_one_frame_of_six_ranges() {
    for raw in [streams::REDIS7_SLOTS_RESP3, streams::VALKEY9_SLOTS_RESP3] {
        let Ok(resp::Status::Complete(p)) = resp::parse(raw, &resp::Limits::default()) else {
            panic!("fixture does not parse")
        };
        assert_eq!(p.consumed, raw.len());
        assert_eq!(p.frame.as_aggregate().map(|a| a.len()), Some(6));
    }
}
