//! The fleet demo's report: the JSON model the demo (`examples/fanout`)
//! writes, Markdown and one self-contained HTML page (inline CSS and SVG,
//! no scripts, no external resources) rendered from it, knee detection over
//! a rate ramp, and the sizing answer taken from the knee.
//!
//! Pure: no sockets, threads or clocks. The demo measures and fills a
//! [`RunReport`]; this crate only computes and renders.
//!
//! ```text
//! demo ──RunReport──▶ write_dir ──▶ report.json, report.md, report.html
//!                       knee(samples) ─▶ Knee ─▶ sizing(Inputs) ─▶ Sizing
//! xtask compare ──CompareReport / ScalingReport──▶ compare.{json,md,html}
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod chart;
mod knee;
mod model;
pub mod sample;
mod sizing;

pub use knee::{knee, steps, summarize, DEFAULT_LAG_THRESHOLD_US};
pub use model::{
    CompareReport, Fault, Knee, Machine, Meta, NodeStats, Ramp, RunReport, Sample, ScalingReport,
    ServerInfo, Step, Totals,
};
pub use sizing::{sizing, Basis, Inputs, Sizing, DEFAULT_USABLE_CORE_FRACTION};
