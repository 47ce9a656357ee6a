//! `cargo xtask compare`: the same scenario in each mode, one after
//! another, then one side-by-side table and which mode to pick; with
//! `--scaling`, one mode over 1, 2, 3 primaries and the scaling curves.
//!
//! Each run is the fleet demo (`examples/fanout`) with `--mode M --report
//! DIR/M --no-live` and the same demo flags; its `report.json` is read back
//! and the comparison written as `DIR/compare.{md,html,json}` (scaling:
//! `DIR/scaling.{md,html,json}`). Every mode starts its own servers (the
//! cluster modes a cluster, `shards` standalone servers, `single` one), all
//! with the same settings.

use std::path::PathBuf;
use std::process::Command;

use fleet_report::{CompareReport, RunReport, ScalingReport};

use crate::{install, run};

/// The modes, in the order they run.
pub const MODES: [&str; 6] = [
    "node-grouped",
    "names-kept",
    "per-partition",
    "classic",
    "shards",
    "single",
];

const USAGE: &str = "\
usage: cargo xtask compare [--dir DIR] [--modes M,M,...] [--scaling [--nodes 1,2,3]]
                           [--dry-run] [--no-run] [DEMO FLAGS...]
  --dir DIR      where the runs and the comparison go (default target/compare)
  --modes LIST   modes to run (default: all six; with --scaling: node-grouped)
  --scaling      run each mode at --nodes primaries instead, and plot the curves
  --nodes LIST   primaries for --scaling (default 1,2,3)
  --dry-run      print the demo commands, run nothing
  --no-run       run nothing; render from the report.json files already in DIR
  DEMO FLAGS     go to every run unchanged (e.g. --server redis --seconds 10
                 --rate 20000, or --ramp 5000:1.5:3); not --mode, --report,
                 --no-live (compare sets them), nor --masters with --scaling;
                 faults (--failover AT, --storm AT, ...) only with cluster modes";

/// Parsed flags.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    dir: PathBuf,
    modes: Vec<String>,
    scaling: bool,
    nodes: Vec<usize>,
    dry_run: bool,
    no_run: bool,
    demo: Vec<String>,
}

fn list<T: std::str::FromStr>(flag: &str, v: &str) -> Result<Vec<T>, String> {
    let items: Result<Vec<T>, _> = v.split(',').map(|s| s.trim().parse()).collect();
    match items {
        Ok(items) if !items.is_empty() => Ok(items),
        _ => Err(format!("{flag}: bad list {v:?}\n{USAGE}")),
    }
}

/// Parses `cargo xtask compare` flags.
///
/// # Errors
///
/// An unknown mode, a bad list, a missing value, or a demo flag that
/// compare sets itself; the message includes the usage.
pub fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        dir: PathBuf::from("target/compare"),
        modes: Vec::new(),
        scaling: false,
        nodes: vec![1, 2, 3],
        dry_run: false,
        no_run: false,
        demo: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--dir" => o.dir = PathBuf::from(value()?),
            "--modes" => o.modes = list::<String>(flag, &value()?)?,
            "--scaling" => o.scaling = true,
            "--nodes" => o.nodes = list::<usize>(flag, &value()?)?,
            "--dry-run" => o.dry_run = true,
            "--no-run" => o.no_run = true,
            "-h" | "--help" => return Err(USAGE.into()),
            "--mode" | "--report" | "--no-live" => {
                return Err(format!("{flag} is set by compare itself\n{USAGE}"))
            }
            other => o.demo.push(other.to_string()),
        }
    }
    if o.scaling && o.demo.iter().any(|a| a == "--masters") {
        return Err(format!(
            "--masters comes from --nodes with --scaling\n{USAGE}"
        ));
    }
    if o.nodes.contains(&0) {
        return Err(format!("--nodes: 0 primaries\n{USAGE}"));
    }
    if o.modes.is_empty() {
        o.modes = if o.scaling {
            vec!["node-grouped".into()]
        } else {
            MODES.iter().map(|m| m.to_string()).collect()
        };
    }
    // The demo injects faults only into a cluster: refuse up front rather
    // than run half the modes, or run the others without the faults.
    let faults = [
        "--failover",
        "--kill",
        "--storm",
        "--reshard",
        "--reshard-atomic",
        "--add-node",
    ];
    let fault = o.demo.iter().find(|a| faults.contains(&a.as_str()));
    let standalone: Vec<&str> = o
        .modes
        .iter()
        .map(String::as_str)
        .filter(|m| matches!(*m, "shards" | "single"))
        .collect();
    if let (Some(fault), false) = (fault, standalone.is_empty()) {
        return Err(format!(
            "{fault}: the demo injects faults only in the cluster modes, not in {}; \
             run --modes node-grouped,per-partition,classic with faults, or leave them out\n{USAGE}",
            standalone.join(", ")
        ));
    }
    for m in &o.modes {
        if !MODES.contains(&m.as_str()) {
            return Err(format!(
                "unknown mode {m:?} (one of {})\n{USAGE}",
                MODES.join(", ")
            ));
        }
        if o.scaling && m == "single" {
            return Err("--scaling: single is one server, it has no node count to vary".into());
        }
    }
    Ok(o)
}

/// One demo run: its mode, primaries (scaling only), directory, arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    mode: String,
    masters: Option<usize>,
    dir: PathBuf,
    args: Vec<String>,
}

/// The runs, in order.
pub fn plan(o: &Options) -> Vec<Planned> {
    let mut out = Vec::new();
    for mode in &o.modes {
        let points: Vec<Option<usize>> = if o.scaling {
            o.nodes.iter().copied().map(Some).collect()
        } else {
            vec![None]
        };
        for masters in points {
            let dir = match masters {
                Some(n) => o
                    .dir
                    .join("scaling")
                    .join(mode)
                    .join(format!("masters-{n}")),
                None => o.dir.join(mode),
            };
            let mut args: Vec<String> = [
                "run",
                "--release",
                "-p",
                "shardsub",
                "--example",
                "fanout",
                "--",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend(["--mode".into(), mode.clone()]);
            if let Some(n) = masters {
                args.extend(["--masters".into(), n.to_string()]);
            }
            args.extend(o.demo.iter().cloned());
            args.extend([
                "--report".into(),
                dir.display().to_string(),
                "--no-live".into(),
            ]);
            out.push(Planned {
                mode: mode.clone(),
                masters,
                dir,
                args,
            });
        }
    }
    out
}

/// Reads each planned run's `report.json` (and writes its `report.md` and
/// `report.html` when missing); a missing or bad one is an error line, the
/// others are kept.
fn collect(planned: &[Planned]) -> (Vec<(Planned, RunReport)>, Vec<String>) {
    let mut runs = Vec::new();
    let mut errors = Vec::new();
    for p in planned {
        match fleet_report::read_run(p.dir.join("report.json")) {
            Ok(r) => {
                // The run's own page, where the demo did not write one.
                if !p.dir.join("report.html").is_file() {
                    let pages = [
                        ("report.md", fleet_report::render_markdown(&r)),
                        ("report.html", fleet_report::render_html(&r)),
                    ];
                    for (name, text) in pages {
                        if let Err(e) = std::fs::write(p.dir.join(name), text) {
                            errors.push(format!("{}: {e}", p.dir.join(name).display()));
                        }
                    }
                }
                runs.push((p.clone(), r));
            }
            Err(e) => errors.push(format!("{}: {e}", p.dir.display())),
        }
    }
    (runs, errors)
}

/// Writes the comparison (or the scaling curves) from what `collect` read.
///
/// # Errors
///
/// Writing the files failed.
fn write(o: &Options, runs: Vec<(Planned, RunReport)>) -> Result<PathBuf, String> {
    let fail = |e: std::io::Error| format!("writing into {}: {e}", o.dir.display());
    if o.scaling {
        let mut all: Vec<ScalingReport> = Vec::new();
        for (p, r) in runs {
            match all.iter_mut().find(|s| s.mode == p.mode) {
                Some(s) => s.runs.push(r),
                None => all.push(ScalingReport {
                    mode: p.mode,
                    runs: vec![r],
                }),
            }
        }
        for s in &mut all {
            s.runs.sort_by_key(|r| r.meta.masters);
        }
        fleet_report::write_scaling_dir(&o.dir, &all).map_err(fail)?;
        println!("{}", fleet_report::render_scaling_markdown(&all));
        Ok(o.dir.join("scaling.html"))
    } else {
        let c = CompareReport {
            runs: runs.into_iter().map(|(_, r)| r).collect(),
        };
        fleet_report::write_compare_dir(&o.dir, &c).map_err(fail)?;
        println!("{}", fleet_report::render_compare_markdown(&c));
        Ok(o.dir.join("compare.html"))
    }
}

fn command(p: &Planned) -> Command {
    let mut c = run::cargo();
    c.args(&p.args);
    c
}

/// `cargo xtask compare ARGS`.
///
/// # Errors
///
/// Bad flags, the servers could not be installed, the build failed, a run
/// left no readable report, or writing the comparison failed.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut o = parse(args)?;
    // The demo runs from the workspace root: make DIR mean the same thing
    // to it and to us wherever `cargo xtask` was started.
    if o.dir.is_relative() {
        o.dir = run::root().join(&o.dir);
    }
    let planned = plan(&o);
    if o.dry_run {
        for p in &planned {
            println!("xtask: would run: {}", run::show(&command(p)));
        }
        return Ok(());
    }
    let mut failed = Vec::new();
    if !o.no_run {
        install::servers()?;
        let mut build = run::cargo();
        build.args([
            "build",
            "--release",
            "-p",
            "shardsub",
            "--example",
            "fanout",
        ]);
        run::status(&mut build)?;
        for (i, p) in planned.iter().enumerate() {
            println!(
                "xtask: compare run {} of {}: mode {}{}",
                i + 1,
                planned.len(),
                p.mode,
                p.masters
                    .map_or(String::new(), |n| format!(", {n} primaries"))
            );
            // A failed run still writes its report (its checks failed):
            // keep going, show it in the table, fail at the end.
            if let Err(e) = run::status(&mut command(p)) {
                failed.push(e);
            }
        }
    }
    let (runs, errors) = collect(&planned);
    if runs.is_empty() {
        return Err(format!("no run left a report:\n  {}", errors.join("\n  ")));
    }
    let page = write(&o, runs)?;
    println!("xtask: wrote {}", page.display());
    failed.extend(errors);
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("some runs failed:\n  {}", failed.join("\n  ")))
    }
}

#[cfg(test)]
mod tests;
