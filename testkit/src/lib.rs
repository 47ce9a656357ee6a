//! Real `redis-server` and `valkey-server` processes for shardsub's tests,
//! benches and demo — never mocks of them.
//!
//! What it gives:
//!
//! - [`Server`]: one standalone (or cluster-mode) server on a free loopback
//!   port, started with `--save "" --appendonly no --enable-debug-command yes`
//!   in a scratch directory, stopped on drop (also when a test panics).
//! - [`Servers`]: N independent servers (client-side sharding).
//! - [`Cluster`]: M masters with R replicas each, slots split like
//!   `redis-cli --cluster create`, plus resharding and failover helpers.
//! - [`FakeServer`]: a scripted loopback server for byte sequences a real
//!   server will not send (hostile input, exact interleavings).
//! - [`FakeSentinel`]: a Sentinel that names a master the test sets and
//!   publishes `+switch-master` on cue.
//! - [`FaultProxy`]: a TCP proxy in front of a real server that can cut,
//!   delay or black-hole the traffic.
//! - [`TlsFiles`]: a server that also listens for TLS
//!   ([`ServerBuilder::tls`], Redis only here: the bundled Valkey has no
//!   TLS).
//! - [`Client`]: a small blocking RESP client.
//! - [`alloc::CountingAlloc`]: the counting global allocator for tests that
//!   prove a path allocates nothing or bound what a thread holds.
//! - [`alone`]: a test that measures its whole process (allocations, peak
//!   RSS, threads) gets the process to itself, under nextest or libtest.
//! - [`accounting::Ledger`]: the message-accounting checker every delivery
//!   test goes through (silent loss, duplicates, reorders).
//! - [`wire_files`]: the wire format's exported files, compared with what
//!   the code computes (or rewritten, for a new file).
//! - [`Rng`]: the seeded generator for tests (the library's own, so a
//!   test and the code under it draw from one implementation).
//! - [`block_on`] and [`counting_waker`]: polling futures by hand, with
//!   a lost wake-up shown as a timeout.
//!
//! What it does not do: install servers (that is `cargo xtask install`) or
//! mock server behaviour.
//!
//! Server-facing tests run against every kind the suite is configured for:
//!
//! ```
//! for kind in testkit::kinds() {
//!     let server = testkit::Server::start(kind)?;
//!     let reply = server.cmd(&[b"SET", b"k", b"v"])?;
//!     assert_eq!(reply, testkit::Value::Simple(b"OK".to_vec()));
//! }
//! # Ok::<(), testkit::Error>(())
//! ```
//!
//! Every wait is bounded; nothing here blocks forever.
// `unsafe` only in `alloc`, which implements `GlobalAlloc`.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod accounting;
#[allow(unsafe_code)]
pub mod alloc;
mod alone;
mod client;
mod cluster;
mod cluster_ops;
mod cluster_replicas;
mod cluster_view;
mod error;
mod fake;
mod kind;
mod process;
mod proxy;
mod sentinel;
mod server;
mod servers;
pub mod threads;
mod tls;
pub mod values;
mod wake;
pub mod wire_files;

pub use alone::alone;
pub use client::{Client, CONNECT_TIMEOUT, IO_TIMEOUT};
pub use cluster::{Cluster, SlotRange, CLUSTER_TIMEOUT};
pub use control::Rng;
pub use error::Error;
pub use fake::{FakeServer, Step, EXPECT_TIMEOUT};
pub use kind::{
    kinds, redis_cli, workspace_root, ServerKind, REDIS_CLI_ENV, REDIS_SERVER_ENV, SERVERS_ENV,
    VALKEY_RELATIVE_PATH, VALKEY_SERVER_ENV,
};
pub use process::{wait_for, ChildGuard, STOP_GRACE};
pub use proxy::{Direction, FaultProxy, ProxyStats};
pub use sentinel::{FakeSentinel, Sentinel, SENTINEL_DOWN_AFTER_MS};
pub use server::{Server, ServerBuilder, CLUSTER_NODE_TIMEOUT_MS, START_TIMEOUT};
pub use servers::Servers;
pub use tls::{TlsAuthClients, TlsFiles};
pub use wake::{block_on, counting_waker, unpark_waker, WakeCount};

/// The owned reply tree (re-exported from the `resp` crate).
pub use resp::Value;
