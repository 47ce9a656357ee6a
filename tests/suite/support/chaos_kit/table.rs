//! The per-fault table: the checker's incidents and the failed publishes
//! attributed to the fault they followed, recovery times, and a summary
//! per kind, as Markdown.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use testkit::accounting::{Fate, Report};

use crate::support::chaos_kit::FaultKind;

/// A loss published up to this long before a fault started is the fault's
/// (a message acked just before a `kill -9` dies in the server's buffers).
const SLACK: Duration = Duration::from_millis(500);

/// One injected fault, as the run recorded it.
#[derive(Clone, Debug)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub detail: String,
    /// When it started (ledger clock).
    pub at: Duration,
    /// How long the fault's own operation took (until the cluster was ok).
    pub op: Duration,
    /// From its start until every subscriber had delivered, on every
    /// channel, a message published after the operation ended.
    pub delivering: Duration,
    /// Peak RSS of the test process after it, KiB.
    pub rss_kib: u64,
}

/// What the checker says about one fault.
#[derive(Clone, Debug, Default)]
pub struct FaultStats {
    /// (tap, channel) pairs that lost messages.
    pub pairs: usize,
    pub lost_signalled: u64,
    pub lost_silent: u64,
    /// Lost on recoverable channels under an unrecoverable event.
    pub lost_unrecoverable: u64,
    /// The longest time from the fault to a hit pair delivering again.
    pub recovery: Option<Duration>,
    /// Pairs that never delivered again (must be none).
    pub not_resumed: usize,
    pub failures: BTreeMap<String, u64>,
}

/// Which fault (index) a time belongs to: the last one started at or
/// before `t + slack`.
fn owner(faults: &[FaultRecord], t: Duration, slack: Duration) -> Option<usize> {
    faults.iter().rposition(|f| f.at <= t + slack)
}

/// Per fault (and, last, for the time before the first fault).
pub fn attribute(
    report: &Report,
    faults: &[FaultRecord],
    failures: &[(Duration, String)],
) -> Vec<FaultStats> {
    let mut stats = vec![FaultStats::default(); faults.len() + 1];
    let mut pairs: Vec<HashSet<(usize, usize)>> = vec![HashSet::new(); faults.len() + 1];
    let before = faults.len();
    for i in &report.incidents {
        let f = owner(faults, i.first_published, SLACK).unwrap_or(before);
        let s = &mut stats[f];
        pairs[f].insert((i.tap, i.channel));
        match i.fate {
            Fate::Signalled => s.lost_signalled += i.lost,
            Fate::Silent => s.lost_silent += i.lost,
            Fate::Unrecoverable => s.lost_unrecoverable += i.lost,
        }
        match i.resumed {
            Some(r) => {
                let start = faults.get(f).map_or(Duration::ZERO, |x| x.at);
                let took = r.saturating_sub(start);
                s.recovery = Some(s.recovery.map_or(took, |m| m.max(took)));
            }
            None => s.not_resumed += 1,
        }
    }
    for (at, kind) in failures {
        let f = owner(faults, *at, Duration::ZERO).unwrap_or(before);
        *stats[f].failures.entry(kind.clone()).or_default() += 1;
    }
    for (s, p) in stats.iter_mut().zip(&pairs) {
        s.pairs = p.len();
    }
    stats
}

fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

fn kinds(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "0".into();
    }
    m.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn median(v: &mut [Duration]) -> Option<Duration> {
    v.sort_unstable();
    (!v.is_empty()).then(|| v[v.len() / 2])
}

/// What the Markdown section says about a run.
pub struct Run<'a> {
    pub server: &'a str,
    pub seed: u64,
    pub minutes: f64,
    pub subscribers: usize,
    pub channels: usize,
    pub pace: Duration,
    pub date: &'a str,
    pub report: &'a Report,
    pub faults: &'a [FaultRecord],
    pub stats: &'a [FaultStats],
    pub peak_rss_kib: u64,
}

/// The run as Markdown: totals, a summary per fault kind, every fault.
pub fn markdown(run: &Run<'_>) -> String {
    let r = run.report;
    let c = &r.counts;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### {} — seed {}, {:.1} min, {}\n\n\
         3 primaries with a replica each, {} subscriber instances × {} channels, \
         one publish round (every channel) every {} ms; {} faults.\n",
        run.server,
        run.seed,
        run.minutes,
        run.date,
        run.subscribers,
        run.channels,
        run.pace.as_millis(),
        run.faults.len()
    );
    let _ = writeln!(
        out,
        "| published | acked | publish failures | delivered | lost (signalled) | \
         lost silently | duplicated | reordered | unexpected | split | peak RSS |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n\
         | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} MiB |\n",
        r.published,
        r.acked,
        kinds(&r.failed),
        c.delivered,
        c.lost_signalled,
        c.lost_silent,
        c.duplicated,
        c.reordered,
        c.unexpected,
        r.split,
        run.peak_rss_kib / 1024
    );
    let _ = writeln!(
        out,
        "| fault | times | recovery median (s) | recovery max (s) | delivering again median (s) | \
         delivering again max (s) | lost (signalled) | lost silently |\n\
         |---|---|---|---|---|---|---|---|"
    );
    let mut by_kind: BTreeMap<FaultKind, Vec<usize>> = BTreeMap::new();
    for (i, f) in run.faults.iter().enumerate() {
        by_kind.entry(f.kind).or_default().push(i);
    }
    for (kind, idx) in &by_kind {
        let mut rec: Vec<Duration> = idx.iter().filter_map(|&i| run.stats[i].recovery).collect();
        let mut up: Vec<Duration> = idx.iter().map(|&i| run.faults[i].delivering).collect();
        let show = |d: Option<Duration>| d.map_or("—".into(), secs);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            kind.name(),
            idx.len(),
            show(median(&mut rec)),
            show(rec.last().copied()),
            show(median(&mut up)),
            show(up.last().copied()),
            idx.iter()
                .map(|&i| run.stats[i].lost_signalled)
                .sum::<u64>(),
            idx.iter().map(|&i| run.stats[i].lost_silent).sum::<u64>(),
        );
    }
    let _ = writeln!(
        out,
        "\n<details><summary>Every fault</summary>\n\n\
         | # | at (s) | fault | detail | op (s) | recovery (s) | delivering again (s) | pairs hit | \
         lost (signalled) | lost silently | publish failures | peak RSS (MiB) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (i, (f, s)) in run.faults.iter().zip(run.stats).enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            secs(f.at),
            f.kind.name(),
            f.detail,
            secs(f.op),
            s.recovery.map_or("—".into(), secs),
            secs(f.delivering),
            s.pairs,
            s.lost_signalled,
            s.lost_silent,
            kinds(&s.failures),
            f.rss_kib / 1024
        );
    }
    if let Some(pre) = run.stats.get(run.faults.len()) {
        let _ = writeln!(
            out,
            "| — | before the first fault | | | | | | {} | {} | {} | {} | |",
            pre.pairs,
            pre.lost_signalled,
            pre.lost_silent,
            kinds(&pre.failures)
        );
    }
    let _ = writeln!(
        out,
        "\n</details>\n\nRecovery: from the fault's start to the moment a (subscriber, \
         channel) pair that lost messages delivered again, the longest over its pairs \
         (— when nothing was lost). Delivering again: from the start until every \
         subscriber had delivered, on every channel, a message published after the \
         fault's operation ended (op: until the cluster was ok again).\n"
    );
    out
}

/// Today's date (UTC) as YYYY-MM-DD.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
