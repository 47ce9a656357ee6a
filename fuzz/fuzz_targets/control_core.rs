//! A simulator schedule (cluster shape, then faults: migrations, failovers,
//! kills, node adds and removals, sunsubscribe bounces, dropped connections,
//! black holes, stale maps, wants and unwants) against the cluster control
//! core. Invariants: see `shardsub_fuzz::control`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shardsub_fuzz::control::check(data);
});
