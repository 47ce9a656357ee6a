//! Decodes any bytes as a recoverable channel's history header; see
//! `shardsub_fuzz::history` for the invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shardsub_fuzz::history::check(data);
});
