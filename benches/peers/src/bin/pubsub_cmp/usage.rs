//! CPU time and context switches: of this process, of one thread
//! (`getrusage`), and per thread by name, of this process or another
//! (`/proc/<pid>/task`).

use std::collections::BTreeMap;
use std::time::Duration;

/// CPU time and context switches so far.
#[derive(Clone, Copy, Default)]
pub struct Usage {
    pub cpu: Duration,
    /// Voluntary context switches: a thread blocked, to be woken later.
    pub voluntary: u64,
    /// Involuntary ones: a thread was preempted.
    pub involuntary: u64,
}

impl Usage {
    /// Every context switch.
    pub fn switches(&self) -> u64 {
        self.voluntary + self.involuntary
    }
}

impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, o: Usage) -> Usage {
        Usage {
            cpu: self.cpu.saturating_sub(o.cpu),
            voluntary: self.voluntary.saturating_sub(o.voluntary),
            involuntary: self.involuntary.saturating_sub(o.involuntary),
        }
    }
}

fn rusage(who: libc::c_int) -> Usage {
    // SAFETY: `usage` is a valid, writable rusage; `who` is RUSAGE_SELF or
    // RUSAGE_THREAD, both valid on Linux.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    Usage {
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        voluntary: usage.ru_nvcsw as u64,
        involuntary: usage.ru_nivcsw as u64,
    }
}

/// This process, every thread (ended ones included).
pub fn process() -> Usage {
    rusage(libc::RUSAGE_SELF)
}

/// The calling thread since it started.
pub fn thread() -> Usage {
    rusage(libc::RUSAGE_THREAD)
}

/// One thread's figures from `/proc/<pid>/task/<tid>/{comm,schedstat,status}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Task {
    /// Its name (the kernel cuts it to 15 bytes).
    pub name: String,
    /// Nanoseconds on a CPU (`schedstat`'s first field).
    pub cpu_ns: u64,
    pub voluntary: u64,
    pub involuntary: u64,
}

/// Nanoseconds on a CPU: the first field of a `schedstat` file.
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// `(voluntary, involuntary)` context switches from a `status` file (0
/// for a line that is missing).
pub fn parse_switches(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("voluntary_ctxt_switches"),
        field("nonvoluntary_ctxt_switches"),
    )
}

/// Every live thread of process `pid` (`"self"` for this one), by thread
/// id. The process's own `status` counts only its main thread's context
/// switches, so they are read thread by thread.
pub fn tasks(pid: &str) -> BTreeMap<u64, Task> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in dir.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let read = |f: &str| std::fs::read_to_string(task.path().join(f)).unwrap_or_default();
        let (voluntary, involuntary) = parse_switches(&read("status"));
        out.insert(
            tid,
            Task {
                name: read("comm").trim().to_string(),
                cpu_ns: parse_schedstat(&read("schedstat")).unwrap_or(0),
                voluntary,
                involuntary,
            },
        );
    }
    out
}

/// Voluntary context switches of each live thread of this process, by
/// thread id, with its name.
pub fn wakeups_by_thread() -> BTreeMap<u64, (String, u64)> {
    tasks("self")
        .into_iter()
        .map(|(tid, t)| (tid, (t.name, t.voluntary)))
        .collect()
}

/// Full names of the threads the subscribers start, to undo the kernel's
/// 15-byte cut of a thread's name.
const THREADS: [&str; 5] = [
    "shardsub-io",
    "shardsub-worker",
    "shardsub-control",
    "shardsub-resolve",
    "tokio-runtime-worker",
];

/// A thread's role from its (cut) name: without its `-N` index and
/// shardsub's prefix (`shardsub-io-1` → `io`).
pub fn role(name: &str) -> String {
    let base = match name.rsplit_once('-') {
        Some((head, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => head,
        _ => name,
    };
    let full = THREADS
        .iter()
        .find(|f| !base.is_empty() && f.starts_with(base))
        .map_or(base, |f| f);
    full.trim_start_matches("shardsub-").to_string()
}

/// Counts summed by thread role (see [`role`]), zeros left out, most
/// first.
fn by_role(counts: impl Iterator<Item = (String, u64)>) -> Vec<(String, u64)> {
    let mut roles: BTreeMap<String, u64> = BTreeMap::new();
    for (name, n) in counts {
        *roles.entry(role(&name)).or_default() += n;
    }
    let mut out: Vec<(String, u64)> = roles.into_iter().filter(|r| r.1 > 0).collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

/// Voluntary context switches by thread role since `before` (from
/// [`wakeups_by_thread`]), the main (measuring) thread left out; most
/// first.
pub fn wakeups_by_role_since(before: &BTreeMap<u64, (String, u64)>) -> Vec<(String, u64)> {
    let main = u64::from(std::process::id());
    by_role(
        wakeups_by_thread()
            .into_iter()
            .filter(|(tid, _)| *tid != main)
            .map(|(tid, (name, n))| {
                let was = before.get(&tid).map_or(0, |t| t.1);
                (name, n.saturating_sub(was))
            }),
    )
}

/// Another process's threads at one moment.
pub struct Snapshot {
    tasks: BTreeMap<u64, Task>,
}

impl Snapshot {
    /// Process `pid` now.
    pub fn of(pid: u32) -> Snapshot {
        Snapshot {
            tasks: tasks(&pid.to_string()),
        }
    }

    /// What the process spent from `before` to this snapshot: its threads
    /// alive now (a thread started meanwhile counts from zero; one that
    /// ended meanwhile is not counted).
    pub fn since(&self, before: &Snapshot) -> Spent {
        let mut spent = Spent::default();
        let mut switches = Vec::new();
        for (tid, now) in &self.tasks {
            let was = before.tasks.get(tid).cloned().unwrap_or_default();
            let (v, i) = (
                now.voluntary.saturating_sub(was.voluntary),
                now.involuntary.saturating_sub(was.involuntary),
            );
            spent.cpu_ns += now.cpu_ns.saturating_sub(was.cpu_ns);
            spent.voluntary += v;
            spent.involuntary += i;
            switches.push((now.name.clone(), v + i));
        }
        spent.switches_by_role = by_role(switches.into_iter());
        spent
    }
}

/// CPU and context switches of a process over a window.
#[derive(Clone, Debug, Default)]
pub struct Spent {
    pub cpu_ns: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    /// Context switches (voluntary and involuntary) by thread role.
    pub switches_by_role: Vec<(String, u64)>,
}

impl Spent {
    /// Every context switch.
    pub fn switches(&self) -> u64 {
        self.voluntary + self.involuntary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_gives_its_first_field() {
        assert_eq!(parse_schedstat("123456789 2000 17\n"), Some(123_456_789));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn status_gives_both_switch_counts() {
        let status = "Name:\tshardsub-io-0\nvoluntary_ctxt_switches:\t2061\n\
                      nonvoluntary_ctxt_switches:\t17\n";
        assert_eq!(parse_switches(status), (2061, 17));
        assert_eq!(parse_switches("Name:\tx\n"), (0, 0));
    }

    #[test]
    fn this_process_reads_back_its_threads() {
        let (named, until) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let t = std::thread::Builder::new()
            .name("shardsub-io-7".into())
            .spawn(move || {
                // The thread names itself when it starts: say so after.
                named.0.send(()).unwrap();
                let _ = until.1.recv();
            })
            .unwrap();
        named.1.recv().unwrap();
        let before = Snapshot::of(std::process::id());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let spent = Snapshot::of(std::process::id()).since(&before);
        assert!(before.tasks.values().any(|t| t.name == "shardsub-io-7"));
        assert!(spent.switches() >= 1, "the test thread slept");
        until.0.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn roles_are_summed_without_their_index() {
        let counts = [
            ("shardsub-io-0", 3),
            ("shardsub-io-1", 4),
            ("shardsub-worke", 2),
        ];
        let roles = by_role(counts.iter().map(|(n, c)| (n.to_string(), *c)));
        assert_eq!(roles, [("io".to_string(), 7), ("worker".to_string(), 2)]);
    }
}
