//! N independent servers as client-side shards: a channel lives on
//! `shard_of(channel, N)`; every instance lists the servers in the same
//! order. Each channel's messages are counted in order.
//!
//! ```text
//! cargo run --example shards -- redis://10.0.0.1:6379 redis://10.0.0.2:6379 redis://10.0.0.3:6379
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardsub::{Event, PubSub};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = std::env::args().skip(1).collect();
    let next: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let seen = next.clone();
    let ps = PubSub::builder()
        .urls(&urls)
        .on_message(move |channel, payload| {
            let mut next = seen.lock().unwrap();
            let key = String::from_utf8_lossy(channel).into_owned();
            let n = next.entry(key).or_default();
            if payload == n.to_string().as_bytes() {
                *n += 1;
            }
        })
        .on_event(|event| {
            // A server's connection was lost: these channels may have
            // missed messages (reload their history here).
            if let Event::Gap { server, channels } = event {
                eprintln!("gap on {server:?}: {} channels", channels.len());
            }
        })
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
    // Where the channels live: how many on each server.
    let mut per_server = vec![0; urls.len()];
    for c in &channels {
        per_server[ps.server_of(c.as_bytes()).unwrap_or(0)] += 1;
    }
    let m = ps.metrics();
    let ok = done() == channels.len() && m.gaps == 0 && m.dropped.total() == 0;
    println!(
        "result: {} delivered={} channels_complete={} per_server={per_server:?} gaps={}",
        if ok { "ok" } else { "fail" },
        m.delivered,
        done(),
        m.gaps
    );
    std::process::exit(if ok { 0 } else { 1 });
}
