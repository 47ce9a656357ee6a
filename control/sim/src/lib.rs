//! A seeded, in-memory Redis Cluster with a virtual clock, driving a
//! [`Core`](control::Core) through random fault schedules and checking its
//! promises (in the spirit of quinn-proto's `Pair` and raft-rs's test
//! network).
//!
//! ```text
//!  Schedule ─ faults at times ─┐
//!                              v
//!   Core ──commands──> Sim ──requests (delayed, per-connection FIFO)──> Cluster
//!    ^                  │ <─replies, pushes, drops (delayed; black holes hold them)─┘
//!    └──handle_* (virtual time) ──┘      every command through check::Checker
//! ```
//!
//! Properties, checked as the run goes and at its end (a failure panics
//! with the schedule's seed; [`run_seed`] replays one):
//!
//! 1. after the last fault and [`Schedule::settle`] of virtual time, every
//!    wanted channel is subscribed exactly once, on a connection to the
//!    live primary that owns its slot (subscribing on replicas: to a live
//!    node of that primary's shard; classic mode: on the one live primary
//!    every lane rides), nothing unwanted stays subscribed, no wanted
//!    channel still owes the gap of a loss, every refused (ACL) channel
//!    was reported and none is subscribed;
//! 2. every resubscribe of a channel whose subscription the server dropped
//!    comes after a gap for it, and no gap names a channel with no
//!    subscribe sent since its previous gap (a first subscribe is no gap);
//! 3. every `SSUBSCRIBE` / `SUNSUBSCRIBE` holds 1 to `batch` channels of one
//!    partition, with that partition's slot, and no channel goes out twice
//!    on a connection before the first one's reply;
//! 4. fetches and probes stay under [`check::MAX_FETCHES_PER_SECOND`] and
//!    [`check::MAX_PROBES_PER_SECOND`] in any second, and after every
//!    drained step `poll_timeout` lies after the current time;
//! 5. no connection gets a `PING` before the ping interval has passed since
//!    anything (a reply, a push, a pong, activity) last reached the core on
//!    it;
//! 6. at the end, [`Core::stats`](control::Core::stats) agrees with what the
//!    simulator saw (fetches, commands, gaps, pings, open connections), and
//!    a run with gaps measured a restore;
//! 7. a pushed `sunsubscribe` that breaks a confirmed subscription is
//!    followed by a topology fetch within the fetch timeout plus the
//!    longest fetch backoff (and the least gap between fetches, plus
//!    0.5 s), not at the next poll.
//!
//! The same world and clock drive the publish core the engine runs
//! ([`control::publish::PublishCore`]) beside the subscribe core, as the
//! control thread does (`pubside`): publishes to a few partitions' slots
//! follow every fault of the schedule (the cluster answers `SPUBLISH` with
//! `MOVED`, `ASK`, `TRYAGAIN` and `CLUSTERDOWN` from its owners and
//! migrations; publish connections drop with their node and with
//! [`Fault::DropLink`]), and its properties P1 to P5 (order per slot, no
//! publish taken twice or a lost one sent again, every publish ending
//! within its bound, routes that converge before the poll with the
//! derived read table equal to the core's, time bounds) are checked in
//! every sharded run.
//!
//! The publish side also has two models of its own, each over 10,000
//! seeded schedules in `tests/sim.rs`, both driving the publish core:
//! [`gates`] (one slot's route
//! change: migrations, failovers with the bus delayed, the old node dying;
//! publish order unless the gate timed out, and the gate's time bound) and
//! [`publish`] (slots whose owners go away and refuse for a while: publish
//! order, every publish ending once within its bounds, the hold's limits),
//! and [`routes`] checks [`control::Routes`] (which slots a map or a `MOVED`
//! moves, each behind one gate per old and new route) against a plain
//! model.
//!
//! Schedules mix the layouts (node-grouped, per-partition, classic), the
//! resubscribe splits and 1 to 4 workers;
//! [`Schedule::random_replicas`] subscribes on replicas, with Redis's or
//! Valkey's pushes and replicas re-pointed to other primaries.

extern crate alloc;

pub mod check;
pub mod cluster;
mod drive;
mod faults;
pub mod gates;
pub mod publish;
mod pubside;
pub mod routes;
pub mod schedule;
mod server;
mod settle;

pub use drive::{run, run_seed, Outcome, Sim};
pub use gates::{run_gate, GateRun};
pub use publish::{run_publish, PublishRun};
pub use pubside::PublishTotals;
pub use routes::{run_routes, RoutesRun};
pub use schedule::{Fault, Schedule};
