//! Route gates and the retry bounds of the publish side: gates closed,
//! barriers answered or failed, markers returned or refused, time passing,
//! publishes redirected and retried. Invariants: see
//! `shardsub_fuzz::publish`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shardsub_fuzz::publish::check(data);
});
