//! Turning what the steps printed or wrote into the Markdown that goes
//! between a table's markers.

use std::path::Path;
use std::time::SystemTime;

use fleet_report::RunReport;

use super::registry::{
    fleet_report_dir, scaling_dir, COST_ROUNDS, FLEET_ENGINES, FLEET_PAIRS, REFERENCE_PER_INSTANCE,
    SCALING_MODES, SCALING_NODES,
};

/// Channels `examples/subscribe_cost.rs` publishes to each round.
const COST_CHANNELS: u64 = 1000;

/// The runs of lines starting with `|` in `stdout`: every Markdown table
/// the command printed, in order.
pub fn markdown_blocks(stdout: &str) -> Vec<Vec<&str>> {
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in stdout.lines() {
        let line = line.trim_end();
        if line.starts_with('|') {
            current.push(line);
        } else if !current.is_empty() {
            blocks.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        blocks.push(current);
    }
    blocks
}

/// The tables of every step: a labelled step's tables under its label; an
/// unlabelled step's table with the same header (first two lines) as the
/// one before it continues that table.
///
/// # Errors
///
/// A step that printed no table.
pub fn tables(outputs: &[(Option<String>, String)]) -> Result<String, String> {
    let mut parts: Vec<(Option<String>, Vec<String>)> = Vec::new();
    for (index, (label, stdout)) in outputs.iter().enumerate() {
        let blocks = markdown_blocks(stdout);
        if blocks.is_empty() {
            return Err(format!(
                "step {} printed no Markdown table (no line starting with `|`)",
                index + 1
            ));
        }
        for (b, block) in blocks.into_iter().enumerate() {
            let label = if b == 0 { label.clone() } else { None };
            if let (None, Some((_, last))) = (&label, parts.last_mut()) {
                if block.len() >= 2 && last.len() >= 2 && last[..2] == block[..2] {
                    last.extend(block[2..].iter().map(|s| s.to_string()));
                    continue;
                }
            }
            parts.push((label, block.iter().map(|s| s.to_string()).collect()));
        }
    }
    let mut out = String::new();
    for (label, lines) in parts {
        if !out.is_empty() {
            out.push('\n');
        }
        if let Some(label) = label {
            out.push_str(&label);
            out.push_str("\n\n");
        }
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// A criterion id's folder: the group, then the function id with the
/// characters criterion replaces in file names turned into `_`.
fn criterion_dir(id: &str) -> String {
    let (group, function) = id.split_once('/').unwrap_or((id, ""));
    let safe: String = function
        .chars()
        .map(|c| if "?\"/\\*<>:|^".contains(c) { '_' } else { c })
        .collect();
    format!("{group}/{safe}")
}

/// The `point_estimate` of the `median` in criterion's `estimates.json`.
pub fn median_ns(json: &str) -> Option<f64> {
    let rest = &json[json.find("\"median\"")?..];
    let at = rest.find("\"point_estimate\":")? + "\"point_estimate\":".len();
    let number: String = rest[at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'))
        .collect();
    number.parse().ok()
}

/// `36.7 ns`, `8.6 µs`, `103 ms`: three significant digits.
pub fn duration(ns: f64) -> String {
    let (value, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    let decimals = if value < 10.0 {
        2
    } else if value < 100.0 {
        1
    } else {
        0
    };
    format!("{value:.decimals$} {unit}")
}

/// The shardcore table from criterion's results under `criterion`,
/// written since `since`.
///
/// # Errors
///
/// A benchmark whose estimates are missing, unreadable, or older than
/// `since` (left by an earlier run: this one did not measure it).
pub fn criterion(
    rows: &[(&str, &str)],
    criterion: &Path,
    since: SystemTime,
) -> Result<String, String> {
    let mut out = String::from("| bench | median time | what it measures |\n|---|---:|---|\n");
    for (id, what) in rows {
        let path = criterion.join(criterion_dir(id)).join("new/estimates.json");
        let json = std::fs::read_to_string(&path)
            .map_err(|e| format!("criterion result {}: {e}", path.display()))?;
        let modified = std::fs::metadata(&path).and_then(|m| m.modified());
        if modified.map_or(true, |m| m < since) {
            return Err(format!(
                "criterion result {} is not from this run (was `{id}` measured?)",
                path.display()
            ));
        }
        let ns = median_ns(&json).ok_or_else(|| format!("no median in {}", path.display()))?;
        out.push_str(&format!("| `{id}` | {} | {what} |\n", duration(ns)));
    }
    Ok(out)
}

/// The instruction total of a callgrind output file (`totals:`, or
/// `summary:` in older formats).
pub fn callgrind_total(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .or_else(|| text.lines().find_map(|l| l.strip_prefix("summary:")))?;
    line.split_whitespace().next()?.parse().ok()
}

/// `12,345,678`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The subscriber-cost table from the four callgrind files in `dir`.
///
/// # Errors
///
/// A file that is missing or has no total, or totals that do not grow
/// with the rounds.
pub fn subscribe_cost(dir: &Path) -> Result<String, String> {
    let mut out = String::from(
        "| server | instructions, 20 rounds | instructions, 120 rounds | per delivered message |\n\
         |---|---:|---:|---:|\n",
    );
    let [few, many] = COST_ROUNDS;
    for (kind, label) in [("redis", "Redis"), ("valkey", "Valkey")] {
        let total = |rounds: u32| {
            let path = dir.join(format!("subscribe_cost.{kind}.{rounds}.out"));
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("callgrind output {}: {e}", path.display()))?;
            callgrind_total(&text).ok_or_else(|| format!("no totals line in {}", path.display()))
        };
        let (a, b) = (total(few)?, total(many)?);
        let messages = u64::from(many - few) * COST_CHANNELS;
        let per = b.checked_sub(a).ok_or_else(|| {
            format!("{label}: {many} rounds counted fewer instructions than {few}")
        })? / messages;
        out.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            thousands(a),
            thousands(b),
            thousands(per)
        ));
    }
    Ok(out)
}

/// The `fleet_instances` table from the fleet demo's reports in `dir`: per
/// server and instance count, each pair's library CPU per 1M delivered,
/// and the many instances' against the one's of the same pair.
pub fn fleet_instances(dir: &Path) -> Result<String, String> {
    let read = |server: &str, engines: u32, pair: u32| -> Result<RunReport, String> {
        let path = dir
            .join(fleet_report_dir(server, engines, pair))
            .join("report.json");
        fleet_report::read_run(&path).map_err(|e| format!("fleet report {}: {e}", path.display()))
    };
    // One value per pair, or one for all when they agree.
    let per_pair = |f: &dyn Fn(&RunReport) -> String, runs: &[RunReport]| {
        let mut v: Vec<String> = runs.iter().map(f).collect();
        if v.windows(2).all(|w| w[0] == w[1]) {
            v.truncate(1);
        }
        v.join(" / ")
    };
    let mut out = String::from(
        "| server | instances | library threads | delivered | library CPU s per 1M delivered | \
         ÷ 1 instance | the demo's own CPU s per 1M | lost silently, duplicated, reordered | target |\n\
         |---|---:|---:|---|---|---|---|---|---|\n",
    );
    for (kind, label) in [("redis", "Redis"), ("valkey", "Valkey")] {
        let runs = |engines: u32| -> Result<Vec<RunReport>, String> {
            (1..=FLEET_PAIRS).map(|p| read(kind, engines, p)).collect()
        };
        let one = runs(FLEET_ENGINES[0])?;
        for engines in FLEET_ENGINES {
            let these = runs(engines)?;
            let t = |r: &RunReport| r.totals.clone();
            let ratios: Vec<f64> = these
                .iter()
                .zip(&one)
                .map(|(m, o)| {
                    m.totals.client_cpu_s_per_million / o.totals.client_cpu_s_per_million.max(1e-9)
                })
                .collect();
            let (ratio, target) = if engines == FLEET_ENGINES[0] {
                (String::new(), String::new())
            } else {
                let worst = ratios.iter().copied().fold(0.0, f64::max);
                let target = if worst <= 1.5 {
                    "≤ 1.5×: met".to_string()
                } else {
                    format!("≤ 1.5×: worst +{:.2}×", worst - 1.5)
                };
                let r: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
                (r.join(" / "), target)
            };
            let losses: u64 = these
                .iter()
                .map(|r| r.totals.lost_silent + r.totals.duplicated + r.totals.reordered)
                .sum();
            out.push_str(&format!(
                "| {label} | {engines} | {} | {} | {} | {ratio} | {} | {} | {target} |\n",
                per_pair(&|r| t(r).library_threads.to_string(), &these),
                per_pair(&|r| thousands(t(r).delivered), &these),
                per_pair(&|r| format!("{:.1}", t(r).client_cpu_s_per_million), &these),
                per_pair(
                    &|r| {
                        let d = t(r).delivered.max(1) as f64 / 1e6;
                        format!("{:.1}", t(r).demo_cpu_s / d)
                    },
                    &these
                ),
                if losses == 0 {
                    "0, 0, 0".to_string()
                } else {
                    format!("{losses} (see the reports)")
                },
            ));
        }
    }
    Ok(out)
}

/// The `scaling` table from the fleet demo's reports in `dir`: per mode
/// and primary count, delivered msg/s at the knee's held step against the
/// reference text's 650k per instance.
pub fn scaling(dir: &Path) -> Result<String, String> {
    let mut out = String::from(
        "| mode | primaries | delivered/s at the knee | per primary | ÷ 650k × primaries | \
         knee | library CPU s per 1M | lost silently, duplicated, reordered |\n\
         |---|---:|---:|---:|---:|---|---:|---|\n",
    );
    for mode in SCALING_MODES {
        for nodes in SCALING_NODES {
            let path = dir.join(scaling_dir(mode, nodes)).join("report.json");
            let r = fleet_report::read_run(&path)
                .map_err(|e| format!("scaling report {}: {e}", path.display()))?;
            let knee = r.knee.as_ref();
            let held = knee.and_then(|k| k.held.as_ref());
            let rate = held.map_or(0.0, |h| h.delivered_per_s);
            let why = match knee {
                None => "no ramp".to_string(),
                Some(k) if k.reason == "not reached" => "not reached".to_string(),
                Some(k) => format!(
                    "{} at {} msg/s published (p99 {:.0} ms)",
                    k.reason,
                    thousands(k.rate as u64),
                    k.lag_p99_us as f64 / 1e3
                ),
            };
            let t = &r.totals;
            out.push_str(&format!(
                "| {mode} | {nodes} | {} | {} | {:.2} | {why} | {:.2} | {}, {}, {} |\n",
                thousands(rate as u64),
                thousands((rate / f64::from(nodes)) as u64),
                rate / (REFERENCE_PER_INSTANCE * f64::from(nodes)),
                t.client_cpu_s_per_million,
                t.lost_silent,
                t.duplicated,
                t.reordered,
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_tables_and_merges_same_headers() {
        let a = "noise\n| h |\n|---|\n| 1 |\nmore\n";
        let b = "| h |\n|---|\n| 2 |\n";
        let c = "| other |\n|---|\n| 3 |\n";
        let outputs = vec![
            (None, a.to_string()),
            (None, b.to_string()),
            (Some("Valkey:".to_string()), c.to_string()),
        ];
        assert_eq!(
            tables(&outputs).unwrap(),
            "| h |\n|---|\n| 1 |\n| 2 |\n\nValkey:\n\n| other |\n|---|\n| 3 |\n"
        );
        let err = tables(&[(None, "no table\n".to_string())]).unwrap_err();
        assert!(err.contains("step 1"), "{err}");
    }

    #[test]
    fn fleet_instances_divides_each_pair_by_its_own_single_instance_run() {
        let dir = std::env::temp_dir().join(format!("xtask-fleet-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (kind, many) in [("redis", 45.0), ("valkey", 60.0)] {
            for pair in 1..=FLEET_PAIRS {
                for engines in FLEET_ENGINES {
                    let mut r = fleet_report::sample::synthetic();
                    r.totals.client_cpu_s_per_million = match engines {
                        1 => 30.0 + f64::from(pair - 1) * 10.0,
                        _ => many,
                    };
                    r.totals.lost_silent = 0;
                    r.totals.duplicated = 0;
                    r.totals.reordered = 0;
                    let at = dir.join(fleet_report_dir(kind, engines, pair));
                    fleet_report::write_dir(&at, &r).expect("write a report");
                }
            }
        }
        let table = fleet_instances(&dir).expect("a table");
        let _ = std::fs::remove_dir_all(&dir);
        // Redis: 45 against 30 and 40; Valkey: 60 against 30 and 40.
        assert!(table.contains("| 1.50 / 1.12 | "), "{table}");
        assert!(table.contains("| ≤ 1.5×: met |"), "{table}");
        assert!(table.contains("| 2.00 / 1.50 | "), "{table}");
        assert!(table.contains("| ≤ 1.5×: worst +0.50× |"), "{table}");
        assert_eq!(
            table.lines().count(),
            2 + 2 * FLEET_ENGINES.len(),
            "{table}"
        );
    }

    #[test]
    fn scaling_reads_the_knee_of_each_run_against_the_reference() {
        let dir = std::env::temp_dir().join(format!("xtask-scaling-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for mode in SCALING_MODES {
            for nodes in SCALING_NODES {
                let mut r = fleet_report::sample::synthetic();
                let knee = r.knee.as_mut().expect("the sample has a knee");
                knee.reason = "lag".into();
                knee.rate = 1_000_000.0 * f64::from(nodes);
                knee.lag_p99_us = 150_000;
                knee.held.as_mut().expect("a held step").delivered_per_s =
                    650_000.0 * f64::from(nodes);
                let at = dir.join(scaling_dir(mode, nodes));
                fleet_report::write_dir(&at, &r).expect("write a report");
            }
        }
        let table = scaling(&dir).expect("a table");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            table.contains("| shards | 8 | 5,200,000 | 650,000 | 1.00 | lag at 8,000,000 msg/s published (p99 150 ms) |"),
            "{table}"
        );
        assert_eq!(
            table.lines().count(),
            2 + SCALING_MODES.len() * SCALING_NODES.len(),
            "{table}"
        );
    }

    #[test]
    fn criterion_folders_and_medians() {
        assert_eq!(criterion_dir("key_slot/16B"), "key_slot/16B");
        assert_eq!(
            criterion_dir("plan/1M_channels/P1024/6_nodes"),
            "plan/1M_channels_P1024_6_nodes"
        );
        let json = r#"{"mean":{"point_estimate":9.0},"median":{"confidence_interval":{"lower_bound":1.0},"point_estimate":36.71,"standard_error":0.1}}"#;
        assert_eq!(median_ns(json), Some(36.71));
        assert_eq!(median_ns("{}"), None);
        assert_eq!(duration(36.71), "36.7 ns");
        assert_eq!(duration(8_600.0), "8.60 µs");
        assert_eq!(duration(103_000_000.0), "103 ms");
    }

    #[test]
    fn criterion_results_must_be_from_this_run() {
        let dir = std::env::temp_dir().join(format!("xtask-criterion-{}", std::process::id()));
        let file = dir.join("g/f_x/new");
        std::fs::create_dir_all(&file).unwrap();
        std::fs::write(
            file.join("estimates.json"),
            r#"{"median":{"point_estimate":1500.0}}"#,
        )
        .unwrap();
        let rows = [("g/f/x", "what")];
        let before = SystemTime::now() - std::time::Duration::from_secs(60);
        assert_eq!(
            criterion(&rows, &dir, before).unwrap(),
            "| bench | median time | what it measures |\n|---|---:|---|\n| `g/f/x` | 1.50 µs | what |\n"
        );
        let after = SystemTime::now() + std::time::Duration::from_secs(60);
        let err = criterion(&rows, &dir, after).unwrap_err();
        assert!(err.contains("not from this run"), "{err}");
        let err = criterion(&[("g/missing", "m")], &dir, before).unwrap_err();
        assert!(err.contains("g/missing"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn callgrind_totals_and_digits() {
        assert_eq!(
            callgrind_total("events: Ir\nsummary: 5\ntotals: 141616074\n"),
            Some(141_616_074)
        );
        assert_eq!(callgrind_total("summary: 7\n"), Some(7));
        assert_eq!(callgrind_total("events: Ir\n"), None);
        assert_eq!(thousands(141_616_074), "141,616,074");
        assert_eq!(thousands(999), "999");
    }
}
