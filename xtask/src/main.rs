//! `cargo xtask demo | compare | size | test | chaos | bench | layers | install | fuzz`: the project's
//! entry points. Each installs what is missing first and says so.

mod bench;
mod chaos;
mod circles;
mod compare;
mod demo;
#[cfg(test)]
mod doc_limits;
mod install;
mod layers;
mod lengths;
mod run;
mod size;
mod stress;
mod test;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  demo [ARGS]  the fleet demo: a local Valkey cluster (3 primaries, 1 replica
            each), 200 subscriber instances, a publish rate ramp to the knee,
            a failover and a resubscribe storm, a report and a sizing answer
            (ARGS go to examples/fanout, e.g. --server redis --seconds 20)
  compare [--modes LIST] [--scaling] [--dry-run] [DEMO ARGS]
            the same demo scenario in each mode, one after another, then one
            side-by-side table and which mode to pick (target/compare/
            compare.{md,html,json}); --scaling: one mode over 1, 2, 3 primaries
  size REPORT.json --rate R [--channels C] [--nodes N]
            the sizing answer for a target from a run's measured knee
            (primaries, client cores, and the assumptions behind them)
  test      the whole suite: fmt, clippy, tests on both servers, doc tests,
            cargo package of the shipped crates, benches once, fuzz smoke
  test --stress [--load N] [--repeat N] [--minutes M] [--tests EXPR] [--no-suite]
            the real-server suite while N threads (default: one per CPU) keep
            the cores busy, then the tests that flaked before (or EXPR, a
            nextest filter) N times (default 3) under the same load; nothing
            is retried, skipped or given longer timeouts
  chaos [--minutes N] [--seed S] [--server redis|valkey] [--report FILE]
            the chaos suite (tests/suite/chaos.rs) in release mode: N minutes of
            seeded faults per server (default 1), then the per-fault tables
            (also written as Markdown to FILE, default target/chaos-report.md)
{BENCH}
  layers    the import rule of src/: each top-level module imports only the
            modules below it in xtask/src/layers.rs (no cycles), and only
            the engine, the workers and the control thread's driver read
            the clock
  install   install what is missing (Redis 7, Valkey 9.1, Chromium, cargo-fuzz,
            cargo-nextest)
  fuzz [SECS]  the fuzz seeds and saved regressions (cargo test in fuzz/), then
            every fuzz target for SECS seconds (default 20)

environment:
  SHARDSUB_SERVERS=redis,valkey   server kinds the tests run against
  XTASK_FUZZ_SECS=20              fuzz smoke time per target in `test`
  XTASK_SKIP=fuzz,benches         test steps to skip (fmt, layers, clippy, tests, doc, package, benches, fuzz)";

fn usage() -> String {
    USAGE.replace("{BENCH}", bench::USAGE)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") => demo::run(&args[1..]),
        Some("compare") => compare::run(&args[1..]),
        Some("size") => size::run(&args[1..]),
        Some("test") if args.get(1).is_some_and(|a| a == "--stress") => stress::run(&args[2..]),
        Some("test") => test::run(),
        Some("chaos") => chaos::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("layers") => layers::run(),
        Some("install") => install::all().map(|_| ()),
        Some("fuzz") => {
            let secs = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20);
            test::fuzz_only(secs)
        }
        Some("-h" | "--help" | "help") => {
            println!("{}", usage());
            Ok(())
        }
        other => Err(format!("unknown command {other:?}\n\n{}", usage())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("xtask: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
