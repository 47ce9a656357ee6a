//! Writes the SYNTHETIC sample reports (made-up numbers, for looking at the
//! rendering only) under the directory given, default
//! `target/sample-report`: `report.*` (one run), `compare.*` (five modes)
//! and `scaling.*` (two modes over 1-3 primaries).

use fleet_report::sample;

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/sample-report".into());
    fleet_report::write_dir(&dir, &sample::synthetic())?;
    fleet_report::write_compare_dir(&dir, &sample::synthetic_compare())?;
    fleet_report::write_scaling_dir(&dir, &sample::synthetic_scaling())?;
    println!("wrote {dir}/{{report,compare,scaling}}.{{json,md,html}} (SYNTHETIC data)");
    Ok(())
}
