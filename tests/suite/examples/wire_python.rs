//! The wire format is usable from another language: a Python publisher
//! (`tests/suite/examples/wire_publish.py`, standard library only, speaking RESP on a
//! socket) computes channel names from the exported tag table
//! (`shardcore/wire/`, `WIRE_FORMAT.md`) and reaches shardsub subscribers
//! on a cluster: every message counted per channel, in order, no gap.
//! Before it publishes, and alone in the first test (no server), it
//! recomputes every exported tag table and every column of every vector
//! file from `WIRE_FORMAT.md`'s formulas (placement, kept names and raw
//! prefixes, history keys, header and envelope bytes, what a subscriber
//! strips), and the SHA-1 of each history script's file and of its text
//! in `WIRE_FORMAT.md`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardsub::{Event, Handler, PubSub};
use testkit::Cluster;

const CHANNELS: usize = 300;
const MESSAGES: u64 = 20;

/// Per channel: messages seen, and whether each came in order (payload =
/// its sequence number).
#[derive(Default)]
struct Ordered {
    next: Mutex<BTreeMap<Vec<u8>, u64>>,
    out_of_order: AtomicU64,
    total: AtomicU64,
    gaps: AtomicU64,
}

impl Handler for Ordered {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        let seq: u64 = std::str::from_utf8(payload)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(u64::MAX);
        let mut next = self.next.lock().unwrap();
        let n = next.entry(channel.to_vec()).or_default();
        if seq != *n {
            self.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        *n += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    fn on_event(&self, event: Event<'_>) {
        if let Event::Gap { .. } = event {
            self.gaps.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn a_python_check_reproduces_every_wire_vector_from_the_document() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("tests/suite/examples/wire_publish.py"))
        .arg("--wire")
        .arg(root.join("shardcore/wire"))
        .output()
        .expect("python3 runs (installed with the test tools)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // 46 names: vectors.tsv once, 5 partition counts, 6 server counts,
    // kept names, 2 raw-prefix sets, 3 placements of history keys; 48
    // payloads sent, 36 received under 4 settings, 2 scripts; the 13
    // power-of-two tables.
    assert_eq!(
        stdout.trim(),
        "self-check: 1022 vectors and 13 tag tables agree",
        "{stderr}"
    );
}

/// The name-printing example (`shardcore`'s `wire_name`) and the Python
/// check, given the same partition and server counts, print the same
/// lines for names of every shape.
#[test]
fn the_name_printing_example_agrees_with_the_python_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = crate::support::examples::example_binary_of("shardsub-shardcore", "wire_name");
    let names = ["news", "room:1", "{x}y", "", "{}", "a{b}c{d}", "é"];
    for (p, n) in [(128, 3), (1000, 1024), (3, 2), (16384, 1)] {
        let (p, n) = (p.to_string(), n.to_string());
        let rust = Command::new(&bin)
            .args(["--partitions", &p, "--servers", &n])
            .args(names)
            .output()
            .expect("wire_name runs");
        let python = Command::new("python3")
            .arg(root.join("tests/suite/examples/wire_publish.py"))
            .arg("--wire")
            .arg(root.join("shardcore/wire"))
            .args(["--partitions", &p, "--servers", &n, "--names"])
            .args(names)
            .output()
            .expect("python3 runs");
        let (rust, python) = (
            String::from_utf8_lossy(&rust.stdout),
            String::from_utf8_lossy(&python.stdout),
        );
        let python: Vec<&str> = python
            .lines()
            .filter(|l| !l.starts_with("self-check"))
            .collect();
        let rust: Vec<&str> = rust.lines().collect();
        assert_eq!(rust.len(), names.len() + 1, "P = {p}, N = {n}: {rust:?}");
        assert_eq!(rust, python, "P = {p}, N = {n}");
    }
}

#[test]
fn a_python_publisher_reaches_cluster_subscribers_through_the_tag_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let rec = Arc::new(Ordered::default());
        let ps = PubSub::builder()
            .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
            .partitions(128)
            .handler_arc(rec.clone())
            .workers(2)
            .queue_capacity(1 << 16)
            .build()
            .expect("pubsub");
        let names: Vec<String> = (0..CHANNELS).map(|i| format!("py:{i}")).collect();
        ps.subscribe(&names).expect("subscribe");
        ps.wait_active(&names, Duration::from_secs(20))
            .expect("active");
        let out = Command::new("python3")
            .arg(root.join("tests/suite/examples/wire_publish.py"))
            .args(["--node", &cluster.seed_addrs()[0].to_string()])
            .arg("--wire")
            .arg(root.join("shardcore/wire"))
            .args(["--partitions", "128", "--prefix", "py"])
            .args(["--channels", &CHANNELS.to_string()])
            .args(["--messages", &MESSAGES.to_string()])
            .output()
            .expect("python3 runs (installed with the test tools)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{kind:?}: {stdout}\n{stderr}");
        eprintln!("{kind:?}: {stdout}");
        let total = CHANNELS as u64 * MESSAGES;
        let last = stdout.lines().last().unwrap_or_default();
        assert_eq!(
            last,
            format!("published {total} channels {CHANNELS} zero-receivers 0"),
            "{kind:?}"
        );
        testkit::wait_for("every message", Duration::from_secs(20), || {
            Ok((rec.total.load(Ordering::Relaxed) >= total).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let next = rec.next.lock().unwrap();
        assert_eq!(next.len(), CHANNELS, "{kind:?}: channels reached");
        assert!(next.values().all(|&n| n == MESSAGES), "{kind:?}: {next:?}");
        assert_eq!(rec.out_of_order.load(Ordering::Relaxed), 0, "{kind:?}");
        assert_eq!(rec.gaps.load(Ordering::Relaxed), 0, "{kind:?}");
        // Nothing the subscriber could not place: every name was ours.
        assert_eq!(ps.metrics().received, total, "{kind:?}");
    }
}
