//! Axis scales and tick choice.

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear, ticks in 1-2-5 steps.
    Linear,
    /// Base-10 logarithmic; values ≤ 0 are left out.
    Log,
}

/// A 1-2-5 step near `raw` (raw > 0 and finite).
fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let f = if norm < 1.5 {
        1.0
    } else if norm < 3.0 {
        2.0
    } else if norm < 7.0 {
        5.0
    } else {
        10.0
    };
    f * mag
}

/// Nice linear ticks covering `[lo, hi]` with about `count` intervals:
/// returns the ticks (first ≤ lo, last ≥ hi) and the step. With
/// `integer`, the step is at least 1 (node counts). Degenerate or
/// non-finite ranges are widened to something drawable.
pub fn nice_ticks(lo: f64, hi: f64, count: usize, integer: bool) -> (Vec<f64>, f64) {
    let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() {
        (lo.min(hi), lo.max(hi))
    } else {
        (0.0, 1.0)
    };
    if hi - lo < 1e-12 * hi.abs().max(1.0) {
        let v = lo;
        let pad = if v == 0.0 { 1.0 } else { v.abs() * 0.1 };
        lo = if v >= 0.0 {
            (v - pad).max(0.0)
        } else {
            v - pad
        };
        hi = v + pad;
    }
    let mut step = nice_step((hi - lo) / count.max(1) as f64);
    if integer {
        step = step.max(1.0).round().max(1.0);
    }
    let first = (lo / step).floor() * step;
    let last = (hi / step).ceil() * step;
    let n = ((last - first) / step).round() as usize;
    let ticks = (0..=n.min(50)).map(|i| first + step * i as f64).collect();
    (ticks, step)
}

/// Log ticks covering `[lo, hi]` (both > 0): 1-2-5 per decade over up to
/// three decades, every decade beyond that. Bad ranges give `[1, 10]`.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > 0.0 && lo.is_finite() && hi.is_finite()) {
        return vec![1.0, 10.0];
    }
    let (lo, hi) = (lo.min(hi), lo.max(hi));
    let d0 = lo.log10().floor() as i32;
    let mut d1 = hi.log10().ceil() as i32;
    if d1 <= d0 {
        d1 = d0 + 1;
    }
    let d1 = d1.min(d0 + 30);
    let mults: &[f64] = if d1 - d0 <= 3 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let mut out = Vec::new();
    for d in d0..d1 {
        for m in mults {
            out.push(m * 10f64.powi(d));
        }
    }
    out.push(10f64.powi(d1));
    // Trim to one tick either side of the data.
    let start = out.iter().rposition(|&t| t <= lo).unwrap_or(0);
    let end = out.iter().position(|&t| t >= hi).unwrap_or(out.len() - 1);
    out.get(start..=end).map(<[f64]>::to_vec).unwrap_or(out)
}

/// A compact number: `1.5M`, `20k`, `0.25`, `3`. Non-finite: `–`.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    let (x, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = if x.abs() >= 100.0 || x == x.round() {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else if x.abs() >= 0.1 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    };
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s}{suffix}")
}
