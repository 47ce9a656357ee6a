//! What recovery costs: how long a subscriber takes to get back the
//! messages it missed, and what a recovery storm (every subscriber
//! instance recovering at once) costs the server.
//!
//! 1. One subscriber, one recoverable channel. Its connections go through
//!    a fault proxy that is black-holed while the publisher (direct to the
//!    server) sends N messages; then the proxy heals and cuts the stale
//!    connections. Timed from the heal to the N-th missed message
//!    delivered (the reconnect, the `Gap`, then reads of 1,000 messages
//!    each), for N = 1,000 and 100,000.
//! 2. A storm: E instances, each subscribed to the same C recoverable
//!    channels through one proxy, black-holed while M messages go to each
//!    channel; then healed at once, so all E × C channels recover together.
//!    Reported: the time until every instance had every message, the
//!    server's CPU over that time (`INFO CPU`), and the read scripts and
//!    `XRANGE`s it ran (`INFO COMMANDSTATS`).
//!
//! ```text
//! cargo run --release --example history_recovery_cost -- [--valkey]
//! ```
//!
//! It starts its own server through testkit (Redis 7 by default).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::history::HistoryOptions;
use shardsub::{Event, PubSub};
use testkit::{FaultProxy, Server, ServerKind};

const PAYLOAD: usize = 64;

/// Caps above anything a run publishes: nothing is trimmed.
const CAPS: HistoryOptions = HistoryOptions {
    max_len: 200_000,
    max_age: Duration::from_secs(600),
};

fn info(server: &Server, section: &str) -> String {
    let v = server.cmd_str(&["INFO", section]).expect("info");
    testkit::values::text(&v).unwrap_or_default()
}

fn server_cpu(server: &Server) -> f64 {
    let text = info(server, "cpu");
    let f = |k| {
        testkit::values::info_field(&text, k)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    f("used_cpu_user") + f("used_cpu_sys")
}

/// `calls` of a command in `INFO COMMANDSTATS` (scripts' own commands
/// included).
fn calls(server: &Server, command: &str) -> u64 {
    let text = info(server, "commandstats");
    testkit::values::info_field(&text, &format!("cmdstat_{command}"))
        .and_then(|v| v.strip_prefix("calls=")?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Waits (bounded) until `done`; polls every millisecond.
fn wait(what: &str, bound: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A subscriber instance through `proxy`, counting messages and gaps.
fn subscriber(proxy: &FaultProxy, got: &Arc<AtomicU64>, gaps: &Arc<AtomicU64>) -> PubSub {
    let (g, e) = (got.clone(), gaps.clone());
    PubSub::builder()
        .address(proxy.addr().to_string())
        .history("r:", CAPS)
        .subscribe_connections(1)
        .workers(1)
        .io_threads(1)
        .reconnect_backoff(Duration::from_millis(5), Duration::from_millis(50))
        .handler(
            shardsub::handler_fn(move |_, _| {
                g.fetch_add(1, Ordering::Relaxed);
            })
            .on_event(move |ev| {
                if let Event::Gap { .. } = ev {
                    e.fetch_add(1, Ordering::Relaxed);
                }
            }),
        )
        .build()
        .expect("subscriber")
}

/// Publishes `n` messages to each of `channels`, the last one waited for.
fn publish(publisher: &PubSub, channels: &[String], n: u64) {
    let payload = vec![b'x'; PAYLOAD];
    for i in 0..n {
        for ch in channels {
            if i + 1 == n {
                publisher
                    .publish_wait(ch, &payload, Duration::from_secs(30))
                    .expect("publish");
            } else {
                publisher.publish(ch, &payload).expect("publish");
            }
        }
    }
}

fn recovery_time(server: &Server, publisher: &PubSub, n: u64) {
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let (got, gaps) = (Arc::default(), Arc::default());
    let ps = subscriber(&proxy, &got, &gaps);
    let ch = vec![format!("r:one:{n}")];
    ps.subscribe(&ch).unwrap();
    ps.wait_active(&ch, Duration::from_secs(10)).unwrap();
    // The first message anchors the channel's position.
    publish(publisher, &ch, 1);
    wait("the first message", Duration::from_secs(10), || {
        got.load(Ordering::Relaxed) == 1
    });
    proxy.blackhole(true);
    publish(publisher, &ch, n);
    let (cpu0, reads0) = (server_cpu(server), calls(server, "evalsha"));
    let start = Instant::now();
    proxy.blackhole(false);
    proxy.cut_all();
    wait("the gap", Duration::from_secs(30), || {
        gaps.load(Ordering::Relaxed) > 0
    });
    let gap = start.elapsed();
    wait("every missed message", Duration::from_secs(120), || {
        got.load(Ordering::Relaxed) == 1 + n
    });
    let took = start.elapsed();
    // The workers add their counts just after the handler returns.
    wait("the recovered count", Duration::from_secs(5), || {
        ps.metrics().recovered >= n
    });
    let m = ps.metrics();
    println!(
        "| {n} | {:.0} | {:.0} | {:.0} | {} | {} | {:.1} |",
        gap.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e3,
        n as f64 / (took - gap).as_secs_f64().max(1e-6),
        m.recovered,
        calls(server, "evalsha") - reads0,
        (server_cpu(server) - cpu0) * 1e3
    );
    ps.shutdown();
}

fn storm(server: &Server, publisher: &PubSub, instances: usize, channels: usize, missed: u64) {
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let names: Vec<String> = (0..channels)
        .map(|c| format!("r:storm{instances}:{c}"))
        .collect();
    let subs: Vec<(PubSub, Arc<AtomicU64>)> = (0..instances)
        .map(|_| {
            let got = Arc::new(AtomicU64::new(0));
            let ps = subscriber(&proxy, &got, &Arc::default());
            ps.subscribe(&names).unwrap();
            ps.wait_active(&names, Duration::from_secs(20)).unwrap();
            (ps, got)
        })
        .collect();
    publish(publisher, &names, 1);
    let each = channels as u64;
    wait("the first messages", Duration::from_secs(20), || {
        subs.iter().all(|s| s.1.load(Ordering::Relaxed) == each)
    });
    proxy.blackhole(true);
    publish(publisher, &names, missed);
    let want = each * (1 + missed);
    let (cpu0, reads0, xrange0) = (
        server_cpu(server),
        calls(server, "evalsha"),
        calls(server, "xrange"),
    );
    let start = Instant::now();
    proxy.blackhole(false);
    proxy.cut_all();
    wait(
        "every instance's messages",
        Duration::from_secs(300),
        || subs.iter().all(|s| s.1.load(Ordering::Relaxed) == want),
    );
    let took = start.elapsed();
    let cpu = server_cpu(server) - cpu0;
    let recovered_now = || subs.iter().map(|s| s.0.metrics().recovered).sum::<u64>();
    wait("the recovered counts", Duration::from_secs(5), || {
        recovered_now() >= each * missed * instances as u64
    });
    let recovered = recovered_now();
    println!(
        "| {instances} | {channels} | {missed} | {recovered} | {:.0} | {:.0} | {} | {} |",
        took.as_secs_f64() * 1e3,
        cpu * 1e3,
        calls(server, "evalsha") - reads0,
        calls(server, "xrange") - xrange0,
    );
    for (ps, _) in subs {
        ps.shutdown();
    }
}

fn main() {
    let kind = if std::env::args().any(|a| a == "--valkey") {
        ServerKind::Valkey
    } else {
        ServerKind::Redis
    };
    let server = Server::start(kind).expect("server");
    let publisher = PubSub::builder()
        .address(server.addr().to_string())
        .history("r:", CAPS)
        .handler(|_: &[u8], _: &[u8]| {})
        .workers(1)
        .io_threads(1)
        .build()
        .expect("publisher");
    println!("{kind:?}, {PAYLOAD}-byte payloads\n");
    println!(
        "| missed | gap event (ms) | last recovered (ms) | recovered/s | recovered | read scripts | \
         server CPU (ms) |\n|---|---|---|---|---|---|---|"
    );
    for n in [1_000, 100_000] {
        recovery_time(&server, &publisher, n);
    }
    println!(
        "\n| instances | channels each | missed per channel | recovered | all recovered (ms) | \
         server CPU (ms) | read scripts | XRANGE |\n|---|---|---|---|---|---|---|---|"
    );
    for instances in [8, 32] {
        storm(&server, &publisher, instances, 100, 100);
    }
    publisher.shutdown();
}
