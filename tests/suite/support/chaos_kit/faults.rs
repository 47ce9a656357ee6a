//! Injecting one fault into the rig. Each returns once the cluster is ok
//! again (every helper ends with `Cluster::wait_ok`), with a description
//! of what it did.

use std::time::{Duration, Instant};

use testkit::{Error, SlotRange};

use crate::support::chaos_kit::rig::{Rig, PROBE_INTERVAL};
use crate::support::chaos_kit::{FaultKind, Rng};

/// The most masters the schedule grows the cluster to.
const MAX_MASTERS: usize = 5;

/// How long a black hole lasts at least: past the probe interval plus the
/// engine's 5 s request timeout, so only the probe can explain recovery.
const BLACK_HOLE_MIN: Duration = Duration::from_secs(8);

/// The bound on every subscriber noticing a black hole (probe interval +
/// request timeout + margin).
const BLACK_HOLE_DETECT: Duration = Duration::from_secs(15);

/// What an injected fault did.
#[derive(Clone, Debug)]
pub struct Injected {
    /// What was done (`AddPrimary` and `RemovePrimary` swap when the
    /// cluster cannot take the drawn one).
    pub kind: FaultKind,
    pub detail: String,
}

/// Injects `kind`, drawing its details from `rng`.
///
/// # Errors
///
/// What a cluster helper returned, or [`Error::Cluster`] for a fault the
/// engine did not notice (a black hole no probe detected).
pub fn inject(rig: &mut Rig, kind: FaultKind, rng: &mut Rng) -> Result<Injected, Error> {
    let kind = match kind {
        FaultKind::AddPrimary if rig.cluster.masters().len() >= MAX_MASTERS => {
            FaultKind::RemovePrimary
        }
        FaultKind::RemovePrimary if rig.added.is_empty() => FaultKind::AddPrimary,
        other => other,
    };
    let detail = match kind {
        FaultKind::MigrateLegacy => migrate(rig, rng, false)?,
        FaultKind::MigrateAtomic => migrate(rig, rng, true)?,
        FaultKind::Failover => {
            let m = pick_master_with_replica(rig, rng)?;
            let r = rig.cluster.replicas_of(m)[0];
            rig.cluster.failover(r)?;
            format!("replica {r} takes over from {m}")
        }
        FaultKind::KillPrimary => {
            let m = pick_master_with_replica(rig, rng)?;
            let promoted = rig.cluster.kill_primary(m)?;
            rig.cluster.restart_node(m)?;
            rig.announce(m)?;
            rig.cluster.wait_ok()?;
            rig.wait_announced(m)?;
            rig.check_announced()?;
            format!("node {m} killed, {promoted} promoted, {m} back as a replica")
        }
        FaultKind::ClientKillPubsub => {
            let mut killed = Vec::new();
            for m in rig.cluster.masters() {
                let n = rig
                    .cluster
                    .node(m)
                    .cmd_str(&["CLIENT", "KILL", "TYPE", "pubsub"])?;
                killed.push(testkit::values::int(&n).unwrap_or(-1));
            }
            format!("connections killed per primary: {killed:?}")
        }
        FaultKind::AddPrimary => {
            let n = rig.cluster.add_master()?;
            rig.announce(n)?;
            rig.cluster.wait_ok()?;
            rig.wait_announced(n)?;
            rig.check_announced()?;
            rig.added.push(n);
            let masters: Vec<usize> = rig
                .cluster
                .masters()
                .into_iter()
                .filter(|&m| m != n)
                .collect();
            let (src, range) = pick_move(rig, rng, &masters, 2)?;
            rig.cluster.migrate_slots(range.clone(), src, n)?;
            rig.check_announced()?;
            format!("node {n} added, {range:?} moved to it from {src}")
        }
        FaultKind::RemovePrimary => {
            let n = rig.added.remove(rng.index(rig.added.len()));
            let mut moved = Vec::new();
            for range in rig.cluster.slots_of(n) {
                let others: Vec<usize> = rig
                    .cluster
                    .masters()
                    .into_iter()
                    .filter(|&m| m != n)
                    .collect();
                let dst = rng.pick(&others).expect("another master");
                rig.cluster.migrate_slots(range.clone(), n, dst)?;
                moved.push(format!("{range:?}->{dst}"));
            }
            rig.cluster.remove_master(n)?;
            rig.proxies.remove(&n);
            format!(
                "node {n}'s slots moved ({}), node removed",
                moved.join(", ")
            )
        }
        FaultKind::BlackHole => black_hole(rig, rng)?,
    };
    Ok(Injected { kind, detail })
}

/// Moves one to three partitions' slots between two masters.
fn migrate(rig: &mut Rig, rng: &mut Rng, atomic: bool) -> Result<String, Error> {
    let masters = rig.cluster.masters();
    let (src, range) = pick_move(rig, rng, &masters, if atomic { 3 } else { 2 })?;
    let others: Vec<usize> = masters.into_iter().filter(|&m| m != src).collect();
    let dst = rng.pick(&others).expect("another master");
    if atomic {
        rig.cluster.migrate_slots_atomic(range.clone(), src, dst)?;
    } else {
        rig.cluster.migrate_slots(range.clone(), src, dst)?;
    }
    let parts = partition_slots(rig, std::slice::from_ref(&range)).len();
    Ok(format!(
        "{range:?} ({parts} partition slots) {src} -> {dst}"
    ))
}

/// The partitions' slots inside `ranges`, sorted; with partitions off,
/// the slots holding channels.
fn partition_slots(rig: &Rig, ranges: &[SlotRange]) -> Vec<u16> {
    let parts = rig.subs[0].ps.partitions().expect("a cluster");
    let all: Vec<u16> = match parts.is_raw() {
        true => rig
            .ledger
            .names()
            .iter()
            .map(|n| shardcore::key_slot(n))
            .collect(),
        false => parts.slots().to_vec(),
    };
    let mut slots: Vec<u16> = all
        .into_iter()
        .filter(|s| ranges.iter().any(|r| r.contains(s)))
        .collect();
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// A master among `candidates` and a range of up to `max_parts` of its
/// partitions' slots (contiguous, owned, leaving it at least one).
fn pick_move(
    rig: &Rig,
    rng: &mut Rng,
    candidates: &[usize],
    max_parts: u64,
) -> Result<(usize, SlotRange), Error> {
    let able: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&m| partition_slots(rig, &rig.cluster.slots_of(m)).len() >= 2)
        .collect();
    if able.is_empty() {
        return Err(Error::Cluster(format!(
            "no master among {candidates:?} owns two partitions"
        )));
    }
    let src = rng.pick(&able).expect("a master with slots");
    let owned = rig.cluster.slots_of(src);
    let slots = partition_slots(rig, &owned);
    let k = (rng.range(1, max_parts) as usize).min(slots.len() - 1);
    let i = rng.index(slots.len() - k + 1);
    let within = owned
        .iter()
        .find(|r| r.contains(&slots[i]))
        .cloned()
        .expect("an owned range holds the slot");
    let last = slots[i..i + k]
        .iter()
        .copied()
        .take_while(|s| within.contains(s))
        .last()
        .unwrap_or(slots[i]);
    Ok((src, slots[i]..=last))
}

fn pick_master_with_replica(rig: &Rig, rng: &mut Rng) -> Result<usize, Error> {
    let with: Vec<usize> = rig
        .cluster
        .masters()
        .into_iter()
        .filter(|&m| !rig.cluster.replicas_of(m).is_empty())
        .collect();
    if with.is_empty() {
        return Err(Error::Cluster("no master has a replica".into()));
    }
    Ok(rng.pick(&with).expect("a master with a replica"))
}

/// Black-holes one primary's proxy (clients only: the cluster bus is
/// direct, so no failover) until every subscriber instance has restarted
/// a connection on an unanswered probe, and at least [`BLACK_HOLE_MIN`];
/// then heals it (closing the connections that lost bytes).
fn black_hole(rig: &mut Rig, rng: &mut Rng) -> Result<String, Error> {
    let m = rng.pick(&rig.cluster.masters()).expect("a master");
    let before = rig.probe_restarts();
    let proxy = rig.proxies.get(&m).expect("every node has a proxy");
    proxy.blackhole(true);
    let start = Instant::now();
    let detected = testkit::wait_for("every subscriber to notice", BLACK_HOLE_DETECT, || {
        let now = rig.probe_restarts();
        Ok(now.iter().zip(&before).all(|(a, b)| a > b).then_some(()))
    });
    let noticed = start.elapsed();
    if let Some(rest) = BLACK_HOLE_MIN.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    let held = start.elapsed();
    let proxy = rig.proxies.get(&m).expect("every node has a proxy");
    let closed = proxy.heal();
    detected.map_err(|e| {
        Error::Cluster(format!(
            "black hole of node {m}: not every subscriber noticed within \
             {BLACK_HOLE_DETECT:?} (probe interval {PROBE_INTERVAL:?}): {e}; \
             probe restarts {before:?} -> {:?}",
            rig.probe_restarts()
        ))
    })?;
    rig.cluster.wait_ok()?;
    Ok(format!(
        "node {m} for {:.1} s; every subscriber noticed after {:.1} s; {closed} connections closed",
        held.as_secs_f64(),
        noticed.as_secs_f64()
    ))
}
