//! What each generated table's heading line says about the run: when, on
//! which commit, on what machine, at what load.

use std::process::Command;

use crate::run::{self, root};

/// The 1-minute load average from `/proc/loadavg` (`None` off Linux).
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// `YYYY-MM-DD HH:MM UTC`, from `date -u`.
pub fn utc_now() -> String {
    run::output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown date".into())
}

/// `git rev-parse --short HEAD`, with `+dirty` when tracked files differ
/// from it (untracked files and the pages this command rewrites,
/// [`crate::bench::DOCS`], do not count).
pub fn commit() -> String {
    let git = |args: &[&str]| {
        let mut command = Command::new("git");
        command.current_dir(root()).args(args);
        run::output(&mut command)
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown commit".into();
    };
    let mut args = vec!["status", "--porcelain", "--untracked-files=no", "--", "."];
    let excluded: Vec<String> = crate::bench::DOCS
        .iter()
        .map(|d| format!(":(exclude){d}"))
        .collect();
    args.extend(excluded.iter().map(String::as_str));
    let dirty = git(&args).is_some_and(|s| !s.trim().is_empty());
    format!("{}{}", head.trim(), if dirty { "+dirty" } else { "" })
}

/// `2 CPUs (Intel Xeon …), 7.8 GiB RAM`, from `nproc`, `/proc/cpuinfo` and
/// `/proc/meminfo`.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| cpu_model(&s))
        .unwrap_or_else(|| "unknown CPU".into());
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| mem_total_kib(&s))
        .map_or("unknown RAM".into(), |kib| {
            format!("{:.1} GiB RAM", kib as f64 / (1u64 << 20) as f64)
        });
    format!("{cpus} CPUs ({model}), {ram}")
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `Redis 7.0.15, Valkey 9.1.2` from each binary's `--version`.
pub fn server_versions(binaries: &[(&str, &std::path::Path)]) -> String {
    let versions: Vec<String> = binaries
        .iter()
        .map(|(name, path)| {
            let out = run::output(Command::new(path).arg("--version")).unwrap_or_default();
            format!("{name} {}", version_of(&out).unwrap_or("?"))
        })
        .collect();
    versions.join(", ")
}

/// The `7.0.15` of `Redis server v=7.0.15 sha=…`.
fn version_of(text: &str) -> Option<&str> {
    text.split_whitespace().find_map(|w| w.strip_prefix("v="))
}

/// What the heading line says about one table's run.
pub struct Heading {
    pub date: String,
    pub commit: String,
    pub machine: String,
    /// The servers' versions, for tables that start servers.
    pub servers: Option<String>,
    pub load_start: Option<f64>,
    pub load_end: Option<f64>,
    /// Free text appended to the load average (`--note`).
    pub note: Option<String>,
    pub seconds: f64,
    pub name: String,
}

impl Heading {
    /// The line written above the table.
    pub fn line(&self) -> String {
        let load = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.2}"));
        let note = self
            .note
            .as_deref()
            .map_or(String::new(), |n| format!(" ({n})"));
        let servers = self
            .servers
            .as_deref()
            .map_or(String::new(), |s| format!(" · {s}"));
        format!(
            "_Generated {} · commit `{}` · {}{} · load average {} → {}{} · {:.0} s · \
             reproduce: `cargo xtask bench --only {}`_",
            self.date,
            self.commit,
            self.machine,
            servers,
            load(self.load_start),
            load(self.load_end),
            note,
            self.seconds,
            self.name
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_model_and_memory() {
        let cpuinfo = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)  CPU @ 2.20GHz\n";
        assert_eq!(
            cpu_model(cpuinfo).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        assert_eq!(
            mem_total_kib("MemTotal:        8152132 kB\nMemFree: 1 kB\n"),
            Some(8_152_132)
        );
        assert_eq!(cpu_model("flags: x\n"), None);
        assert_eq!(version_of("Redis server v=7.0.15 sha=0:0"), Some("7.0.15"));
        assert_eq!(version_of("nothing"), None);
    }

    #[test]
    fn heading_names_everything() {
        let line = Heading {
            date: "2026-12-01 18:00 UTC".into(),
            commit: "abc1234+dirty".into(),
            machine: "2 CPUs (X), 7.8 GiB RAM".into(),
            servers: Some("Redis 7.0.15, Valkey 9.1.2".into()),
            load_start: Some(1.5),
            load_end: None,
            note: Some("other builds running".into()),
            seconds: 61.2,
            name: "shardcore".into(),
        }
        .line();
        assert_eq!(
            line,
            "_Generated 2026-12-01 18:00 UTC · commit `abc1234+dirty` · 2 CPUs (X), 7.8 GiB RAM · \
             Redis 7.0.15, Valkey 9.1.2 · load average 1.50 → ? (other builds running) · 61 s · \
             reproduce: `cargo xtask bench --only shardcore`_"
        );
    }
}
