//! `cargo xtask demo`: installs the servers if missing, then builds and runs
//! the fleet demo, `examples/fanout` (see its doc comment for every flag,
//! and `examples/fanout/README.md` for the manual).

use crate::{install, run};

/// The demo's settings, spelled out so the printed command line says what
/// runs. Arguments given to `cargo xtask demo` follow and override them
/// (faults add to these; `--no-failover` drops the failover).
const DEFAULTS: [&str; 30] = [
    "--server",
    "valkey",
    "--masters",
    "3",
    "--replicas",
    "1",
    "--engines",
    "200",
    "--channels",
    "20000",
    "--partitions",
    "128",
    "--ramp",
    "5000:1.5:12",
    "--knee-lag-ms",
    "100",
    "--seconds",
    "100",
    "--payload",
    "256",
    "--failover",
    "15",
    "--storm",
    "40",
    "--report",
    "target/demo-report",
    "--io-threads",
    "2",
    "--target",
    "1000000",
];

const ABOUT: &str = "\
xtask: the fleet demo (examples/fanout) starts a local Valkey cluster (3 primaries,
       1 replica each) and a fleet of 200 subscriber instances, each a full
       PubSub with its own connections as on a separate app node, sharing one
       runtime (2 I/O, 1 control and 2 worker threads in all), over 20,000
       channels in 128
       partitions. A publisher sends 256-byte messages to random channels,
       5,000/s at first and 1.5 times more every 12 s, until lag p99 stays
       above 100 ms or messages drop (the knee; at most 100 s). At 15 s a
       replica takes over a primary (CLUSTER FAILOVER), at 40 s every pubsub
       connection is killed (a reconnect storm): what moved, the gap events,
       how soon delivery was back, SSUBSCRIBEs per node. The live view shows
       published/s, delivered/s, lag, drops, gaps, connections and rebuilds.
       At the end every message is accounted for, and the servers' own counts
       (CLIENT LIST, INFO commandstats, INFO CPU) go into target/demo-report/
       (report.json, report.md, report.html with plots), with a sizing answer
       for 1,000,000 msg/s taken at the knee. The servers share this
       machine's cores with the fleet: the numbers are a lower bound.
       About 1.5 minutes after the build; the servers are stopped at the end.";

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
