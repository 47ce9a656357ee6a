//! What each run measures: allocations (testkit's counting global
//! allocator, installed in `main.rs`), process CPU time,
//! write-type syscalls (see the crate's `src/syscalls.rs`), and the
//! server's CPU time.

use std::net::SocketAddr;

use shardsub_peer_benches::syscalls::{Counters, Writes};

/// Allocation calls (`alloc`, `alloc_zeroed`, `realloc`) of every thread
/// so far, counted by the binary's global allocator.
pub fn allocs() -> u64 {
    crate::GLOBAL.allocations()
}

/// User + system CPU seconds of this process (`RUSAGE_SELF`, all threads)
/// or of its waited-for children (`RUSAGE_CHILDREN`).
pub fn cpu_seconds(children: bool) -> f64 {
    let who = if children {
        libc::RUSAGE_CHILDREN
    } else {
        libc::RUSAGE_SELF
    };
    // SAFETY: `rusage` is plain data; getrusage fills it and only reads `who`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a properly sized, writable `rusage`.
    let rc = unsafe { libc::getrusage(who, &mut usage) };
    if rc != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Voluntary + involuntary context switches of this process, all threads
/// (`getrusage(RUSAGE_SELF)`: `ru_nvcsw + ru_nivcsw`).
pub fn context_switches() -> u64 {
    // SAFETY: as in `cpu_seconds`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a properly sized, writable `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    (usage.ru_nvcsw + usage.ru_nivcsw) as u64
}

/// `used_cpu_user + used_cpu_sys` from the server's `INFO CPU`.
///
/// # Errors
///
/// When the server cannot be asked or the reply lacks the fields.
pub fn server_cpu(server: SocketAddr) -> Result<f64, String> {
    let reply = testkit::Client::connect(server)
        .and_then(|mut c| c.cmd(&[b"INFO", b"CPU"]))
        .map_err(|e| format!("INFO CPU: {e}"))?;
    let text = testkit::values::text(&reply).ok_or("INFO CPU: not a string reply")?;
    let field = |name: &str| {
        testkit::values::info_field(&text, name)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| format!("INFO CPU lacks {name}"))
    };
    Ok(field("used_cpu_user")? + field("used_cpu_sys")?)
}

/// Counters read before and after a run.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot {
    /// Wall clock.
    pub at: std::time::Instant,
    /// Client CPU seconds (self, or children for the C reference).
    pub cpu: f64,
    /// Write-type syscalls of this process and its children.
    pub writes: Option<Writes>,
    /// Allocation calls of this process.
    pub allocs: u64,
    /// Server CPU seconds.
    pub server_cpu: f64,
    /// Context switches of this process (see [`context_switches`]).
    pub switches: u64,
}

impl Snapshot {
    /// Reads every counter now.
    ///
    /// # Errors
    ///
    /// As [`server_cpu`].
    pub fn take(
        server: SocketAddr,
        children: bool,
        counters: Option<&Counters>,
    ) -> Result<Snapshot, String> {
        let server_cpu = server_cpu(server)?;
        Ok(Snapshot {
            cpu: cpu_seconds(children),
            writes: counters.map(Counters::read),
            allocs: allocs(),
            server_cpu,
            switches: context_switches(),
            at: std::time::Instant::now(),
        })
    }
}

/// One client's run, as deltas.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Messages published and acknowledged.
    pub messages: u64,
    /// Wall seconds.
    pub secs: f64,
    /// Client CPU seconds.
    pub cpu: f64,
    /// Socket write syscalls (the C reference's included: a child).
    pub socket_writes: Option<u64>,
    /// Eventfd wakes (8-byte `write`s).
    pub wakes: Option<u64>,
    /// Allocations (`None` for the C reference).
    pub allocs: Option<u64>,
    /// Server CPU seconds.
    pub server_cpu: f64,
    /// Socket writes as the engine counts them (shardsub only).
    pub engine_writes: Option<u64>,
    /// Context switches of this process (`None` for the C reference).
    pub switches: Option<u64>,
    /// Every syscall of this process and its children (`None` without the
    /// `raw_syscalls` counter).
    pub syscalls: Option<u64>,
}

impl Sample {
    /// The deltas between two snapshots; the C reference's allocations
    /// belong to another process and are left out.
    pub fn between(a: &Snapshot, b: &Snapshot, messages: u64, in_process: bool) -> Sample {
        Sample {
            messages,
            secs: b.at.duration_since(a.at).as_secs_f64(),
            cpu: b.cpu - a.cpu,
            socket_writes: a.writes.zip(b.writes).map(|(a, b)| b.socket - a.socket),
            wakes: a.writes.zip(b.writes).map(|(a, b)| b.wakes - a.wakes),
            allocs: in_process.then(|| b.allocs - a.allocs),
            server_cpu: b.server_cpu - a.server_cpu,
            engine_writes: None,
            switches: in_process.then(|| b.switches - a.switches),
            syscalls: a
                .writes
                .zip(b.writes)
                .filter(|(a, _)| a.all > 0)
                .map(|(a, b)| b.all - a.all),
        }
    }
}
