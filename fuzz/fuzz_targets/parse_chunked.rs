//! The first byte picks a read size; the rest is fed to a `Decoder` that many
//! bytes at a time. Invariant: it agrees with parsing the whole buffer, frame
//! for frame and error for error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((&size, rest)) = data.split_first() {
        shardsub_fuzz::check_chunked(rest, usize::from(size % 64) + 1);
    }
});
