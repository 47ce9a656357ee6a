//! The closing summary: messages, lag, per node what the servers count,
//! CPU per million delivered, the checks, and the `result:` line.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fleet_report::RunReport;

use crate::fleet::Instances;
use crate::node::{quantile, total};
use crate::options::{FaultKind, Mode, Options};
use crate::report::Measured;
use crate::servers::{conns, n, Conns};
use crate::target::Probe;

/// Connections per node at the end, as the servers count them.
pub struct ConnsAtEnd {
    pub per_node: BTreeMap<SocketAddr, Conns>,
    /// Node-grouped on servers the demo started: whether every primary came
    /// out with exactly one subscribe and one publish connection per
    /// instance, and no other node with any (None: not checked).
    pub exact: Option<bool>,
}

/// Reads `CLIENT LIST` of every node until the counts are what node-grouped
/// placement must give (one subscribe and one publish connection per
/// instance per primary, none elsewhere) or, in other modes, until two
/// readings 200 ms apart agree; at most 5 s.
pub fn settle_conns(o: &Options, probe: &Probe, inst: &Instances) -> ConnsAtEnd {
    let engines = inst.fleet.len();
    let publishers = inst.publishers.len();
    let check = matches!(o.mode, Mode::NodeGrouped | Mode::NamesKept) && o.local();
    let read = || -> BTreeMap<SocketAddr, (Conns, &'static str)> {
        probe
            .nodes()
            .into_iter()
            .map(|v| (v.addr, (conns(v.addr), v.role)))
            .collect()
    };
    let exact = |m: &BTreeMap<SocketAddr, (Conns, &'static str)>| {
        m.values().all(|(c, role)| {
            // Per primary: one subscribe and one publish connection per
            // engine, the same two per publisher (named apart).
            let on = usize::from(*role == "primary");
            c.sub == on * engines && c.publ == on * engines && c.publisher == on * 2 * publishers
        })
    };
    let start = Instant::now();
    let mut last = read();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = read();
        let done = if check {
            exact(&now)
        } else {
            now.values().map(|v| v.0).eq(last.values().map(|v| v.0))
        };
        last = now;
        if done || start.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    ConnsAtEnd {
        exact: check.then(|| exact(&last)),
        per_node: last.into_iter().map(|(a, (c, _))| (a, c)).collect(),
    }
}

/// Partitions any fault moved; whether a storm ran (it affects all).
fn moved(m: &Measured) -> (BTreeSet<u32>, bool) {
    let set = m
        .faults
        .iter()
        .flat_map(|d| d.moved.iter().copied())
        .collect();
    (set, m.faults.iter().any(|d| d.kind == FaultKind::Storm))
}

/// Prints the summary and checks; sets `rep.result`; returns whether every
/// check held.
pub fn print_and_check(
    o: &Options,
    inst: &Instances,
    m: &Measured,
    conns: &ConnsAtEnd,
    settled: Result<(), String>,
    rep: &mut RunReport,
) -> bool {
    let a = &m.accounting;
    let c = &a.counts;
    let t = &rep.totals;
    println!(
        "\n== summary ({} {}, {} mode, {} engines, {} publisher(s), {:.1} s of publishing)",
        o.kind,
        m.version,
        o.mode.name(),
        o.engines,
        o.publishers,
        m.publishing_secs
    );
    println!(
        "messages: {} published ({} acknowledged, {} failed, {} without an outcome), {} \
         deliveries expected; {} delivered in order, {} lost inside a signalled window, {} lost \
         silently, {} duplicated, {} reordered; {} recovered from history",
        n(a.published),
        n(a.acked),
        n(a.failed_total()),
        n(a.pending),
        n(m.expected),
        n(c.delivered),
        n(c.lost_signalled),
        n(c.lost_silent),
        n(c.duplicated),
        n(c.reordered),
        n(m.recovered),
    );
    for e in &a.examples {
        println!("  problem: {e}");
    }
    println!(
        "lag (publish → handler): p50 {}  p99 {}  p99.9 {}",
        quantile(&m.lag, 0.5),
        quantile(&m.lag, 0.99),
        quantile(&m.lag, 0.999)
    );
    println!(
        "{:<21} {:<8} {:>6} {:>6} {:>10} {:>10} {:>11} {:>10} {:>11} {:>10} {:>9}",
        "node",
        "role",
        "parts",
        "conns",
        "sub conns",
        "of engines",
        "SSUBSCRIBE",
        "SUBSCRIBE",
        "(S)PUBLISH",
        "CPU s",
        "storm/inst"
    );
    for s in &rep.nodes {
        println!(
            "{:<21} {:<8} {:>6} {:>6} {:>10} {:>10} {:>11} {:>10} {:>11} {:>10.2} {:>9}",
            s.addr,
            s.role,
            s.partitions_owned,
            s.connections,
            s.subscribe_connections,
            s.engine_subscribe_connections,
            n(s.ssubscribe_calls),
            n(s.subscribe_calls),
            n(s.publish_calls),
            s.server_cpu_s,
            s.resubscribe_calls
                .filter(|_| s.role == "primary")
                .map_or("-".into(), |r| format!(
                    "{:.1}",
                    r as f64 / o.engines as f64
                )),
        );
    }
    if let Some(calls) = storm_per_instance(m) {
        let held = held_per_instance(inst, m);
        println!(
            "storm: {calls:.1} SSUBSCRIBE/SUBSCRIBE per instance per primary during recovery; \
             one per partition an instance holds there would be {held:.1}"
        );
    }
    if o.mode.is_cluster() {
        let primaries = rep
            .nodes
            .iter()
            .filter(|s| s.role == "primary")
            .count()
            .max(1);
        println!(
            "subscribe connections per primary (CLIENT LIST): {} engines + {} publisher \
             instance(s), each instance one per primary in node-grouped mode (a publisher's \
             carries only its failover service channel); one connection per partition would need \
             ≈ {} per primary",
            o.engines,
            o.publishers,
            n((o.engines * o.partitions as usize / primaries) as u64)
        );
    }
    println!(
        "CPU per 1M delivered: server {:.2} s (all nodes, INFO CPU), client {:.2} s (the \
         library's threads; the demo's own publishing loop and accounting took {:.2} s \
         more in all){}",
        t.server_cpu_s_per_million,
        t.client_cpu_s_per_million,
        t.demo_cpu_s,
        if o.local() {
            "; servers and fleet share this machine's cores"
        } else {
            ""
        }
    );
    if let Some(k) = &rep.knee {
        println!(
            "knee: {} at {}/s (lag p99 {:.1} ms)",
            k.reason,
            n(k.rate as u64),
            k.lag_p99_us as f64 / 1000.0
        );
    }

    let mut failed = Vec::new();
    for (e, f) in inst.fleet.iter().enumerate() {
        if f.node.delivered.load(Ordering::Relaxed) == 0 {
            failed.push(format!("engine {e} received nothing"));
            break;
        }
    }
    let gaps_before = gaps_before_faults(m);
    if gaps_before > 0 {
        failed.push(format!("{gaps_before} gap events before any fault"));
    }
    let unenveloped = total(&inst.fleet, |x| &x.unenveloped);
    if unenveloped > 0 {
        failed.push(format!("{unenveloped} messages without the envelope"));
    }
    if conns.exact == Some(false) {
        failed.push(
            "connections per node are not one subscribe and one publish per instance per primary"
                .into(),
        );
    }
    for d in &m.faults {
        if d.back_after.is_none() {
            failed.push(format!("delivery not back after --{}", d.kind.name()));
        }
        if (d.kind == FaultKind::Storm || !d.moved.is_empty()) && d.gap_events == 0 {
            failed.push(format!("--{} gave no gap events", d.kind.name()));
        }
    }
    if let Err(why) = settled {
        // Past a ramp's knee, worker queues may drop the last round too:
        // its messages never come, and each drop was signalled (the
        // accounting says none was lost silently). Only in a run with no
        // faults, whose only signals are those drops.
        let knee = rep.knee.as_ref().is_some_and(|k| k.reason != "not reached");
        let dropped_at_knee = knee && m.faults.is_empty() && m.dropped > 0;
        if dropped_at_knee && a.is_clean() && c.lost_signalled > 0 {
            println!(
                "note: the last round did not settle ({why}): what it misses was dropped past \
                 the knee and signalled"
            );
        } else {
            failed.push(format!("the last round did not settle: {why}"));
        }
    }
    if !a.is_clean() {
        failed.push(
            "messages lost silently, duplicated, reordered, corrupt, unwanted or split".into(),
        );
    }
    if a.pending > 0 {
        failed.push(format!("{} publishes without an outcome", a.pending));
    }
    if c.delivered + c.lost_signalled != m.expected {
        failed.push(format!(
            "delivered {} + lost signalled {} is not the {} deliveries the publishes owe",
            c.delivered, c.lost_signalled, m.expected
        ));
    }
    let outside = lost_outside_moved(m);
    if outside > 0 && m.dropped == 0 {
        failed.push(format!(
            "{outside} signalled losses outside the moved partitions"
        ));
    }
    for f in &failed {
        println!("check failed: {f}");
    }
    rep.result = if failed.is_empty() {
        "ok".into()
    } else {
        failed.join("; ")
    };
    failed.is_empty()
}

/// Resubscribe commands per instance per primary during the storms'
/// recoveries (mean over the primaries).
fn storm_per_instance(m: &Measured) -> Option<f64> {
    if !m.faults.iter().any(|d| d.resubscribes.is_some()) {
        return None;
    }
    let engines = m.engines.max(1) as f64;
    let per: Vec<f64> = m
        .nodes
        .iter()
        .filter(|(v, _, _)| v.role == "primary")
        .filter_map(|(v, _, _)| {
            let calls: Option<u64> = m
                .faults
                .iter()
                .filter_map(|d| d.resubscribes.as_ref())
                .map(|r| r.get(&v.addr).copied())
                .sum();
            calls.map(|c| c as f64 / engines)
        })
        .collect();
    (!per.is_empty()).then(|| per.iter().sum::<f64>() / per.len() as f64)
}

/// Partitions an instance holds per primary (mean over both).
fn held_per_instance(inst: &Instances, m: &Measured) -> f64 {
    let parts = crate::options::partitions(m.partitions).expect("checked by --partitions");
    let primaries: Vec<_> = m.nodes.iter().filter(|n| n.0.role == "primary").collect();
    let mut held = 0usize;
    for (v, _, _) in &primaries {
        for f in &inst.fleet {
            held += (0..parts.count())
                .filter(|&p| f.holds[p as usize])
                .filter(|&p| {
                    v.slots
                        .iter()
                        .any(|&(a, b)| (a..=b).contains(&parts.slot(p)))
                })
                .count();
        }
    }
    held as f64 / (inst.fleet.len().max(1) * primaries.len().max(1)) as f64
}

fn gaps_before_faults(m: &Measured) -> u64 {
    m.faults.first().map_or(m.gap_events, |d| d.gaps_at_start)
}

/// Signalled losses in partitions no fault moved (none counted after a
/// storm, which touches every partition).
fn lost_outside_moved(m: &Measured) -> u64 {
    let (moved, storm) = moved(m);
    if storm {
        return 0;
    }
    let parts = crate::options::partitions(m.partitions).expect("checked by --partitions");
    m.accounting
        .incidents
        .iter()
        .filter(|i| i.fate == testkit::accounting::Fate::Signalled)
        .filter(|i| !moved.contains(&parts.partition_of(format!("room:{}", i.channel).as_bytes())))
        .map(|i| i.lost)
        .sum()
}

/// The `result:` line: `key=value` pairs the tests read.
pub fn result_line(o: &Options, m: &Measured, conns: &ConnsAtEnd, rep: &RunReport) -> String {
    let a = &m.accounting;
    let c = &a.counts;
    let primaries: Vec<&str> = rep
        .nodes
        .iter()
        .filter(|s| s.role != "replica")
        .map(|s| s.addr.as_str())
        .collect();
    let range = |f: &dyn Fn(&Conns) -> usize| {
        let v: Vec<usize> = conns
            .per_node
            .iter()
            .filter(|(a, _)| primaries.contains(&a.to_string().as_str()))
            .map(|(_, c)| f(c))
            .collect();
        format!(
            "{}..{}",
            v.iter().min().unwrap_or(&0),
            v.iter().max().unwrap_or(&0)
        )
    };
    let stale: usize = conns
        .per_node
        .iter()
        .filter(|(a, _)| !primaries.contains(&a.to_string().as_str()))
        .map(|(_, c)| c.sub + c.publ + c.publisher)
        .sum();
    let (moved, _) = moved(m);
    let restored = m
        .faults
        .iter()
        .map(|d| d.back_after.map(|b| b.as_millis().to_string()))
        .collect::<Option<Vec<_>>>()
        .map_or("none".into(), |v| {
            v.iter().max().cloned().unwrap_or("0".into())
        });
    format!(
        "mode={} server={} published={} acked={} publish_failed={} pending={} expected={} \
         received={} delivered={} lost_signalled={} lost_silent={} duplicated={} reordered={} \
         unexpected={} unwanted={} split={} lost_outside_moved={} signals={} dropped={} \
         gaps_before_faults={} faults={} moved_partitions={} gap_events={} restored_ms={} \
         sub_conns_per_master={} pub_conns_per_master={} publisher_conns_per_master={} \
         subscribed_conns_per_master={} stale_conns={stale} checks={}",
        o.mode.name(),
        o.kind,
        a.published,
        a.acked,
        a.failed_total(),
        a.pending,
        m.expected,
        m.received,
        c.delivered,
        c.lost_signalled,
        c.lost_silent,
        c.duplicated,
        c.reordered,
        c.unexpected,
        a.unwanted,
        a.split,
        lost_outside_moved(m),
        c.signals,
        m.dropped,
        gaps_before_faults(m),
        m.faults.len(),
        moved.len(),
        m.faults.iter().map(|d| d.gap_events).sum::<u64>(),
        restored,
        range(&|c| c.sub),
        range(&|c| c.publ),
        range(&|c| c.publisher),
        range(&|c| c.subscribed),
        if rep.result == "ok" { "ok" } else { "failed" },
    )
}
