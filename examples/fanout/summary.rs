//! The demo's closing summary: messages, lag, connections and commands per
//! node as the servers count them, CPU per million delivered, a sizing
//! estimate, the checks, and the `result:` line (what the smoke test
//! reads: the accounting of every message, and exact connection counts).

use std::collections::BTreeSet;

use shardcore::Partitions;
use shardsub::PubSub;
use testkit::Cluster;

use testkit::accounting::{Fate, Report};

use crate::failover::FailoverReport;
use crate::node::{quantile, Fleet};
use crate::options::Options;
use crate::servers::{n, ssubscribe_calls, Conns};

/// What the run measured, for the summary.
pub struct Measured {
    pub version: String,
    pub masters_at_start: Vec<usize>,
    pub subscriptions: usize,
    /// Deliveries the acknowledged publishes owe (the publisher's count).
    pub expected: u64,
    /// Every (engine, channel) stream classified.
    pub accounting: Report,
    /// Whether every publish got its outcome and every engine its last
    /// message of every channel (or why not).
    pub settled: Result<(), String>,
    /// Messages the handlers got, in all.
    pub received: u64,
    /// Messages the library dropped (queue full, shutdown).
    pub dropped: u64,
    pub unenveloped: u64,
    pub publishing_secs: f64,
    pub lag: Vec<u64>,
    /// Server CPU seconds per node index over the publishing window.
    pub server_cpu: Vec<f64>,
    /// This process's CPU seconds over the same window.
    pub client_cpu: f64,
    /// `SSUBSCRIBE` calls per node before and after the initial subscribe.
    pub ss_start: Vec<u64>,
    pub ss_subscribed: Vec<u64>,
    pub failover: FailoverReport,
    pub gaps_before_failover: u64,
    /// Connections per node before every instance refreshed its map, after
    /// it, and whether they then came out exact.
    pub conns_before: Conns,
    pub conns: Conns,
    pub conns_settled: bool,
}

/// Prints the summary; returns whether every check held.
pub fn print(
    o: &Options,
    cluster: &Cluster,
    fleet: &[Fleet],
    publisher: &PubSub,
    parts: &Partitions,
    names: &[Vec<u8>],
    m: &Measured,
) -> bool {
    let kind = o.kind;
    let a = &m.accounting;
    let c = &a.counts;
    let failed = a.failed_total();
    println!(
        "\n== summary ({kind} {}, {} masters, {} engines, {:.1} s of publishing)",
        m.version, o.masters, o.engines, m.publishing_secs
    );
    // Signalled losses are expected only where the failover moved
    // partitions (or where a full queue said it dropped).
    let moved: BTreeSet<u32> = m.failover.moved_parts.iter().copied().collect();
    let lost_outside_moved: u64 = a
        .incidents
        .iter()
        .filter(|i| i.fate == Fate::Signalled)
        .filter(|i| !moved.contains(&parts.partition_of(&names[i.channel])))
        .map(|i| i.lost)
        .sum();
    println!(
        "messages: {} published ({} acknowledged, {} failed, {} without an outcome), {} \
         deliveries expected; {} received by the handlers",
        n(a.published),
        n(a.acked),
        n(failed),
        n(a.pending),
        n(m.expected),
        n(m.received),
    );
    println!(
        "accounting (every expected message of every engine and channel): {} delivered in \
         order, {} lost inside a signalled window ({}), {} lost silently, {} duplicated, {} \
         reordered, {} unexpected, {} unwanted, {} split over threads; {} gap/drop signals",
        n(c.delivered),
        n(c.lost_signalled),
        if o.failover {
            "around the failover: their channels were named by gap events"
        } else {
            "named by gap or drop events"
        },
        n(c.lost_silent),
        n(c.duplicated),
        n(c.reordered),
        n(c.unexpected),
        n(a.unwanted),
        n(a.split),
        n(c.signals),
    );
    for (name, t) in &a.taps {
        println!(
            "  {name}: {} delivered, {} lost signalled, {} lost silently, {} duplicated, {} \
             reordered",
            n(t.delivered),
            n(t.lost_signalled),
            n(t.lost_silent),
            n(t.duplicated),
            n(t.reordered)
        );
    }
    for e in &a.examples {
        println!("  problem: {e}");
    }
    println!(
        "lag (publish → handler): p50 {}  p99 {}  p99.9 {}",
        quantile(&m.lag, 0.5),
        quantile(&m.lag, 0.99),
        quantile(&m.lag, 0.999)
    );

    // Connections and commands per node, as the servers count them (after
    // every instance refreshed its map). The publisher instance opens
    // (idle) subscribe connections too, one group per primary it knows.
    let masters_now = cluster.masters();
    let engine_conns = o.engines * o.multiplier;
    let want_sub = engine_conns + o.multiplier;
    println!(
        "{:<17} {:<8} {:>9} {:>9} {:>11} {:>12} {:>11} {:>8}",
        "node",
        "role",
        "sub conns",
        "pub conns",
        "per-part.*",
        "SSUBSCRIBE",
        "server CPU",
        "channels"
    );
    let conns_ok = m.conns_settled;
    let mut sub_range = (usize::MAX, 0);
    let mut pub_range = (usize::MAX, 0);
    let mut stale = Vec::new();
    let mut stale_conns = 0;
    let (mut grouped, mut per_partition_total) = (0, 0);
    for i in cluster.live() {
        let master = masters_now.contains(&i);
        let (subs, pubs) = (m.conns.sub[i], m.conns.publ[i]);
        let (subs_before, pubs_before) = (m.conns_before.sub[i], m.conns_before.publ[i]);
        // A client with one connection per partition opens, per engine, one
        // for every partition it holds on this node.
        let owned: BTreeSet<u32> = (0..parts.count())
            .filter(|&p| cluster.owner_of_slot(parts.slot(p)) == Some(i))
            .collect();
        let (mut per_partition, mut channels) = (0, 0u64);
        for f in fleet {
            let held = owned.iter().filter(|&&p| f.holds[p as usize]).count();
            per_partition += held;
            channels += f
                .channels
                .iter()
                .filter(|&&c| owned.contains(&parts.partition_of(&names[c])))
                .count() as u64;
        }
        if master {
            sub_range = (sub_range.0.min(subs), sub_range.1.max(subs));
            pub_range = (pub_range.0.min(pubs), pub_range.1.max(pubs));
            grouped += subs;
            per_partition_total += per_partition;
        } else {
            stale_conns += subs + pubs;
            if subs_before + pubs_before > 0 {
                stale.push(format!(
                    "{} ({subs_before} sub, {pubs_before} pub)",
                    cluster.node(i).addr()
                ));
            }
        }
        let total = ssubscribe_calls(cluster, i);
        let initial = m.ss_subscribed[i].saturating_sub(m.ss_start[i]);
        let dash = |v: String| if master { v } else { "-".into() };
        println!(
            "{:<17} {:<8} {:>9} {:>9} {:>11} {:>12} {:>9.2} s {:>8}",
            cluster.node(i).addr().to_string(),
            if master { "master" } else { "replica" },
            subs,
            pubs,
            dash(per_partition.to_string()),
            format!("{initial}+{}", total.saturating_sub(m.ss_subscribed[i])),
            m.server_cpu[i],
            dash(n(channels)),
        );
    }
    println!(
        "subscribe connections per master: {} engines × multiplier {} = {engine_conns}, \
         +{} for the publisher instance's idle ones = {want_sub}{}; *one connection per \
         partition would need {} across the cluster instead of {}",
        o.engines,
        o.multiplier,
        o.multiplier,
        if conns_ok {
            ""
        } else {
            " — NOT what the servers show"
        },
        n(per_partition_total as u64),
        n(grouped as u64),
    );
    if !stale.is_empty() {
        println!(
            "note: before the refresh, demoted node(s) still held shardsub connections: {}. The \
             publisher instance subscribes nothing, so no sunsubscribe reaches it, and its \
             publishes there drew {} MOVED (a replica takes SPUBLISH and passes it on within its \
             shard): it would rewire at its next topology poll; after refresh() {stale_conns} \
             remain",
            stale.join(", "),
            publisher.cluster_metrics().unwrap().redirects.moved,
        );
    }
    println!(
        "SSUBSCRIBE: {} subscriptions took {} commands at start (each carries channels of one \
         partition, ≤ 512; one per partition per engine would be {}){}",
        n(m.subscriptions as u64),
        n(m.ss_subscribed
            .iter()
            .sum::<u64>()
            .saturating_sub(m.ss_start.iter().sum())),
        n(fleet
            .iter()
            .map(|f| f.holds.iter().filter(|&&h| h).count() as u64)
            .sum()),
        if o.failover {
            format!(
                "; {} on the new master after the failover",
                m.failover.resubscribes
            )
        } else {
            String::new()
        },
    );

    // CPU per million delivered, and the sizing estimate.
    let per_m = |cpu: f64| cpu / (m.received.max(1) as f64 / 1e6);
    let was_master: BTreeSet<usize> = m
        .masters_at_start
        .iter()
        .chain(&masters_now)
        .copied()
        .collect();
    let server_masters: f64 = was_master.iter().map(|&i| m.server_cpu[i]).sum();
    let server_all: f64 = m.server_cpu.iter().sum();
    println!(
        "CPU per 1M delivered: server {:.2} s on the masters ({:.2} s with the replicas, INFO CPU); \
         client {:.2} s (this process: {} engines + the publisher, getrusage)",
        per_m(server_masters),
        per_m(server_all),
        per_m(m.client_cpu),
        o.engines,
    );
    if m.received < 100_000 || server_masters <= 0.0 {
        println!("sizing: too few messages delivered (< 100,000) for an estimate");
    } else {
        let per_core = m.received as f64 / server_masters;
        let plan = (o.target as f64 / (per_core * 0.7)).ceil().max(1.0);
        println!(
            "sizing (estimate from a shared 2-core machine, servers and clients competing for the \
             same cores; the reference measured ≈650k msg/s per instance on a dedicated vCPU): at \
             this server CPU per message one core per master sustains ≈ {} delivered msg/s; for {} \
             msg/s plan {plan} masters (at 70 % load) and ≈ {:.1} client cores across the fleet",
            n(per_core as u64),
            n(o.target),
            o.target as f64 * per_m(m.client_cpu) / 1e6,
        );
    }

    // Checks that hold on any machine, however slow.
    let mut ok = true;
    let mut fail = |what: String| {
        println!("check failed: {what}");
        ok = false;
    };
    for (e, f) in fleet.iter().enumerate() {
        if f.node.delivered.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            fail(format!("engine {e} received nothing"));
        }
    }
    if m.gaps_before_failover > 0 {
        fail(format!(
            "{} gap events before any fault",
            m.gaps_before_failover
        ));
    }
    if m.unenveloped > 0 {
        fail(format!("{} messages without the envelope", m.unenveloped));
    }
    if !conns_ok {
        fail(format!(
            "connections per master are not {want_sub} subscribe and {} publish (and none \
             elsewhere) after a refresh",
            o.engines + 1
        ));
    }
    let fo = &m.failover;
    if o.failover && (!fo.done || fo.restored.is_none() || fo.gap_events == 0) {
        fail("the failover did not produce gap events and restored delivery".into());
    }
    // The accounting: nothing lost silently, duplicated or reordered, and
    // the checker's classes add up to what the publisher counted.
    if let Err(why) = &m.settled {
        fail(format!("the last round did not settle: {why}"));
    }
    if !a.is_clean() {
        fail("messages lost silently, duplicated, reordered, corrupt, unwanted or split".into());
    }
    if a.pending > 0 {
        fail(format!("{} publishes without an outcome", a.pending));
    }
    if c.delivered + c.lost_signalled != m.expected {
        fail(format!(
            "delivered {} + lost signalled {} is not the {} deliveries the publishes owe",
            c.delivered, c.lost_signalled, m.expected
        ));
    }
    if lost_outside_moved > 0 && m.dropped == 0 {
        fail(format!(
            "{lost_outside_moved} signalled losses outside the moved partitions, with no drops"
        ));
    }
    let drop_events = crate::node::total(fleet, |n| &n.drop_events);
    println!(
        "result: server={kind} published={} acked={} publish_failed={failed} pending={} \
         expected={} received={} delivered={} lost_signalled={} lost_silent={} duplicated={} \
         reordered={} unexpected={} unwanted={} split={} lost_outside_moved={lost_outside_moved} \
         signals={} dropped={} drop_events={drop_events} gaps_before_failover={} failover={} \
         moved_partitions={} gap_events={} gaps_outside_moved={} restored_ms={} \
         sub_conns_per_master={}..{} pub_conns_per_master={}..{} stale_conns={stale_conns} \
         checks={}",
        a.published,
        a.acked,
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
        c.signals,
        m.dropped,
        m.gaps_before_failover,
        o.failover,
        fo.moved,
        fo.gap_events,
        fo.gaps_outside_moved,
        fo.restored
            .map_or("none".into(), |d| d.as_millis().to_string()),
        sub_range.0,
        sub_range.1,
        pub_range.0,
        pub_range.1,
        if ok { "ok" } else { "failed" },
    );
    ok
}
