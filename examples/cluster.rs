//! A Redis/Valkey Cluster with sharded Pub/Sub: channels in 128 app-level
//! partitions, one subscribe connection per primary, `SPUBLISH` to each
//! slot's owner. Each channel's messages are counted in order.
//!
//! ```text
//! cargo run --example cluster -- redis://10.0.1.1:7000?cluster=true
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardsub::{handler_fn, PubSub};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seeds: Vec<String> = std::env::args().skip(1).collect();
    let next: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let seen = next.clone();
    let ps = PubSub::builder()
        .urls(&seeds) // each with ?cluster=true: seeds, not shards
        .partitions(128)
        .handler(handler_fn(move |channel, payload| {
            let mut next = seen.lock().unwrap();
            let n = next
                .entry(String::from_utf8_lossy(channel).into())
                .or_default();
            if payload == n.to_string().as_bytes() {
                *n += 1;
            }
        }))
        .build()?;

    let channels: Vec<String> = (0..300).map(|i| format!("room:{i}")).collect();
    ps.subscribe(&channels)?;
    ps.wait_active(&channels, Duration::from_secs(10))?;
    for seq in 0..10 {
        for c in &channels {
            ps.publish(c, seq.to_string())?;
        }
    }

    let deadline = Instant::now() + Duration::from_secs(10);
    let done = || next.lock().unwrap().values().filter(|&&n| n == 10).count();
    while done() < channels.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let all = ps.metrics();
    let m = all.cluster.as_ref().expect("a cluster placement");
    let ok = done() == channels.len() && all.gaps == 0 && all.dropped.total() == 0;
    println!(
        "result: {} delivered={} channels_complete={} primaries={} subscribe_connections={} gaps={}",
        if ok { "ok" } else { "fail" },
        all.delivered,
        done(),
        m.nodes,
        m.subscribe_connections,
        all.gaps
    );
    std::process::exit(if ok { 0 } else { 1 });
}
