//! `examples/tokio_server.rs` against real servers (Redis 7 and Valkey 9):
//! on one server, on two client-side shards and on a 3-master cluster it
//! publishes through its TCP line server with `publish_pending().await`
//! and receives with `recv().await`; its `result:` line must show every
//! message acknowledged and received, in order per channel, nothing
//! dropped or lost silently, and every channel's last message seen.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use testkit::{kinds, Cluster, Server, Servers};

use crate::support;

const CHANNELS: u64 = 16;
const MESSAGES: u64 = 200;

/// Runs the example with `args` and checks its `result:` line.
fn run_and_check(bin: &PathBuf, args: &[String], what: &str) {
    let out = Command::new(bin)
        .args(args)
        .args(["--channels", &CHANNELS.to_string()])
        .args(["--messages", &MESSAGES.to_string()])
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
    let total = CHANNELS * MESSAGES;
    for (k, want) in [
        ("published", total),
        ("acked", total),
        ("received", total),
        ("dropped", 0),
        ("gaps", 0),
        ("reordered", 0),
        ("silent", 0),
        ("channels", CHANNELS),
        ("complete", CHANNELS),
    ] {
        assert_eq!(num(k), want, "{k} in {ctx}");
    }
}

#[test]
fn tokio_example_publishes_and_receives_through_the_async_api() {
    let bin = support::examples::example_binary("tokio_server");
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let args = ["--server".to_string(), server.addr().to_string()];
        run_and_check(&bin, &args, &format!("{kind:?} one server"));
        drop(server);

        let servers = Servers::start(kind, 2).unwrap();
        let args: Vec<String> = servers
            .addrs()
            .iter()
            .flat_map(|a| ["--server".to_string(), a.to_string()])
            .collect();
        run_and_check(&bin, &args, &format!("{kind:?} two shards"));
        drop(servers);

        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let args = ["--cluster".to_string(), cluster.seed_addrs()[0].to_string()];
        run_and_check(&bin, &args, &format!("{kind:?} cluster"));
    }
}
