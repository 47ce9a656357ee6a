//! Where a channel lives, for an operator with a shell: its partition,
//! tag, key slot and server name on a cluster, and its server among N
//! (the formulas are in `WIRE_FORMAT.md`).
//!
//! ```text
//! cargo run -p shardsub-shardcore --example wire_name -- --partitions 128 --servers 3 news room:1
//! ```
//!
//! prints, after a `#` header, one line per channel:
//! `channel<TAB>partition<TAB>tag<TAB>slot<TAB>server name<TAB>shard`.
//! On a cluster, `redis-cli -c -p PORT SPUBLISH '<server name>' hello`
//! reaches shardsub's subscribers of the channel (without the envelope's
//! or a recoverable channel's header: a subscriber delivers such a
//! message as it is); on N servers, `PUBLISH <channel> hello` to server
//! `shard` (0-based, in the order every instance lists them).
//! `tests/suite/examples/wire_publish.py --wire shardcore/wire --names …`
//! prints the same lines.

use std::process::ExitCode;

use shardcore::{shard_of, Partitions};

const USAGE: &str = "usage: wire_name [--partitions P] [--servers N] CHANNEL...";

fn main() -> ExitCode {
    let (mut partitions, mut servers, mut channels) = (128u32, 1u32, Vec::new());
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let count = match arg.as_str() {
            "--partitions" => &mut partitions,
            "--servers" => &mut servers,
            _ => {
                channels.push(arg);
                continue;
            }
        };
        match it.next().and_then(|v| v.parse().ok()) {
            Some(n) => *count = n,
            None => {
                eprintln!("{arg} needs a number\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let parts = match Partitions::new(partitions) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if channels.is_empty() || servers == 0 {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    println!(
        "# P = {partitions}, N = {servers}: channel, partition, tag, slot, server name, shard"
    );
    for c in channels {
        let k = parts.partition_of(c.as_bytes());
        println!(
            "{c}\t{k}\t{}\t{}\t{}\t{}",
            String::from_utf8_lossy(parts.tag(k)),
            parts.slot(k),
            String::from_utf8_lossy(&parts.redis_channel(c.as_bytes())),
            shard_of(c.as_bytes(), servers),
        );
    }
    ExitCode::SUCCESS
}
