//! The subscriber's cost per delivered message, in a form a count of
//! instructions can measure: a `PubSub` on one server (1 subscribe
//! connection, 1 worker, 1 I/O thread) subscribed to 1,000 channels, fed
//! by a plain socket in this process that publishes one message to each
//! channel per round and waits for the handler to have them all before the
//! next round. Nothing is dropped and nothing depends on speed, so the
//! instructions of two runs with different round counts differ by the cost
//! of the extra messages alone:
//!
//! ```text
//! cargo build --release --example subscribe_cost
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.20 \
//!     target/release/examples/subscribe_cost --rounds 20
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.120 \
//!     target/release/examples/subscribe_cost --rounds 120
//! # instructions per message = (total(120) - total(20)) / 100,000
//! ```
//!
//! The publisher's side (writing the batch, reading 1,000 replies) is
//! counted too; it is the same in every build being compared. Without
//! `--addr` it starts its own Redis through testkit (`--valkey` for
//! Valkey).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use resp::PublishKind;
use shardsub::PubSub;

const CHANNELS: usize = 1000;
const PAYLOAD: usize = 64;

/// Counts delivered messages; wakes the publisher when a round is in.
#[derive(Default)]
struct Count {
    n: Mutex<u64>,
    cond: Condvar,
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let rounds: u64 = arg("--rounds").and_then(|s| s.parse().ok()).unwrap_or(20);
    let kind = if std::env::args().any(|a| a == "--valkey") {
        testkit::ServerKind::Valkey
    } else {
        testkit::ServerKind::Redis
    };
    let own = match arg("--addr") {
        Some(_) => None,
        None => Some(testkit::Server::start(kind).expect("server")),
    };
    let addr = arg("--addr").unwrap_or_else(|| own.as_ref().unwrap().addr().to_string());
    let count = Arc::new(Count::default());
    let c2 = count.clone();
    let ps = PubSub::builder()
        .address(addr.clone())
        .subscribe_connections(1)
        .workers(1)
        .io_threads(1)
        .probe_interval(Duration::ZERO)
        .handler(move |_: &[u8], payload: &[u8]| {
            std::hint::black_box(payload);
            let mut n = c2.n.lock().unwrap();
            *n += 1;
            if *n % CHANNELS as u64 == 0 {
                c2.cond.notify_all();
            }
        })
        .build()
        .expect("pubsub");
    let chans: Vec<String> = (0..CHANNELS).map(|i| format!("cost:{i}")).collect();
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, Duration::from_secs(60)).unwrap();
    // One round of PUBLISH commands, encoded once.
    let mut batch = Vec::new();
    let payload = [b'x'; PAYLOAD];
    for c in &chans {
        resp::encode_publish(
            &mut batch,
            PublishKind::Publish,
            &[c.as_bytes()],
            &[&payload],
        );
    }
    let mut publisher = TcpStream::connect(&addr).expect("publisher");
    let mut replies = vec![0u8; 4 * CHANNELS]; // ":1\r\n" each
    for round in 1..=rounds {
        publisher.write_all(&batch).unwrap();
        publisher.read_exact(&mut replies).unwrap();
        let want = round * CHANNELS as u64;
        let mut n = count.n.lock().unwrap();
        while *n < want {
            n = count.cond.wait(n).unwrap();
        }
    }
    let delivered = *count.n.lock().unwrap();
    let m = ps.metrics();
    println!(
        "rounds {rounds}: delivered {delivered}, dropped {}, gaps {}",
        m.dropped.queue_full, m.gaps
    );
    assert_eq!(delivered, rounds * CHANNELS as u64);
    ps.shutdown();
}
