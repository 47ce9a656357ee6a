//! Every generated table of BENCHMARKS.md: its name, what builds it, what
//! measures it, how long that takes here, and how the output becomes
//! Markdown. Each estimate is the measured (or, where marked, the
//! expected) wall time of the measuring steps on the shared 2-core machine,
//! not counting builds; `cargo xtask bench --list` prints them.

/// The program a command runs.
#[derive(Clone, Debug)]
pub enum Program {
    /// `cargo`, as the one running xtask.
    Cargo,
    /// A file under the target directory (`release/examples/…`).
    Target(&'static str),
    /// A file under the workspace root (`benches/peers/callgrind.sh`).
    Script(&'static str),
    /// `valgrind --tool=callgrind --callgrind-out-file=<target>/xtask-bench/<out>
    /// <target>/<binary> …`.
    Callgrind {
        out: String,
        binary: &'static str,
        extra: &'static [&'static str],
    },
}

/// One command line with its extra environment.
#[derive(Clone, Debug)]
pub struct Cmd {
    pub program: Program,
    pub args: Vec<String>,
    pub env: Vec<(&'static str, String)>,
}

impl Cmd {
    fn new(program: Program, args: &[&str]) -> Self {
        Self {
            program,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
        }
    }

    fn env(mut self, key: &'static str, value: &str) -> Self {
        self.env.push((key, value.into()));
        self
    }
}

fn cargo(args: &[&str]) -> Cmd {
    Cmd::new(Program::Cargo, args)
}

/// `cargo build --release --example NAME`.
fn release_example(name: &str) -> Cmd {
    cargo(&["build", "--release", "--example", name])
}

/// A measuring command; its label (if any) goes above its tables.
#[derive(Clone, Debug)]
pub struct Step {
    pub label: Option<String>,
    pub cmd: Cmd,
    /// Whether [`Render::Tables`] reads a table from its stdout.
    pub prints_table: bool,
}

fn step(label: &str, cmd: Cmd) -> Step {
    Step {
        label: (!label.is_empty()).then(|| label.to_string()),
        cmd,
        prints_table: true,
    }
}

/// A measuring step whose output is not a table (criterion runs whose
/// results a later step reads).
fn measure_only(cmd: Cmd) -> Step {
    Step {
        label: None,
        cmd,
        prints_table: false,
    }
}

/// How a table is made from the steps.
#[derive(Clone, Debug)]
pub enum Render {
    /// The Markdown tables the steps print (runs of lines starting with
    /// `|`). Consecutive unlabelled tables with the same header are merged.
    Tables,
    /// Criterion's median for each `(benchmark id, what it measures)`,
    /// read from `<target>/criterion/<id>/new/estimates.json`.
    Criterion(&'static [(&'static str, &'static str)]),
    /// Instructions per delivered message from callgrind totals at two
    /// round counts (`examples/subscribe_cost.rs`).
    SubscribeCost,
    /// Library CPU of 1 and 200 instances side by side, from the fleet
    /// demo's `report.json` files ([`fleet_report_dir`]).
    FleetInstances,
    /// Delivered msg/s at the knee per mode and primary count against the
    /// reference text's, from the fleet demo's reports ([`scaling_dir`]).
    Scaling,
}

/// The reference text's delivered msg/s for one Redis instance (256-byte
/// messages, a dedicated core); it reports about 5M on 8.
pub const REFERENCE_PER_INSTANCE: f64 = 650_000.0;

/// The `scaling` table's placements: client-side sharding and a cluster of
/// the same size, node-grouped.
pub const SCALING_MODES: [&str; 2] = ["shards", "node-grouped"];

/// The `scaling` table's primary counts.
pub const SCALING_NODES: [u32; 4] = [1, 2, 4, 8];

/// Where a `scaling` run writes its report, under the scratch folder.
pub fn scaling_dir(mode: &str, nodes: u32) -> String {
    format!("scaling/{mode}.{nodes}")
}

/// Instances per run of the `fleet_instances` table: one, then many on
/// the same runtime.
pub const FLEET_ENGINES: [u32; 2] = [1, 200];

/// Pairs of runs (one of each size, in turn) per server.
pub const FLEET_PAIRS: u32 = 2;

/// Where a `fleet_instances` run writes its report, under the scratch
/// folder: `fleet_instances/<server>.<engines>.<pair>`.
pub fn fleet_report_dir(server: &str, engines: u32, pair: u32) -> String {
    format!("fleet_instances/{server}.{engines}.{pair}")
}

/// One table.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: &'static str,
    /// The BENCHMARKS.md section the table belongs to.
    pub section: &'static str,
    /// Expected seconds of the measuring steps (builds excluded).
    pub estimate_s: u32,
    /// Whether `estimate_s` was measured here (`true`) or is expected from
    /// the sample sizes and earlier hand runs.
    pub measured: bool,
    /// Whether the steps start Redis and Valkey (installed first).
    pub servers: bool,
    /// Fewer CPUs than this: the table is not measured here (left as it
    /// was), and does not count in the whole run's time (0: any machine).
    pub min_cpus: usize,
    pub build: Vec<Cmd>,
    pub steps: Vec<Step>,
    pub render: Render,
}

mod pubsub;

const SERVERS: [(&str, &str); 2] = [("redis", "Redis"), ("valkey", "Valkey")];

/// Rounds of `subscribe_cost` for its two callgrind runs.
pub const COST_ROUNDS: [u32; 2] = [20, 120];

const SHARDCORE: &[(&str, &str)] = &[
    (
        "key_slot/16B",
        "CRC16 (slice-by-16) of a 16-byte key, no tag",
    ),
    ("key_slot/64B", "64-byte key, no tag"),
    (
        "key_slot/64B_tagged",
        "64-byte key whose `{…}` tag is 12 bytes",
    ),
    (
        "channel/channel_hash/25B",
        "FNV-1a 64 + fmix64 of a 25-byte channel",
    ),
    ("channel/partition_of/P1024", "channel → partition"),
    (
        "channel/worker_of/16",
        "channel → dispatch worker (hash + jump hash)",
    ),
    (
        "channel/redis_channel_into/P1024",
        "channel → partition → `{TAG}.channel` into a caller's buffer, no allocation",
    ),
    (
        "channel/redis_channel_into/P1000",
        "same, runtime-computed (non-power-of-two) table",
    ),
    (
        "channel/partitions_new/P1000",
        "building a non-power-of-two table at run time",
    ),
    (
        "plan/1M_channels/P1024/6_nodes/16_workers",
        "planning SSUBSCRIBEs for 1M channels already grouped by partition (borrows slices: cost is per partition, not per channel)",
    ),
    (
        "plan/group_then_plan/1M_channels",
        "hashing 1M channels into partitions, grouping, then planning",
    ),
];

/// Expected seconds of every build the entries need, from a clean target
/// directory; nothing when they are up to date. Measured at load average
/// 5-7: the peers crate 5 min 13 s (release) + 4 min 28 s (its bench
/// profile, criterion on top), the root crate's release examples 2 min
/// 50 s and its benches 33 s.
pub const BUILDS_ESTIMATE_S: u32 = 840;

/// Every table, in BENCHMARKS.md order.
pub fn all() -> Vec<Entry> {
    let peers = ["--manifest-path", "benches/peers/Cargo.toml"];
    let mut out = vec![Entry {
        name: "shardcore",
        section: "shardcore",
        estimate_s: 65,
        measured: true,
        servers: false,
        min_cpus: 0,
        build: vec![cargo(&[
            "bench",
            "-p",
            "shardsub-shardcore",
            "--bench",
            "shardcore",
            "--no-run",
        ])],
        steps: vec![step(
            "",
            cargo(&[
                "bench",
                "-p",
                "shardsub-shardcore",
                "--bench",
                "shardcore",
                "--",
                "--warm-up-time",
                "1",
                "--measurement-time",
                "3",
            ]),
        )],
        render: Render::Criterion(SHARDCORE),
    }];
    out.push(Entry {
        name: "sequential",
        section: "engine: flush delay vs sequential callers",
        estimate_s: 10,
        measured: true,
        servers: true,
        min_cpus: 0,
        build: vec![cargo(&[
            "bench",
            "-p",
            "shardsub",
            "--bench",
            "sequential",
            "--no-run",
        ])],
        steps: SERVERS
            .iter()
            .map(|(kind, label)| {
                step(
                    &format!("{label}:"),
                    cargo(&[
                        "bench",
                        "-p",
                        "shardsub",
                        "--bench",
                        "sequential",
                        "--",
                        "table",
                    ])
                    .env("SHARDSUB_SERVERS", kind),
                )
            })
            .collect(),
        render: Render::Tables,
    });
    let mut load = Vec::new();
    for (kind, _) in SERVERS {
        for (threads, delay) in [("1", "0"), ("1", "100"), ("8", "100")] {
            let mut args = vec!["--threads", threads, "--flush-delay-us", delay];
            if kind == "valkey" {
                args.push("--valkey");
            }
            load.push(step(
                "",
                Cmd::new(Program::Target("release/examples/publish_load"), &args)
                    .env("SHARDSUB_BENCH_MARKDOWN", "1"),
            ));
        }
    }
    out.push(Entry {
        name: "publish_load",
        section: "engine: fire-and-forget publishing",
        estimate_s: 25,
        measured: true,
        servers: true,
        min_cpus: 0,
        build: vec![release_example("publish_load")],
        steps: load,
        render: Render::Tables,
    });
    // Half the hand run's 1,000,000 per run, to keep the whole
    // regeneration under 30 minutes (61 s measured on 44342a3).
    out.push(publish_cmp("publish_peers", 110, &["--messages", "500000"]));
    // Sequential runs go at ~10-50k msg/s: 20,000 per run keeps both
    // servers near a minute. shardsub runs three times: threads waiting on
    // `publish_wait`, and tokio tasks awaiting `Engine::publish_pending` or
    // `Engine::publish_async` like the peers' tasks (57-63 s on ed181d9).
    out.push(publish_cmp(
        "publish_sequential",
        60,
        &[
            "--mode",
            "sequential",
            "--only",
            "shardsub,shardsub-tasks,shardsub-async,redis,fred",
            "--conc",
            "1,4",
            "--messages",
            "20000",
            "--warmup",
            "2000",
        ],
    ));
    out.push(Entry {
        name: "parser",
        section: "Parser",
        estimate_s: 190,
        measured: true,
        servers: false,
        min_cpus: 0,
        build: vec![cargo(&[
            "bench", peers[0], peers[1], "--bench", "parsers", "--no-run",
        ])],
        steps: vec![
            measure_only(cargo(&["bench", peers[0], peers[1], "--bench", "parsers"])),
            step(
                "",
                cargo(&[
                    "run",
                    "--release",
                    peers[0],
                    peers[1],
                    "--bin",
                    "table",
                    "--",
                    "{peers_target}/criterion",
                ]),
            ),
        ],
        render: Render::Tables,
    });
    out.push(Entry {
        name: "parser_instructions",
        section: "Parser (instructions per frame)",
        estimate_s: 90,
        measured: true,
        servers: false,
        min_cpus: 0,
        build: vec![cargo(&[
            "build",
            "--release",
            peers[0],
            peers[1],
            "--bin",
            "once",
        ])],
        steps: [
            "push_10k_smessage_256B",
            "array_100x1KiB",
            "cluster_slots_redis7",
            "cluster_slots_valkey9",
        ]
        .iter()
        .flat_map(|stream| {
            ["whole", "chunked_1460"].map(|mode| {
                step(
                    &format!("`{stream}`, {mode}:"),
                    Cmd::new(
                        Program::Script("benches/peers/callgrind.sh"),
                        &[stream, mode],
                    ),
                )
            })
        })
        .collect(),
        render: Render::Tables,
    });
    out.push(Entry {
        name: "subscribe_cost",
        section: "Pub/Sub: subscriber instructions per delivered message",
        estimate_s: 20,
        measured: true,
        servers: true,
        min_cpus: 0,
        build: vec![release_example("subscribe_cost")],
        steps: SERVERS
            .iter()
            .flat_map(|(kind, _)| {
                COST_ROUNDS.map(|rounds| {
                    let rounds = rounds.to_string();
                    let mut args = vec!["--rounds", rounds.as_str()];
                    if *kind == "valkey" {
                        args.push("--valkey");
                    }
                    let program = Program::Callgrind {
                        out: format!("subscribe_cost.{kind}.{rounds}.out"),
                        binary: "release/examples/subscribe_cost",
                        extra: &[],
                    };
                    step(kind, Cmd::new(program, &args))
                })
            })
            .collect(),
        render: Render::SubscribeCost,
    });
    out.extend(pubsub::pubsub_and_cluster());
    out
}

/// The entries named in `--only a,b` (every entry when `None`).
///
/// # Errors
///
/// A name that is no entry's.
pub fn select(only: Option<&str>) -> Result<Vec<Entry>, String> {
    let all = all();
    let Some(list) = only else { return Ok(all) };
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match all.iter().find(|e| e.name == name) {
            Some(e) if !out.iter().any(|o: &Entry| o.name == name) => out.push(e.clone()),
            Some(_) => {}
            None => {
                let names: Vec<&str> = all.iter().map(|e| e.name).collect();
                return Err(format!(
                    "no table named {name:?}; tables: {}",
                    names.join(", ")
                ));
            }
        }
    }
    if out.is_empty() {
        return Err("--only needs at least one table name".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

/// A table of `benches/peers`' `publish_cmp`, one step per server with
/// `args` after `--kinds KIND`.
fn publish_cmp(name: &'static str, estimate_s: u32, args: &[&str]) -> Entry {
    let peers = ["--manifest-path", "benches/peers/Cargo.toml"];
    let bin = ["--bin", "publish_cmp"];
    Entry {
        name,
        section: "Publish vs peers",
        estimate_s,
        measured: true,
        servers: true,
        min_cpus: 0,
        build: vec![cargo(&[&["build", "--release"][..], &peers, &bin].concat())],
        steps: SERVERS
            .iter()
            .map(|(kind, label)| {
                let run = [
                    &["run", "--release"][..],
                    &peers,
                    &bin,
                    &["--", "--kinds", kind],
                    args,
                ];
                step(&format!("{label}:"), cargo(&run.concat()))
            })
            .collect(),
        render: Render::Tables,
    }
}
