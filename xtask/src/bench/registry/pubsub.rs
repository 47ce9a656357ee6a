//! The Pub/Sub and cluster tables of the registry.

use super::{
    cargo, fleet_report_dir, measure_only, release_example, scaling_dir, step, Cmd, Entry, Program,
    Render, Step, FLEET_ENGINES, FLEET_PAIRS, SCALING_MODES, SCALING_NODES, SERVERS,
};

/// Pub/Sub throughput, the subscriber peer comparisons (full speed, then
/// paced rates and idle), 1M channels, and the three
/// `examples/cluster_bench.rs` tables.
pub fn pubsub_and_cluster() -> Vec<Entry> {
    let bench = |name: &str| cargo(&["bench", "-p", "shardsub", "--bench", name, "--no-run"]);
    let cluster_build = release_example("cluster_bench");
    let cluster = |label: &str, args: &[&str]| {
        step(
            label,
            Cmd::new(Program::Target("release/examples/cluster_bench"), args),
        )
    };
    vec![
        Entry {
            name: "pubsub_throughput",
            section: "Pub/Sub: throughput",
            estimate_s: 40,
            measured: true,
            servers: true,
            min_cpus: 0,
            build: vec![bench("pubsub_throughput")],
            steps: vec![step(
                "",
                cargo(&["bench", "-p", "shardsub", "--bench", "pubsub_throughput"])
                    .env("PUBSUB_BENCH_SECS", "3"),
            )],
            render: Render::Tables,
        },
        Entry {
            name: "pubsub_peers",
            section: "Pub/Sub: subscriber vs the redis crate",
            estimate_s: 90,
            measured: true,
            servers: true,
            min_cpus: 0,
            build: vec![cargo(&[
                "build",
                "--release",
                "--manifest-path",
                "benches/peers/Cargo.toml",
                "--bin",
                "pubsub_cmp",
            ])],
            steps: vec![step(
                "",
                cargo(&[
                    "run",
                    "--release",
                    "--manifest-path",
                    "benches/peers/Cargo.toml",
                    "--bin",
                    "pubsub_cmp",
                ]),
            )],
            render: Render::Tables,
        },
        subscriber_rates(),
        subscriber_grid(),
        fleet_instances(),
        scaling(),
        Entry {
            name: "pubsub_1m_channels",
            section: "Pub/Sub: 1M channels on one server",
            estimate_s: 55,
            measured: true,
            servers: true,
            min_cpus: 0,
            build: vec![bench("pubsub_subscribe")],
            steps: vec![step(
                "",
                cargo(&["bench", "-p", "shardsub", "--bench", "pubsub_subscribe"]),
            )],
            render: Render::Tables,
        },
        Entry {
            name: "history_cost",
            section: "What history costs per publish",
            estimate_s: 15,
            measured: true,
            servers: true,
            min_cpus: 0,
            build: vec![release_example("history_cost")],
            steps: ["", "--valkey"]
                .into_iter()
                .flat_map(|kind| [None, Some("--cluster")].map(move |c| (kind, c)))
                .map(|(kind, c)| {
                    let mut args = vec!["--messages", "30000"];
                    args.extend(
                        [kind, c.unwrap_or("")]
                            .into_iter()
                            .filter(|a| !a.is_empty()),
                    );
                    step(
                        "",
                        Cmd::new(Program::Target("release/examples/history_cost"), &args),
                    )
                })
                .collect(),
            render: Render::Tables,
        },
        Entry {
            name: "history_recovery_cost",
            section: "What recovery costs",
            estimate_s: 15,
            measured: true,
            servers: true,
            min_cpus: 0,
            build: vec![release_example("history_recovery_cost")],
            steps: vec![
                step(
                    "Redis:",
                    Cmd::new(
                        Program::Target("release/examples/history_recovery_cost"),
                        &[],
                    ),
                ),
                step(
                    "Valkey:",
                    Cmd::new(
                        Program::Target("release/examples/history_recovery_cost"),
                        &["--valkey"],
                    ),
                ),
            ],
            render: Render::Tables,
        },
        Entry {
            name: "cluster_cpu",
            section: "Cluster: server CPU, sharded vs classic",
            estimate_s: 50,
            measured: true,
            servers: true,
            min_cpus: 0,
            build: vec![cluster_build.clone()],
            steps: vec![
                cluster("Redis:", &["cpu", "redis", "400000"]),
                cluster("Valkey:", &["cpu", "valkey", "400000"]),
            ],
            render: Render::Tables,
        },
        Entry {
            name: "cluster_cpu_per_primary",
            section: "Cluster: server CPU at the same load per primary",
            // 60-66 s with the three runs per row on ac6f5cd.
            estimate_s: 70,
            measured: true,
            servers: true,
            min_cpus: 0,
            build: vec![cluster_build.clone()],
            steps: vec![
                cluster("Redis:", &["cpu-per-primary", "redis", "300000", "3"]),
                cluster("Valkey:", &["cpu-per-primary", "valkey", "300000", "3"]),
            ],
            render: Render::Tables,
        },
        Entry {
            name: "cluster_resubscribe",
            section: "Cluster: SSUBSCRIBE per master after a storm",
            estimate_s: 10,
            measured: true,
            servers: true,
            min_cpus: 0,
            build: vec![cluster_build.clone()],
            steps: vec![
                cluster("Redis:", &["resubscribe", "redis", "4", "5000"]),
                cluster("Valkey:", &["resubscribe", "valkey", "4", "5000"]),
            ],
            render: Render::Tables,
        },
        Entry {
            name: "cluster_publish_cost",
            section: "Cluster: client cost of a redirect-safe publish",
            // 33 s in the full run on 49b2686.
            estimate_s: 45,
            measured: true,
            servers: true,
            min_cpus: 0,
            build: vec![cluster_build],
            steps: vec![
                cluster("Redis:", &["publish-cost", "redis", "1000000"]),
                cluster("Valkey:", &["publish-cost", "valkey", "1000000"]),
            ],
            render: Render::Tables,
        },
    ]
}

/// A run of the fleet demo (`examples/fanout`) with `args`, no live view,
/// its report written to `report` under the scratch folder.
fn fanout(args: &[&str], report: &str) -> Step {
    let dir = format!("{{scratch}}/{report}");
    let mut all = args.to_vec();
    all.extend(["--no-live", "--report", dir.as_str()]);
    measure_only(Cmd::new(Program::Target("release/examples/fanout"), &all))
}

/// The fleet demo at 5,000 msg/s over 20,000 channels on 3 primaries, with
/// 1 and then 200 subscriber instances on one runtime, in turn, two pairs
/// per server; each run writes its `report.json`, and the table is made
/// from them.
fn fleet_instances() -> Entry {
    let mut steps = Vec::new();
    for (kind, _) in SERVERS {
        for pair in 1..=FLEET_PAIRS {
            for engines in FLEET_ENGINES {
                let n = engines.to_string();
                let args = [
                    "--server",
                    kind,
                    "--masters",
                    "3",
                    "--replicas",
                    "0",
                    "--channels",
                    "20000",
                    "--rate",
                    "5000",
                    "--seconds",
                    "15",
                    "--engines",
                    n.as_str(),
                ];
                steps.push(fanout(&args, &fleet_report_dir(kind, engines, pair)));
            }
        }
    }
    Entry {
        name: "fleet_instances",
        section: "Pub/Sub: many instances on one runtime",
        estimate_s: 160,
        measured: true,
        servers: true,
        min_cpus: 0,
        build: vec![release_example("fanout")],
        steps,
        render: Render::FleetInstances,
    }
}

/// The reference text's scaling, on a machine with a core per server: the
/// fleet demo on Redis ramping to its knee (lag p99 past 100 ms, or drops)
/// with 1, 2, 4 and 8 standalone servers (client-side sharding) and a
/// node-grouped cluster of as many primaries; 8 subscriber instances over
/// 100,000 channels, a publisher instance per primary. About 8 minutes.
fn scaling() -> Entry {
    let mut steps = Vec::new();
    for mode in SCALING_MODES {
        for nodes in SCALING_NODES {
            let n = nodes.to_string();
            let ramp = format!("{}:1.35:4", 100_000 * nodes);
            let args = [
                "--server",
                "redis",
                "--mode",
                mode,
                "--masters",
                n.as_str(),
                "--replicas",
                "0",
                "--engines",
                "8",
                "--publishers",
                n.as_str(),
                "--channels",
                "100000",
                "--ramp",
                ramp.as_str(),
                "--seconds",
                "40",
                "--io-threads",
                "4",
            ];
            steps.push(fanout(&args, &scaling_dir(mode, nodes)));
        }
    }
    Entry {
        name: "scaling",
        section: "Pub/Sub: scaling with servers (16 cores)",
        estimate_s: 480,
        measured: false,
        servers: true,
        min_cpus: 16,
        build: vec![release_example("fanout")],
        steps,
        render: Render::Scaling,
    }
}

const PEERS: [&str; 2] = ["--manifest-path", "benches/peers/Cargo.toml"];

/// `cargo run --release` of the peers crate's `pubsub_cmp` with `args`.
fn pubsub_cmp(args: &[&str]) -> Cmd {
    let head = [
        "run",
        "--release",
        PEERS[0],
        PEERS[1],
        "--bin",
        "pubsub_cmp",
        "--",
    ];
    cargo(&[&head[..], args].concat())
}

/// Builds the peers crate's `pubsub_cmp`.
fn pubsub_cmp_build() -> Cmd {
    cargo(&[
        "build",
        "--release",
        PEERS[0],
        PEERS[1],
        "--bin",
        "pubsub_cmp",
    ])
}

/// One subscriber at 1k, 10k, 100k msg/s and the maximum beside the
/// `redis` crate, a step per server (their rows make one table), then
/// both idle (`pubsub_cmp --rates`, `--idle`).
fn subscriber_rates() -> Entry {
    let mut steps: Vec<_> = SERVERS
        .iter()
        .map(|(kind, _)| step("", pubsub_cmp(&["--rates"]).env("SHARDSUB_SERVERS", kind)))
        .collect();
    steps.push(step("", pubsub_cmp(&["--idle"])));
    Entry {
        name: "subscriber_rates",
        section: "Pub/Sub: one subscriber at realistic rates vs the redis crate",
        // 147 s measured at load average 3-5.6 (about 55 s per server: 3
        // repetitions of 4 rates x 3 subscribers; 34 s idle).
        estimate_s: 150,
        measured: true,
        servers: true,
        min_cpus: 0,
        build: vec![pubsub_cmp_build()],
        steps,
        render: Render::Tables,
    }
}

/// Five subscribers at once, each a process (shardsub, shardsub with
/// `delivery_delay` 0, the `redis` crate on a current-thread and on a
/// 2-worker runtime, `fred`), on the same traffic: rate {1k, 10k, 50k
/// msg/s} × channels {1, 100, 10,000} × publisher shape {one `PUBLISH` a
/// write, a batch every 1 ms}, on both servers, 3 repetitions
/// (`pubsub_cmp --grid`; issue 45). One step for both servers, so that
/// `SHARDSUB_SERVERS` picks them, and `SUBSCRIBER_GRID_CELLS` /
/// `SUBSCRIBER_GRID_REPS` make a smoke run of it (see the bench's
/// `grid.rs`).
fn subscriber_grid() -> Entry {
    Entry {
        name: "subscriber_grid",
        section: "Pub/Sub: subscribers at rates × channels × publisher shapes",
        // 18 cells x 2 servers x 3 repetitions at about 5.3 s a cell (1 s
        // of warm-up, a 4 s window, five subscribers started and
        // subscribed): smoke runs of 2 and 4 cells took 10 and 21 s at
        // load average 4-5.
        estimate_s: 600,
        measured: false,
        servers: true,
        min_cpus: 0,
        build: vec![pubsub_cmp_build()],
        steps: vec![step("", pubsub_cmp(&["--grid"]))],
        render: Render::Tables,
    }
}
