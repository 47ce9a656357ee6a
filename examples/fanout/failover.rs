//! The demo's failover: half-way through publishing, `CLUSTER FAILOVER` on a
//! replica of the first master (through testkit), then what the fleet saw.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shardcore::Partitions;
use testkit::Cluster;

use crate::node::{now_us, Fleet};
use crate::servers::{ms, n, ssubscribe_calls};

/// What the failover showed.
#[derive(Default)]
pub struct FailoverReport {
    /// It ran (it is skipped when publishing ends first).
    pub done: bool,
    /// From sending `CLUSTER FAILOVER` until every engine had a message
    /// published after the cluster reported ok on every moved partition.
    pub restored: Option<Duration>,
    /// Partitions whose slot moved to the promoted replica.
    pub moved: usize,
    /// Which ones.
    pub moved_parts: Vec<u32>,
    /// Gap events the handlers had before the failover (should be none).
    pub gaps_before: u64,
    /// Gap events the handlers got from it.
    pub gap_events: u64,
    /// (engine, partition) pairs named by a gap that did not move.
    pub gaps_outside_moved: usize,
    /// `SSUBSCRIBE` calls the promoted replica executed for the fleet.
    pub resubscribes: u64,
}

/// Waits until `at`, fails over the first master, and measures. Prints its
/// findings as one block (so per-second lines do not cut through it).
///
/// # Errors
///
/// The first master has no replica, or testkit's failover failed.
pub fn run(
    cluster: &mut Cluster,
    fleet: &[Fleet],
    parts: &Partitions,
    at: Instant,
    stop: &AtomicBool,
) -> Result<FailoverReport, String> {
    // Half-time is a point on the clock: nothing else to wait for.
    while Instant::now() < at {
        if stop.load(Ordering::Relaxed) {
            return Ok(FailoverReport::default());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let master = cluster.masters()[0];
    let replica = *cluster
        .replicas_of(master)
        .first()
        .ok_or("the first master has no replica")?;
    let owner = |c: &Cluster, p: u32| c.owner_of_slot(parts.slot(p));
    let before: Vec<Option<usize>> = (0..parts.count()).map(|p| owner(cluster, p)).collect();
    let gaps_before: Vec<u64> = fleet
        .iter()
        .map(|f| f.node.gap_events.load(Ordering::Relaxed))
        .collect();
    let restores_before: Vec<u64> = fleet
        .iter()
        .map(|f| f.ps.cluster_metrics().unwrap().restores)
        .collect();
    let ss_before = ssubscribe_calls(cluster, replica);
    println!(
        "-- failover: CLUSTER FAILOVER on {} (replica of master {}) …",
        cluster.node(replica).addr(),
        cluster.node(master).addr()
    );

    // The failover itself: testkit returns once the replica is master and
    // every node agrees on the new slot map.
    let t0 = Instant::now();
    cluster
        .failover(replica)
        .map_err(|e| format!("failover: {e}"))?;
    let ok_after = t0.elapsed();
    let ok_us = now_us();
    let moved: Vec<u32> = (0..parts.count())
        .filter(|&p| owner(cluster, p) != before[p as usize])
        .collect();

    // Delivery is back when every engine has been handed a message that was
    // published after the cluster reported ok, on every moved partition it
    // holds channels of (polled every 2 ms, at most 10 s).
    let restored = loop {
        let back = fleet.iter().all(|f| {
            moved.iter().all(|&p| {
                let p = p as usize;
                !f.holds[p] || f.node.newest[p].load(Ordering::Relaxed) >= ok_us
            })
        });
        if back {
            break Some(t0.elapsed());
        }
        if t0.elapsed() > ok_after + Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };

    // Gap events reach a worker before the messages that follow the
    // resubscribe, but other workers may still be behind: let every handler
    // catch up with the library's count, and the library finish its own
    // restore timer (bounded).
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(2)
        && fleet.iter().zip(&restores_before).any(|(f, &r)| {
            let m = f.ps.cluster_metrics().unwrap();
            f.node.gap_events.load(Ordering::Relaxed) < m.pubsub.gaps || m.restores == r
        })
    {
        std::thread::sleep(Duration::from_millis(5));
    }

    let mut report = FailoverReport {
        done: true,
        restored,
        moved: moved.len(),
        moved_parts: moved.clone(),
        gaps_before: gaps_before.iter().sum(),
        resubscribes: ssubscribe_calls(cluster, replica).saturating_sub(ss_before),
        ..FailoverReport::default()
    };
    let list: Vec<String> = moved.iter().take(12).map(|p| p.to_string()).collect();
    let mut out = format!(
        "-- failover: {} is master after {} (cluster ok); {} partitions moved to it: {}{}\n",
        cluster.node(replica).addr(),
        ms(ok_after),
        moved.len(),
        list.join(", "),
        if moved.len() > 12 { ", …" } else { "" },
    );
    for (e, f) in fleet.iter().enumerate() {
        let got = f
            .node
            .gap_events
            .load(Ordering::Relaxed)
            .saturating_sub(gaps_before[e]);
        report.gap_events += got;
        // The gaps must name exactly the moved partitions this engine holds.
        let gapped: BTreeSet<u32> = (0..parts.count())
            .filter(|&p| f.node.gap_parts[p as usize].load(Ordering::Relaxed))
            .collect();
        let expected: BTreeSet<u32> = moved
            .iter()
            .copied()
            .filter(|&p| f.holds[p as usize])
            .collect();
        let outside = gapped.difference(&expected).count();
        let missed = expected.difference(&gapped).count();
        report.gaps_outside_moved += outside;
        out += &format!(
            "   engine {e}: {got} gap events naming {} channels in {} partitions ({}); \
             library's restore timer {}\n",
            n(f.node.gap_channels.load(Ordering::Relaxed)),
            gapped.len(),
            if outside == 0 && missed == 0 {
                "exactly the moved ones it holds".to_string()
            } else {
                format!("NOT the moved set: {outside} outside it, {missed} moved without a gap")
            },
            f.ps.cluster_metrics()
                .unwrap()
                .last_restore
                .map_or("-".into(), ms),
        );
    }
    out += &match restored {
        Some(t) => format!(
            "-- failover: delivery restored on every moved partition of every engine {} after \
             CLUSTER FAILOVER was sent ({} after the cluster reported ok); {} SSUBSCRIBE on the \
             new master\n",
            ms(t),
            ms(t.saturating_sub(ok_after)),
            report.resubscribes,
        ),
        None => "-- failover: delivery NOT restored within 10 s of cluster ok\n".into(),
    };
    print!("{out}");
    Ok(report)
}
