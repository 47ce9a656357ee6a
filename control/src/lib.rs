//! The sans-IO control core of shardsub's cluster subscribe side.
//!
//! [`Core`] decides what the subscribe side of a Redis Cluster client does:
//! which subscribe connections to hold (node-grouped: `multiplier` per
//! primary, partition `p` on connection `p % multiplier`), which channels
//! each carries, when to fetch the slot map (the first node's version
//! chooses `CLUSTER SHARDS` or `CLUSTER SLOTS`) and probe unowned slots, how to
//! rewire when the layout changes ([`topology::plan_rewire`], the plan that
//! runs), how to resubscribe (whole partitions through
//! [`shardcore::plan_resubscribe`], or channels split by hash for
//! comparison: [`ResubscribeSplit`]), which channels get a gap event, and
//! when a silent connection gets a liveness `PING`. It has no sockets,
//! threads or clocks: time comes in as [`Time`], inputs as `handle_*`
//! calls, and commands go out through [`Core::poll_command`]. It counts
//! what the engine's cluster metrics report from the control thread
//! ([`Core::stats`]).
//!
//! ```text
//!  app: want / unwant / refresh ──┐
//!  publish path: MOVED redirect ──┤
//!  conns: up / down / reply /     ├─> Core ─> poll_command: Open, Close, Ping,
//!         sunsubscribe push /     │          Subscribe, Unsubscribe, Gap,
//!         pong / activity ────────┤          Refused, AskVersion, FetchTopology,
//!  version / topology /           │          ProbeSlot
//!    probe replies ───────────────┤   ├─> poll_timeout
//!  timer (poll_timeout) ──────────┘   └─> queries: stats, conn_of, node_of,
//!                                         is_settled, subscribed_on, layout
//! ```
//!
//! Every layout of [`ConnLayout`] is covered: node-grouped (the default), one
//! connection per partition, and classic `SUBSCRIBE` (hash lanes on one
//! primary). The publish side's decisions are beside it: [`Routes`] say
//! which node takes each slot's publishes and which slots a new map or a
//! `MOVED` moves, [`Gates`] keep a moved slot's publishes until the old
//! route is drained, [`Services`] keep a service channel on every node
//! (its drop reveals a lost slot at once), [`Hold`] keeps a slot's publishes while it has no
//! reachable owner, and [`RetryPolicy`] bounds and times a refused
//! publish's redirects and retries. [`publish::PublishCore`] joins them
//! and makes the decisions between them (a `MOVED` moves the route and an
//! `ASK` does not, the no-owner fallback, gate chunking, releases, expiry),
//! and routes commands by key's slot under the same rules;
//! the engine's control thread drives it, as do the golden transcripts, the
//! simulator and the fuzzer, and the parts are used through it.
//! With [`Config::replicas`] each shard's connections go to one of its
//! replicas (the primary while it has none usable): the layout is then
//! partition → serving node, and everything above follows it.
//! A node first learnt from a `MOVED` (no id yet) keeps its connections
//! when a later map names it with an id at the same address.
//!
//! It is `no_std` + `alloc`: it cannot read a clock or open a socket.
//! The simulator that runs it against a seeded in-memory cluster with a
//! virtual clock, and checks its promises after random fault schedules,
//! is a crate of its own (`control/sim`, not published).
//!
//! ```
//! use control::{Command, Config, Core, Time};
//! let parts = shardcore::Partitions::new(16).unwrap();
//! let seed = topology::NodeAddr { host: "10.0.0.1".into(), port: 7000 };
//! let mut core = Core::new(Config::new(parts, vec![seed]), Time::ZERO).unwrap();
//! assert!(matches!(core.poll_command(), Some(Command::AskVersion { .. })));
//! assert!(core.poll_timeout().is_some());
//! assert_eq!(core.stats().rebuilds.startup, 1);
//! ```
// The library is no_std; its unit tests have std's prelude.
#![cfg_attr(not(test), no_std)]
// Unsafe code is denied everywhere but `channel`, the thin shared name
// (see its module docs).
#![deny(unsafe_code)]
#![deny(missing_docs)]

extern crate alloc;

mod backoff;
mod channel;
mod classic;
mod command;
mod config;
mod conns;
mod core;
#[cfg(test)]
mod driver_tests;
#[cfg(test)]
mod fixed_tests;
mod gates;
mod hold;
mod probes;
pub mod publish;
#[cfg(test)]
mod replica_move_tests;
#[cfg(test)]
mod replica_tests;
mod replicas;
mod retry;
mod rewire;
mod rng;
mod routes;
mod sample;
mod services;
mod stats;
mod subscribe;
#[cfg(test)]
mod test_maps;
#[cfg(test)]
mod tests;
mod time;

pub use crate::backoff::{Backoff, Jitter};
pub use crate::channel::{Channel, MAX_CHANNEL_LEN};
pub use crate::classic::{classic_lane, pattern_lane};
pub use crate::command::{Command, ConnId, FetchError, ProbeReply, SubscribeReply};
pub use crate::config::{Config, ConfigError, ConnLayout, ResubscribeSplit};
pub use crate::core::Core;
pub use crate::gates::{GateCommand, Gates};
pub use crate::hold::{Due, Held, Hold, Offer, Refused};
pub use crate::retry::{RetryFailure, RetryPolicy};
pub use crate::rng::Rng;
pub use crate::routes::{RouteMove, Routes, NO_ROUTE};
pub use crate::sample::Sample;
pub use crate::services::{ServiceNode, Services, ServicesRound, STALE_ROUNDS};
pub use crate::stats::{Rebuilds, Stats, TopologyErrors};
pub use crate::time::Time;
