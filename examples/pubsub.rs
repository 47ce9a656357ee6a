//! Pub/Sub over one server or N client-side shards: subscribe, publish,
//! receive on worker threads, read the metrics.
//!
//! Start one or more servers, then:
//!
//! ```text
//! redis-server --port 6379 --save "" --appendonly no &
//! cargo run --release --example pubsub -- 127.0.0.1:6379
//! cargo run --release --example pubsub -- 127.0.0.1:6379 127.0.0.1:6380 127.0.0.1:6381
//! ```
//!
//! Every address given is one shard; a channel lives on
//! `shard_of(channel, N)`, for publishing and subscribing alike.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::pubsub::{Event, Handler};
use shardsub::PubSub;

/// The application's handler: runs on the worker threads.
struct App {
    messages: AtomicU64,
    gaps: AtomicU64,
}

impl Handler for App {
    fn on_message(&self, _channel: &[u8], _payload: &[u8]) {
        // One channel's messages always come to the same worker, in order.
        self.messages.fetch_add(1, Ordering::Relaxed);
    }

    fn on_event(&self, event: Event<'_>) {
        if let Event::Gap { server, channels } = event {
            // A connection was lost and these channels resubscribed: a real
            // application would reload their recent history here.
            self.gaps.fetch_add(1, Ordering::Relaxed);
            let server = server.map_or("no server".to_string(), |a| a.to_string());
            eprintln!("gap on {server}: {} channels", channels.len());
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Addresses from the command line; one local server by default.
    let mut addrs: Vec<String> = std::env::args().skip(1).collect();
    if addrs.is_empty() {
        addrs.push("127.0.0.1:6379".into());
    }
    let app = Arc::new(App {
        messages: AtomicU64::new(0),
        gaps: AtomicU64::new(0),
    });

    // One PubSub: publish connections, subscribe connections (2 per shard),
    // a control thread and 4 workers. The envelope carries the publish time
    // so the metrics include end-to-end lag.
    let ps = PubSub::builder()
        .addresses(addrs.iter().cloned())
        .subscribe_connections(2)
        .workers(4)
        .envelope(true)
        .handler_arc(app.clone())
        .build()?;

    // 10,000 channels: subscribe returns at once; the commands leave in
    // batches of at most 512 channels. Then wait until all are confirmed.
    let channels: Vec<String> = (0..10_000).map(|i| format!("room:{i}")).collect();
    let started = Instant::now();
    ps.subscribe(&channels)?;
    ps.wait_active(&channels, Duration::from_secs(10))?;
    println!(
        "subscribed {} channels on {} shard(s) in {:?}",
        channels.len(),
        addrs.len(),
        started.elapsed()
    );

    // Publish 10 messages of 256 bytes to every channel, fire-and-forget.
    let payload = [b'x'; 256];
    let total = 10 * channels.len() as u64;
    let started = Instant::now();
    for _ in 0..10 {
        for c in &channels {
            ps.publish(c.as_bytes(), payload)?;
        }
    }

    // Wait (bounded) until the handler has seen them, or some were dropped.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = ps.metrics();
        if m.delivered + m.dropped.total() >= total || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let elapsed = started.elapsed();

    // The metrics snapshot: counts, queue depths, connections, lag.
    let m = ps.metrics();
    println!(
        "delivered {} of {total} in {elapsed:?} ({:.0} msg/s), dropped {:?}",
        app.messages.load(Ordering::Relaxed),
        m.delivered as f64 / elapsed.as_secs_f64(),
        m.dropped
    );
    println!(
        "commands: {} SUBSCRIBE, connections per shard {:?}, gaps {}",
        m.subscribe_commands,
        m.active_connections,
        app.gaps.load(Ordering::Relaxed)
    );
    if let Some(lag) = m.lag {
        println!(
            "lag: p50 {:?} p99 {:?} p999 {:?} max {:?}",
            lag.p50, lag.p99, lag.p999, lag.max
        );
    }
    ps.shutdown();
    Ok(())
}
