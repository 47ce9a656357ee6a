//! The opt-in envelope: a 12-byte header carrying the publish time, so the
//! subscriber can measure end-to-end lag.
//!
//! Layout: the magic `\0SS1`, then the publish time as microseconds since
//! the Unix epoch, little-endian `u64`. The subscriber strips it before the
//! handler sees the payload. Publisher and subscriber clocks must agree
//! (same host, or NTP-synchronised hosts) for the lag to mean anything.
//!
//! ```
//! use shardsub::pubsub::envelope;
//! let mut out = Vec::new();
//! envelope::encode_into(&mut out, b"hello", 1_700_000_000_000_000);
//! assert_eq!(out.len(), envelope::HEADER_LEN + 5);
//! assert_eq!(envelope::decode(&out), Some((1_700_000_000_000_000, &b"hello"[..])));
//! assert_eq!(envelope::decode(b"hello"), None);
//! ```

/// The header's first bytes.
pub const MAGIC: [u8; 4] = *b"\0SS1";

/// Header length in bytes.
pub const HEADER_LEN: usize = 12;

/// The header for a message published at `sent_us`: what goes before
/// the payload.
pub fn header(sent_us: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    let (magic, time) = h.split_at_mut(MAGIC.len());
    magic.copy_from_slice(&MAGIC);
    time.copy_from_slice(&sent_us.to_le_bytes());
    h
}

/// Appends the header (with `sent_us`) and `payload` to `out`.
pub fn encode_into(out: &mut Vec<u8>, payload: &[u8], sent_us: u64) {
    out.extend_from_slice(&header(sent_us));
    out.extend_from_slice(payload);
}

/// Splits an enveloped payload into its publish time and the application
/// payload; `None` when `bytes` does not start with a header.
pub fn decode(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<HEADER_LEN>()?;
    let (magic, time) = head.split_first_chunk::<4>()?;
    if *magic != MAGIC {
        return None;
    }
    let time: [u8; 8] = time.try_into().ok()?;
    Some((u64::from_le_bytes(time), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let mut out = Vec::new();
        encode_into(&mut out, b"", 5);
        assert_eq!(decode(&out), Some((5, &b""[..])));
        assert_eq!(decode(&out[..11]), None);
        out[0] = b'x';
        assert_eq!(decode(&out), None);
        assert_eq!(decode(b""), None);
    }
}
