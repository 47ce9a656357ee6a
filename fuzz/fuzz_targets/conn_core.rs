//! Runs a schedule (server bytes in any chunks, submissions, writes, clock
//! steps, EOF, errors) against the connection core. Invariants: see
//! `shardsub_fuzz::conn`: requests complete once and in order, a failed
//! connection stays closed, timers and flushes fire when due, output is the
//! handshake then the commands in order, heap stays bounded.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shardsub_fuzz::conn::check(data);
});
