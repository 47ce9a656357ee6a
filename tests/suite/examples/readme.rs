//! The README's example programs run against real servers (Redis 7 and
//! Valkey 9): `examples/server.rs` on one server, `examples/shards.rs` on
//! three, `examples/cluster.rs` on a three-primary cluster. Each counts
//! every message per channel in order and says `result: ok` only when all
//! arrived with no gap or drop; the test checks that line and its counts.
//! The quick start (`examples/quick_start.rs`, the README's first block)
//! prints the message it published.

use std::process::Command;

use testkit::{Cluster, Server, Servers};

use crate::support;

/// Runs `name` with `args`; returns its `result:` line.
fn run(name: &str, args: &[String]) -> String {
    let bin = support::examples::example_binary(name);
    let out = Command::new(&bin)
        .args(args)
        .output()
        .expect("example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} {args:?}: {stdout}\n{stderr}");
    stdout
        .lines()
        .find(|l| l.starts_with("result: "))
        .unwrap_or_else(|| panic!("{name}: no result line in {stdout}"))
        .to_string()
}

#[test]
fn the_readme_examples_deliver_everything_in_every_placement() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let line = run("server", &[format!("redis://{}", server.addr())]);
        assert!(
            line.starts_with("result: ok delivered=1000 channels_complete=100 gaps=0"),
            "{kind:?}: {line}"
        );

        let servers = Servers::start(kind, 3).expect("servers");
        let urls: Vec<String> = servers
            .addrs()
            .iter()
            .map(|a| format!("redis://{a}"))
            .collect();
        let line = run("shards", &urls);
        assert!(
            line.starts_with("result: ok delivered=3000 channels_complete=300 per_server="),
            "{kind:?}: {line}"
        );
        assert!(
            !line.contains(" 0,") && !line.contains("[0"),
            "{kind:?}: {line}"
        );

        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let seeds: Vec<String> = cluster
            .seed_addrs()
            .iter()
            .map(|a| format!("redis://{a}?cluster=true"))
            .collect();
        let line = run("cluster", &seeds);
        assert_eq!(
            line,
            "result: ok delivered=3000 channels_complete=300 primaries=3 \
             subscribe_connections=3 gaps=0",
            "{kind:?}"
        );
    }
}

/// The README's quick start is `examples/quick_start.rs`, word for word
/// (its crate doc aside), and prints the message it published, on both
/// servers.
#[test]
fn the_quick_start_prints_the_message_it_published() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README");
    let file = std::fs::read_to_string(format!("{root}/examples/quick_start.rs")).expect("example");
    // The README shows it without its crate doc.
    let code = file
        .split_once("\n\n")
        .filter(|(doc, _)| doc.starts_with("//!"))
        .map_or(&file[..], |(_, code)| code);
    assert!(
        readme.contains(&format!("```rust no_run\n{code}```\n")),
        "README.md's quick start is not examples/quick_start.rs"
    );
    let bin = support::examples::example_binary("quick_start");
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let out = Command::new(&bin)
            .arg(format!("redis://{}", server.addr()))
            .output()
            .expect("quick start runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{kind:?}: {stdout}");
        assert_eq!(stdout, "room:1: hello\n", "{kind:?}");
    }
}
