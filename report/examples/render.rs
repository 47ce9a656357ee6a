//! Renders a `report.json` written by the demo again: `report.md` and
//! `report.html` next to it.
//!
//! `cargo run -p fleet-report --example render -- DIR/report.json`

fn main() -> Result<(), String> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: render DIR/report.json")?;
    let run = fleet_report::read_run(&path).map_err(|e| e.to_string())?;
    let dir = std::path::Path::new(&path)
        .parent()
        .unwrap_or(std::path::Path::new("."));
    for (name, text) in [
        ("report.md", fleet_report::render_markdown(&run)),
        ("report.html", fleet_report::render_html(&run)),
    ] {
        let out = dir.join(name);
        std::fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))?;
        println!("wrote {}", out.display());
    }
    Ok(())
}
