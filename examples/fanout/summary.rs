//! The demo's closing summary: messages, lag, connections and commands per
//! node as the servers count them, CPU per million delivered, a sizing
//! estimate, the checks, and the `result:` line.

use std::collections::BTreeSet;

use shardcore::Partitions;
use shardsub::cluster::ClusterPubSub;
use testkit::Cluster;

use crate::failover::FailoverReport;
use crate::node::{quantile, Fleet};
use crate::options::Options;
use crate::servers::{n, named_clients, ssubscribe_calls};

/// What the run measured, for the summary.
pub struct Measured {
    pub version: String,
    pub masters_at_start: Vec<usize>,
    pub subscriptions: usize,
    pub published: u64,
    pub expected: u64,
    pub delivered: u64,
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
}

/// Prints the summary; returns whether every check held.
pub fn print(
    o: &Options,
    cluster: &Cluster,
    fleet: &[Fleet],
    publisher: &ClusterPubSub,
    parts: &Partitions,
    names: &[Vec<u8>],
    m: &Measured,
) -> bool {
    let kind = o.kind;
    let failed = publisher.metrics().publish_failed;
    println!(
        "\n== summary ({kind} {}, {} masters, {} engines, {:.1} s of publishing)",
        m.version, o.masters, o.engines, m.publishing_secs
    );
    println!(
        "messages: {} published, {} delivered of {} expected; {} dropped, {} publishes failed, \
         {} {}",
        n(m.published),
        n(m.delivered),
        n(m.expected),
        n(m.dropped),
        n(failed),
        n(m.expected.saturating_sub(m.delivered + m.dropped)),
        if o.failover {
            "lost around the failover (their channels were named by gap events)"
        } else {
            "missing"
        },
    );
    println!(
        "lag (publish → handler): p50 {}  p99 {}  p99.9 {}",
        quantile(&m.lag, 0.5),
        quantile(&m.lag, 0.99),
        quantile(&m.lag, 0.999)
    );

    // Connections and commands per node, as the servers count them. The
    // publisher instance opens (idle) subscribe connections too, one group
    // per primary it knows.
    let masters_now = cluster.masters();
    let pub_sub = publisher.metrics().subscribe_connections / m.masters_at_start.len().max(1);
    let engine_conns = o.engines * o.multiplier;
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
    let mut conns_ok = true;
    let mut sub_range = (usize::MAX, 0);
    let mut stale = Vec::new();
    let (mut grouped, mut per_partition_total) = (0, 0);
    for i in cluster.live() {
        let master = masters_now.contains(&i);
        let subs = named_clients(cluster, i, "shardsub-sub");
        let pubs = named_clients(cluster, i, "shardsub-pub");
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
            conns_ok &= (engine_conns..=engine_conns + pub_sub).contains(&subs);
            sub_range = (sub_range.0.min(subs), sub_range.1.max(subs));
            grouped += subs;
            per_partition_total += per_partition;
        } else if subs + pubs > 0 {
            stale.push(format!(
                "{} ({subs} sub, {pubs} pub)",
                cluster.node(i).addr()
            ));
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
         +{pub_sub} where the publisher instance's idle ones are{}; *one connection per partition \
         would need {} across the cluster instead of {}",
        o.engines,
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
            "note: demoted node(s) still holding shardsub connections: {}. The publisher \
             instance subscribes nothing, so no sunsubscribe reaches it, and its publishes there \
             drew {} MOVED (a replica takes SPUBLISH and passes it on within its shard): it \
             rewires at its next topology poll",
            stale.join(", "),
            publisher.metrics().redirects.moved,
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
    let per_m = |cpu: f64| cpu / (m.delivered.max(1) as f64 / 1e6);
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
    if m.delivered < 100_000 || server_masters <= 0.0 {
        println!("sizing: too few messages delivered (< 100,000) for an estimate");
    } else {
        let per_core = m.delivered as f64 / server_masters;
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
        fail("subscribe connections per master are not engines × multiplier".into());
    }
    let fo = &m.failover;
    if o.failover && (!fo.done || fo.restored.is_none() || fo.gap_events == 0) {
        fail("the failover did not produce gap events and restored delivery".into());
    }
    println!(
        "result: server={kind} published={} delivered={} expected={} dropped={} \
         publish_failed={failed} gaps_before_failover={} failover={} moved_partitions={} \
         gap_events={} gaps_outside_moved={} restored_ms={} sub_conns_per_master={}..{} checks={}",
        m.published,
        m.delivered,
        m.expected,
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
        if ok { "ok" } else { "failed" },
    );
    ok
}
