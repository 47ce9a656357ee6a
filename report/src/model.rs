//! The report's JSON model: one demo run ([`RunReport`]), the same scenario
//! in several modes ([`CompareReport`]) and one mode over a node count
//! ([`ScalingReport`]).
//!
//! Field names are the contract with the demo (`examples/fanout`), which
//! fills them, and with `cargo xtask compare`, which reads them back. Fields
//! added later carry `#[serde(default)]` so older files still load.
//!
//! Units are in the names: `_s` seconds, `_ms` milliseconds, `_us`
//! microseconds, `_per_s` per second of wall time, `_cores` CPU seconds per
//! second of wall time (1.0 = one core busy), `_per_million` CPU seconds per
//! million delivered messages.

use serde::{Deserialize, Serialize};

/// One demo run: its settings, what it measured each interval, the faults it
/// injected, and the totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run's settings and the machine it ran on.
    pub meta: Meta,
    /// One per reporting interval (normally one second), in time order.
    pub samples: Vec<Sample>,
    /// The faults injected, in time order.
    pub faults: Vec<Fault>,
    /// The lag distribution over the whole run: `(lag_us, fraction)` pairs,
    /// lag ascending, fraction of delivered messages with a lag at most
    /// `lag_us` (ascending, the last one 1.0).
    pub lag_cdf: Vec<(u64, f64)>,
    /// Per server node, as the servers themselves report it.
    pub nodes: Vec<NodeStats>,
    /// Totals over the whole run.
    pub totals: Totals,
    /// The knee, from [`crate::knee`] over `samples` (None: not computed).
    pub knee: Option<Knee>,
    /// The sizing answer the demo printed for its `--target` (None: none
    /// asked for; the renderers then size a few round targets themselves).
    #[serde(default)]
    pub sizing: Option<crate::Sizing>,
    /// `"ok"`, or the checks that failed, in words.
    pub result: String,
}

/// The run's settings and the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// When the run started, UTC, e.g. `"2026-12-01T20:30:00Z"`.
    pub date_utc: String,
    /// The git commit the demo was built from (may be empty).
    pub commit: String,
    /// The machine the demo ran on.
    pub machine: Machine,
    /// The server software.
    pub server: ServerInfo,
    /// True when the demo started the servers on this machine itself, so
    /// servers and clients shared its cores (false: `--url`, servers
    /// elsewhere).
    pub local: bool,
    /// The placement mode: `"node-grouped"`, `"per-partition"`,
    /// `"classic"`, `"shards"` or `"single"`.
    pub mode: String,
    /// Primaries in the cluster (1 for a single server).
    pub masters: usize,
    /// Replicas per primary.
    pub replicas: usize,
    /// Subscriber engines, one per simulated app node.
    pub engines: usize,
    /// Publisher threads.
    pub publishers: usize,
    /// Distinct channels.
    pub channels: usize,
    /// App-level partitions.
    pub partitions: u32,
    /// Bytes per message, envelope included.
    pub payload: usize,
    /// How long the demo published, in seconds.
    pub seconds: u64,
    /// Target publish rate, msg/s (0 = flat out).
    pub rate: u64,
    /// The rate ramp, when `--ramp` was given.
    pub ramp: Option<Ramp>,
    /// True when the channels were recoverable (`--history`).
    pub history: bool,
}

/// The machine the demo ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Logical CPUs available to the demo.
    pub cpus: usize,
    /// The CPU model name (may be empty).
    pub cpu_model: String,
    /// Memory, GiB.
    pub ram_gib: f64,
}

/// The server software.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// `"redis"` or `"valkey"`.
    pub kind: String,
    /// The version the server reports, e.g. `"9.0.0"`.
    pub version: String,
}

/// A rate ramp: start at `start` msg/s and multiply by `factor` every
/// `step_s` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ramp {
    /// The first step's target rate, msg/s.
    pub start: u64,
    /// The factor from one step to the next (e.g. 1.5).
    pub factor: f64,
    /// Seconds per step.
    pub step_s: f64,
}

/// One reporting interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// End of the interval, seconds since publishing started.
    pub t_s: f64,
    /// Messages published per second in the interval.
    pub published_per_s: f64,
    /// Messages delivered per second in the interval (all engines).
    pub delivered_per_s: f64,
    /// Median publish-to-delivery lag in the interval, µs.
    pub lag_p50_us: u64,
    /// 99th percentile lag in the interval, µs.
    pub lag_p99_us: u64,
    /// Messages dropped in the interval (queues full, signalled).
    pub drops: u64,
    /// Gap events in the interval.
    pub gaps: u64,
    /// Client-side open connections at the end of the interval.
    pub connections: u64,
    /// Connection rebuilds in the interval.
    pub rebuilds: u64,
    /// The target publish rate in the interval, msg/s (0 = flat out).
    pub rate_target: f64,
    /// Server CPU in the interval, all server processes together, CPU
    /// seconds per wall second (None: not measured per interval). The knee
    /// and the sizing answer take per-message server CPU from this.
    #[serde(default)]
    pub server_cpu_cores: Option<f64>,
    /// The library's CPU in the interval (the runtime's threads, for the
    /// fleet and the publishers; the demo's own publishing loop and
    /// accounting are not in it), CPU seconds per wall second (None: not
    /// measured).
    #[serde(default)]
    pub client_cpu_cores: Option<f64>,
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// `"failover"`, `"kill"`, `"storm"`, `"reshard"`, `"reshard-atomic"`
    /// or `"add-node"`.
    pub kind: String,
    /// When it started, seconds since publishing started.
    pub at_s: f64,
    /// How long the operation itself took, ms.
    pub took_ms: f64,
    /// What moved, in words.
    pub detail: String,
    /// App-level partitions whose owner changed.
    pub partitions_moved: u64,
    /// Gap events the engines got for it.
    pub gap_events: u64,
    /// Until delivery was back on every affected channel, ms from `at_s`
    /// (None: not measured or never back).
    pub back_after_ms: Option<f64>,
    /// Messages lost and signalled by a gap event.
    pub lost_signalled: u64,
    /// Messages lost with no gap event: must be 0.
    pub lost_silent: u64,
    /// Messages recovered from history (0 without `--history`).
    pub recovered: u64,
}

/// One server node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStats {
    /// `host:port`.
    pub addr: String,
    /// `"primary"`, `"replica"` or `"server"` (not a cluster).
    pub role: String,
    /// App-level partitions this node owned at the end.
    pub partitions_owned: u64,
    /// Client connections (CLIENT LIST), at the end.
    pub connections: u64,
    /// Connections with subscriptions (CLIENT LIST: sub or ssub > 0, or
    /// flag P), at the end.
    pub subscribe_connections: u64,
    /// Of those, the subscriber instances' (the publisher instances'
    /// connections, named apart, left out: on a cluster each holds one
    /// subscribe connection per primary for the library's failover service
    /// channel). Older reports lack it (0).
    #[serde(default)]
    pub engine_subscribe_connections: u64,
    /// SSUBSCRIBE calls over the run (INFO commandstats delta).
    pub ssubscribe_calls: u64,
    /// SUBSCRIBE calls over the run (INFO commandstats delta).
    pub subscribe_calls: u64,
    /// PUBLISH and SPUBLISH calls over the run (INFO commandstats delta).
    pub publish_calls: u64,
    /// Server CPU over the run, seconds (INFO CPU, user + sys delta).
    pub server_cpu_s: f64,
    /// SSUBSCRIBE + SUBSCRIBE calls during the `--storm` recovery window
    /// (None: no storm).
    pub resubscribe_calls: Option<u64>,
}

/// Totals over the whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Messages published.
    pub published: u64,
    /// Messages delivered (all engines).
    pub delivered: u64,
    /// Deliveries expected (published × subscribers per channel).
    pub expected: u64,
    /// Lost and signalled by a gap event.
    pub lost_signalled: u64,
    /// Lost with no gap event: must be 0.
    pub lost_silent: u64,
    /// Delivered more than once.
    pub duplicated: u64,
    /// Delivered out of order.
    pub reordered: u64,
    /// Recovered from history.
    pub recovered: u64,
    /// Signalled losses history could not recover.
    pub unrecoverable: u64,
    /// The library's CPU over the run (the threads of the shared runtime:
    /// I/O, control and workers, for the fleet and the publishers), s.
    /// The sizing takes client CPU from this.
    pub client_cpu_s: f64,
    /// The rest of the demo process's CPU (its publishing loop, its
    /// accounting, the live view), s: not the library's, not sized.
    #[serde(default)]
    pub demo_cpu_s: f64,
    /// The library's threads (named `shardsub-*`) running at the end of
    /// the run, for every instance together (0: not counted).
    #[serde(default)]
    pub library_threads: u64,
    /// Server CPU over the run, all nodes, s.
    pub server_cpu_s: f64,
    /// Client CPU seconds per million delivered messages.
    pub client_cpu_s_per_million: f64,
    /// Server CPU seconds per million delivered messages.
    pub server_cpu_s_per_million: f64,
    /// Gap events.
    pub gap_events: u64,
    /// Messages dropped (queues full, signalled).
    pub drops: u64,
}

/// The knee: the first sustained rate step at which lag p99 crosses the
/// threshold or drops start. See [`crate::knee`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// The crossing step's target rate, msg/s (measured publish rate when
    /// flat out). When `reason` is `"not reached"`: the highest step's.
    pub rate: f64,
    /// The crossing step's lag p99 ([`Step::lag_p99_us`]), µs.
    pub lag_p99_us: u64,
    /// `"lag"`, `"drops"` or `"not reached"`.
    pub reason: String,
    /// The threshold the lag was held against, µs.
    #[serde(default)]
    pub threshold_us: u64,
    /// Where the crossing step starts, seconds since publishing started.
    #[serde(default)]
    pub at_s: f64,
    /// The operating point sizing uses: the last step that held (the
    /// highest one when not reached; None when even the first step failed).
    #[serde(default)]
    pub held: Option<Step>,
}

/// One rate step as measured, averaged over its samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Target rate, msg/s (0 = flat out).
    pub rate_target: f64,
    /// Measured publishes per second.
    pub published_per_s: f64,
    /// Measured deliveries per second.
    pub delivered_per_s: f64,
    /// Lag p99 over the step: the lower median of its samples' p99 (those
    /// a fault disturbed left out), µs.
    pub lag_p99_us: u64,
    /// Drops over the step.
    pub drops: u64,
    /// Server CPU per delivered message, µs (None: not measured).
    pub server_cpu_us_per_msg: Option<f64>,
    /// Client CPU per delivered message, µs (None: not measured).
    pub client_cpu_us_per_msg: Option<f64>,
    /// Samples in the step.
    pub samples: usize,
    /// Samples the verdict looked at (the step's, less those a fault
    /// disturbed; all of them when every one was).
    #[serde(default)]
    pub judged: usize,
    /// Judged samples with drops.
    #[serde(default)]
    pub dropping: usize,
}

/// The same scenario in several modes, one after another on one cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareReport {
    /// One run per mode, in the order they ran.
    pub runs: Vec<RunReport>,
}

/// One mode over a node count (masters 1, 2, 3, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingReport {
    /// The mode every run used.
    pub mode: String,
    /// One run per node count, ascending.
    pub runs: Vec<RunReport>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report with every field set, Options both Some and None.
    pub(crate) fn full() -> RunReport {
        crate::sample::synthetic()
    }

    #[test]
    fn run_report_round_trips_through_json() {
        let report = full();
        let json = serde_json::to_string_pretty(&report).expect("serialize");
        let back: RunReport = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, report);
        assert!(json.contains("\"lag_cdf\""), "{json}");
    }

    #[test]
    fn added_fields_default_when_missing() {
        let mut value = serde_json::to_value(full()).expect("to value");
        let obj = value.as_object_mut().expect("object");
        obj.remove("sizing");
        let totals = obj["totals"].as_object_mut().expect("totals");
        totals.remove("library_threads");
        for s in obj["samples"].as_array_mut().expect("samples") {
            let s = s.as_object_mut().expect("sample");
            s.remove("server_cpu_cores");
            s.remove("client_cpu_cores");
        }
        let back: RunReport = serde_json::from_value(value).expect("old file loads");
        assert!(back.sizing.is_none());
        assert_eq!(back.totals.library_threads, 0);
        assert!(back.samples.iter().all(|s| s.server_cpu_cores.is_none()));
    }

    #[test]
    fn compare_and_scaling_round_trip() {
        let c = CompareReport {
            runs: vec![full(), full()],
        };
        let json = serde_json::to_string(&c).expect("serialize");
        assert_eq!(serde_json::from_str::<CompareReport>(&json).expect("de"), c);
        let s = ScalingReport {
            mode: "node-grouped".into(),
            runs: vec![full()],
        };
        let json = serde_json::to_string(&s).expect("serialize");
        assert_eq!(serde_json::from_str::<ScalingReport>(&json).expect("de"), s);
    }
}
