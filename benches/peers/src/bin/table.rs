//! Prints the resp/BENCHMARKS.md parser table from criterion's results.
//!
//! `table <criterion dir>` (the `criterion` folder in the target directory).
//! Uses each benchmark's median time per pass.

use std::path::Path;

use shardsub_peer_benches::{parsers, streams, MODES};

/// The `point_estimate` of the `median` in an `estimates.json`.
fn median_ns(json: &str) -> Option<f64> {
    let at = json.find("\"median\"")?;
    let rest = &json[at..];
    let p = rest.find("\"point_estimate\":")? + "\"point_estimate\":".len();
    let num: String = rest[p..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'))
        .collect();
    num.parse().ok()
}

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: table <target-dir>/criterion");
        std::process::exit(2);
    };
    println!("| stream | mode | parser | GiB/s | frames/s | vs fastest peer |");
    println!("|---|---|---|---:|---:|---:|");
    for s in streams::all() {
        for mode in MODES {
            let rows: Vec<(&str, Option<f64>)> = parsers::all()
                .iter()
                .map(|p| {
                    let path = Path::new(&dir)
                        .join(s.name)
                        .join(mode)
                        .join(p.name)
                        .join("new/estimates.json");
                    let ns = std::fs::read_to_string(path)
                        .ok()
                        .and_then(|j| median_ns(&j));
                    (p.name, ns)
                })
                .collect();
            let best_peer = rows
                .iter()
                .filter(|(n, _)| *n != "resp")
                .filter_map(|(_, t)| *t)
                .fold(f64::INFINITY, f64::min);
            for (name, ns) in &rows {
                let Some(ns) = ns else {
                    println!("| {} | {mode} | {name} | – | – | – |", s.name);
                    continue;
                };
                let gib = s.bytes.len() as f64 / ns; // bytes per ns = GB/s
                let gib = gib * 1e9 / (1u64 << 30) as f64;
                let fps = s.frames as f64 / ns * 1e9;
                let ratio = best_peer / ns;
                let bold = if *name == "resp" { "**" } else { "" };
                println!(
                    "| {} | {mode} | {bold}{name}{bold} | {gib:.2} | {} | {bold}{ratio:.2}×{bold} |",
                    s.name,
                    human(fps)
                );
            }
        }
    }
}

fn human(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}
