//! Exact syscall counts without tracing: kernel counters on the
//! `syscalls:sys_enter_*` tracepoints. [`Counters`]: write-type syscalls
//! of this process and everything it starts afterwards (threads,
//! `redis-benchmark`), opened with `inherit` so later threads and children
//! count too (reading the counter adds up the live and exited ones).
//! `write` is split by its length: 8-byte writes are eventfd wakes (no
//! Redis command is 8 bytes), the rest go to sockets (or to stdout, which
//! is silent during a run). [`Process`]: every syscall of another
//! process's threads from the moment it is opened (the subscriber grid's;
//! `/proc/<pid>/io` would miss `recv`, `send`, `epoll_wait` and futexes).
//!
//! Needs tracefs (`/sys/kernel/tracing`) and the right to count tracepoints
//! (root, or `perf_event_paranoid` ≤ -1); without them every count is absent.

use std::os::fd::{FromRawFd, OwnedFd};

/// The counts at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Writes {
    /// `write` (not 8 bytes), `writev`, `sendto`, `sendmsg`.
    pub socket: u64,
    /// 8-byte `write`s: eventfd wakes.
    pub wakes: u64,
    /// Every syscall (`raw_syscalls:sys_enter`); 0 when that counter is absent.
    pub all: u64,
}

/// Open counters, one per (tracepoint, filter).
pub struct Counters {
    socket: Vec<OwnedFd>,
    wakes: Option<OwnedFd>,
    all: Option<OwnedFd>,
}

/// `perf_event_attr` up to `config1` (`PERF_ATTR_SIZE_VER0`, 64 bytes).
#[repr(C)]
#[derive(Default)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_TRACEPOINT: u32 = 2;
const FLAG_INHERIT: u64 = 1 << 1;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// `_IOW('$', 6, char *)`.
const PERF_EVENT_IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;

fn open(syscall: &str, filter: Option<&str>) -> Option<OwnedFd> {
    open_event(&format!("syscalls/sys_enter_{syscall}"), filter, 0)
}

/// A counter of `event` for thread `tid` (0: this one) and the threads and
/// children it starts afterwards.
fn open_event(event: &str, filter: Option<&str>, tid: libc::pid_t) -> Option<OwnedFd> {
    let id: u64 = std::fs::read_to_string(format!("/sys/kernel/tracing/events/{event}/id"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let attr = Attr {
        kind: PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<Attr>() as u32,
        config: id,
        flags: FLAG_INHERIT,
        ..Attr::default()
    };
    // SAFETY: perf_event_open reads `size` bytes of a valid attr; pid `tid`
    // (0: this thread) and cpu -1 mean that thread on any CPU; no group.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const Attr,
            tid,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor returned to us alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    if let Some(filter) = filter {
        let c = std::ffi::CString::new(filter).ok()?;
        // SAFETY: a valid descriptor and a NUL-terminated filter string.
        let rc = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                PERF_EVENT_IOC_SET_FILTER,
                c.as_ptr(),
            )
        };
        if rc != 0 {
            return None;
        }
    }
    Some(fd)
}

fn read(fd: &OwnedFd) -> u64 {
    let mut value = 0u64;
    // SAFETY: reads 8 bytes into a u64 we own.
    let n = unsafe {
        libc::read(
            std::os::fd::AsRawFd::as_raw_fd(fd),
            (&mut value as *mut u64).cast(),
            8,
        )
    };
    if n == 8 {
        value
    } else {
        0
    }
}

impl Counters {
    /// Opens the counters; `None` when the kernel does not let us. Open
    /// them after starting the server (a child started later is counted).
    pub fn open() -> Option<Counters> {
        let socket = vec![
            open("write", Some("count != 8"))?,
            open("writev", None)?,
            open("sendto", None)?,
            open("sendmsg", None)?,
        ];
        let wakes = open("write", Some("count == 8"));
        let all = open_event("raw_syscalls/sys_enter", None, 0);
        Some(Counters { socket, wakes, all })
    }

    /// The counts so far.
    pub fn read(&self) -> Writes {
        Writes {
            socket: self.socket.iter().map(read).sum(),
            wakes: self.wakes.as_ref().map_or(0, read),
            all: self.all.as_ref().map_or(0, read),
        }
    }
}

/// Every syscall of another process's threads (those alive when opened)
/// from the moment it is opened.
pub struct Process {
    threads: Vec<OwnedFd>,
}

impl Process {
    /// A counter on each thread of `pid` (`/proc/<pid>/task`); `None` when
    /// the kernel does not let us open one.
    pub fn open(pid: u32) -> Option<Process> {
        let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
            .filter_map(|t| t.file_name().to_str()?.parse::<libc::pid_t>().ok())
            .map(|tid| open_event("raw_syscalls/sys_enter", None, tid))
            .collect::<Option<Vec<_>>>()?;
        Some(Process { threads })
    }

    /// Syscalls so far.
    pub fn read(&self) -> u64 {
        self.threads.iter().map(read).sum()
    }
}
