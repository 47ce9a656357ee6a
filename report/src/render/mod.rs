//! Renderers: Markdown and self-contained HTML for one run, a comparison
//! of modes and a scaling series.

mod compare;
mod figures;
mod run;
mod scaling;
mod tables;

pub use compare::{render_compare_html, render_compare_markdown};
pub use run::{render_html, render_markdown};
pub use scaling::{render_scaling_html, render_scaling_markdown};

#[cfg(test)]
mod tests;
