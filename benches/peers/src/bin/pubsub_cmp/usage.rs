//! CPU time and context switches: of this process, of one thread
//! (`getrusage`), and per thread by name (`/proc/self/task`).

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

/// Voluntary context switches of each live thread of this process, by
/// thread id, with its name (`/proc/self/task/*/{comm,status}`).
pub fn wakeups_by_thread() -> BTreeMap<u64, (String, u64)> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let read = |f: &str| std::fs::read_to_string(task.path().join(f)).unwrap_or_default();
        let voluntary = read("status")
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        out.insert(tid, (read("comm").trim().to_string(), voluntary));
    }
    out
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

/// Voluntary context switches by thread role since `before` (from
/// [`wakeups_by_thread`]), the main (measuring) thread left out; most
/// first.
pub fn wakeups_by_role_since(before: &BTreeMap<u64, (String, u64)>) -> Vec<(String, u64)> {
    let main = u64::from(std::process::id());
    let mut roles: BTreeMap<String, u64> = BTreeMap::new();
    for (tid, (name, n)) in wakeups_by_thread() {
        if tid == main {
            continue;
        }
        let was = before.get(&tid).map_or(0, |t| t.1);
        *roles.entry(role(&name)).or_default() += n.saturating_sub(was);
    }
    let mut out: Vec<(String, u64)> = roles.into_iter().filter(|r| r.1 > 0).collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}
