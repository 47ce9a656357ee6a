//! Faults on demand, each at its time after publishing starts, on the
//! cluster the demo started (testkit's cluster operations), while publishing
//! goes on: a failover, a kill -9 (the node comes back as a replica), a
//! storm (`CLIENT KILL TYPE pubsub` on every primary), a legacy or atomic
//! slot migration, and a new node taking slots. For each, what it did: the
//! partitions that moved, the gap events, how long until delivery was back
//! for every engine (see `wait_back`), and for the storm
//! the resubscribe commands each node executed (`INFO commandstats`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shardcore::Partitions;
use testkit::{Cluster, Error, SlotRange};

use crate::node::{now_us, total, Fleet};
use crate::options::FaultKind;
use crate::servers::{ms, Counters};

/// What one fault did.
#[derive(Clone, Debug)]
pub struct Done {
    pub kind: FaultKind,
    /// Seconds after publishing started, when it began.
    pub at_s: f64,
    /// The operation itself.
    pub took: Duration,
    pub detail: String,
    pub moved: Vec<u32>,
    pub gap_events: u64,
    /// From the start until every engine had a message published after the
    /// operation on every affected partition it holds.
    pub back_after: Option<Duration>,
    /// The storm: SSUBSCRIBE + SUBSCRIBE calls per node during recovery.
    pub resubscribes: Option<BTreeMap<SocketAddr, u64>>,
    /// Gap events the fleet had got before it.
    pub gaps_at_start: u64,
    /// Messages recovered from history meanwhile.
    pub recovered: u64,
    /// When it began on the ledger's clock (for the losses).
    pub ledger_from: Duration,
}

/// The schedule's context.
pub struct Ctx<'a> {
    pub fleet: &'a [Fleet],
    pub parts: &'a Partitions,
    pub begin: Instant,
    pub stop: &'a AtomicBool,
    pub ledger_clock: &'a (dyn Fn() -> Duration + Sync),
}

/// Runs `schedule` (sorted by time) on `cluster`; a fault whose time comes
/// after publishing stopped is skipped.
///
/// # Errors
///
/// The first fault testkit could not carry out.
pub fn run(
    cluster: &mut Cluster,
    schedule: &[(FaultKind, f64)],
    cx: &Ctx<'_>,
) -> Result<Vec<Done>, String> {
    let mut done = Vec::new();
    for (n, &(kind, at)) in schedule.iter().enumerate() {
        let when = cx.begin + Duration::from_secs_f64(at);
        // A point on the clock: nothing else to wait for.
        while Instant::now() < when {
            if cx.stop.load(Ordering::Relaxed) {
                return Ok(done);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let d = one(cluster, kind, n, cx).map_err(|e| format!("--{}: {e}", kind.name()))?;
        crate::live::note(format!(
            "-- {} at {:.1} s: {} (took {}); {} partitions moved, {} gap events, delivery back \
             after {}",
            kind.name(),
            d.at_s,
            d.detail,
            ms(d.took),
            d.moved.len(),
            d.gap_events,
            d.back_after.map_or("NOT within 10 s".into(), ms)
        ));
        done.push(d);
    }
    Ok(done)
}

fn one(cluster: &mut Cluster, kind: FaultKind, n: usize, cx: &Ctx<'_>) -> Result<Done, Error> {
    let parts = cx.parts;
    let owner = |c: &Cluster, p: u32| c.owner_of_slot(parts.slot(p));
    let before: Vec<Option<usize>> = (0..parts.count()).map(|p| owner(cluster, p)).collect();
    let gaps_before = total(cx.fleet, |x| &x.gap_events);
    let recovered = || -> u64 { cx.fleet.iter().map(|f| f.ps.metrics().recovered).sum() };
    let recovered_before = recovered();
    let counters = |c: &Cluster| -> BTreeMap<SocketAddr, Counters> {
        c.live()
            .into_iter()
            .map(|i| (c.node(i).addr(), Counters::read(c.node(i).addr())))
            .collect()
    };
    let storm_before = (kind == FaultKind::Storm).then(|| counters(cluster));
    let restores_before: Vec<u64> = cx
        .fleet
        .iter()
        .map(|f| f.ps.cluster_metrics().map_or(0, |m| m.restores))
        .collect();
    let at_s = cx.begin.elapsed().as_secs_f64();
    let ledger_from = (cx.ledger_clock)();
    let t0 = Instant::now();
    let detail = act(cluster, kind, n, parts)?;
    let took = t0.elapsed();
    let ok_us = now_us();
    let moved: Vec<u32> = (0..parts.count())
        .filter(|&p| owner(cluster, p) != before[p as usize])
        .collect();
    // A storm cuts every subscribe connection: every partition is affected.
    let affected: Vec<u32> = if kind == FaultKind::Storm {
        (0..parts.count()).collect()
    } else {
        moved.clone()
    };
    let back_after = wait_back(cx.fleet, &affected, ok_us, t0, &restores_before);
    // Let every handler catch up with its library's gap count, and every
    // engine's resubscribing come to rest (bounded).
    settle(cx.fleet);
    let resubscribes = storm_before.map(|b| {
        counters(cluster)
            .into_iter()
            .map(|(a, c)| {
                let d = c.since(&b.get(&a).copied().unwrap_or_default());
                (a, d.ssubscribe + d.subscribe)
            })
            .collect()
    });
    Ok(Done {
        kind,
        at_s,
        took,
        detail,
        moved,
        gap_events: total(cx.fleet, |x| &x.gap_events).saturating_sub(gaps_before),
        back_after,
        resubscribes,
        gaps_at_start: gaps_before,
        recovered: recovered().saturating_sub(recovered_before),
        ledger_from,
    })
}

/// Carries the fault out; `n` (its index) picks the master, so repeated
/// faults go round.
fn act(c: &mut Cluster, kind: FaultKind, n: usize, parts: &Partitions) -> Result<String, Error> {
    let masters = c.masters();
    let pick = |c: &Cluster, with_replica: bool| pick(c, n, with_replica);
    let addr = |c: &Cluster, i: usize| c.node(i).addr().to_string();
    Ok(match kind {
        FaultKind::Failover => {
            let m = pick(c, true)?;
            let r = c.replicas_of(m)[0];
            c.failover(r)?;
            format!(
                "CLUSTER FAILOVER: replica {} took over from {}",
                addr(c, r),
                addr(c, m)
            )
        }
        FaultKind::Kill => {
            let m = pick(c, true)?;
            let promoted = c.kill_primary(m)?;
            c.restart_node(m)?;
            format!(
                "kill -9 of primary {}; {} promoted; {} back as a replica",
                addr(c, m),
                addr(c, promoted),
                addr(c, m)
            )
        }
        FaultKind::Storm => {
            let mut killed = Vec::new();
            for m in c.masters() {
                let v = c.node(m).cmd_str(&["CLIENT", "KILL", "TYPE", "pubsub"])?;
                killed.push(testkit::values::int(&v).unwrap_or(-1));
            }
            format!("CLIENT KILL TYPE pubsub on every primary: {killed:?} connections")
        }
        FaultKind::Reshard | FaultKind::ReshardAtomic => {
            let src = pick(c, false)?;
            let range = partition_range(c, parts, src, 3)?;
            let dst = *masters
                .iter()
                .find(|&&m| m != src)
                .ok_or_else(|| Error::Cluster("a reshard needs two masters".into()))?;
            if kind == FaultKind::Reshard {
                c.migrate_slots(range.clone(), src, dst)?;
            } else {
                c.migrate_slots_atomic(range.clone(), src, dst)?;
            }
            format!(
                "slots {range:?} {} -> {} ({})",
                addr(c, src),
                addr(c, dst),
                if kind == FaultKind::Reshard {
                    "SETSLOT + MIGRATE"
                } else {
                    "CLUSTER MIGRATESLOTS"
                }
            )
        }
        FaultKind::AddNode => {
            let src = pick(c, false)?;
            let new = c.add_master()?;
            c.wait_ok()?;
            let range = partition_range(c, parts, src, 3)?;
            c.migrate_slots(range.clone(), src, new)?;
            format!(
                "new primary {} took slots {range:?} from {}",
                addr(c, new),
                addr(c, src)
            )
        }
    })
}

/// The `n`th master (round robin), one with a replica if asked.
fn pick(c: &Cluster, n: usize, with_replica: bool) -> Result<usize, Error> {
    let able: Vec<usize> = c
        .masters()
        .into_iter()
        .filter(|&m| !with_replica || !c.replicas_of(m).is_empty())
        .collect();
    able.get(n % able.len().max(1))
        .copied()
        .ok_or_else(|| Error::Cluster("no master has a replica".into()))
}

/// A range of up to `k` consecutive partition slots master `src` owns,
/// inside one of its ranges, leaving it at least one.
fn partition_range(
    c: &Cluster,
    parts: &Partitions,
    src: usize,
    k: usize,
) -> Result<SlotRange, Error> {
    let owned = c.slots_of(src);
    let mut slots: Vec<u16> = parts
        .slots()
        .iter()
        .copied()
        .filter(|s| owned.iter().any(|r| r.contains(s)))
        .collect();
    slots.sort_unstable();
    if slots.len() < 2 {
        return Err(Error::Cluster(format!(
            "master {src} owns fewer than two partitions"
        )));
    }
    let within = owned
        .iter()
        .find(|r| r.contains(&slots[0]))
        .cloned()
        .ok_or_else(|| Error::Cluster("no owned range".into()))?;
    let last = slots
        .iter()
        .take(k.min(slots.len() - 1))
        .copied()
        .take_while(|s| within.contains(s))
        .last()
        .unwrap_or(slots[0]);
    Ok(slots[0]..=last)
}

/// Waits (≤ 10 s after the operation) until delivery is back for every
/// engine holding an affected partition: its library confirmed every wanted
/// channel again (a restore since `restores_before`) and it had a message
/// published after `ok_us` on an affected partition, or it had such a
/// message on every affected partition it holds. (Fresh messages alone
/// would wait on the sparsest (engine, partition) pair's next publish.)
fn wait_back(
    fleet: &[Fleet],
    affected: &[u32],
    ok_us: u64,
    t0: Instant,
    restores_before: &[u64],
) -> Option<Duration> {
    let bound = t0.elapsed() + Duration::from_secs(10);
    loop {
        let back = fleet.iter().zip(restores_before).all(|(f, &r)| {
            let held: Vec<usize> = affected
                .iter()
                .map(|&p| p as usize)
                .filter(|&p| f.holds[p])
                .collect();
            let fresh = |p: &usize| f.node.newest[*p].load(Ordering::Relaxed) >= ok_us;
            let restored = f.ps.cluster_metrics().is_some_and(|m| m.restores > r);
            held.is_empty() || held.iter().all(fresh) || (restored && held.iter().any(fresh))
        });
        if back {
            return Some(t0.elapsed());
        }
        if t0.elapsed() > bound {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Until every handler has the gap events its library counted and the
/// fleet's subscribe commands stopped growing for 300 ms (≤ 3 s).
fn settle(fleet: &[Fleet]) {
    let start = Instant::now();
    let commands = || -> u64 {
        fleet
            .iter()
            .map(|f| f.ps.metrics().subscribe_commands)
            .sum()
    };
    let (mut last, mut still) = (commands(), Instant::now());
    while start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
        let now = commands();
        if now != last {
            (last, still) = (now, Instant::now());
        }
        let gaps_in = fleet
            .iter()
            .all(|f| f.node.gap_events.load(Ordering::Relaxed) >= f.ps.metrics().gaps);
        if gaps_in && still.elapsed() > Duration::from_millis(300) {
            return;
        }
    }
}
