//! The fleet demo (`examples/fanout.rs`, what `cargo xtask demo` runs) in
//! its `--quick` form, on one server kind: 3 masters with a replica each,
//! 3 subscriber engines over 2,000 channels, 5,000 msg/s for 3 s with a
//! `CLUSTER FAILOVER` half-way. Its `result:` line must show delivery,
//! nothing dropped, no gap before the failover, gap events after it that
//! name only the moved partitions, delivery restored, and one subscribe
//! connection per engine per master.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

fn fanout_binary() -> PathBuf {
    // Tests run from <target>/<profile>/deps; examples live next to it in
    // <target>/<profile>/examples. `cargo test` builds them, `cargo test
    // --test fanout_smoke` does not, and a binary left from an older build
    // would test old code: so build it here (a no-op when it is fresh).
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let target_dir = profile_dir.parent().unwrap();
    let mut build = Command::new(env!("CARGO"));
    build
        .args(["build", "--quiet", "-p", "shardsub", "--example", "fanout"])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    assert!(build.status().unwrap().success(), "building fanout failed");
    let bin = profile_dir.join("examples").join("fanout");
    assert!(bin.exists(), "{} missing", bin.display());
    bin
}

#[test]
fn quick_fleet_demo_delivers_and_follows_a_failover() {
    // One kind keeps this short: Valkey (the demo's default) when selected.
    let kinds = testkit::kinds();
    let kind = if kinds.contains(&testkit::ServerKind::Valkey) {
        testkit::ServerKind::Valkey
    } else {
        kinds[0]
    };
    let out = Command::new(fanout_binary())
        .args(["--quick", "--server", kind.name()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{kind}: {stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("result: "))
        .unwrap_or_else(|| panic!("no result line:\n{stdout}"));
    let result: HashMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let num = |k: &str| -> u64 {
        result
            .get(k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{k} missing in {line}"))
    };
    let ctx = format!("{kind}:\n{stdout}");
    assert_eq!(result.get("checks"), Some(&"ok"), "{ctx}");
    assert!(num("published") > 5_000, "{ctx}");
    // Fan-out 1.5. Messages published while the failover moved partitions
    // may be lost (a slow machine stretches that window); most arrive.
    assert!(num("delivered") * 2 > num("expected"), "{ctx}");
    assert_eq!(num("dropped"), 0, "{ctx}");
    assert_eq!(num("gaps_before_failover"), 0, "{ctx}");
    assert!(num("moved_partitions") > 0, "{ctx}");
    assert!(num("gap_events") > 0, "{ctx}");
    assert_eq!(num("gaps_outside_moved"), 0, "{ctx}");
    assert!(num("restored_ms") < 15_000, "{ctx}");
    // 3 engines × 1 on every master, plus the publisher instance's own
    // idle one where it has one.
    let conns = result.get("sub_conns_per_master").copied().unwrap_or("");
    assert!(matches!(conns, "3..3" | "3..4" | "4..4"), "{ctx}");
}
