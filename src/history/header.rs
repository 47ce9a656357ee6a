//! The history header: epoch and offset in front of a recoverable
//! channel's payload, written by the publish script.
//!
//! Layout: the magic `\0SH1`, the epoch in decimal ASCII, `.`, the offset
//! in decimal ASCII, `\n`, then the payload (which starts with the lag
//! envelope when that is on). Each number has 1 to 20 digits and fits a
//! `u64`; anything else is not a header.
//!
//! ```
//! use shardsub::history::{header, Position};
//! let mut out = Vec::new();
//! let at = Position { epoch: 1_700_000_000_000_000, offset: 42 };
//! header::encode_into(&mut out, at, b"hello");
//! assert_eq!(out, b"\0SH11700000000000000.42\nhello");
//! assert_eq!(header::decode(&out), Some((at, &b"hello"[..])));
//! assert_eq!(header::decode(b"hello"), None);
//! ```

use crate::history::Position;

/// The header's first bytes.
pub const MAGIC: [u8; 4] = *b"\0SH1";

/// The most digits a number may have.
const MAX_DIGITS: usize = 20;

/// Appends the header for `at`, then `payload`, to `out` (what the
/// publish script publishes).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn encode_into(out: &mut Vec<u8>, at: Position, payload: &[u8]) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(at.epoch.to_string().as_bytes());
    out.push(b'.');
    out.extend_from_slice(at.offset.to_string().as_bytes());
    out.push(b'\n');
    out.extend_from_slice(payload);
}

/// Splits a payload into its position and the rest; `None` when `bytes`
/// does not start with a well-formed header.
pub fn decode(bytes: &[u8]) -> Option<(Position, &[u8])> {
    let rest = bytes.strip_prefix(&MAGIC[..])?;
    let (epoch, rest) = number(rest, b'.')?;
    let (offset, rest) = number(rest, b'\n')?;
    Some((Position { epoch, offset }, rest))
}

/// A decimal `u64` of 1 to 20 digits ended by `end`, and what follows.
fn number(bytes: &[u8], end: u8) -> Option<(u64, &[u8])> {
    let len = bytes.iter().take(MAX_DIGITS + 1).position(|&b| b == end)?;
    let (digits, rest) = bytes.split_at(len);
    if digits.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some((n, rest.get(1..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn round_trips_and_never_panics(
            epoch: u64,
            offset: u64,
            payload: Vec<u8>,
            junk: Vec<u8>,
        ) {
            let at = Position { epoch, offset };
            let mut out = Vec::new();
            encode_into(&mut out, at, &payload);
            proptest::prop_assert_eq!(decode(&out), Some((at, &payload[..])));
            // Any bytes: a position and a suffix of them, or nothing.
            if let Some((_, rest)) = decode(&junk) {
                proptest::prop_assert!(junk.ends_with(rest));
            }
            let mut cut = junk.clone();
            cut.splice(0..0, MAGIC);
            if let Some((_, rest)) = decode(&cut) {
                proptest::prop_assert!(rest.len() < cut.len());
            }
        }
    }

    #[test]
    fn vectors() {
        let ok: &[(&[u8], u64, u64, &[u8])] = &[
            (b"\0SH11.1\n", 1, 1, b""),
            (b"\0SH10.0\n\0SS1xxxxxxxx", 0, 0, b"\0SS1xxxxxxxx"),
            (
                b"\0SH118446744073709551615.18446744073709551615\nP",
                u64::MAX,
                u64::MAX,
                b"P",
            ),
        ];
        for &(bytes, epoch, offset, rest) in ok {
            let at = Position { epoch, offset };
            assert_eq!(decode(bytes), Some((at, rest)), "{bytes:?}");
            let mut out = Vec::new();
            encode_into(&mut out, at, rest);
            assert_eq!(out, bytes);
        }
        let bad: &[&[u8]] = &[
            b"",
            b"\0SH1",
            b"\0SH1.1\n",
            b"\0SH11.\n",
            b"\0SH11.1",
            b"\0SH11x.1\n",
            b"\0SH1-1.1\n",
            b"\0SH118446744073709551616.1\n",
            b"\0SH1000000000000000000001.1\n",
            b"\0SH21.1\n",
        ];
        for &bytes in bad {
            assert_eq!(decode(bytes), None, "{bytes:?}");
        }
    }
}
