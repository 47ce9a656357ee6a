//! The fleet: `--engines` subscriber instances and `--publishers` publisher
//! instances, each a full `PubSub` with its own connections as separate
//! app nodes would have, all on one shared `shardsub::Runtime`: its I/O
//! threads, its one control thread and its worker threads (`--workers`,
//! shared by every instance), so hundreds fit a small machine on a fixed
//! number of threads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shardcore::Partitions;
use shardsub::cluster::{Mode as PlacementMode, ResubscribeSplit};
use shardsub::history::HistoryOptions;
use shardsub::{PubSub, PubSubBuilder, Runtime};

use crate::account::Books;
use crate::node::{self, Fleet, Lag, Node};
use crate::options::{Mode, Options};
use crate::servers::{ms, n};
use crate::target::Probe;

/// The connection name of the publisher instances (`CLIENT LIST`).
pub const PUBLISHER_NAME: &str = "fanout-publisher";

/// Every instance of the run.
pub struct Instances {
    pub fleet: Vec<Fleet>,
    pub publishers: Vec<PubSub>,
    /// The runtime all of them share (kept for its lifetime).
    pub runtime: Runtime,
}

/// The settings every instance shares: placement and the runtime.
fn base(o: &Options, probe: &Probe, rt: &Runtime) -> PubSubBuilder {
    let mut b = probe.builder().runtime(rt);
    if probe.cluster {
        let mode = match o.mode {
            Mode::PerPartition => PlacementMode::PerPartition,
            Mode::Classic => PlacementMode::Classic,
            _ => PlacementMode::Sharded,
        };
        b = b.partitions(o.partitions).mode(mode);
        if o.split_channels {
            b = b.resubscribe_split(ResubscribeSplit::Channels);
        }
    }
    if o.history {
        let keep = HistoryOptions {
            max_len: 10_000,
            max_age: Duration::from_secs(300),
        };
        b = b.history("room:", keep);
    }
    b
}

/// Builds every instance (nothing subscribed yet).
///
/// # Errors
///
/// The runtime or an instance that did not build, with its index.
pub fn build(
    o: &Options,
    probe: &Probe,
    parts: &Partitions,
    names: &[Vec<u8>],
    books: &Books,
    lag: &Arc<Lag>,
) -> Result<Instances, String> {
    let runtime =
        Runtime::with_workers(o.io_threads, o.workers).map_err(|e| format!("runtime: {e}"))?;
    let mut mine: Vec<Vec<usize>> = vec![Vec::new(); o.engines];
    for i in 0..o.channels {
        for e in node::subscribers_of(i, o.engines) {
            mine[e].push(i);
        }
    }
    let mut fleet = Vec::with_capacity(o.engines);
    for (e, channels) in mine.into_iter().enumerate() {
        let node = Arc::new(Node::new(parts, lag.clone(), books.tap(e, &channels)));
        let ps = base(o, probe, &runtime)
            .handler_arc(node.clone())
            .build()
            .map_err(|err| format!("subscriber engine {e}: {err}"))?;
        let mut holds = vec![false; parts.count() as usize];
        for &i in &channels {
            holds[parts.partition_of(&names[i]) as usize] = true;
        }
        fleet.push(Fleet {
            ps,
            node,
            channels,
            holds,
        });
    }
    let publishers = (0..o.publishers)
        .map(|k| {
            // Named apart, so the servers' counts can tell the subscriber
            // instances' connections from the publishers' (whose subscribe
            // connection carries only the library's failover service
            // channel on a cluster).
            base(o, probe, &runtime)
                .client_name(PUBLISHER_NAME)
                .handler(|_: &[u8], _: &[u8]| {})
                .build()
                .map_err(|err| format!("publisher {k}: {err}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Instances {
        fleet,
        publishers,
        runtime,
    })
}

/// Every engine subscribes its channels at the same moment (a fleet
/// starting up) and waits until the servers confirmed all of them; prints
/// the spread of the times.
///
/// # Errors
///
/// The first engine whose subscribe failed or did not confirm in 60 s.
pub fn subscribe_all(fleet: &[Fleet], names: &[Vec<u8>]) -> Result<(), String> {
    let start = Instant::now();
    // Subscribing is asynchronous: issue every engine's, then wait for each.
    for (e, f) in fleet.iter().enumerate() {
        let chans: Vec<&[u8]> = f.channels.iter().map(|&i| &names[i][..]).collect();
        f.ps.subscribe(&chans)
            .map_err(|err| format!("engine {e} subscribe: {err}"))?;
    }
    let mut times = Vec::with_capacity(fleet.len());
    for (e, f) in fleet.iter().enumerate() {
        let chans: Vec<&[u8]> = f.channels.iter().map(|&i| &names[i][..]).collect();
        let left = Duration::from_secs(60).saturating_sub(start.elapsed());
        f.ps.wait_active(&chans, left.max(Duration::from_secs(1)))
            .map_err(|err| format!("engine {e} subscribe: {err}"))?;
        times.push(start.elapsed());
    }
    let commands: u64 = fleet
        .iter()
        .map(|f| f.ps.metrics().subscribe_commands)
        .sum();
    let subs: usize = fleet.iter().map(|f| f.channels.len()).sum();
    println!(
        "  {} engines, {} subscriptions: all active after {} ({} subscribe commands, {:.1} per \
         engine)",
        fleet.len(),
        n(subs as u64),
        ms(start.elapsed()),
        n(commands),
        commands as f64 / fleet.len().max(1) as f64
    );
    Ok(())
}

/// Client-side connections open now, over every instance.
pub fn connections(inst: &Instances) -> u64 {
    let one = |ps: &PubSub| -> u64 {
        match ps.cluster_metrics() {
            Some(m) => (m.subscribe_connections + m.nodes) as u64,
            None => ps.metrics().active_connections.iter().sum::<usize>() as u64,
        }
    };
    inst.fleet.iter().map(|f| one(&f.ps)).sum::<u64>()
        + inst.publishers.iter().map(one).sum::<u64>()
}

/// Topology rebuilds so far, over every instance (0 on servers).
pub fn rebuilds(inst: &Instances) -> u64 {
    let one = |ps: &PubSub| ps.cluster_metrics().map_or(0, |m| m.rebuilds.total());
    inst.fleet.iter().map(|f| one(&f.ps)).sum::<u64>()
        + inst.publishers.iter().map(one).sum::<u64>()
}
