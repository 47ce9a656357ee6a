//! A flags byte and a RESP frame, parsed as CLUSTER SLOTS and CLUSTER SHARDS.
//! Invariants: see `shardsub_fuzz::topo`: no panic, and a parsed slot map
//! covers 0..=16383 without overlap, owning exactly the claimed slots.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shardsub_fuzz::topo::check(data);
});
