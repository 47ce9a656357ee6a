//! Parses the whole input, frame after frame. Invariants: no panic,
//! 0 < consumed <= input length, lazy views yield exactly `len` elements, and
//! what parsed re-encodes and re-parses to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shardsub_fuzz::check_whole(data);
});
