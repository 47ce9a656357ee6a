//! One subscriber instance at realistic rates beside the `redis` crate
//! (`--rates`): 1k, 10k and 100k stamped messages a second from the paced
//! publisher, then the maximum (the C publisher, with stamped probes
//! beside it), each rate with shardsub's defaults, shardsub with
//! `delivery_delay` 0 and the crate's defaults, one after the other on a
//! fresh server, [`REPS`] times. Prints, per server, the median and the
//! worst repetition of CPU per delivered message, its ratio to the
//! crate's (repetition by repetition), and the p99 lag against the
//! crate's, with the targets judged on the worst repetition.

use std::time::Duration;

use crate::load::{measure, Load, Row};
use crate::subscribers::Who;

/// Paced rates (messages a second) and how long each runs (seconds).
const PACED: [(f64, f64); 3] = [(1_000.0, 2.0), (10_000.0, 1.5), (100_000.0, 1.0)];
/// Messages of the C publisher at the maximum, and stamped probes a second
/// beside them.
const MAX: (u64, f64) = (400_000, 2_000.0);
/// Repetitions of every row.
const REPS: usize = 3;
/// Targets for shardsub's defaults against the crate: CPU per message at
/// most this share of the crate's at every rate, and at the maximum; p99
/// lag at most the crate's plus this many ms.
pub const CPU_TARGET: f64 = 1.0;
pub const CPU_TARGET_MAX: f64 = 0.5;
pub const LAG_TARGET_MS: f64 = 1.0;

/// The subscribers of every rate: shardsub's defaults, the same with
/// `delivery_delay` 0, and the crate (the reference), in this order.
const SUBSCRIBERS: [(&str, Who); 3] = [
    ("shardsub (default)", Who::shardsub_default(None)),
    (
        "shardsub, delivery_delay 0",
        Who::shardsub_default(Some(Duration::ZERO)),
    ),
    ("redis 1.8.1 (default)", Who::redis_default(2)),
];

fn loads() -> Vec<(String, Load)> {
    let mut out: Vec<(String, Load)> = PACED
        .iter()
        .map(|&(rate, secs)| (format!("{}k/s", rate / 1000.0), Load::Paced { rate, secs }))
        .collect();
    out.push((
        "max (C)".to_string(),
        Load::C {
            n: MAX.0,
            probes: MAX.1,
        },
    ));
    out
}

/// The `q` quantile of sorted lags, in ms (`NaN` when there are none).
pub fn quantile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted_us.len() as f64).ceil() as usize).clamp(1, sorted_us.len());
    f64::from(sorted_us[rank - 1]) / 1000.0
}

/// Median (the mean of the middle two for an even count) and the largest.
pub fn median_worst(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[n - 1])
}

fn cpu_us(row: &Row) -> f64 {
    row.used.cpu.as_secs_f64() * 1e6 / row.seen.max(1) as f64
}

/// Whether `(median, worst)` keeps to `limit`, and by how much it misses.
pub fn verdict((median, worst): (f64, f64), limit: f64, unit: &str) -> String {
    if worst <= limit {
        "met".into()
    } else if median <= limit {
        format!("median met, worst +{:.2}{unit}", worst - limit)
    } else {
        format!(
            "+{:.2}{unit} (worst +{:.2}{unit})",
            median - limit,
            worst - limit
        )
    }
}

/// `median (worst)`.
pub fn pair((median, worst): (f64, f64), decimals: usize) -> String {
    format!("{median:.decimals$} ({worst:.decimals$})")
}

/// Three significant digits, at most two decimals.
pub fn num(x: f64) -> String {
    if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Measures every rate and subscriber on each server kind, and prints a
/// row per kind and rate.
pub fn run() {
    let loads = loads();
    println!(
        "| server | rate | CPU µs/msg: shardsub, delay 0, crate | ÷ crate (worst) \
         | wake-ups/msg: shardsub, crate | lag p50 ms: shardsub, delay 0, crate \
         | p99 − crate's, ms (worst) | targets |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for kind in testkit::kinds() {
        // runs[load][subscriber]: one row per repetition.
        let mut runs: Vec<Vec<Vec<Row>>> = loads
            .iter()
            .map(|_| SUBSCRIBERS.iter().map(|_| Vec::new()).collect())
            .collect();
        for rep in 0..REPS {
            for (l, (rate, load)) in loads.iter().enumerate() {
                for (s, (who, w)) in SUBSCRIBERS.iter().enumerate() {
                    let row = measure(kind, *w, *load);
                    eprintln!(
                        "{} rep {rep} {rate} {who}: {}/{} delivered, {:.2} µs CPU/msg, \
                         p99 {:.2} ms, woke {:?}",
                        kind.name(),
                        row.seen,
                        row.published,
                        cpu_us(&row),
                        quantile_ms(&row.lags, 0.99),
                        row.woke
                    );
                    runs[l][s].push(row);
                }
            }
        }
        for ((rate, load), runs) in loads.iter().zip(&runs) {
            print_row(kind.name(), rate, *load, runs);
        }
    }
}

/// Median over the repetitions of `f(run, the crate's run)`.
fn median_of(rows: &[Row], crate_rows: &[Row], f: impl Fn(&Row, &Row) -> f64) -> (f64, f64) {
    median_worst(rows.iter().zip(crate_rows).map(|(r, c)| f(r, c)).collect())
}

/// Wake-ups per delivered message over every repetition: in all, and (where
/// `by_thread`) by the two roles that woke most.
fn wakeups(rows: &[Row], by_thread: bool) -> String {
    let seen: u64 = rows.iter().map(|r| r.seen).sum::<u64>().max(1);
    let total: u64 = rows.iter().map(|r| r.used.voluntary).sum();
    let per = |n: u64| n as f64 / seen as f64;
    if !by_thread {
        return format!("{:.2}", per(total));
    }
    let top = top_roles(rows.iter().flat_map(|r| &r.woke), per);
    format!("{:.2} ({top})", per(total))
}

/// The two roles with the most of a count summed over `counts` (role,
/// count), each with `per(its sum)`: `io 1.00, worker 0.98`.
pub fn top_roles<'a>(
    counts: impl Iterator<Item = &'a (String, u64)>,
    per: impl Fn(u64) -> f64,
) -> String {
    let mut roles: Vec<(String, u64)> = Vec::new();
    for (role, n) in counts {
        match roles.iter_mut().find(|(r, _)| r == role) {
            Some(slot) => slot.1 += n,
            None => roles.push((role.clone(), *n)),
        }
    }
    roles.sort_by_key(|r| std::cmp::Reverse(r.1));
    let top: Vec<String> = roles
        .iter()
        .take(2)
        .map(|(role, n)| format!("{role} {:.2}", per(*n)))
        .collect();
    top.join(", ")
}

/// One rate on one server: shardsub (`runs[0]`), shardsub with
/// `delivery_delay` 0 (`runs[1]`) and the crate (`runs[2]`), medians of
/// the repetitions, the worst beside the figures the targets judge.
fn print_row(server: &str, rate: &str, load: Load, runs: &[Vec<Row>]) {
    let crate_rows = &runs[2];
    let three = |f: &dyn Fn(&Row) -> f64, fmt: &dyn Fn(f64) -> String| {
        let v: Vec<String> = runs
            .iter()
            .map(|rows| fmt(median_of(rows, crate_rows, |r, _| f(r)).0))
            .collect();
        v.join(", ")
    };
    let ratio = median_of(&runs[0], crate_rows, |r, c| cpu_us(r) / cpu_us(c));
    let p99 = |r: &Row| quantile_ms(&r.lags, 0.99);
    let diff = median_of(&runs[0], crate_rows, |r, c| p99(r) - p99(c));
    let limit = match load {
        Load::C { .. } => CPU_TARGET_MAX,
        Load::Paced { .. } => CPU_TARGET,
    };
    let (cpu, lag) = (
        verdict(ratio, limit, "×"),
        verdict(diff, LAG_TARGET_MS, " ms"),
    );
    let targets = if cpu == "met" && lag == "met" {
        "met".to_string()
    } else {
        format!("CPU {cpu}, lag {lag}")
    };
    let lost: Vec<String> = runs
        .iter()
        .zip(SUBSCRIBERS)
        .filter_map(|(rows, (who, _))| {
            let lost: u64 = rows
                .iter()
                .map(|r| r.published.saturating_sub(r.seen))
                .sum();
            let dropped: u64 = rows.iter().map(|r| r.dropped).sum();
            (lost > 0)
                .then(|| format!("{who}: {lost} lost, {dropped} of them dropped (queue full)"))
        })
        .collect();
    let targets = [targets]
        .into_iter()
        .chain(lost)
        .collect::<Vec<_>>()
        .join("; ");
    println!(
        "| {server} | {rate} | {} | {} | {}, {} | {} | {} | {targets} |",
        three(&cpu_us, &num),
        pair(ratio, 2),
        wakeups(&runs[0], ratio.1 > limit),
        wakeups(crate_rows, false),
        three(&|r| quantile_ms(&r.lags, 0.5), &|x| format!("{x:.2}")),
        pair(diff, 2),
    );
}
