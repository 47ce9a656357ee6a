//! Two cluster maps (compact form or two topology replies), their layouts,
//! the rewire plan and the resubscribe plan. Invariants: see
//! `shardsub_fuzz::rewire`: every partition whose node changed is rewired
//! exactly once, no other is, and every channel is resubscribed once.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shardsub_fuzz::rewire::check(data);
});
