//! `examples/tokio_server.rs` against real servers (Redis 7 and Valkey 9):
//! on one server, on two client-side shards and on a 3-master cluster it
//! builds, publishes, receives (a `Stream`) and closes through the async
//! API on a current-thread runtime; its `result:` line must show every
//! message acknowledged and received, in order per channel, nothing
//! dropped or lost silently, every channel's last message seen, and no
//! call or poll holding the runtime's thread (with a slow handler too).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use testkit::{kinds, Cluster, Server, Servers};

use crate::support;

/// Runs the example with `args` and checks its `result:` line: every
/// message acknowledged and received, none lost, and no call into the
/// library or poll of its futures holding the runtime's only thread (at
/// most 1% over 1 ms, which a busy machine's preemption explains, none
/// over 100 ms), and the drop of the last handle as quick.
fn run_and_check(bin: &PathBuf, args: &[String], (channels, messages): (u64, u64), what: &str) {
    let out = Command::new(bin)
        .args(args)
        .args(["--channels", &channels.to_string()])
        .args(["--messages", &messages.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ctx = format!("{what}: {stdout}\n{stderr}");
    assert!(out.status.success(), "{ctx}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("result: "))
        .unwrap_or_else(|| panic!("no result line: {ctx}"));
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("ok"), "{ctx}");
    let result: HashMap<&str, u64> = words
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k, v.parse().unwrap_or_else(|_| panic!("{k}={v}: {ctx}"))))
        .collect();
    let num = |k: &str| {
        *result
            .get(k)
            .unwrap_or_else(|| panic!("{k} missing: {ctx}"))
    };
    let total = channels * messages;
    for (k, want) in [
        ("published", total),
        ("acked", total),
        ("received", total),
        ("dropped", 0),
        ("gaps", 0),
        ("reordered", 0),
        ("silent", 0),
        ("channels", channels),
        ("complete", channels),
    ] {
        assert_eq!(num(k), want, "{k} in {ctx}");
    }
    // A call that blocks holds the thread for the whole wait (the slow
    // handler's call is 500 ms); a busy machine preempts some polls for
    // a few ms (30 of 12,856 over 1 ms, the longest 12.7 ms, in one loaded
    // CI run), which the bounds leave room for.
    let polls = num("polls");
    assert!(polls >= total, "{ctx}");
    assert!(
        num("slow_polls") * 100 <= polls,
        "over 1% of polls took 1 ms: {ctx}"
    );
    assert!(num("max_poll_us") < 100_000, "{ctx}");
    assert!(num("drop_us") < 100_000, "{ctx}");
}

#[test]
fn tokio_example_publishes_and_receives_through_the_async_api() {
    let bin = support::examples::example_binary("tokio_server");
    let size = (16, 200);
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let args = ["--server".to_string(), server.addr().to_string()];
        run_and_check(&bin, &args, size, &format!("{kind:?} one server"));
        // A slow handler (on the library's workers) never stalls the
        // runtime, and dropping the last handle while its 500 ms call runs
        // returns at once (it took the call's time before).
        let slow = [&args[..], &["--handler-ms".to_string(), "2".to_string()]].concat();
        run_and_check(&bin, &slow, (16, 50), &format!("{kind:?} slow handler"));
        drop(server);

        let servers = Servers::start(kind, 2).unwrap();
        let args: Vec<String> = servers
            .addrs()
            .iter()
            .flat_map(|a| ["--server".to_string(), a.to_string()])
            .collect();
        run_and_check(&bin, &args, size, &format!("{kind:?} two shards"));
        drop(servers);

        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let args = ["--cluster".to_string(), cluster.seed_addrs()[0].to_string()];
        run_and_check(&bin, &args, size, &format!("{kind:?} cluster"));
    }
}
