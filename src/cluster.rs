//! Pub/Sub on a Redis or Valkey Cluster: sharded over app-level partitions,
//! node-grouped, following the cluster as it moves.
//!
//! A [`PubSub`](crate::PubSub) placed on a cluster (built with
//! [`PubSubBuilder::seed`](crate::PubSubBuilder::seed)) owns one publish
//! connection per primary and the subscribe connections the control core
//! asks for (one per
//! [`PubSubBuilder::subscribe_connections`](crate::PubSubBuilder::subscribe_connections)
//! per primary, node-grouped), all on its runtime's I/O threads, one
//! control thread, and the same worker pool, [`Handler`](crate::Handler) and
//! [`Event::Gap`](crate::Event::Gap) as on servers:
//!
//! ```text
//! publish(ch) ─► partition p ─► "{tag_p}.ch" ─► slot ─► owner's pipelined conn ─► SPUBLISH
//!                       MOVED/ASK/TRYAGAIN/CLUSTERDOWN ─► driver: reroute, retry (bounded), tell the core
//! subscribe(ch) ─► registry lane p ─► core.handle_want ─► Subscribe (one partition, ≤512)
//!                                                      ─► driver: SSUBSCRIBE on the conn of p's primary
//! core: AskVersion (first fetch) ─► driver: INFO server ─► handle_version ─► FetchTopology
//!       ─► driver: CLUSTER SHARDS|SLOTS, as the version chose (non-blocking) ─► handle_topology
//!       ─► Layout ─► plan_rewire ─► Open / Unsubscribe / Gap / Subscribe / Close; ProbeSlot for
//!       unowned slots; pings for silent connections
//! triggers: start, poll (30 s), server sunsubscribe of a wanted channel or of a node's
//!           service channel, MOVED, a lost subscribe conn, a refused SSUBSCRIBE;
//!           while degraded, retry every 200 ms (doubling while fetches fail)
//! ```
//!
//! The control thread is the driver of the sans-IO [`control::Core`]
//! (`driver.rs`, `commands.rs`): it feeds each report of a connection, the
//! application or the publish path to the core with the time, carries out
//! the core's commands with non-blocking calls whose answers come back as
//! inputs, and carries out the publish side's sans-IO decisions beside it
//! ([`control::Routes`] from the core's map and `MOVED`s,
//! [`control::Gates`], [`control::Hold`], [`control::RetryPolicy`],
//! [`control::Services`]). The same driver, with
//! the core in its fixed mode, serves one server and N client-side shards:
//! there is one control loop in the crate.
//!
//! - A channel `ch` lives in partition `partition_of(ch)`, under the
//!   server name `{TAG}.ch` ([`shardcore::Partitions::redis_channel_into`]);
//!   the handler sees `ch`.
//! - Each `SSUBSCRIBE` carries channels of one partition only (one slot):
//!   a mix would be refused with `CROSSSLOT`.
//! - After a reconnect or a rewire, channels are restored partition by
//!   partition through [`shardcore::plan_resubscribe`] (by the core), and the
//!   handler gets [`Event::Gap`](crate::Event::Gap) for exactly the channels that were moved or
//!   lost (`server` is the address of the node they were on; one incident,
//!   one event per worker).
//! - [`Mode::PerPartition`] and [`Mode::Classic`] exist for comparison.
//!
//! - Failovers reach publish-only instances too: in [`Mode::Sharded`] each
//!   instance subscribes, on every primary's subscribe connection, one
//!   service channel in a slot that primary owns. A demoted primary pushes
//!   `sunsubscribe` for it, and a topology fetch runs at once (again soon
//!   while the map still shows the slot there), instead of at the next
//!   poll: a replica accepts `SPUBLISH`
//!   without `MOVED` and forwards it, so nothing else would tell.
//! - When a slot's publish route moves, its publishes are held until the
//!   old route has answered a `PING` sent after them; when the old node is
//!   now a replica of the new owner, until a marker sent through it has
//!   come back over the cluster bus at the new owner (at most 1 s, then
//!   counted in [`Holds::gate_timeouts`]). A channel's publishes do not
//!   overtake each other across the switch.
//! - A publish never written whose slot owner cannot be reached (a
//!   `kill -9`ed primary, until its replica is promoted) is held, in
//!   order, for up to
//!   [`PubSubBuilder::publish_hold`](crate::PubSubBuilder::publish_hold) (5 s; bounded in messages and bytes
//!   by [`PubSubBuilder::publish_hold_limit`](crate::PubSubBuilder::publish_hold_limit)), then sent to the new
//!   owner; past the hold it fails with [`Error::OwnerUnreachable`](crate::Error::OwnerUnreachable), past
//!   the limit at once with [`Error::HoldFull`](crate::Error::HoldFull). One whose connection broke
//!   (or was closed by a topology change that retired its node, or by a
//!   shutdown) after it was written and before its reply may have run and
//!   been delivered: it fails with [`Error::ConnectionLost`](crate::Error::ConnectionLost) (counted in
//!   [`ClusterMetrics::publish_failed`]) and is never sent again, so no
//!   subscriber gets it twice; the caller decides whether to publish it
//!   again (on a recoverable channel the history says whether it was
//!   applied). One whose node engine was closed before it was written is
//!   simply sent to the slot's owner. One the
//!   server refused for now (`TRYAGAIN`, `CLUSTERDOWN`) is retried alone,
//!   the slot's later publishes held until it was taken.
//!
//! - An idle subscribe connection gets a `PING` after
//!   [`PubSubBuilder::probe_interval`](crate::PubSubBuilder::probe_interval) of silence; one that does not
//!   answer within another interval is closed, reopened and resubscribed
//!   (with gap events).
//!
//! What it does not do: patterns (sharded Pub/Sub has none); the service
//! channel (failover detection for publish-only instances) exists only in
//! [`Mode::Sharded`]. The envelope works here as on servers.
//! A node that joins adds connections to the runtime, not threads.
//!
//! ```no_run
//! use shardsub::PubSub;
//! let ps = PubSub::builder()
//!     .seed("127.0.0.1:7000")
//!     .handler(|channel: &[u8], payload: &[u8]| {
//!         println!("{}: {} bytes", String::from_utf8_lossy(channel), payload.len());
//!     })
//!     .build()?;
//! ps.subscribe(["news"])?;
//! ps.wait_active(&["news"], std::time::Duration::from_secs(2))?;
//! ps.publish(b"news", b"hello")?;
//! # Ok::<(), shardsub::Error>(())
//! ```

pub use crate::control_loop::{Mode, ResubscribeSplit};
pub use crate::metrics::{ClusterMetrics, Holds, RebuildCounts, Redirects, TopologyErrors};
