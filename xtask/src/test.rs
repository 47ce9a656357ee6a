//! `cargo xtask test`: every check, timed, with a summary at the end.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::install;
use crate::run::{self, cargo, root, Note};

/// Default fuzz smoke time per target, in seconds.
const FUZZ_SECS: u64 = 20;

/// The workspace crates that ship: `shardsub` and the crates its API is
/// built on. Every other member is `publish = false` (a test checks that
/// this list is exactly the members cargo would publish).
const SHIPPED: [&str; 5] = [
    "shardsub-shardcore",
    "shardsub-resp",
    "shardsub-topology",
    "shardsub-control",
    "shardsub",
];

/// The one metadata warning a shipped crate may give: no real URL exists
/// for a homepage or repository (the documentation link defaults to the
/// crate's generated docs).
const NO_URL_WARNING: &str = "warning: manifest has no documentation, homepage or repository";

enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

#[derive(Default)]
pub(crate) struct Report {
    steps: Vec<(String, f64, Outcome)>,
}

impl Report {
    pub(crate) fn step(&mut self, name: &str, body: impl FnOnce() -> Result<(), String>) -> bool {
        if skipped(name) {
            println!("\nxtask: === {name}: skipped (XTASK_SKIP)");
            self.steps
                .push((name.into(), 0.0, Outcome::Skipped("XTASK_SKIP".into())));
            return true;
        }
        println!("\nxtask: === {name}");
        let start = Instant::now();
        let outcome = match body() {
            Ok(()) => Outcome::Passed,
            Err(msg) => {
                eprintln!("xtask: {name} FAILED: {msg}");
                Outcome::Failed(msg)
            }
        };
        let ok = !matches!(outcome, Outcome::Failed(_));
        self.steps
            .push((name.into(), start.elapsed().as_secs_f64(), outcome));
        ok
    }

    fn skip(&mut self, name: &str, why: &str) {
        println!("\nxtask: === {name}: skipped: {why}");
        self.steps
            .push((name.into(), 0.0, Outcome::Skipped(why.into())));
    }

    pub(crate) fn finish(self, total: Instant) -> Result<(), String> {
        println!("\nxtask: summary");
        for (name, secs, outcome) in &self.steps {
            let status = match outcome {
                Outcome::Passed => "ok".to_string(),
                Outcome::Failed(msg) => format!("FAILED: {msg}"),
                Outcome::Skipped(why) => format!("skipped ({why})"),
            };
            println!("  {name:<32} {secs:>7.1} s  {status}");
        }
        println!("  {:<32} {:>7.1} s", "total", total.elapsed().as_secs_f64());
        let failed: Vec<&str> = self
            .steps
            .iter()
            .filter(|(_, _, o)| matches!(o, Outcome::Failed(_)))
            .map(|(n, _, _)| n.as_str())
            .collect();
        if failed.is_empty() {
            println!("xtask: all steps passed");
            Ok(())
        } else {
            Err(format!("failed steps: {}", failed.join(", ")))
        }
    }
}

/// `cargo nextest run` with the suite's bounds (`xtask/nextest.toml`) and
/// `env` (the servers' binaries): the arguments that choose the tests follow.
pub(crate) fn nextest(env: &[(&'static str, String)]) -> Command {
    let config = format!("xtask:{}", root().join("xtask/nextest.toml").display());
    let mut command = cargo();
    command
        .args(["nextest", "run"])
        .args(["--tool-config-file", &config])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    command
}

/// Runs a nextest `command`, keeping the lines that name failed tests for
/// the summary.
pub(crate) fn nextest_noting(command: &mut Command) -> Result<(), String> {
    run::status_noting(command, failure_line)
}

/// What a full run from a fresh clone writes under `target/`, in GiB
/// (measured with `.ci/run`'s settings; a run builds the workspace in
/// several feature sets, the examples and a release build).
const RUN_WRITES_GIB: u64 = 5;

/// Says how much disk the run has, and warns when it is less than a run
/// writes: a full disk fails builds mid-run with errors that name no cause
/// in the project.
fn disk_note() {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let probe = target
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    let Some(free) = free_gib(probe) else {
        return;
    };
    println!("xtask: {free} GiB free on the disk of {}", target.display());
    if free < RUN_WRITES_GIB {
        println!(
            "xtask: WARNING: a full run writes about {RUN_WRITES_GIB} GiB there; \
             builds may fail with \"No space left on device\""
        );
    }
}

/// Free space on the file system holding `path`, from `df` (POSIX output).
fn free_gib(path: &Path) -> Option<u64> {
    let out = Command::new("df").arg("-Pk").arg(path).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let kib: u64 = text
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kib / (1024 * 1024))
}

/// Step names (or their first word) listed in `XTASK_SKIP`.
fn skipped(name: &str) -> bool {
    let first = name.split_whitespace().next().unwrap_or(name);
    std::env::var("XTASK_SKIP").is_ok_and(|list| {
        list.split(',')
            .map(str::trim)
            .any(|s| !s.is_empty() && (s == name || s == first))
    })
}

pub fn run() -> Result<(), String> {
    let total = Instant::now();
    let mut report = Report::default();
    disk_note();
    let mut tools = None;
    if !report.step("install", || install::all().map(|t| tools = Some(t))) {
        return report.finish(total);
    }
    let env = tools.map(|t| t.env()).unwrap_or_default();
    report.step("fmt", || {
        run::status(cargo().args(["fmt", "--all", "--", "--check"]))
    });
    report.step("layers (imports only downward)", crate::layers::run);
    report.step("clippy", || {
        run::status(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    });
    // TLS and tokio are opt-in features of the root package: the default
    // build above leaves them out, so their code gets its own lint, tests
    // and docs.
    report.step("clippy (tls and tokio features)", || {
        run::status(cargo().args([
            "clippy",
            "-p",
            "shardsub",
            "--features",
            "tls,tokio",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    });
    report.step("tests (nextest, redis+valkey)", || {
        nextest_noting(nextest(&env).args(["--workspace", "--no-fail-fast"]))
    });
    report.step("tls tests (nextest, redis; --features tls)", || {
        // The unit tests (URLs, config) and the suite's `tls` area
        // (tests/suite/tls/) against Redis listening for TLS; the bundled
        // Valkey has no TLS (a test says so).
        nextest_noting(
            nextest(&env)
                .args(["-p", "shardsub", "--features", "tls"])
                .args(["--lib", "--test", "suite"])
                .args(["-E", "kind(lib) | (binary(suite) & test(/^tls::/))"])
                .arg("--no-fail-fast"),
        )?;
        run::status(
            cargo()
                .args(["test", "--doc", "-p", "shardsub", "--features", "tls"])
                .args(["--", "tls", "Tls"]),
        )
    });
    report.step(
        "tokio tests (nextest, redis+valkey; --features tokio)",
        || {
            // The lend for async callers (`src/engine/lend_async_tests.rs`)
            // and the tests named `tokio_…`.
            nextest_noting(
                nextest(&env)
                    .args(["-p", "shardsub", "--features", "tokio"])
                    .args(["--lib", "--no-fail-fast", "-E", "test(/lend_async|tokio_/)"]),
            )
        },
    );
    report.step("doc tests", || {
        run::status(
            cargo()
                .args(["test", "--doc", "--workspace"])
                .envs(env.iter().map(|(k, v)| (*k, v.as_str()))),
        )
    });
    report.step("docs (rustdoc -D warnings)", || {
        run::status(
            cargo()
                .args(["doc", "--no-deps", "--workspace"])
                .env("RUSTDOCFLAGS", "-D warnings"),
        )?;
        run::status(
            cargo()
                .args([
                    "doc",
                    "--no-deps",
                    "-p",
                    "shardsub",
                    "--features",
                    "tls,tokio",
                ])
                .env("RUSTDOCFLAGS", "-D warnings"),
        )
    });
    report.step("package (cargo package, shipped crates)", package);
    report.step("benches once", || {
        run::status(
            cargo()
                .args([
                    "bench",
                    "--workspace",
                    "--benches",
                    "--no-fail-fast",
                    "--",
                    "--test",
                ])
                // Each bench runs once, to prove it works: optimising the
                // build would only cost minutes. Real measurements use the
                // normal bench profile (`cargo bench`).
                .env("CARGO_PROFILE_BENCH_OPT_LEVEL", "0")
                .env("CARGO_PROFILE_BENCH_DEBUG", "false")
                .envs(env.iter().map(|(k, v)| (*k, v.as_str()))),
        )
    });
    let secs = std::env::var("XTASK_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(FUZZ_SECS);
    fuzz_steps(&mut report, secs);
    report.finish(total)
}

/// `cargo package` for every shipped crate at once: cargo packages them in
/// dependency order and verifies each by building its `.crate` against the
/// others' fresh packages, so the unpublished path dependencies between
/// them are checked too. Cargo only warns when a manifest lacks a
/// description, license or readme; here that fails the step. In CI (a clean
/// clone) the tree must be clean; elsewhere uncommitted changes are allowed.
fn package() -> Result<(), String> {
    clear_stale_extractions();
    let mut command = cargo();
    command.arg("package");
    for krate in SHIPPED {
        command.args(["-p", krate]);
    }
    if std::env::var_os("CI").is_none() {
        command.arg("--allow-dirty");
    }
    let line = run::show(&command);
    println!("xtask: $ {line}");
    let out = command
        .output()
        .map_err(|e| format!("`{line}` could not run: {e}"))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    eprint!("{err}");
    if !out.status.success() {
        return Err(format!("`{line}` failed ({})", out.status));
    }
    let missing = missing_metadata(&err);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "a shipped crate lacks metadata:\n    {}",
            missing.join("\n    ")
        ))
    }
}

/// Cargo verifies a package against the others through a local registry
/// (`target/package/tmp-registry`) whose crates it extracts into
/// `$CARGO_HOME/registry/src/<registry id>/<crate>-<version>`, and it
/// reuses such a directory when one exists: a clone at a path packaged
/// before, at the same versions, would be verified against the sources of
/// that earlier run (it happened: a new function "not found"). The shipped
/// crates are in no real registry, so every such directory is a leftover:
/// removed first, and said.
fn clear_stale_extractions() {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry").join("src")) else {
        return;
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return;
    };
    for registry in registries.flatten() {
        let Ok(entries) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = SHIPPED.iter().any(|k| {
                name.strip_prefix(k)
                    .and_then(|v| v.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
            });
            if ours && std::fs::remove_dir_all(e.path()).is_ok() {
                println!(
                    "xtask: removed {} (an earlier packaging's extracted sources)",
                    e.path().display()
                );
            }
        }
    }
}

/// The lines of `cargo package`'s output saying that a manifest lacks
/// metadata other than a documentation, homepage or repository URL, each
/// with the crate it is about (cargo warns just before `Packaging <crate>`).
fn missing_metadata(output: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = Vec::new();
    for line in output.lines().map(str::trim) {
        if line.starts_with("warning: manifest has no") && line != NO_URL_WARNING {
            pending.push(line);
        } else if let Some(rest) = line.strip_prefix("Packaging ") {
            let name = rest.split_whitespace().next().unwrap_or(rest);
            found.extend(pending.drain(..).map(|w| format!("{name}: {w}")));
        }
    }
    found.extend(pending.into_iter().map(String::from));
    found
}

/// The lines of nextest's output that name a failed test or say why it
/// failed, for the summary (a CI log may keep only the end of the run).
fn failure_line(line: &str) -> Note {
    let line = line.trim_start();
    let status = line.split(" [").next().unwrap_or("");
    let failed = [
        "FAIL",
        "TIMEOUT",
        "SIGSEGV",
        "SIGABRT",
        "SIGKILL",
        "LEAK-FAIL",
        "ABORT",
    ];
    if line.contains(" [") && failed.iter().any(|f| status.ends_with(f)) {
        Note::Line
    } else if line.contains("panicked at ") {
        Note::AndNext
    } else {
        Note::Skip
    }
}

/// `cargo xtask fuzz [SECS]`: only the fuzz steps (installing cargo-fuzz if needed).
pub fn fuzz_only(secs: u64) -> Result<(), String> {
    let total = Instant::now();
    let mut report = Report::default();
    if report.step("install cargo-fuzz", || {
        install::cargo_tool("fuzz", "cargo-fuzz")
    }) {
        fuzz_steps(&mut report, secs);
    }
    report.finish(total)
}

/// Builds the fuzz targets and runs each for `secs` seconds on a scratch
/// copy of its seed corpus (the committed corpus is only read).
fn fuzz_steps(report: &mut Report, secs: u64) {
    if skipped("fuzz") {
        report.skip("fuzz", "XTASK_SKIP");
        return;
    }
    let fuzz_dir = root().join("fuzz");
    if !fuzz_dir.join("Cargo.toml").is_file() {
        report.skip("fuzz", "fuzz/Cargo.toml does not exist yet");
        return;
    }
    let targets = match run::output(&mut fuzz_cargo("list", &fuzz_dir)) {
        Some(list) => list
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect::<Vec<_>>(),
        None => Vec::new(),
    };
    if targets.is_empty() {
        report.skip("fuzz", "`cargo fuzz list` finds no targets in fuzz/");
        return;
    }
    // Every committed seed and every input saved from a finding
    // (`fuzz/regressions/`) passes its target's check: the fuzz package is
    // outside the workspace, so the suite's tests do not run them.
    report.step("fuzz seeds and regressions", || {
        let mut command = cargo();
        command
            .args(["test", "--manifest-path"])
            .arg(fuzz_dir.join("Cargo.toml"))
            .env("RUSTC_BOOTSTRAP", "1");
        run::status(&mut command)
    });
    if !report.step("fuzz build", || {
        run::status(&mut fuzz_cargo("build", &fuzz_dir))
    }) {
        return;
    }
    for target in targets {
        report.step(&format!("fuzz {target} ({secs} s)"), || {
            fuzz_run(&fuzz_dir, &target, secs)
        });
    }
}

fn fuzz_run(fuzz_dir: &Path, target: &str, secs: u64) -> Result<(), String> {
    let scratch: PathBuf =
        std::env::temp_dir().join(format!("shardsub-fuzz-{target}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| format!("create {}: {e}", scratch.display()))?;
    let mut command = fuzz_cargo("run", fuzz_dir);
    command.arg(target).arg(&scratch);
    let seeds = fuzz_dir.join("corpus").join(target);
    if seeds.is_dir() {
        command.arg(&seeds);
    }
    command.args([
        "--",
        &format!("-max_total_time={secs}"),
        "-print_final_stats=1",
    ]);
    let result = run::status(&mut command);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// `cargo fuzz <sub> --fuzz-dir fuzz` from the root, on this stable toolchain.
fn fuzz_cargo(sub: &str, fuzz_dir: &Path) -> Command {
    let mut command = cargo();
    command
        .args(["fuzz", sub, "--fuzz-dir"])
        .arg(fuzz_dir)
        .env("RUSTC_BOOTSTRAP", "1");
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_lines_name_failed_tests_and_their_panics() {
        let failed = "        FAIL [   1.234s] shardsub::cluster_pubsub follows_a_move";
        assert_eq!(failure_line(failed), Note::Line);
        assert_eq!(failure_line("TRY 2 FAIL [   0.5s] a b"), Note::Line);
        assert_eq!(failure_line("     TIMEOUT [ 240.0s] a b"), Note::Line);
        assert_eq!(failure_line("     SIGSEGV [   0.1s] a b"), Note::Line);
        let panic = "thread 'x' panicked at tests/a.rs:10:5:";
        assert_eq!(failure_line(panic), Note::AndNext);
        assert_eq!(failure_line("        PASS [   1.0s] a b"), Note::Skip);
        assert_eq!(failure_line("        SLOW [> 60.0s] a b"), Note::Skip);
        let summary = "     Summary [ 586.3s] 526 tests run: 525 passed, 1 failed";
        assert_eq!(failure_line(summary), Note::Skip);
    }

    #[test]
    fn missing_metadata_names_all_but_the_url_warning() {
        let output = format!(
            "{NO_URL_WARNING}\n   Packaging shardsub-resp v0.1.0 (/r/resp)\n\
             warning: manifest has no description, documentation, homepage or repository\n   \
             Packaging shardsub v0.1.0 (/r)\n\
             warning: ignoring test `suite` as `tests/suite/main.rs` is not included\n"
        );
        assert_eq!(
            missing_metadata(&output),
            ["shardsub: warning: manifest has no description, documentation, homepage or repository"]
        );
        assert!(missing_metadata(NO_URL_WARNING).is_empty());
    }

    /// `SHIPPED` is exactly the workspace members without `publish = false`
    /// (cargo reports those with an empty `publish` list).
    #[test]
    fn shipped_crates_are_the_publishable_members() {
        let out = cargo()
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .output()
            .expect("cargo metadata runs");
        assert!(out.status.success(), "cargo metadata failed");
        let metadata: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
        let mut publishable: Vec<&str> = metadata["packages"]
            .as_array()
            .expect("a package list")
            .iter()
            .filter(|p| p["publish"].as_array().is_none_or(|r| !r.is_empty()))
            .map(|p| p["name"].as_str().expect("a name"))
            .collect();
        publishable.sort_unstable();
        let mut shipped = SHIPPED.to_vec();
        shipped.sort_unstable();
        assert_eq!(publishable, shipped);
    }
}
