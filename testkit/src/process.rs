//! Process plumbing: scratch directories, free ports, signals, bounded waits.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::{Error, Rng};

/// How long a stopping server gets after SIGTERM before it is sent SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// A scratch directory removed on drop.
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub(crate) fn new(label: &str) -> Result<TempDir, Error> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "shardsub-testkit-{label}-{}-{n}",
            std::process::id()
        ));
        // A stale directory can only be left by an earlier process with our pid.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .map_err(|e| Error::io(format!("create {}", path.display()), e))?;
        Ok(TempDir { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Where server ports are picked: below the kernel's ephemeral range
/// (32768 and up by default), bus port (+ 10000) included, so that a port
/// a killed server had is not taken by some client's outgoing connection
/// before the server restarts on it (that happened: "bind: Address already
/// in use" on a chaos restart).
const PORTS: std::ops::Range<u16> = 12_000..22_700;

/// A loopback port that was free a moment ago (a listener bound it and
/// closed it), outside the ephemeral range (see [`PORTS`]). With `bus`,
/// port + 10000 (the cluster bus) must be free as well.
pub(crate) fn free_port(bus: bool) -> Result<u16, Error> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // A different walk per process (tests run as many processes at once)
    // and per call.
    let seed = Rng::mix(u64::from(std::process::id()))
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    let span = u64::from(PORTS.end - PORTS.start);
    for _ in 0..256 {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let x = Rng::mix(seed ^ Rng::mix(k));
        let port = PORTS.start + (x % span) as u16;
        let free = |p: u16| TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, p)).is_ok();
        if free(port) && (!bus || free(port + 10_000)) {
            return Ok(port);
        }
    }
    Err(Error::Timeout {
        what: "a free loopback port (and its cluster bus port)".into(),
        waited: Duration::ZERO,
    })
}

/// Sends SIGTERM via `kill(1)` (keeps testkit free of libc and unsafe code).
pub(crate) fn terminate(pid: u32) {
    terminate_all(&[pid]);
}

/// Sends `signal` (as `kill(1)` spells it, e.g. `-STOP`) to `pid`.
pub(crate) fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(signal)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// SIGTERM to several processes with one `kill(1)`, so they shut down in parallel.
pub(crate) fn terminate_all(pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .args(pids.iter().map(u32::to_string))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Starts a detached watchdog that SIGKILLs `server` and removes its scratch
/// `dir` (if any) once this process is gone: a test process killed by a
/// harness timeout runs no destructors, and its servers must not outlive
/// it. The watchdog ends as soon as the server does (checked every second),
/// so a reused pid is never signalled later.
pub(crate) fn spawn_watchdog(server: u32, dir: Option<&Path>) {
    let parent = std::process::id();
    let remove = dir.map_or(String::new(), |d| {
        format!("sleep 1; rm -rf {};", shell_quote(&d.to_string_lossy()))
    });
    let script = format!(
        "( while kill -0 {parent} 2>/dev/null && kill -0 {server} 2>/dev/null; do sleep 1; done; \
         kill -0 {parent} 2>/dev/null || {{ kill -9 {server} 2>/dev/null; {remove} }} ) \
         </dev/null >/dev/null 2>&1 &"
    );
    // The outer shell exits at once (reaped here); the loop is re-parented.
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `'text'`, safe inside `sh -c`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A child process a test started (a browser, an example program): on
/// drop it is stopped (SIGTERM, then SIGKILL after [`STOP_GRACE`]; always
/// reaped) and its scratch directory, if any, removed; if the test process
/// dies first, a watchdog kills it by its pid.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    dir: Option<PathBuf>,
}

impl ChildGuard {
    /// Guards `child`, and `dir` (removed after the child stops).
    pub fn new(child: Child, dir: Option<PathBuf>) -> ChildGuard {
        spawn_watchdog(child.id(), dir.as_deref());
        ChildGuard { child, dir }
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child, to take its pipes or ask whether it exited.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Stops the child now (as the drop does) and says whether it was
    /// still running and exited within [`STOP_GRACE`] of SIGTERM, rather
    /// than exiting before or needing SIGKILL.
    pub fn stop(&mut self) -> bool {
        if let Ok(Some(_)) = self.child.try_wait() {
            return false;
        }
        terminate(self.child.id());
        let graceful = wait_exit(&mut self.child, STOP_GRACE);
        if !graceful {
            kill(&mut self.child);
        }
        graceful
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        stop(&mut self.child);
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Waits up to `bound` for the child to exit; true if it did.
pub(crate) fn wait_exit(child: &mut Child, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => return false,
            Ok(None) => thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// SIGTERM, then SIGKILL after [`STOP_GRACE`]; always reaps the child.
pub(crate) fn stop(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    terminate(child.id());
    if !wait_exit(child, STOP_GRACE) {
        kill(child);
    }
}

/// SIGKILL and reap.
pub(crate) fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Polls `probe` every few milliseconds until it yields `Some`, up to `bound`.
///
/// # Errors
///
/// [`Error::Timeout`] naming `what`, with the last error seen from `probe`.
pub fn wait_for<T>(
    what: &str,
    bound: Duration,
    mut probe: impl FnMut() -> Result<Option<T>, Error>,
) -> Result<T, Error> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(2);
    let mut last_error = None;
    loop {
        match probe() {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if start.elapsed() >= bound {
            let what = match last_error {
                Some(e) => format!("{what} (last error: {e})"),
                None => what.to_string(),
            };
            return Err(Error::Timeout {
                what,
                waited: start.elapsed(),
            });
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The last `lines` lines of a file, or a note that it could not be read.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}
