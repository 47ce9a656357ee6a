//! The setters of subscribing on replicas (a cluster placement's option;
//! the control core's `Config::replicas` does the placing).

use crate::PubSubBuilder;

/// Subscribing on replicas. Like every cluster setter, they apply to a
/// cluster only: [`PubSubBuilder::build`] refuses them with servers given
/// by [`PubSubBuilder::address`].
impl PubSubBuilder {
    /// Subscribes on replicas (default off): each shard's subscribe
    /// connection goes to one of its replicas instead of its primary,
    /// which then carries only publishes and replication, and across a
    /// fleet the delivery load of a shard spreads over its replicas (each
    /// instance ranks them by its own seed, [`PubSubBuilder::replica_seed`],
    /// and keeps the one it chose while it stays a usable replica of that
    /// shard). A shard with no usable replica (none listed, failed, or its
    /// connection failed within the last poll interval) is served by its
    /// primary. Sharded modes only
    /// ([`Mode::Sharded`](crate::cluster::Mode::Sharded),
    /// [`Mode::PerPartition`](crate::cluster::Mode::PerPartition)): `build`
    /// refuses it with [`Mode::Classic`](crate::cluster::Mode::Classic).
    ///
    /// The guarantees stay those of primaries: a serving replica that
    /// dies, is marked failed, or is re-pointed to another shard
    /// (`CLUSTER REPLICATE`) moves its partitions to another node, with a
    /// gap event for each of their channels before the messages that
    /// follow. Redis 7.0 tells a re-pointed replica's subscribers nothing
    /// (they silently stop receiving): that is found at the next slot map,
    /// which a poll ([`PubSubBuilder::poll_interval`]) or any other trigger
    /// reads, and the gap covers the time since; Valkey pushes
    /// `sunsubscribe` and the move is at once. A slot that changes primary
    /// under its serving node (a promotion, a failover of its primary)
    /// restarts that connection, with a gap: two maps cannot tell it from
    /// a replica that moved and whose slots followed it.
    ///
    /// A shard with wanted channels never moves to another of its own
    /// replicas (one that lags the node left, by seconds while it resyncs
    /// after a failover, would deliver messages twice): when its replica
    /// cannot serve, its primary does, and keeps it while it has wanted
    /// channels, so the spread narrows after failures until instances
    /// restart. On Redis, a replica re-pointed away and back between two
    /// map reads loses messages in between unseen. Costs: a
    /// replication lag on delivery, and a gap for a shard's channels
    /// whenever its serving node has to change.
    pub fn subscribe_on_replicas(mut self, on: bool) -> Self {
        self.cluster.replicas = on;
        self.cluster_only("subscribe_on_replicas")
    }

    /// The seed that ranks each shard's replicas for this instance when
    /// [`PubSubBuilder::subscribe_on_replicas`] is on (default: one drawn
    /// per instance, so a fleet spreads over the replicas). Instances with
    /// the same seed choose the same replicas. `build` refuses it without
    /// `subscribe_on_replicas(true)`.
    pub fn replica_seed(mut self, seed: u64) -> Self {
        self.cluster.replica_seed = Some(seed);
        self.cluster_only("replica_seed")
    }
}
