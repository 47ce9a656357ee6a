//! `cargo xtask compare`: flags, the planned commands, and reading and
//! writing on synthetic reports (no demo runs here).

use super::*;

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

fn has(dir: &std::path::Path, name: &str) -> bool {
    dir.join(name).is_file()
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-compare-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn defaults_run_all_five_modes() {
    let o = parse(&[]).expect("parse");
    assert_eq!(o.modes, MODES.to_vec());
    assert_eq!(o.dir, PathBuf::from("target/compare"));
    assert!(!o.scaling && !o.dry_run && o.demo.is_empty());
}

#[test]
fn demo_flags_pass_through_and_compare_flags_are_kept_apart() {
    let o = parse(&args(
        "--server redis --dir /tmp/x --seconds 5 --modes classic,shards --rate 9",
    ))
    .expect("parse");
    assert_eq!(o.demo, args("--server redis --seconds 5 --rate 9"));
    assert_eq!(o.modes, args("classic shards"));
    assert_eq!(o.dir, PathBuf::from("/tmp/x"));
}

#[test]
fn bad_flags_are_clear_errors() {
    for (bad, want) in [
        ("--mode classic", "set by compare itself"),
        ("--report d", "set by compare itself"),
        ("--modes nope", "unknown mode \"nope\""),
        ("--modes", "--modes needs a value"),
        ("--nodes 1,x", "bad list"),
        ("--scaling --nodes 0,1", "0 primaries"),
        ("--scaling --masters 3", "--masters comes from --nodes"),
        ("--scaling --modes single", "no node count"),
        ("--failover 4", "not in shards, single"),
        ("--modes classic,shards --storm 3", "not in shards;"),
    ] {
        let err = parse(&args(bad)).expect_err(bad);
        assert!(err.contains(want), "{bad}: {err}");
    }
}

#[test]
fn faults_go_with_the_cluster_modes() {
    let o = parse(&args("--modes node-grouped,classic --failover 4 --storm 9")).expect("parse");
    assert_eq!(o.demo, args("--failover 4 --storm 9"));
}

#[test]
fn plan_gives_one_demo_command_per_mode() {
    let o = parse(&args("--dir out --modes node-grouped,classic --seconds 4")).expect("parse");
    let p = plan(&o);
    assert_eq!(p.len(), 2);
    assert_eq!(p[1].dir, PathBuf::from("out/classic"));
    assert_eq!(
        p[1].args.join(" "),
        "run --release -p shardsub --example fanout -- --mode classic --seconds 4 \
         --report out/classic --no-live"
    );
}

#[test]
fn scaling_plans_each_node_count() {
    let o = parse(&args("--dir out --scaling --nodes 1,3")).expect("parse");
    let p = plan(&o);
    let dirs: Vec<String> = p.iter().map(|p| p.dir.display().to_string()).collect();
    assert_eq!(
        dirs,
        [
            "out/scaling/node-grouped/masters-1",
            "out/scaling/node-grouped/masters-3"
        ]
    );
    assert!(p[1]
        .args
        .join(" ")
        .contains("--mode node-grouped --masters 3"));
}

#[test]
fn dry_run_runs_nothing() {
    run(&args("--dry-run --dir /nonexistent/x --seconds 1")).expect("dry run");
}

#[test]
fn compare_reads_each_report_and_writes_the_table() {
    let dir = temp("cmp");
    let o = parse(&["--dir".into(), dir.display().to_string(), "--no-run".into()]).expect("parse");
    let sample = fleet_report::sample::synthetic_compare();
    // Every mode of the sample but the last left a report (the sample has
    // no names-kept run either).
    for r in sample.runs.iter().take(4) {
        fleet_report::write_dir(dir.join(&r.meta.mode), r).expect("write run");
    }
    // One as the demo may leave it: report.json only.
    std::fs::remove_file(dir.join("classic/report.html")).expect("rm");
    let (runs, errors) = collect(&plan(&o));
    assert_eq!(runs.len(), 4);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("single")), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("names-kept")),
        "{errors:?}"
    );
    write(&o, runs).expect("write compare");
    assert!(
        has(&dir.join("classic"), "report.html"),
        "rendered where missing"
    );
    for f in ["compare.json", "compare.md", "compare.html"] {
        assert!(has(&dir, f), "{f}");
    }
    let json = std::fs::read_to_string(dir.join("compare.json")).expect("read");
    let back: CompareReport = serde_json::from_str(&json).expect("compare.json");
    assert_eq!(back.runs, sample.runs[..4].to_vec());
    let md = std::fs::read_to_string(dir.join("compare.md")).expect("read md");
    assert!(md.contains("Pick node-grouped"), "{md}");
    // The whole command fails (a run is missing) but still writes.
    let err = run(&["--dir".into(), dir.display().to_string(), "--no-run".into()])
        .expect_err("missing run");
    assert!(err.contains("some runs failed"), "{err}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn scaling_groups_runs_by_mode_in_node_order() {
    let dir = temp("scale");
    let o = parse(&[
        "--dir".into(),
        dir.display().to_string(),
        "--scaling".into(),
        "--modes".into(),
        "node-grouped,classic".into(),
        "--no-run".into(),
    ])
    .expect("parse");
    for s in fleet_report::sample::synthetic_scaling() {
        for r in &s.runs {
            let d = dir
                .join("scaling")
                .join(&s.mode)
                .join(format!("masters-{}", r.meta.masters));
            fleet_report::write_dir(d, r).expect("write run");
        }
    }
    let (runs, errors) = collect(&plan(&o));
    assert!(errors.is_empty(), "{errors:?}");
    write(&o, runs).expect("write scaling");
    let json = std::fs::read_to_string(dir.join("scaling.json")).expect("read");
    let back: Vec<ScalingReport> = serde_json::from_str(&json).expect("scaling.json");
    let shape: Vec<(String, Vec<usize>)> = back
        .iter()
        .map(|s| {
            (
                s.mode.clone(),
                s.runs.iter().map(|r| r.meta.masters).collect(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("node-grouped".to_string(), vec![1, 2, 3]),
            ("classic".to_string(), vec![1, 2, 3])
        ]
    );
    assert!(has(&dir, "scaling.html"));
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn no_reports_at_all_is_an_error() {
    let dir = temp("none");
    let err = run(&["--dir".into(), dir.display().to_string(), "--no-run".into()])
        .expect_err("nothing to read");
    assert!(err.contains("no run left a report"), "{err}");
}
