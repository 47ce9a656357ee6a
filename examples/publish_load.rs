//! Publishes N messages as fast as possible from T threads and reports the
//! rate, client CPU per million messages, and publishes per `write`.
//!
//! ```text
//! cargo run --release --example publish_load -- [--addr HOST:PORT] [--valkey]
//!     [--messages 1000000] [--threads 1] [--payload 256] [--flush-delay-us 100] [--wait]
//! ```
//!
//! `--wait` makes every thread a sequential caller: each publish waits for
//! its reply before the next (many such threads are where a flush delay
//! earns its keep: their publishes share writes).
//!
//! Without `--addr` it starts its own server (Redis, or Valkey with
//! `--valkey`) through testkit. Client CPU comes from `/proc/self/stat`
//! (user + system time of the whole process, server excluded).
//!
//! With `SHARDSUB_BENCH_MARKDOWN=1` the result is also printed as a
//! Markdown table of one row (`cargo xtask bench --only publish_load`
//! collects the rows of its runs into the BENCHMARKS.md table).

use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::engine::{Engine, PublishOptions};

/// User + system CPU seconds of this process so far.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which ends with ')'): utime is the
    // 12th, stime the 13th, in clock ticks (100 per second on Linux).
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (tick(11) + tick(12)) as f64 / 100.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut addr: Option<String> = None;
    let mut kind = testkit::ServerKind::Redis;
    let (mut messages, mut threads, mut payload, mut delay_us) =
        (1_000_000u64, 1usize, 256usize, 100u64);
    let mut wait = false;
    while let Some(a) = args.next() {
        let mut num = || {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .expect("a number")
        };
        match a.as_str() {
            "--addr" => addr = args.next(),
            "--valkey" => kind = testkit::ServerKind::Valkey,
            "--messages" => messages = num(),
            "--threads" => threads = num() as usize,
            "--payload" => payload = num() as usize,
            "--flush-delay-us" => delay_us = num(),
            "--wait" => wait = true,
            other => panic!("unknown argument {other}"),
        }
    }
    // Our own server unless one was given.
    let server = match &addr {
        Some(_) => None,
        None => Some(testkit::Server::start(kind).expect("server starts")),
    };
    let addr = addr.unwrap_or_else(|| {
        server
            .as_ref()
            .map(|s| s.addr().to_string())
            .unwrap_or_default()
    });
    // The server column of the Markdown row.
    let label = match (&server, kind) {
        (None, _) => addr.clone(),
        (Some(_), testkit::ServerKind::Redis) => "Redis".to_string(),
        (Some(_), _) => "Valkey".to_string(),
    };
    let engine = Arc::new(
        Engine::builder()
            .address(addr)
            .io_threads(1)
            .flush_delay(Duration::from_micros(delay_us))
            .request_timeout(Duration::from_secs(30))
            .build()
            .expect("engine connects"),
    );
    let body = vec![b'x'; payload];
    let per_thread = messages / threads as u64;
    let cpu0 = cpu_seconds();
    let s0 = engine.stats();
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (engine, body) = (engine.clone(), body.clone());
            std::thread::spawn(move || {
                let channel = format!("load-{t}");
                for _ in 0..per_thread {
                    // NotConnected cannot happen here unless the server dies.
                    if wait {
                        engine
                            .publish_wait(channel.as_bytes(), &body, PublishOptions::classic())
                            .expect("publish");
                    } else {
                        engine.publish(channel.as_bytes(), &body).expect("publish");
                    }
                }
                // The last one's reply comes after all of this thread's.
                engine
                    .publish_pending(channel.as_bytes(), b"end", PublishOptions::classic())
                    .wait()
                    .expect("end marker")
            })
        })
        .collect();
    for w in workers {
        w.join().expect("publisher");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let s = engine.stats();
    let total = per_thread * threads as u64;
    let writes = s.writes - s0.writes;
    println!(
        "{total} messages of {payload} B from {threads} {}thread(s), flush delay {delay_us} µs: \
         {:.0} msg/s, {:.2} client CPU s per million, {:.0} publishes per write, \
         {} error replies",
        if wait { "sequential " } else { "" },
        total as f64 / elapsed,
        cpu / (total as f64 / 1e6),
        (s.requests - s0.requests) as f64 / writes.max(1) as f64,
        s.error_replies - s0.error_replies,
    );
    if std::env::var("SHARDSUB_BENCH_MARKDOWN").is_ok_and(|v| v == "1") {
        let delay = if delay_us == 0 {
            "off".to_string()
        } else {
            format!("{delay_us} µs")
        };
        println!(
            "| server | publishers | flush delay | messages | msg/s | client CPU s / 1M msgs | publishes / write |"
        );
        println!("|---|---|---|---:|---:|---:|---:|");
        println!(
            "| {label} | {threads}{} | {delay} | {total} | {:.0} | {:.2} | {:.0} |",
            if wait { " sequential" } else { "" },
            total as f64 / elapsed,
            cpu / (total as f64 / 1e6),
            (s.requests - s0.requests) as f64 / writes.max(1) as f64,
        );
    }
    engine.shutdown();
}
