//! The history header of recoverable channels (`history_header`): any
//! bytes decode without a panic; a decoded payload is a suffix of the
//! input; the position and payload re-encode to bytes that decode to the
//! same.

use shardsub::history::header;

/// Checks one input.
pub fn check(data: &[u8]) {
    if let Some((at, rest)) = header::decode(data) {
        assert!(data.ends_with(rest));
        let mut out = Vec::new();
        header::encode_into(&mut out, at, rest);
        assert_eq!(header::decode(&out), Some((at, rest)));
    }
}
