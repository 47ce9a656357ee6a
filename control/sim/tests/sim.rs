//! The simulator over many seeded fault schedules (see `control_sim`).
//!
//! - `CONTROL_SIM_SEED=<n>` reruns one seed (the sweep then stays out of
//!   the way); add `CONTROL_SIM_TRACE=1` to print every event and command.
//! - `CONTROL_SIM_RUNS=<n>` sets how many schedules the sweep runs
//!   (10,000 by default; the replica sweep runs a fifth of it).
//! - `CONTROL_SIM_REPLICA_SEED=<n>` reruns one replica schedule.

use std::time::Instant;

use control_sim::{run, run_seed, Outcome, Schedule};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn one_seed_reruns_from_the_environment() {
    let seed = env("CONTROL_SIM_SEED").unwrap_or(0);
    let o = run_seed(seed);
    eprintln!("seed {seed}: {o:?}");
    // Deterministic: the same seed, the same run.
    assert_eq!(run_seed(seed), o);
}

#[test]
fn ten_thousand_seeded_schedules_keep_every_promise() {
    if env("CONTROL_SIM_SEED").is_some() {
        return;
    }
    let started = Instant::now();
    let mut total = Outcome::default();
    let n = env("CONTROL_SIM_RUNS").unwrap_or(10_000);
    for seed in 0..n {
        let o = run_seed(seed);
        total.steps += o.steps;
        total.commands += o.commands;
        total.gaps += o.gaps;
        total.subscribes += o.subscribes;
        total.probes += o.probes;
        total.redirects += o.redirects;
        total.activity += o.activity;
        total.publish += o.publish;
    }
    eprintln!("{n} schedules in {:?}: {total:?}", started.elapsed());
    // The sweep exercised what it is for: resubscribes after losses,
    // redirects, probes.
    assert!(total.gaps > n, "{total:?}");
    assert!(total.redirects > n / 10, "{total:?}");
    assert!(total.probes > n / 100, "{total:?}");
    assert!(total.activity > n / 10, "{total:?}");
    publish_bounds(n, &total.publish);
    // Every primary has subscribe connections here: one that dies is
    // noticed, and no slot published to stays routed to it.
    assert_eq!(total.publish.dead_routes, 0, "{total:?}");
}

/// The publish side of a sweep of `n` schedules exercised what it is for
/// (publishes, redirects, gates and their markers), and its counted
/// exceptions stay rare: publishes reordered because a gate timed out,
/// and publishes written while an earlier one was on the wire and then
/// refused (see `control/sim/src/pubside/`).
fn publish_bounds(n: u64, p: &control_sim::PublishTotals) {
    assert!(p.published > n, "{p:?}");
    assert!(p.redirects > n / 10, "{p:?}");
    assert!(p.gates > n / 10 && p.markers > 0 && p.held > 0, "{p:?}");
    // Gates time out where the world allows nothing else (a slot with no
    // owner for up to 1.5 s, a stale map naming a dead node): counted.
    assert!(p.gate_timeouts > 0 && p.timeout_reorders < n / 5, "{p:?}");
    assert!(p.inflight_reorders <= n / 50, "{p:?}");
}

#[test]
fn replica_schedules_keep_every_promise() {
    if let Some(seed) = env("CONTROL_SIM_REPLICA_SEED") {
        let s = Schedule::random_replicas(seed);
        eprintln!("{s:?}");
        run(&s);
        return;
    }
    if env("CONTROL_SIM_SEED").is_some() {
        return;
    }
    let started = Instant::now();
    let mut total = Outcome::default();
    let n = env("CONTROL_SIM_RUNS").map_or(2_000, |r| r / 5);
    for seed in 0..n {
        let o = run(&Schedule::random_replicas(seed));
        total.gaps += o.gaps;
        total.redirects += o.redirects;
        total.subscribes += o.subscribes;
        total.publish += o.publish;
    }
    eprintln!(
        "{n} replica schedules in {:?}: {total:?}",
        started.elapsed()
    );
    assert!(total.gaps > n, "{total:?}");
    // Not asserted: `dead_routes` (22 of these 2,000 schedules). Subscribed
    // on replicas with Redis's pushes, a killed primary whose replica took
    // over drops no subscribe connection, and the publish core asks for no
    // map when its connection to the slot's owner is down: publishes to
    // its slots are held and expire until the 30 s poll.
    publish_bounds(n, &total.publish);
}

#[test]
fn both_resubscribe_splits_keep_every_promise() {
    if env("CONTROL_SIM_SEED").is_some() {
        return;
    }
    for seed in 0..300 {
        for split_channels in [false, true] {
            let mut s = Schedule::random(seed);
            s.workers = 3;
            s.split_channels = split_channels;
            let o = run(&s);
            assert!(o.subscribes > 0, "seed {seed}: {o:?}");
        }
    }
}

#[test]
fn classic_mode_keeps_every_subscription_promise() {
    if env("CONTROL_SIM_SEED").is_some() {
        return;
    }
    let mut total = Outcome::default();
    for seed in 0..500 {
        let mut s = Schedule::random(seed);
        s.classic = true;
        let o = run(&s);
        total.gaps += o.gaps;
        total.subscribes += o.subscribes;
    }
    // Connections dropped and nodes killed or removed break lanes.
    assert!(total.gaps > 100, "{total:?}");
}

/// Seeds past the sweeps that once broke a promise, in both the default
/// and the replica schedules (the publish side's too, in every run).
#[test]
fn seeds_that_once_failed_keep_every_promise() {
    // 17,803 and 59,068: a MOVED for a publish whose slot was parked for
    // an earlier one sent it ahead of that one.
    const SEEDS: &[u64] = &[17_803, 29_075, 38_646, 59_068];
    for &seed in SEEDS {
        run(&Schedule::random(seed));
        run(&Schedule::random_replicas(seed));
    }
}

#[test]
fn ten_thousand_route_changes_keep_publish_order() {
    if let Some(seed) = env("CONTROL_SIM_GATE_SEED") {
        eprintln!("{:?}", control_sim::run_gate(seed));
        return;
    }
    let started = Instant::now();
    let n = env("CONTROL_SIM_RUNS").unwrap_or(10_000);
    let (mut held, mut markers, mut timed_out, mut lost, mut delivered) = (0, 0, 0, 0, 0);
    for seed in 0..n {
        let r = control_sim::run_gate(seed);
        held += u64::from(r.held);
        markers += u64::from(r.markers);
        timed_out += u64::from(r.timed_out);
        lost += u64::from(r.lost);
        delivered += u64::from(r.delivered);
    }
    eprintln!(
        "{n} route changes in {:?}: {delivered} delivered, {held} held, {markers} markers, \
         {lost} lost, {timed_out} timed out",
        started.elapsed()
    );
    // The sweep exercised what it is for: publishes held behind gates,
    // markers, losses with the old node, and (rarely) the timeout.
    assert!(
        held > n && markers > n / 4 && lost > 0,
        "{held} {markers} {lost}"
    );
    assert!(
        timed_out > 0 && timed_out < n / 5,
        "{timed_out} of {n} timed out"
    );
}

#[test]
fn ten_thousand_publish_schedules_keep_order_and_bounds() {
    if let Some(seed) = env("CONTROL_SIM_PUBLISH_SEED") {
        eprintln!("{:?}", control_sim::run_publish(seed));
        return;
    }
    let started = Instant::now();
    let n = env("CONTROL_SIM_RUNS").unwrap_or(10_000);
    let mut total = control_sim::PublishRun::default();
    for seed in 0..n {
        let r = control_sim::run_publish(seed);
        total.publishes += r.publishes;
        total.taken += r.taken;
        total.failed += r.failed;
        total.held += r.held;
        total.refusals += r.refusals;
        total.probes += r.probes;
        total.inflight_reorders += r.inflight_reorders;
    }
    eprintln!(
        "{n} publish schedules in {:?}: {total:?}",
        started.elapsed()
    );
    // The sweep exercised what it is for: held publishes, refusals,
    // probes, failures.
    let n = n as u32;
    assert!(
        total.held > n && total.refusals > n && total.probes > n / 2,
        "{total:?}"
    );
    assert!(
        total.failed > 0 && total.taken > total.publishes / 2,
        "{total:?}"
    );
    // Publishes written while an earlier one was on the wire and then
    // refused can be taken before it (property 1's exception): rare,
    // because a slot released after its owner was unreachable or refusing
    // starts with a probe, also after a probe failed for good and after a
    // release waited for an owner that was down (11 in the 10,000 default
    // schedules, 1,346 in 1,000,000; 92 without those two probes, 1,980
    // with no probe at all).
    assert!(total.inflight_reorders <= n / 500, "{total:?}");
}

#[test]
fn ten_thousand_route_tables_move_exactly_the_slots_that_moved() {
    if let Some(seed) = env("CONTROL_SIM_ROUTES_SEED") {
        eprintln!("{:?}", control_sim::run_routes(seed));
        return;
    }
    let started = Instant::now();
    let n = env("CONTROL_SIM_RUNS").unwrap_or(10_000);
    let mut total = control_sim::RoutesRun::default();
    for seed in 0..n {
        let r = control_sim::run_routes(seed);
        total.maps += r.maps;
        total.moveds += r.moveds;
        total.moves += r.moves;
        total.slots_moved += r.slots_moved;
        total.to_none += r.to_none;
    }
    eprintln!("{n} route tables in {:?}: {total:?}", started.elapsed());
    // The sweep exercised what it is for: moves by maps and by `MOVED`s,
    // some to no route, several slots behind one gate.
    let n = n as u32;
    assert!(
        total.moves > n && total.slots_moved > total.moves && total.to_none > 0,
        "{total:?}"
    );
}
