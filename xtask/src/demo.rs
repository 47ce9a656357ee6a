//! `cargo xtask demo`: installs the servers if missing, then builds and runs
//! the fleet demo, `examples/fanout` (see its doc comment for every flag).

use crate::{install, run};

/// The demo's settings, spelled out so the printed command line says what
/// runs. Arguments given to `cargo xtask demo` follow and override them.
const DEFAULTS: [&str; 18] = [
    "--server",
    "valkey",
    "--masters",
    "3",
    "--replicas",
    "1",
    "--engines",
    "4",
    "--channels",
    "20000",
    "--partitions",
    "128",
    "--seconds",
    "8",
    "--rate",
    "50000",
    "--payload",
    "256",
];

const ABOUT: &str = "\
xtask: the fleet demo (examples/fanout) starts a local Valkey cluster (3 masters,
       1 replica each) and 4 subscriber engines, each its own PubSub as on
       a separate app node, over 20,000 channels in 128 partitions. A publisher
       sends 256-byte messages to random channels at 50,000/s for 8 s, with a
       timestamp envelope so the subscribers measure lag; every second it prints
       rates, drops, lag and gap events. Half-way a replica takes over a master
       (CLUSTER FAILOVER): it shows which partitions moved, the gap events each
       engine got, and how soon delivery was back. The summary counts
       connections and SSUBSCRIBE calls per node as the servers see them, CPU
       per million delivered on both sides, and a sizing estimate. About 15 s
       after the build; the servers are stopped at the end.";

pub fn run(args: &[String]) -> Result<(), String> {
    install::servers()?;
    println!("{ABOUT}");
    let mut command = run::cargo();
    command
        .args([
            "run",
            "--release",
            "-p",
            "shardsub",
            "--example",
            "fanout",
            "--",
        ])
        .args(DEFAULTS)
        .args(args);
    run::status(&mut command)
}
