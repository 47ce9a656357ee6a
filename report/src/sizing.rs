//! The sizing answer: how many primaries and client cores a target rate
//! needs, from the CPU per message measured at the knee.
//!
//! Server CPU per message falls steeply as load rises (batching in the
//! server and the engines), so an estimate taken from a low-rate run
//! overstates the need several times. The answer therefore takes its
//! per-message figures from the knee's held step, the highest rate that
//! kept lag under the threshold, and says so; when the knee was not
//! reached it says the figures come from below it and overstate.

use serde::{Deserialize, Serialize};

use crate::chart::fmt_num;
use crate::model::{Knee, RunReport};

/// What to size for, and the measured run to size from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inputs {
    /// Messages published per second to plan for.
    pub target_rate: f64,
    /// Distinct channels.
    pub channels: usize,
    /// Application nodes, each one subscriber engine.
    pub app_nodes: usize,
    /// Deliveries per published message ([`Inputs::from_run`]: as measured,
    /// delivered ÷ published; None: `app_nodes`, every node subscribes to
    /// every channel).
    pub fan_out: Option<f64>,
    /// Fraction of each core the plan may use (0.6 leaves 40 % headroom).
    pub usable_core_fraction: f64,
    /// Cores one primary can use: 1 (the command loop is one thread).
    pub cores_per_primary: f64,
    /// The measured knee.
    pub knee: Knee,
    /// What the knee was measured on.
    pub basis: Basis,
}

/// The run the knee was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Basis {
    /// The run's mode.
    pub mode: String,
    /// `"redis"` or `"valkey"` and its version.
    pub server: String,
    /// Primaries in the measured cluster.
    pub masters: usize,
    /// Replicas per primary in the measured cluster.
    pub replicas: usize,
    /// Subscriber engines in the measured run.
    pub engines: usize,
    /// The machine's logical CPUs.
    pub cpus: usize,
    /// True when servers and clients shared the machine's cores.
    pub local: bool,
    /// The primaries' share of all server CPU over the run (0..=1; 1 when
    /// the per-node figures are missing).
    pub primary_cpu_share: f64,
}

/// Usable core fraction used unless told otherwise.
pub const DEFAULT_USABLE_CORE_FRACTION: f64 = 0.6;

impl Inputs {
    /// Sizes `target_rate` for the run's own channels, engine count and
    /// measured fan-out (delivered ÷ published), from the run's knee (or
    /// one computed at the default threshold).
    pub fn from_run(run: &RunReport, target_rate: f64) -> Inputs {
        let (knee, _) = crate::run_knee(run);
        let all: f64 = run.nodes.iter().map(|n| n.server_cpu_s).sum();
        let primaries: f64 = run
            .nodes
            .iter()
            .filter(|n| n.role != "replica")
            .map(|n| n.server_cpu_s)
            .sum();
        let share = if all > 0.0 && all.is_finite() {
            (primaries / all).clamp(0.0, 1.0)
        } else {
            1.0
        };
        let m = &run.meta;
        Inputs {
            target_rate,
            channels: m.channels,
            app_nodes: m.engines,
            fan_out: (run.totals.published > 0)
                .then(|| run.totals.delivered as f64 / run.totals.published as f64),
            usable_core_fraction: DEFAULT_USABLE_CORE_FRACTION,
            cores_per_primary: 1.0,
            knee,
            basis: Basis {
                mode: m.mode.clone(),
                server: format!("{} {}", m.server.kind, m.server.version),
                masters: m.masters,
                replicas: m.replicas,
                engines: m.engines,
                cpus: m.machine.cpus,
                local: m.local,
                primary_cpu_share: share,
            },
        }
    }
}

/// The answer, with its inputs and assumptions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sizing {
    /// Messages published per second planned for.
    pub target_rate: f64,
    /// Deliveries per second that means (target × fan-out).
    pub deliveries_per_s: f64,
    /// Primaries needed (None: no CPU per message was measured).
    pub primaries: Option<u64>,
    /// Client cores needed over all app nodes (None: not measured).
    pub client_cores_total: Option<f64>,
    /// Client cores per app node, rounded up (None: not measured).
    pub client_cores_per_node: Option<u64>,
    /// Primary CPU per delivered message used, µs.
    pub primary_cpu_us_per_msg: Option<f64>,
    /// Client CPU per delivered message used, µs.
    pub client_cpu_us_per_msg: Option<f64>,
    /// The measured rate the figures come from, msg/s published.
    pub measured_at_rate: f64,
    /// Every assumption behind the numbers, one sentence each.
    pub assumptions: Vec<String>,
}

/// Sizes `inputs.target_rate` from the knee's held step (see the module
/// docs). Never panics: missing or non-finite figures give `None`s and an
/// assumption line saying what was missing.
pub fn sizing(inputs: &Inputs) -> Sizing {
    let i = inputs;
    let fan_out = i.fan_out.unwrap_or(i.app_nodes as f64).max(0.0);
    let target = if i.target_rate.is_finite() {
        i.target_rate.max(0.0)
    } else {
        0.0
    };
    let deliveries = target * fan_out;
    let usable = if i.usable_core_fraction > 0.0 && i.usable_core_fraction <= 1.0 {
        i.usable_core_fraction
    } else {
        DEFAULT_USABLE_CORE_FRACTION
    };
    let per_primary = if i.cores_per_primary > 0.0 && i.cores_per_primary.is_finite() {
        i.cores_per_primary
    } else {
        1.0
    };
    let held = i.knee.held.as_ref();
    let finite = |v: Option<f64>| v.filter(|x| x.is_finite() && *x >= 0.0);
    let server_us = finite(held.and_then(|h| h.server_cpu_us_per_msg));
    let primary_us = server_us.map(|u| u * i.basis.primary_cpu_share.clamp(0.0, 1.0));
    let client_us = finite(held.and_then(|h| h.client_cpu_us_per_msg));
    let primaries = primary_us.map(|u| {
        let cores = deliveries * u / 1e6 / (usable * per_primary);
        (cores.ceil() as u64).max(1)
    });
    let client_total = client_us.map(|u| deliveries * u / 1e6 / usable);
    let nodes = i.app_nodes.max(1) as f64;
    let client_per_node = client_total.map(|c| ((c / nodes).ceil() as u64).max(1));
    let measured_at = held.map_or(0.0, |h| h.published_per_s);
    let mut a = Vec::new();
    a.push(format!(
        "Fan-out {fan_out:.1} deliveries per published message{}.",
        if i.fan_out.is_none() {
            " (every app node subscribes to every channel)"
        } else {
            " (as measured: delivered ÷ published)"
        }
    ));
    match (held, i.knee.reason.as_str()) {
        (None, _) => a.push(
            "No step held: even the first rate crossed the lag threshold or dropped, \
             so there is no measured operating point to size from."
                .into(),
        ),
        (Some(h), "not reached") => a.push(format!(
            "The knee was not reached: the figures come from {} msg/s, the highest rate \
             run, which kept lag p99 at {:.2} ms. CPU per message falls as load rises, so \
             this overstates what a loaded server needs.",
            fmt_num(h.published_per_s),
            h.lag_p99_us as f64 / 1e3
        )),
        (Some(h), reason) => a.push(format!(
            "Per-message CPU measured at {} msg/s published ({} µs server, {} µs client \
             per delivered message), the last step below the knee: the next step, {} msg/s, \
             crossed on {reason} (lag p99 {:.2} ms against {:.2} ms).",
            fmt_num(h.published_per_s),
            server_us.map_or("–".into(), |c| format!("{c:.2}")),
            client_us.map_or("–".into(), |c| format!("{c:.2}")),
            fmt_num(i.knee.rate),
            i.knee.lag_p99_us as f64 / 1e3,
            i.knee.threshold_us as f64 / 1e3
        )),
    }
    if held.is_some() && (server_us.is_none() || client_us.is_none()) {
        a.push("Server or client CPU was not measured per interval: no estimate for it.".into());
    }
    a.push(format!(
        "Each primary uses at most {per_primary} core(s) (one command loop), and the plan \
         uses {:.0} % of each core, leaving {:.0} % headroom for failovers and bursts.",
        usable * 100.0,
        (1.0 - usable) * 100.0
    ));
    a.push(format!(
        "Server CPU scales with deliveries; primaries carried {:.0} % of the measured \
         server CPU (replicas the rest), on {} with {} primaries and {} replica(s) each, \
         mode {}.",
        i.basis.primary_cpu_share * 100.0,
        i.basis.server,
        i.basis.masters,
        i.basis.replicas,
        i.basis.mode
    ));
    a.push(format!(
        "Channels spread evenly: {} channels over the primaries{}.",
        i.channels,
        match primaries {
            Some(p) if (i.channels as u64) < p =>
                format!("; fewer channels than the {p} primaries, so some would stay idle"),
            _ => String::new(),
        }
    ));
    if i.basis.local {
        a.push(format!(
            "The knee was measured with servers and clients sharing this machine's {} \
             CPUs: each side had fewer cores than it would alone, so the knee is lower \
             than on dedicated machines.",
            i.basis.cpus
        ));
    }
    Sizing {
        target_rate: target,
        deliveries_per_s: deliveries,
        primaries,
        client_cores_total: client_total,
        client_cores_per_node: client_per_node,
        primary_cpu_us_per_msg: primary_us,
        client_cpu_us_per_msg: client_us,
        measured_at_rate: measured_at,
        assumptions: a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Step;

    fn inputs(server_us: Option<f64>, client_us: Option<f64>) -> Inputs {
        Inputs {
            target_rate: 1_000_000.0,
            channels: 20_000,
            app_nodes: 4,
            fan_out: None,
            usable_core_fraction: 0.5,
            cores_per_primary: 1.0,
            knee: Knee {
                rate: 120_000.0,
                lag_p99_us: 40_000,
                reason: "lag".into(),
                threshold_us: 10_000,
                at_s: 20.0,
                held: Some(Step {
                    rate_target: 80_000.0,
                    published_per_s: 79_500.0,
                    delivered_per_s: 318_000.0,
                    lag_p99_us: 2_000,
                    drops: 0,
                    server_cpu_us_per_msg: server_us,
                    client_cpu_us_per_msg: client_us,
                    samples: 3,
                    judged: 3,
                    dropping: 0,
                }),
            },
            basis: Basis {
                mode: "node-grouped".into(),
                server: "valkey 9.0.0".into(),
                masters: 3,
                replicas: 1,
                engines: 4,
                cpus: 2,
                local: true,
                primary_cpu_share: 0.75,
            },
        }
    }

    #[test]
    fn primaries_and_client_cores_from_the_knee() {
        // 4M deliveries/s × 2 µs × 0.75 = 6 cores; / 0.5 usable = 12.
        // Clients: 4M × 1.5 µs = 6 cores / 0.5 = 12, 3 per node.
        let s = sizing(&inputs(Some(2.0), Some(1.5)));
        assert_eq!(s.deliveries_per_s, 4_000_000.0);
        assert_eq!(s.primaries, Some(12));
        assert_eq!(s.client_cores_per_node, Some(3));
        let total = s.client_cores_total.expect("client");
        assert!((total - 12.0).abs() < 1e-9, "{total}");
        assert_eq!(s.measured_at_rate, 79_500.0);
        let text = s.assumptions.join("\n");
        assert!(
            text.contains("79.5k msg/s published (2.00 µs server, 1.50 µs client"),
            "{text}"
        );
        assert!(text.contains("sharing this machine's 2"), "{text}");
        assert!(text.contains("50 % headroom"), "{text}");
    }

    #[test]
    fn rounds_up_and_never_below_one() {
        let mut i = inputs(Some(2.0), Some(1.5));
        i.target_rate = 1.0;
        let s = sizing(&i);
        assert_eq!((s.primaries, s.client_cores_per_node), (Some(1), Some(1)));
        i.target_rate = 1_000_001.0;
        assert_eq!(sizing(&i).primaries, Some(13));
    }

    #[test]
    fn missing_cpu_gives_none_and_says_so() {
        let s = sizing(&inputs(None, Some(f64::NAN)));
        assert_eq!((s.primaries, s.client_cores_total), (None, None));
        assert!(s.assumptions.iter().any(|a| a.contains("not measured")));
    }

    #[test]
    fn nothing_held_and_bad_numbers_never_panic() {
        let mut i = inputs(Some(2.0), Some(1.0));
        i.knee.held = None;
        i.target_rate = f64::NAN;
        i.usable_core_fraction = 0.0;
        i.app_nodes = 0;
        let s = sizing(&i);
        assert_eq!(s.primaries, None);
        assert!(s.assumptions.iter().any(|a| a.contains("No step held")));
    }

    #[test]
    fn from_run_takes_fan_out_and_knee_from_the_measurements() {
        let mut run = crate::sample::synthetic();
        run.totals.published = 1_000;
        run.totals.delivered = 1_500;
        let i = Inputs::from_run(&run, 10_000.0);
        assert_eq!(i.fan_out, Some(1.5));
        let s = sizing(&i);
        assert_eq!(s.deliveries_per_s, 15_000.0);
        let held = run.knee.as_ref().and_then(|k| k.held).expect("held");
        assert_eq!(s.measured_at_rate, held.published_per_s);
        assert!(
            s.assumptions[0].contains("as measured"),
            "{:?}",
            s.assumptions
        );
        // No knee in the report: computed at the default threshold.
        run.knee = None;
        let (k, computed) = crate::run_knee(&run);
        assert!(computed);
        assert_eq!(k.threshold_us, crate::DEFAULT_LAG_THRESHOLD_US);
        assert_eq!(Inputs::from_run(&run, 1.0).knee, k);
    }

    #[test]
    fn not_reached_says_it_overstates() {
        let mut i = inputs(Some(2.0), Some(1.0));
        i.knee.reason = "not reached".into();
        let text = sizing(&i).assumptions.join(" ");
        assert!(text.contains("overstates"), "{text}");
    }
}
