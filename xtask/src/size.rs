//! `cargo xtask size REPORT --rate R [--channels C] [--nodes N] [--fan-out F]
//! [--usable F]`: the sizing answer for a target, from a demo run's measured
//! knee (its `report.json`), with the assumptions printed.

use fleet_report::chart::fmt_num;
use fleet_report::{sizing, Inputs};

const USAGE: &str = "\
usage: cargo xtask size REPORT.json --rate R [--channels C] [--nodes N]
                        [--fan-out F] [--usable F]
  REPORT.json  a demo run's report (ideally a --ramp run, so it has a knee)
  --rate R     messages published per second to plan for
  --channels C distinct channels (default: the run's)
  --nodes N    application nodes, one subscriber engine each (default: the run's)
  --fan-out F  deliveries per published message (default: as measured)
  --usable F   fraction of each core the plan may use (default 0.6)";

fn number(flag: &str, v: Option<&String>) -> Result<f64, String> {
    v.and_then(|v| v.replace('_', "").parse::<f64>().ok())
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("{flag} needs a number ≥ 0\n{USAGE}"))
}

/// Parses the flags into sizing inputs for the report at `args[0]`.
///
/// # Errors
///
/// A missing or unreadable report, a missing `--rate`, or a bad number.
fn parse(args: &[String]) -> Result<Inputs, String> {
    let path = args
        .first()
        .filter(|a| !a.starts_with('-'))
        .ok_or_else(|| USAGE.to_string())?;
    let run = fleet_report::read_run(path).map_err(|e| format!("{path}: {e}"))?;
    let mut rate = None;
    let mut i = Inputs::from_run(&run, 0.0);
    let mut it = args.iter().skip(1);
    while let Some(flag) = it.next() {
        let v = number(flag, it.next());
        match flag.as_str() {
            "--rate" => rate = Some(v?),
            "--channels" => i.channels = v? as usize,
            "--nodes" => i.app_nodes = (v? as usize).max(1),
            "--fan-out" => i.fan_out = Some(v?),
            "--usable" => {
                let u = v?;
                if !(u > 0.0 && u <= 1.0) {
                    return Err(format!("--usable: a fraction in (0, 1], not {u}"));
                }
                i.usable_core_fraction = u;
            }
            other => return Err(format!("unknown flag {other:?}\n{USAGE}")),
        }
    }
    i.target_rate = rate.ok_or_else(|| format!("--rate is required\n{USAGE}"))?;
    Ok(i)
}

/// `cargo xtask size ARGS`.
///
/// # Errors
///
/// Bad flags or an unreadable report (see [`parse`]).
pub fn run(args: &[String]) -> Result<(), String> {
    let inputs = parse(args)?;
    let s = sizing(&inputs);
    let or = |v: Option<String>| v.unwrap_or_else(|| "not measured".into());
    println!(
        "sizing for {} msg/s published over {} channels and {} app nodes \
         ({} deliveries/s):",
        fmt_num(s.target_rate),
        inputs.channels,
        inputs.app_nodes,
        fmt_num(s.deliveries_per_s)
    );
    println!(
        "  primaries:             {}",
        or(s.primaries.map(|p| p.to_string()))
    );
    println!(
        "  client cores:          {} in all, {} per app node",
        or(s.client_cores_total.map(|c| format!("{c:.1}"))),
        or(s.client_cores_per_node.map(|c| c.to_string()))
    );
    println!("assumptions:");
    for a in &s.assumptions {
        println!("  - {a}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> (std::path::PathBuf, String) {
        let dir = std::env::temp_dir().join(format!("xtask-size-{}", std::process::id()));
        fleet_report::write_dir(&dir, &fleet_report::sample::synthetic()).expect("write");
        let path = dir.join("report.json").display().to_string();
        (dir, path)
    }

    fn args(path: &str, rest: &str) -> Vec<String> {
        std::iter::once(path.to_string())
            .chain(rest.split_whitespace().map(String::from))
            .collect()
    }

    #[test]
    fn flags_override_the_run_and_rate_is_required() {
        let (dir, path) = report();
        let i = parse(&args(
            &path,
            "--rate 1_000_000 --channels 50 --nodes 10 --fan-out 2",
        ))
        .expect("parse");
        assert_eq!(
            (i.target_rate, i.channels, i.app_nodes, i.fan_out),
            (1e6, 50, 10, Some(2.0))
        );
        let s = sizing(&i);
        assert_eq!(s.deliveries_per_s, 2e6);
        assert!(s.primaries.is_some_and(|p| p >= 1));
        for (bad, want) in [
            ("--channels 5", "--rate is required"),
            ("--rate x", "needs a number"),
            ("--rate 1 --usable 2", "a fraction"),
            ("--rate 1 --bogus 1", "unknown flag"),
        ] {
            let err = parse(&args(&path, bad)).expect_err(bad);
            assert!(err.contains(want), "{bad}: {err}");
        }
        assert!(parse(&[]).expect_err("no report").contains("usage"));
        let err = parse(&args("/nonexistent/report.json", "--rate 1")).expect_err("missing");
        assert!(err.contains("/nonexistent/report.json"), "{err}");
        run(&args(&path, "--rate 100000")).expect("prints");
        std::fs::remove_dir_all(dir).expect("clean up");
    }
}
