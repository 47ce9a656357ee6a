//! shardsub's integration tests: one test binary (`cargo nextest run
//! --test suite [FILTER]`), one module per area, against real Redis and
//! Valkey servers, clusters and scripted fake servers from `testkit`.
//!
//! - [`engine`]: the engine alone (commands, publishes, faults, wire
//!   limits, routing, I/O threads, `DEBUG PROTOCOL` display).
//! - [`pubsub`]: `PubSub` on one server and on client-side shards
//!   (delivery, faults, unsubscribe, gap events, placement, URLs, async).
//! - [`cluster`]: `PubSub` on real clusters (delivery, redirects, faults,
//!   failover, replicas, lane moves, probe, ACL, `ASK` with fake nodes).
//! - [`history`]: recoverable channels (publish, read, recovery, faults).
//! - [`alloc`]: what the hot paths allocate, counted by the suite's
//!   global allocator ([`GLOBAL`]).
//! - [`tls`] (the `tls` feature): TLS servers, a TLS cluster, TLS
//!   allocations.
//! - [`examples`]: programs run as child processes (the examples, the
//!   fleet demo, a Python publisher speaking the wire format).
//! - [`chaos`]: the chaos suite (`cargo xtask chaos` runs it in release
//!   mode).
//!
//! Shared helpers are in [`support`]. `TESTS.md` maps each promise to the
//! tests that guard it.
//!
//! nextest runs every test in a process of its own, which is how the suite
//! runs (`cargo xtask test`). Under `cargo test` the tests share one
//! process: the tests that measure the whole process (allocations, peak
//! RSS, threads) then rerun themselves alone in a child process
//! ([`testkit::alone`]).

mod alloc;
mod chaos;
mod cluster;
mod engine;
mod examples;
mod history;
mod pubsub;
mod support;
#[cfg(feature = "tls")]
mod tls;

/// The suite's one global allocator: it counts every allocation of every
/// thread of the process, and each thread's own (see [`testkit::alloc`]).
#[global_allocator]
static GLOBAL: testkit::alloc::CountingAlloc = testkit::alloc::CountingAlloc::new();
