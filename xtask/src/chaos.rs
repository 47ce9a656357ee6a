//! `cargo xtask chaos --minutes N --seed S [--server redis|valkey] [--report FILE]
//! [--history | --raw]`: the chaos suite (`chaos::chaos` in the test suite,
//! tests/suite/chaos.rs) in release mode, for as
//! long as asked, then its per-fault tables; with `--history`, half the
//! channels recoverable under the strict verdict (`CHAOS_HISTORY=1`); with
//! `--raw`, partitions off (`CHAOS_RAW=1`: channels keep their names).

use std::path::PathBuf;

use crate::{install, run};

/// Parsed flags.
#[derive(Debug, PartialEq)]
struct Options {
    minutes: f64,
    seed: Option<u64>,
    server: Option<String>,
    report: Option<PathBuf>,
    history: bool,
    raw: bool,
}

const USAGE: &str = "usage: cargo xtask chaos [--minutes N] [--seed S] \
                     [--server redis|valkey] [--report FILE] [--history | --raw]";

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        minutes: 1.0,
        seed: None,
        server: None,
        report: None,
        history: false,
        raw: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--minutes" => {
                let v = value()?;
                o.minutes = v
                    .parse()
                    .ok()
                    .filter(|m: &f64| *m > 0.0 && m.is_finite())
                    .ok_or_else(|| format!("--minutes {v:?}: a positive number"))?;
            }
            "--seed" => {
                let v = value()?;
                o.seed = Some(v.parse().map_err(|_| format!("--seed {v:?}: a number"))?);
            }
            "--server" => {
                let v = value()?;
                if testkit::ServerKind::from_name(&v).is_none() {
                    return Err(format!("--server {v:?}: redis or valkey"));
                }
                o.server = Some(v);
            }
            "--report" => o.report = Some(PathBuf::from(value()?)),
            "--history" => o.history = true,
            "--raw" => o.raw = true,
            other => return Err(format!("unknown flag {other:?}\n{USAGE}")),
        }
    }
    if o.history && o.raw {
        return Err(format!(
            "--history and --raw exclude each other (recoverable channels need partitions)\n{USAGE}"
        ));
    }
    Ok(o)
}

pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let tools = install::servers()?;
    let seed = o.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let report = o
        .report
        .clone()
        .unwrap_or_else(|| run::root().join("target/chaos-report.md"));
    let report = if report.is_absolute() {
        report
    } else {
        std::env::current_dir()
            .map_err(|e| format!("current directory: {e}"))?
            .join(report)
    };
    let mut command = run::cargo();
    command
        .args(["test", "--release", "-p", "shardsub", "--test", "suite"])
        .args(["--", "--exact", "chaos::chaos", "--nocapture"])
        .envs(tools.env())
        .env("CHAOS_MINUTES", o.minutes.to_string())
        .env("CHAOS_SEED", seed.to_string())
        .env("CHAOS_REPORT", &report);
    if let Some(server) = &o.server {
        command.env("CHAOS_SERVERS", server);
    }
    if o.history {
        command.env("CHAOS_HISTORY", "1");
    }
    if o.raw {
        command.env("CHAOS_RAW", "1");
    }
    println!(
        "xtask: chaos{}: {} min of faults per server, seed {seed}, servers {}; tables to {}",
        match (o.history, o.raw) {
            (true, _) => " (history)",
            (false, true) => " (partitions off)",
            (false, false) => "",
        },
        o.minutes,
        o.server.as_deref().unwrap_or("redis,valkey"),
        report.display()
    );
    let result = run::status(&mut command);
    match std::fs::read_to_string(&report) {
        Ok(tables) => println!(
            "\nxtask: chaos: per-fault tables ({})\n\n{tables}",
            report.display()
        ),
        Err(e) => println!("xtask: chaos: no tables at {} ({e})", report.display()),
    }
    result.map_err(|e| format!("{e} (seed {seed})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_parse_and_bad_ones_are_refused() {
        let o = parse(&args("--minutes 10 --seed 42 --server valkey")).unwrap();
        assert_eq!(o.minutes, 10.0);
        assert_eq!(o.seed, Some(42));
        assert_eq!(o.server.as_deref(), Some("valkey"));
        assert_eq!(parse(&[]).unwrap().minutes, 1.0);
        assert!(!o.history && !parse(&[]).unwrap().history);
        assert!(parse(&args("--history --minutes 5")).unwrap().history);
        assert!(parse(&args("--raw")).unwrap().raw);
        assert!(parse(&args("--raw --history")).is_err());
        for bad in [
            "--minutes 0",
            "--minutes x",
            "--seed -1",
            "--server memcached",
            "--seed",
            "-x",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
    }
}
