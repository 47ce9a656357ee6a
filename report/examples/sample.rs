//! Writes the SYNTHETIC sample report (made-up numbers, for looking at the
//! rendering only) to the directory given, default `target/sample-report`.

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/sample-report".into());
    fleet_report::write_dir(&dir, &fleet_report::sample::synthetic())?;
    println!("wrote {dir}/report.{{json,md,html}} (SYNTHETIC data)");
    Ok(())
}
