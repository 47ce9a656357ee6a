//! Shared helpers for the cluster tests: channel names, the engine they
//! start from, and `CLIENT LIST` counts. Delivery goes through the
//! accounting checker (`tests/accounted`).
#![allow(dead_code)]

use std::sync::Arc;

use shardsub::Handler;
use shardsub::PubSub;
use testkit::Cluster;

pub fn channels(n: usize, prefix: &str) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}:{i}").into_bytes())
        .collect()
}

/// The builder every cluster test starts from: `cluster`'s seeds, 2
/// workers with deep queues, `handler`.
pub fn builder(cluster: &Cluster, handler: Arc<dyn Handler>) -> shardsub::PubSubBuilder {
    PubSub::builder()
        .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
        .handler_arc(handler)
        .workers(2)
        // Room for bursts on a loaded machine: drops are signalled and
        // accounted, but the delivery tests expect none.
        .queue_capacity(1 << 16)
}

/// A node-grouped `PubSub` on `cluster` with 2 workers.
pub fn engine_with(cluster: &Cluster, handler: Arc<dyn Handler>) -> PubSub {
    builder(cluster, handler).build().expect("cluster pubsub")
}

/// `CLIENT LIST` entries named `name` on node `i`.
pub fn named_clients(cluster: &Cluster, i: usize, name: &str) -> usize {
    let v = cluster
        .node(i)
        .cmd(&[b"CLIENT", b"LIST"])
        .expect("client list");
    let text = testkit::values::text(&v).unwrap_or_default();
    text.lines()
        .filter(|l| l.split(' ').any(|f| f == format!("name={name}")))
        .count()
}
