//! `PubSub` on one server and on client-side shards (a few tests also run
//! the same code on a cluster, in every placement).

mod async_api;
mod blocking;
mod command;
mod delivery;
mod faults;
mod gap_events;
mod hostile;
mod lost_reply;
mod names;
mod patterns;
pub(crate) mod placement;
mod sentinel;
mod shared_runtime;
mod start_degraded;
mod unix;
mod unsubscribe;
mod url;
