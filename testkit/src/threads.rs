//! This process's threads by name: how many, and their CPU time.

use std::collections::BTreeMap;

/// Live threads of this process whose name (`/proc/self/task/*/comm`, cut
/// by the kernel to 15 bytes) starts with `prefix` (0 where `/proc` is not
/// readable).
pub fn threads_named(prefix: &str) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

/// CPU seconds so far of each live thread of this process, summed by
/// name (`/proc/self/task/*/comm`, cut by the kernel to 15 bytes) with
/// a trailing `-N` index dropped: `shardsub-io-0` and `shardsub-io-1`
/// count as `shardsub-io`. From each thread's `schedstat` (nanoseconds on
/// a CPU); threads that have ended are not in it. Empty where `/proc` is
/// not readable.
pub fn cpu_by_thread() -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let read = |f: &str| std::fs::read_to_string(task.path().join(f)).unwrap_or_default();
        let ns: u64 = read("schedstat")
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let comm = read("comm");
        let comm = comm.trim();
        let name = match comm.rsplit_once('-') {
            Some((head, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => head,
            _ => comm,
        };
        *out.entry(name.to_string()).or_insert(0.0) += ns as f64 / 1e9;
    }
    out
}

/// What each thread name spent between two [`cpu_by_thread`] readings, in
/// seconds (names only in `after` count from 0).
pub fn cpu_since(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(name, s)| {
            (
                name.clone(),
                (s - before.get(name).copied().unwrap_or(0.0)).max(0.0),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_named_thread_is_counted_under_its_name_without_the_index() {
        let before = cpu_by_thread();
        let t = std::thread::Builder::new()
            .name("testkit-spin-7".into())
            .spawn(|| {
                // Spins until this thread has had 30 ms on a CPU (not 50 ms
                // of the wall clock: on busy cores that gave it 4 ms).
                let own = || -> u64 {
                    std::fs::read_to_string("/proc/thread-self/schedstat")
                        .ok()
                        .and_then(|s| s.split_whitespace().next()?.parse().ok())
                        .unwrap_or(u64::MAX)
                };
                let (start, from) = (std::time::Instant::now(), own());
                let mut x = 0u64;
                while own().saturating_sub(from) < 30_000_000
                    && start.elapsed() < std::time::Duration::from_secs(30)
                {
                    for _ in 0..10_000 {
                        x = x.wrapping_add(std::hint::black_box(1));
                    }
                }
                // Read while this thread is still alive.
                assert_eq!(threads_named("testkit-spin"), 1);
                (x, cpu_by_thread())
            })
            .expect("spawn");
        let (_, after) = t.join().expect("join");
        let spent = cpu_since(&before, &after);
        let spin = spent.get("testkit-spin").copied().unwrap_or(0.0);
        assert!(spin > 0.01, "{spent:?}");
        assert!(!spent.contains_key("testkit-spin-7"), "{spent:?}");
    }
}
