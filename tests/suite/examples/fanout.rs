//! The fleet demo (`examples/fanout`, what `cargo xtask demo` runs) in
//! its `--quick` form, on one server kind: 3 masters with a replica each,
//! 3 subscriber engines over 2,000 channels, 5,000 msg/s for 3 s with a
//! `CLUSTER FAILOVER` half-way. The demo stamps every message with its
//! channel's sequence number and classifies every expected delivery; its
//! `result:` line must show every message accounted for (nothing lost
//! silently, duplicated or reordered; delivered plus lost in a signalled
//! window is exactly what the publishes owe, and the signalled losses lie
//! in the moved partitions), nothing dropped, no gap before the failover,
//! gap events after it that name only the moved partitions, delivery
//! restored, and exactly one subscribe and one publish connection per
//! instance per master (none on the demoted one).

use std::collections::HashMap;
use std::process::Command;

use crate::support::examples::example_binary;

#[test]
fn quick_fleet_demo_delivers_and_follows_a_failover() {
    quick_demo(&[]);
}

/// The same with partitions off (`--mode names-kept`): channels keep their
/// names on the cluster, the failover's gaps name the moved slots.
#[test]
fn quick_fleet_demo_with_names_kept_delivers_and_follows_a_failover() {
    quick_demo(&["--mode", "names-kept"]);
}

fn quick_demo(extra: &[&str]) {
    // One kind keeps this short: Valkey (the demo's default) when selected.
    let kinds = testkit::kinds();
    let kind = if kinds.contains(&testkit::ServerKind::Valkey) {
        testkit::ServerKind::Valkey
    } else {
        kinds[0]
    };
    let out = Command::new(example_binary("fanout"))
        .args([
            "--quick",
            "--failover",
            "1.5",
            "--no-live",
            "--server",
            kind.name(),
        ])
        .args(extra)
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
    let ctx = format!("{kind} {extra:?}:\n{stdout}");
    let eq = |k: &str, want: u64| assert_eq!(num(k), want, "{k} in {ctx}");
    // Every publish was acknowledged: 3 s at 5,000/s, then one more on
    // each of the 2,000 channels.
    let published = num("published");
    assert!(published > 10_000, "{ctx}");
    eq("acked", published);
    eq("publish_failed", 0);
    eq("pending", 0);
    // Every expected delivery is accounted for, exactly.
    for k in [
        "lost_silent",
        "duplicated",
        "reordered",
        "unexpected",
        "unwanted",
        "split",
        "lost_outside_moved",
    ] {
        eq(k, 0);
    }
    let expected = num("expected");
    assert!(expected > published, "fan-out 1.5: {ctx}");
    eq("delivered", expected - num("lost_signalled"));
    eq("received", num("delivered"));
    // Losses only where the failover signalled them.
    eq("dropped", 0);
    eq("gaps_before_faults", 0);
    eq("faults", 1);
    assert!(num("moved_partitions") > 0, "{ctx}");
    assert!(num("gap_events") > 0, "{ctx}");
    assert!(num("signals") >= num("gap_events"), "{ctx}");
    assert!(num("restored_ms") < 15_000, "{ctx}");
    // Per master: one subscribe and one publish connection of each of the
    // 3 engines, the same two of the publisher instance (named apart);
    // none elsewhere once every instance refreshed its map.
    assert_eq!(result.get("sub_conns_per_master"), Some(&"3..3"), "{ctx}");
    assert_eq!(result.get("pub_conns_per_master"), Some(&"3..3"), "{ctx}");
    assert_eq!(
        result.get("publisher_conns_per_master"),
        Some(&"2..2"),
        "{ctx}"
    );
    eq("stale_conns", 0);
    assert_eq!(result.get("checks"), Some(&"ok"), "{ctx}");
}
