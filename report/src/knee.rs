//! The knee: ramp the rate and find the first sustained step at which lag
//! p99 crosses a threshold or drops start.
//!
//! Samples are grouped into steps by their `rate_target` (consecutive
//! samples with the same target). Samples a fault disturbed (gap events or
//! connection rebuilds in the interval, and the interval after) are left out
//! of the verdict, unless that leaves nothing. A step *crosses* when more
//! than half of the rest have a lag p99 above the threshold (the step's lag
//! p99 is their lower median, so it is above the threshold exactly then),
//! or more than half of them dropped messages: one spike does not make a
//! knee. The step before the crossing one is the operating point that held
//! ([`Knee::held`]); sizing takes its CPU per message from it.

use crate::model::{Knee, RunReport, Sample, Step};

/// The lag p99 threshold used when a report carries no knee, µs: 100 ms,
/// the demo's `--knee-lag-ms` default.
pub const DEFAULT_LAG_THRESHOLD_US: u64 = 100_000;

/// Two targets within this relative distance are the same step.
const SAME_TARGET: f64 = 0.005;

/// Splits `samples` into rate steps (consecutive samples, same target).
pub fn steps(samples: &[Sample]) -> Vec<&[Sample]> {
    step_ranges(samples)
        .into_iter()
        .filter_map(|r| samples.get(r))
        .collect()
}

/// The steps as index ranges into `samples`.
fn step_ranges(samples: &[Sample]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=samples.len() {
        let split = match (samples.get(i - 1), samples.get(i)) {
            (Some(a), Some(b)) => !same_target(a.rate_target, b.rate_target),
            _ => true,
        };
        if split {
            if i > start {
                out.push(start..i);
            }
            start = i;
        }
    }
    out
}

/// Per sample: whether a fault disturbed it (gap events or rebuilds in it
/// or in the interval before).
fn disturbed(samples: &[Sample]) -> Vec<bool> {
    let hit = |s: &Sample| s.gaps > 0 || s.rebuilds > 0;
    let mut prev = false;
    samples
        .iter()
        .map(|s| {
            let now = hit(s);
            let out = now || prev;
            prev = now;
            out
        })
        .collect()
}

fn same_target(a: f64, b: f64) -> bool {
    if a == b {
        return true;
    }
    let scale = a.abs().max(b.abs());
    scale.is_finite() && (a - b).abs() <= scale * SAME_TARGET
}

/// Averages one step's samples (fault-disturbed ones left out of the lag
/// and drops verdict, see the module docs). Non-finite rates count as 0.
pub fn summarize(step: &[Sample]) -> Step {
    summarize_with(step, &disturbed(step))
}

fn summarize_with(step: &[Sample], disturbed: &[bool]) -> Step {
    let n = step.len();
    let finite = |v: f64| if v.is_finite() { v } else { 0.0 };
    let mean = |f: &dyn Fn(&Sample) -> f64| {
        if n == 0 {
            0.0
        } else {
            step.iter().map(|s| finite(f(s))).sum::<f64>() / n as f64
        }
    };
    let delivered = mean(&|s| s.delivered_per_s);
    let per_msg = |f: &dyn Fn(&Sample) -> Option<f64>| -> Option<f64> {
        let cores: Option<Vec<f64>> = step.iter().map(f).collect();
        let cores = cores?;
        if n == 0 || delivered <= 0.0 {
            return None;
        }
        let mean_cores = cores.iter().map(|&c| finite(c)).sum::<f64>() / n as f64;
        Some(mean_cores / delivered * 1e6)
    };
    let calm: Vec<&Sample> = step
        .iter()
        .zip(disturbed.iter().chain(std::iter::repeat(&false)))
        .filter(|(_, &d)| !d)
        .map(|(s, _)| s)
        .collect();
    let judged: Vec<&Sample> = if calm.is_empty() {
        step.iter().collect()
    } else {
        calm
    };
    Step {
        rate_target: step.first().map_or(0.0, |s| finite(s.rate_target)),
        published_per_s: mean(&|s| s.published_per_s),
        delivered_per_s: delivered,
        lag_p99_us: lower_median(judged.iter().map(|s| s.lag_p99_us).collect()),
        drops: step.iter().map(|s| s.drops).fold(0u64, u64::saturating_add),
        server_cpu_us_per_msg: per_msg(&|s| s.server_cpu_cores),
        client_cpu_us_per_msg: per_msg(&|s| s.client_cpu_cores),
        samples: n,
        judged: judged.len(),
        dropping: judged.iter().filter(|s| s.drops > 0).count(),
    }
}

/// The lower median (0 for none): above a threshold exactly when more than
/// half of the values are.
fn lower_median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

/// The rate a step ran at: its target, or what it published when flat out.
fn step_rate(s: &Step) -> f64 {
    if s.rate_target > 0.0 {
        s.rate_target
    } else {
        s.published_per_s
    }
}

/// Finds the knee in `samples` (see the module docs). With no samples the
/// knee is "not reached" at rate 0 and nothing held.
pub fn knee(samples: &[Sample], lag_threshold_us: u64) -> Knee {
    let mut held: Option<Step> = None;
    let flags = disturbed(samples);
    for range in step_ranges(samples) {
        let (Some(step), Some(d)) = (samples.get(range.clone()), flags.get(range)) else {
            continue;
        };
        let summary = summarize_with(step, d);
        let reason = if summary.dropping * 2 > summary.judged {
            Some("drops")
        } else if summary.lag_p99_us > lag_threshold_us {
            Some("lag")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Knee {
                rate: step_rate(&summary),
                lag_p99_us: summary.lag_p99_us,
                reason: reason.into(),
                threshold_us: lag_threshold_us,
                at_s: step_start(samples, step),
                held,
            };
        }
        let better = held.is_none_or(|h| summary.delivered_per_s >= h.delivered_per_s);
        if better {
            held = Some(summary);
        }
    }
    Knee {
        rate: held.as_ref().map_or(0.0, step_rate),
        lag_p99_us: held.as_ref().map_or(0, |h| h.lag_p99_us),
        reason: "not reached".into(),
        threshold_us: lag_threshold_us,
        at_s: 0.0,
        held,
    }
}

/// The run's knee: the one it carries, or one computed here over its
/// samples at [`DEFAULT_LAG_THRESHOLD_US`] (the flag says which).
pub fn run_knee(r: &RunReport) -> (Knee, bool) {
    match &r.knee {
        Some(k) => (k.clone(), false),
        None => (knee(&r.samples, DEFAULT_LAG_THRESHOLD_US), true),
    }
}

/// Where `step` starts: the previous sample's end (0 for the first).
fn step_start(all: &[Sample], step: &[Sample]) -> f64 {
    let first = step.first().map_or(0.0, |s| s.t_s);
    all.iter()
        .map(|s| s.t_s)
        .filter(|&t| t < first)
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, target: f64, p99: u64, drops: u64) -> Sample {
        Sample {
            t_s: t,
            published_per_s: target,
            delivered_per_s: target * 4.0,
            lag_p50_us: p99 / 4,
            lag_p99_us: p99,
            drops,
            gaps: 0,
            connections: 12,
            rebuilds: 0,
            rate_target: target,
            server_cpu_cores: Some(target / 100_000.0),
            client_cpu_cores: Some(target / 200_000.0),
        }
    }

    fn ramp(p99s: &[&[u64]]) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut t = 0.0;
        let mut rate = 10_000.0;
        for step in p99s {
            for &p in *step {
                t += 1.0;
                out.push(s(t, rate, p, 0));
            }
            rate *= 2.0;
        }
        out
    }

    #[test]
    fn knee_at_first_sustained_lag_crossing() {
        let samples = ramp(&[&[900, 1000], &[1200, 1100], &[30_000, 40_000], &[90_000]]);
        let k = knee(&samples, 10_000);
        assert_eq!(k.reason, "lag");
        assert_eq!(k.rate, 40_000.0);
        // The lower median of the step's p99s.
        assert_eq!(k.lag_p99_us, 30_000);
        assert_eq!(k.at_s, 4.0);
        let held = k.held.expect("held");
        assert_eq!(held.rate_target, 20_000.0);
        assert_eq!(held.lag_p99_us, 1100);
        // 0.2 cores / 80,000 deliveries/s = 2.5 µs per message.
        let cpu = held.server_cpu_us_per_msg.expect("cpu");
        assert!((cpu - 2.5).abs() < 1e-9, "{cpu}");
    }

    #[test]
    fn one_spike_is_not_a_knee() {
        let samples = ramp(&[&[900, 50_000, 1000], &[1200, 1100, 1300]]);
        let k = knee(&samples, 10_000);
        assert_eq!(k.reason, "not reached");
        assert_eq!(k.rate, 20_000.0);
        assert_eq!(k.held.expect("held").rate_target, 20_000.0);
    }

    #[test]
    fn samples_a_fault_disturbed_are_left_out() {
        // A failover in the second step: its interval (gap events) and the
        // next one are slow, the third sample is not.
        let mut samples = ramp(&[&[900, 1000, 1100], &[50_000, 60_000, 1_200], &[1_300]]);
        samples[3].gaps = 40;
        let k = knee(&samples, 10_000);
        assert_eq!(k.reason, "not reached", "{k:?}");
        let steps: Vec<Step> = steps(&samples).into_iter().map(summarize).collect();
        assert_eq!((steps[1].judged, steps[1].lag_p99_us), (1, 1_200));
        // Rebuilds mark a fault too; the same slow samples unmarked are a knee.
        samples[3].gaps = 0;
        samples[3].rebuilds = 3;
        assert_eq!(knee(&samples, 10_000).reason, "not reached");
        samples[3].rebuilds = 0;
        let k = knee(&samples, 10_000);
        assert_eq!((k.reason.as_str(), k.rate), ("lag", 20_000.0));
    }

    #[test]
    fn a_step_the_fault_covers_entirely_is_judged_on_all_its_samples() {
        let mut samples = ramp(&[&[900], &[50_000, 60_000]]);
        samples[1].rebuilds = 1;
        samples[2].rebuilds = 1;
        let k = knee(&samples, 10_000);
        assert_eq!((k.reason.as_str(), k.rate), ("lag", 20_000.0));
    }

    #[test]
    fn drops_make_a_knee_even_with_low_lag() {
        let mut samples = ramp(&[&[900, 1000], &[1000, 1000]]);
        for x in samples.iter_mut().skip(2) {
            x.drops = 5;
        }
        let k = knee(&samples, 10_000);
        assert_eq!(k.reason, "drops");
        assert_eq!(k.rate, 20_000.0);
        assert_eq!(k.held.expect("held").rate_target, 10_000.0);
    }

    #[test]
    fn first_step_failing_holds_nothing() {
        let k = knee(&ramp(&[&[20_000]]), 10_000);
        assert_eq!(k.reason, "lag");
        assert!(k.held.is_none());
    }

    #[test]
    fn flat_out_uses_the_measured_rate() {
        let mut samples = ramp(&[&[900, 1000, 1100]]);
        for x in &mut samples {
            x.rate_target = 0.0;
            x.published_per_s = 123_000.0;
        }
        let k = knee(&samples, 10_000);
        assert_eq!(k.reason, "not reached");
        assert_eq!(k.rate, 123_000.0);
    }

    #[test]
    fn empty_and_odd_inputs_never_panic() {
        let k = knee(&[], 10_000);
        assert_eq!((k.rate, k.reason.as_str()), (0.0, "not reached"));
        assert!(k.held.is_none());
        let mut odd = ramp(&[&[1000]]);
        odd[0].rate_target = f64::NAN;
        odd[0].delivered_per_s = f64::INFINITY;
        odd[0].server_cpu_cores = None;
        let k = knee(&odd, 10_000);
        assert_eq!(k.reason, "not reached");
        assert!(k.held.expect("held").server_cpu_us_per_msg.is_none());
        assert_eq!(steps(&odd).len(), 1);
    }

    #[test]
    fn steps_split_on_target_changes_only() {
        let samples = ramp(&[&[1, 1, 1], &[1], &[1, 1]]);
        let lens: Vec<usize> = steps(&samples).iter().map(|s| s.len()).collect();
        assert_eq!(lens, vec![3, 1, 2]);
    }
}
