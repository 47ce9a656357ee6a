//! An idle subscriber (`--idle`): 10,000 channels subscribed, no traffic,
//! for [`SECS`]. Each subscriber runs in a process of its own
//! (`--idle-one KIND WHO`, this binary again) with a server of its own,
//! all at once, so `getrusage` gives that subscriber's wake-ups
//! (voluntary context switches) and CPU alone; the measuring thread's own
//! are taken off. Scaled to an hour, with the threads that woke most
//! (`/proc/self/task`).

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::load::{wait_subscribed, CHANNELS};
use crate::subscribers::{Delivery, Who};
use crate::usage;

/// Seconds each idle subscriber is measured: past shardsub's 30 s
/// liveness probe of a silent connection, so an hour's probes are counted.
const SECS: u64 = 32;
/// Seconds after the subscriptions are confirmed before measuring.
const SETTLE: Duration = Duration::from_secs(1);

/// Each subscriber: its `--idle-one` name and what it runs.
const WHO: [(&str, Who); 2] = [
    ("shardsub", Who::shardsub_default(None)),
    ("redis", Who::redis_default(2)),
];

/// Runs every idle subscriber at once and prints a row per server kind:
/// each subscriber's wake-ups a second (shardsub's by thread), and both
/// scaled to an hour with their CPU.
pub fn run() {
    let exe = std::env::current_exe().expect("this binary");
    let mut children = Vec::new();
    for kind in testkit::kinds() {
        for (who, _) in WHO {
            let child = Command::new(&exe)
                .args(["--idle-one", kind.name(), who])
                .stdout(Stdio::piped())
                .spawn()
                .expect("idle subscriber starts");
            children.push((kind, child));
        }
    }
    let mut rows: Vec<(testkit::ServerKind, String)> = Vec::new();
    for (kind, child) in children {
        let out = child.wait_with_output().expect("idle subscriber ends");
        assert!(out.status.success(), "idle subscriber failed");
        rows.push((
            kind,
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ));
    }
    println!(
        "| server | idle, {CHANNELS} channels, {SECS} s: wake-ups/s, shardsub (threads), crate \
         | wake-ups/hour | CPU s/hour |"
    );
    println!("|---|---|---|---|");
    for pair in rows.chunks(2) {
        let [(kind, shardsub), (_, peer)] = pair else {
            continue;
        };
        let field = |line: &str, i: usize| line.split('\t').nth(i).unwrap_or("?").to_string();
        println!(
            "| {} | {}, {} | {}, {} | {}, {} |",
            kind.name(),
            field(shardsub, 0),
            field(peer, 0),
            field(shardsub, 1),
            field(peer, 1),
            field(shardsub, 2),
            field(peer, 2),
        );
    }
}

/// One idle subscriber (`KIND WHO`): prints its wake-ups a second (with
/// the threads that woke), wake-ups an hour and CPU seconds an hour,
/// tab-separated.
pub fn one(args: Vec<String>) {
    let [kind, who] = &args[..] else {
        panic!("--idle-one KIND shardsub|redis");
    };
    let kind = testkit::ServerKind::from_name(kind).expect("redis or valkey");
    let Some((_, w)) = WHO.iter().find(|(name, _)| name == who) else {
        panic!("unknown subscriber {who}");
    };
    let server = testkit::Server::start(kind).unwrap();
    let delivery = Delivery::new(0);
    let sub = w.start(server.addr(), CHANNELS, &delivery);
    wait_subscribed(&server, CHANNELS, 1);
    std::thread::sleep(SETTLE);
    let (before, me_before, threads_before) = (
        usage::process(),
        usage::thread(),
        usage::wakeups_by_thread(),
    );
    std::thread::sleep(Duration::from_secs(SECS));
    let me = usage::thread() - me_before;
    let used = usage::process() - before - me;
    let woke = usage::wakeups_by_role_since(&threads_before);
    let secs = SECS as f64;
    let mut per_s = format!("{:.2}", used.voluntary as f64 / secs);
    if matches!(w, Who::Shardsub { .. }) {
        let threads: Vec<String> = woke
            .iter()
            .take(3)
            .map(|(name, n)| format!("{name} {:.2}", *n as f64 / secs))
            .collect();
        per_s += &format!(" ({})", threads.join(", "));
    }
    println!(
        "{per_s}\t{:.0}\t{:.3}",
        used.voluntary as f64 * 3600.0 / secs,
        used.cpu.as_secs_f64() * 3600.0 / secs,
    );
    assert_eq!(delivery.seen(), 0, "an idle subscriber got messages");
    sub.stop();
}
