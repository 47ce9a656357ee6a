//! Renderers: Markdown and self-contained HTML for one run, a comparison
//! of modes and a scaling series.

mod figures;
mod run;
mod tables;

pub use run::{render_html, render_markdown};

#[cfg(test)]
mod tests;
