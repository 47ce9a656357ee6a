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
//!
//! ```
//! // SYNTHETIC numbers (a ramp whose lag p99 crosses 10 ms near the top).
//! let run = fleet_report::sample::synthetic();
//! let knee = fleet_report::knee(&run.samples, 10_000);
//! assert_eq!(knee.reason, "lag");
//! let held = knee.held.expect("a step held below the knee");
//! assert!(held.published_per_s < knee.rate);
//! let answer = fleet_report::sizing(&fleet_report::Inputs::from_run(&run, 1e6));
//! assert!(answer.primaries.is_some_and(|p| p >= 1));
//! assert!(fleet_report::render_html(&run).starts_with("<!DOCTYPE html>"));
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod chart;
mod knee;
mod model;
mod render;
pub mod sample;
mod sizing;

pub use knee::{knee, run_knee, steps, summarize, DEFAULT_LAG_THRESHOLD_US};
pub use model::{
    CompareReport, Fault, Knee, Machine, Meta, NodeStats, Ramp, RunReport, Sample, ScalingReport,
    ServerInfo, Step, Totals,
};
pub use render::{
    render_compare_html, render_compare_markdown, render_html, render_markdown,
    render_scaling_html, render_scaling_markdown,
};
pub use sizing::{sizing, Basis, Inputs, Sizing, DEFAULT_USABLE_CORE_FRACTION};

use std::{fs, io, path::Path};

/// Writes `report.json`, `report.md` and `report.html` for `run` into
/// `dir`, creating it if needed.
///
/// # Errors
///
/// Any error creating the directory, serializing or writing the files.
pub fn write_dir(dir: impl AsRef<Path>, run: &RunReport) -> io::Result<()> {
    let dir = dir.as_ref();
    fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(run).map_err(io::Error::other)?;
    fs::write(dir.join("report.json"), json + "\n")?;
    fs::write(dir.join("report.md"), render_markdown(run))?;
    fs::write(dir.join("report.html"), render_html(run))?;
    Ok(())
}

/// Writes `compare.json`, `compare.md` and `compare.html` into `dir`.
///
/// # Errors
///
/// Any error creating the directory, serializing or writing the files.
pub fn write_compare_dir(dir: impl AsRef<Path>, c: &CompareReport) -> io::Result<()> {
    let dir = dir.as_ref();
    fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(c).map_err(io::Error::other)?;
    fs::write(dir.join("compare.json"), json + "\n")?;
    fs::write(dir.join("compare.md"), render_compare_markdown(c))?;
    fs::write(dir.join("compare.html"), render_compare_html(c))?;
    Ok(())
}

/// Writes `scaling.json` (an array, one [`ScalingReport`] per mode),
/// `scaling.md` and `scaling.html` into `dir`.
///
/// # Errors
///
/// Any error creating the directory, serializing or writing the files.
pub fn write_scaling_dir(dir: impl AsRef<Path>, all: &[ScalingReport]) -> io::Result<()> {
    let dir = dir.as_ref();
    fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(all).map_err(io::Error::other)?;
    fs::write(dir.join("scaling.json"), json + "\n")?;
    fs::write(dir.join("scaling.md"), render_scaling_markdown(all))?;
    fs::write(dir.join("scaling.html"), render_scaling_html(all))?;
    Ok(())
}

/// Reads a `report.json` written by [`write_dir`].
///
/// # Errors
///
/// The file cannot be read, or is not a [`RunReport`] (the message names
/// the file and the line and column).
pub fn read_run(path: impl AsRef<Path>) -> io::Result<RunReport> {
    let path = path.as_ref();
    let text = fs::read_to_string(path)?;
    serde_json::from_str(&text).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a run report: {e}", path.display()),
        )
    })
}
