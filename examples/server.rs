//! The smallest useful program: one server, 100 channels, 10 messages
//! each, every one counted in order by the handler.
//!
//! ```text
//! cargo run --example server -- redis://127.0.0.1:6379
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardsub::PubSub;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or("redis://127.0.0.1:6379".into());
    // Per channel: the next sequence number expected (out of order = bad).
    let next: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let seen = next.clone();
    let ps = PubSub::builder()
        .url(&url)
        .on_message(move |channel, payload| {
            let mut next = seen.lock().unwrap();
            let key = String::from_utf8_lossy(channel).into_owned();
            let n = next.entry(key).or_default();
            if payload == n.to_string().as_bytes() {
                *n += 1;
            }
        })
        .build()?;

    let channels: Vec<String> = (0..100).map(|i| format!("room:{i}")).collect();
    ps.subscribe(&channels)?;
    ps.wait_active(&channels, Duration::from_secs(10))?;
    for seq in 0..10 {
        for c in &channels {
            ps.publish(c, seq.to_string())?;
        }
    }

    // Wait (bounded) until every channel has all ten, in order.
    let deadline = Instant::now() + Duration::from_secs(10);
    let done = || next.lock().unwrap().values().filter(|&&n| n == 10).count();
    while done() < channels.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let m = ps.metrics();
    let ok = done() == channels.len() && m.gaps == 0 && m.dropped.total() == 0;
    println!(
        "result: {} delivered={} channels_complete={} gaps={}",
        if ok { "ok" } else { "fail" },
        m.delivered,
        done(),
        m.gaps
    );
    std::process::exit(if ok { 0 } else { 1 });
}
