//! `cargo xtask bench`: reruns the tables of BENCHMARKS.md and writes each
//! between its `<!-- bench:NAME -->` markers, under a heading line that says
//! when, on which commit, on what machine and at what load it ran, and how
//! to rerun it. The prose around the markers is never touched.
//!
//! ```text
//! registry (name, builds, steps, render) ──▶ build ──▶ steps (stdout captured)
//!        ──▶ render (Markdown) ──▶ markers::replace ──▶ BENCHMARKS.md
//! ```
//!
//! A table whose build or run fails is named in the error and left as it
//! was; the others are still written.

mod exec;
mod machine;
pub(crate) mod markers;
pub(crate) mod registry;
mod render;

use std::path::PathBuf;
use std::time::Instant;

use crate::install;
use crate::run::root;
use registry::{Entry, Render};

pub const USAGE: &str = "  \
  bench [--only NAME[,NAME]] [--list] [--dry-run] [--lock FILE] [--note TEXT]
            rerun the tables of BENCHMARKS.md and the crates' BENCHMARKS.md (all, or the named ones) and
            rewrite them between their markers; --list: names and time
            estimates; --dry-run: print the commands only; --lock FILE: run
            each measuring step under `flock -x FILE`; --note: added to the
            heading's load-average field";

#[derive(Debug, Default)]
struct Options {
    only: Option<String>,
    list: bool,
    dry_run: bool,
    lock: Option<PathBuf>,
    note: Option<String>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match arg.as_str() {
            "--only" => o.only = Some(value("--only")?),
            "--list" => o.list = true,
            "--dry-run" => o.dry_run = true,
            "--lock" => o.lock = Some(value("--lock")?.into()),
            "--note" => o.note = Some(value("--note")?),
            other => return Err(format!("bench: unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(o)
}

/// The pages with generated tables: the workspace's, and the crates'
/// own (the parser's, shardcore's). Each table is marked on one of them.
pub(crate) const DOCS: &[&str] = &[
    "BENCHMARKS.md",
    "resp/BENCHMARKS.md",
    "shardcore/BENCHMARKS.md",
    "benches/peers/BENCHMARKS.md",
];

/// A page of [`DOCS`], as read.
struct Page {
    path: PathBuf,
    name: &'static str,
    text: String,
    marked: Vec<String>,
}

/// Every page of [`DOCS`] with the tables it marks.
///
/// # Errors
///
/// An unreadable page, bad markers, or a table marked on no page.
fn pages(known: &[&str], entries: &[registry::Entry]) -> Result<Vec<Page>, String> {
    let mut pages = Vec::new();
    for name in DOCS {
        let path = root().join(name);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        let marked = markers::regions(&text, known)
            .map_err(|e| format!("{name} {e}"))?
            .into_iter()
            .map(|r| r.name)
            .collect();
        pages.push(Page {
            path,
            name,
            text,
            marked,
        });
    }
    for e in entries {
        if !pages.iter().any(|p| p.marked.iter().any(|m| m == e.name)) {
            return Err(format!(
                "{} {}",
                DOCS.join(", "),
                markers::MarkerError::NoMarkers {
                    name: e.name.into()
                }
            ));
        }
    }
    Ok(pages)
}

/// `cargo xtask bench …`.
///
/// # Errors
///
/// Bad arguments or markers, or the names of the tables that failed.
pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let entries = registry::select(o.only.as_deref())?;
    let known: Vec<&str> = registry::all().iter().map(|e| e.name).collect();
    let mut pages = pages(&known, &entries)?;
    if o.list {
        list(&entries);
        return Ok(());
    }
    let ctx = exec::Context::new(o.lock.clone());
    if o.dry_run {
        for e in &entries {
            println!("# {} (~{} s): {}", e.name, e.estimate_s, e.section);
            for cmd in &e.build {
                println!("  build:   {}", ctx.show(cmd, false));
            }
            for s in &e.steps {
                println!("  measure: {}", ctx.show(&s.cmd, true));
            }
        }
        return Ok(());
    }
    let prepared = prepare(&entries)?;
    let commit = machine::commit();
    let total = Instant::now();
    let mut failed = Vec::new();
    let mut times = Vec::new();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    for e in &entries {
        if cpus < e.min_cpus {
            println!(
                "\nxtask: bench {}: needs {} CPUs, this machine has {cpus}: not measured, \
                 table left as it was",
                e.name, e.min_cpus
            );
            continue;
        }
        println!(
            "\nxtask: === bench {} (estimate {} s)",
            e.name, e.estimate_s
        );
        match table(&ctx, &prepared, e, &commit, o.note.as_deref()) {
            Ok((text, secs)) => {
                let tables = [(e.name.to_string(), text)];
                let Some(page) = pages
                    .iter_mut()
                    .find(|p| p.marked.iter().any(|m| m == e.name))
                else {
                    return Err(format!("{}: no page marks it", e.name));
                };
                page.text = markers::replace(&page.text, &known, &tables)
                    .map_err(|err| format!("{} {err}", page.name))?;
                std::fs::write(&page.path, &page.text)
                    .map_err(|err| format!("write {}: {err}", page.path.display()))?;
                println!("xtask: bench {}: written ({secs:.0} s measured)", e.name);
                times.push((e.name, secs, e.estimate_s));
            }
            Err(msg) => {
                eprintln!(
                    "xtask: bench {} FAILED (table left as it was): {msg}",
                    e.name
                );
                failed.push(format!("{} ({msg})", e.name));
            }
        }
    }
    println!("\nxtask: bench summary (measuring time / estimate)");
    for (name, secs, estimate) in &times {
        println!("  {name:<24} {secs:>6.0} s / {estimate:>4} s");
    }
    println!(
        "  {:<24} {:>6.0} s (builds included)",
        "total",
        total.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("tables that failed: {}", failed.join("; ")))
    }
}

fn list(entries: &[Entry]) {
    let mut sum = 0;
    for e in entries {
        sum += e.estimate_s;
        let how = if e.measured { "measured" } else { "expected" };
        println!(
            "{:<24} {:>5} s ({how})  {}",
            e.name, e.estimate_s, e.section
        );
    }
    println!(
        "{:<24} {:>5} s + up to {} s of builds",
        "total",
        sum,
        registry::BUILDS_ESTIMATE_S
    );
}

/// Servers and valgrind, installed when missing; the environment that
/// points the steps at the servers, and their versions.
fn prepare(entries: &[Entry]) -> Result<Prepared, String> {
    let mut env = Vec::new();
    let mut servers = String::new();
    if entries.iter().any(|e| e.servers) {
        let tools = install::servers()?;
        env = tools.env();
        servers = machine::server_versions(&[
            ("Redis", &tools.redis_server),
            ("Valkey", &tools.valkey_server),
        ]);
    }
    let callgrind = entries.iter().any(|e| {
        e.steps.iter().any(|s| {
            matches!(
                s.cmd.program,
                registry::Program::Callgrind { .. } | registry::Program::Script(_)
            )
        })
    });
    if callgrind {
        install::apt_tool("valgrind", "valgrind")?;
    }
    // publish_cmp's syscall counters, and the subscriber grid's.
    let traced = entries.iter().any(|e| {
        e.steps.iter().any(|s| {
            s.cmd
                .args
                .iter()
                .any(|a| a == "publish_cmp" || a == "--grid")
        })
    });
    if traced {
        install::tracefs();
    }
    Ok(Prepared { env, servers })
}

/// What [`prepare`] found.
struct Prepared {
    env: Vec<(&'static str, String)>,
    /// `Redis 7.0.15, Valkey 9.1.2`, or empty when no table starts servers.
    servers: String,
}

/// Builds, measures and renders one table: its Markdown (heading line
/// included) and the seconds its steps took.
fn table(
    ctx: &exec::Context,
    prepared: &Prepared,
    e: &Entry,
    commit: &str,
    note: Option<&str>,
) -> Result<(String, f64), String> {
    let env = &prepared.env;
    for cmd in &e.build {
        ctx.build(cmd, env)?;
    }
    // The scratch folder holds only this command's callgrind files: empty
    // it, so a table never reads a file from an earlier run.
    let _ = std::fs::remove_dir_all(ctx.scratch());
    std::fs::create_dir_all(ctx.scratch())
        .map_err(|err| format!("create {}: {err}", ctx.scratch().display()))?;
    let started = std::time::SystemTime::now();
    let limit = std::time::Duration::from_secs(u64::from(e.estimate_s) * 4 + 300);
    let date = machine::utc_now();
    let load_start = machine::load_average();
    let start = Instant::now();
    let mut outputs = Vec::new();
    for (index, s) in e.steps.iter().enumerate() {
        let stdout = ctx
            .measure(&s.cmd, env, limit)
            .map_err(|err| format!("step {}: {err}", index + 1))?;
        if s.prints_table {
            outputs.push((s.label.clone(), stdout));
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let load_end = machine::load_average();
    let body = match &e.render {
        Render::Tables => render::tables(&outputs)?,
        Render::Criterion(rows) => {
            render::criterion(rows, &ctx.target().join("criterion"), started)?
        }
        Render::SubscribeCost => render::subscribe_cost(&ctx.scratch())?,
        Render::FleetInstances => render::fleet_instances(&ctx.scratch())?,
        Render::Scaling => render::scaling(&ctx.scratch())?,
    };
    let mut note = note.map(str::to_string);
    if let Some(lock) = &ctx.lock {
        let held = format!("under `flock {}`", lock.display());
        note = Some(note.map_or(held.clone(), |n| format!("{n}; {held}")));
    }
    let heading = machine::Heading {
        date,
        commit: commit.into(),
        machine: machine::machine(),
        servers: e.servers.then(|| prepared.servers.clone()),
        load_start,
        load_end,
        note,
        seconds,
        name: e.name.into(),
    };
    Ok((format!("\n{}\n\n{body}\n", heading.line()), seconds))
}

#[cfg(test)]
mod tests {
    use super::registry::{Cmd, Program, Step};
    use super::*;

    fn entry(script: &str) -> Entry {
        Entry {
            name: "t",
            section: "test",
            estimate_s: 1,
            measured: false,
            servers: false,
            min_cpus: 0,
            build: Vec::new(),
            steps: vec![Step {
                label: Some("Label:".into()),
                cmd: Cmd {
                    program: Program::Script("/bin/sh"),
                    args: vec!["-c".into(), script.into()],
                    env: Vec::new(),
                },
                prints_table: true,
            }],
            render: Render::Tables,
        }
    }

    fn prepared() -> Prepared {
        Prepared {
            env: Vec::new(),
            servers: String::new(),
        }
    }

    #[test]
    fn a_table_gets_its_heading_and_a_failing_step_is_named() {
        let ctx = exec::Context::new(None);
        let (text, _) = table(&ctx, &prepared(), &entry("echo '| a |'"), "c0ffee", None).unwrap();
        assert!(text.starts_with("\n_Generated "), "{text}");
        assert!(text.contains("commit `c0ffee`"), "{text}");
        assert!(
            text.contains("`cargo xtask bench --only t`_\n\nLabel:\n\n| a |\n"),
            "{text}"
        );
        let err = table(&ctx, &prepared(), &entry("exit 3"), "c0ffee", None).unwrap_err();
        assert!(err.starts_with("step 1: "), "{err}");
        let err = table(&ctx, &prepared(), &entry("echo no table"), "c0ffee", None).unwrap_err();
        assert!(err.contains("no Markdown table"), "{err}");
    }

    #[test]
    fn arguments() {
        let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = parse(&args(&["--only", "a,b", "--dry-run", "--lock", "/tmp/l"])).unwrap();
        assert_eq!(o.only.as_deref(), Some("a,b"));
        assert!(o.dry_run && !o.list);
        assert!(parse(&args(&["--only"]))
            .unwrap_err()
            .contains("needs a value"));
        assert!(parse(&args(&["--bogus"])).unwrap_err().contains("--bogus"));
    }
}
