//! The run as a `fleet_report::RunReport`: settings and machine, the
//! samples, the faults with the losses inside their windows, the lag CDF,
//! per node what the servers themselves count (`CLIENT LIST`, `INFO
//! commandstats`, `INFO CPU`), and the totals; written to `--report DIR`
//! as `report.json` (and Markdown and HTML where the report crate renders
//! them).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use fleet_report::{Fault, Machine, Meta, NodeStats, Ramp, RunReport, Sample, ServerInfo, Totals};
use shardcore::Partitions;
use testkit::accounting::{Fate, Report};

use crate::faults::Done;
use crate::options::Options;
use crate::servers::{Conns, Counters};
use crate::target::NodeView;

/// What the run measured, for the report.
pub struct Measured {
    pub date_utc: String,
    pub version: String,
    pub samples: Vec<Sample>,
    pub faults: Vec<Done>,
    pub lag: Vec<u64>,
    pub accounting: Report,
    pub expected: u64,
    pub received: u64,
    pub dropped: u64,
    pub recovered: u64,
    pub unrecoverable: u64,
    pub gap_events: u64,
    /// The library's threads' CPU (see `servers::library_cpu`), s.
    pub client_cpu: f64,
    /// The rest of the process's, s.
    pub demo_cpu: f64,
    /// The library's threads at the end (`shardsub-*`).
    pub library_threads: usize,
    /// Per node at the end: where it is, its counters over the run, its
    /// connections.
    pub nodes: Vec<(NodeView, Counters, Conns)>,
    pub publishing_secs: f64,
    /// `--partitions`.
    pub partitions: u32,
    /// `--engines`.
    pub engines: usize,
}

/// The report of a run; `result` is filled in by the checks.
pub fn build(o: &Options, parts: &Partitions, m: &Measured) -> RunReport {
    let a = &m.accounting;
    let c = &a.counts;
    let server_cpu: f64 = m.nodes.iter().map(|n| n.1.cpu).sum();
    let per_m = |cpu: f64| cpu / (m.received.max(1) as f64 / 1e6);
    let mut storm: BTreeMap<SocketAddr, u64> = BTreeMap::new();
    for d in &m.faults {
        for (addr, calls) in d.resubscribes.iter().flatten() {
            *storm.entry(*addr).or_default() += calls;
        }
    }
    let any_storm = m.faults.iter().any(|d| d.resubscribes.is_some());
    let nodes = m
        .nodes
        .iter()
        .map(|(v, k, conns)| NodeStats {
            addr: v.addr.to_string(),
            role: v.role.into(),
            partitions_owned: (0..parts.count())
                .filter(|&p| {
                    let s = parts.slot(p);
                    v.slots.iter().any(|&(a, b)| a <= s && s <= b)
                })
                .count() as u64,
            connections: conns.total as u64,
            subscribe_connections: conns.subscribed as u64,
            engine_subscribe_connections: (conns.subscribed - conns.publisher_subscribed) as u64,
            ssubscribe_calls: k.ssubscribe,
            subscribe_calls: k.subscribe,
            publish_calls: k.publish,
            server_cpu_s: k.cpu,
            resubscribe_calls: any_storm.then(|| storm.get(&v.addr).copied().unwrap_or(0)),
        })
        .collect();
    RunReport {
        meta: Meta {
            date_utc: m.date_utc.clone(),
            commit: commit(),
            machine: machine(),
            server: ServerInfo {
                kind: o.kind.name().into(),
                version: m.version.clone(),
            },
            local: o.local(),
            mode: o.mode.name().into(),
            masters: if o.mode == crate::options::Mode::Single {
                1
            } else {
                o.masters
            },
            replicas: if o.mode.is_cluster() { o.replicas } else { 0 },
            engines: o.engines,
            publishers: o.publishers,
            channels: o.channels,
            partitions: o.partitions,
            payload: o.payload,
            seconds: o.seconds,
            rate: o.rate,
            ramp: o.ramp.map(|r| Ramp {
                start: r.start,
                factor: r.factor,
                step_s: r.step_s,
            }),
            history: o.history,
        },
        samples: m.samples.clone(),
        faults: faults(&m.faults, a),
        lag_cdf: crate::node::cdf(&m.lag),
        nodes,
        totals: Totals {
            published: a.published,
            delivered: c.delivered,
            expected: m.expected,
            lost_signalled: c.lost_signalled,
            lost_silent: c.lost_silent,
            duplicated: c.duplicated,
            reordered: c.reordered,
            recovered: m.recovered,
            unrecoverable: m.unrecoverable,
            client_cpu_s: m.client_cpu,
            demo_cpu_s: m.demo_cpu,
            library_threads: m.library_threads as u64,
            server_cpu_s: server_cpu,
            client_cpu_s_per_million: per_m(m.client_cpu),
            server_cpu_s_per_million: per_m(server_cpu),
            gap_events: m.gap_events,
            drops: m.dropped,
        },
        knee: o
            .ramp
            .map(|_| fleet_report::knee(&m.samples, o.knee_lag_ms * 1000)),
        sizing: None,
        result: String::new(),
    }
}

/// The faults, each with the losses that began in its window (from 1 s
/// before it started until the next fault).
fn faults(done: &[Done], a: &Report) -> Vec<Fault> {
    let starts: Vec<f64> = done
        .iter()
        .map(|d| d.ledger_from.as_secs_f64() - 1.0)
        .collect();
    let owner = |t: f64| starts.iter().rposition(|&s| s <= t);
    let mut lost = vec![(0u64, 0u64); done.len()];
    for i in &a.incidents {
        if let Some(k) = owner(i.first_published.as_secs_f64()) {
            match i.fate {
                Fate::Signalled => lost[k].0 += i.lost,
                _ => lost[k].1 += i.lost,
            }
        }
    }
    done.iter()
        .zip(lost)
        .map(|(d, (signalled, silent))| Fault {
            kind: d.kind.name().into(),
            at_s: d.at_s,
            took_ms: d.took.as_secs_f64() * 1000.0,
            detail: d.detail.clone(),
            partitions_moved: d.moved.len() as u64,
            gap_events: d.gap_events,
            back_after_ms: d.back_after.map(|b| b.as_secs_f64() * 1000.0),
            lost_signalled: signalled,
            lost_silent: silent,
            recovered: d.recovered,
        })
        .collect()
}

/// The checkout's commit (`git rev-parse`, run where the demo was built),
/// empty when there is none.
fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or(String::new(), |o| {
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        })
}

/// CPUs, the CPU model and memory, from /proc.
fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or(String::new(), |(_, v)| v.trim().to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model: model,
        ram_gib: kib / (1024.0 * 1024.0),
    }
}

/// Writes `dir/report.json`, `report.md` and `report.html`.
///
/// # Errors
///
/// The directory or a file could not be written.
pub fn write(dir: &Path, r: &RunReport) -> Result<(), String> {
    fleet_report::write_dir(dir, r).map_err(|e| format!("--report {}: {e}", dir.display()))
}

/// The sizing answer for `--target`, from the run's knee (prints it).
pub fn size(o: &Options, r: &mut RunReport) {
    let Some(target) = o.target else { return };
    let s = fleet_report::sizing(&fleet_report::Inputs::from_run(r, target as f64));
    let cores = |v: Option<f64>| v.map_or("?".into(), |c| format!("{c:.1}"));
    println!(
        "sizing for {target} msg/s ({:.0} deliveries/s), from the step held at {:.0} msg/s: {} \
         primaries, {} client cores in all",
        s.deliveries_per_s,
        s.measured_at_rate,
        s.primaries.map_or("?".into(), |p| p.to_string()),
        cores(s.client_cores_total),
    );
    for a in &s.assumptions {
        println!("  assuming: {a}");
    }
    r.sizing = Some(s);
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn now_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}
