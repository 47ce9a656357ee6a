//! The counting global allocator for tests that prove a path allocates
//! nothing, or bound what it holds.
//!
//! Install it once per binary and read a count around the code under test:
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: testkit::alloc::CountingAlloc = testkit::alloc::CountingAlloc::new();
//!
//! let before = GLOBAL.allocations();
//! let v: Vec<u8> = Vec::with_capacity(64);
//! assert!(GLOBAL.allocations() > before);
//! # drop(v);
//! ```
//!
//! It keeps two kinds of count:
//!
//! - **Process-wide** ([`CountingAlloc::allocations`]): every thread (I/O
//!   threads, workers), so it covers a whole path. A test that needs an
//!   exact figure must have the process to itself: nextest runs each test
//!   in a process of its own; under libtest's runner [`crate::alone`]
//!   reruns the test by itself in a child process.
//! - **This thread's** ([`this_thread`]): allocation calls, live bytes and
//!   their peak, so a test can measure what its own thread does while
//!   other tests run in parallel, and a harness can pause counting around
//!   its own bookkeeping.
//!
//! `alloc`, `alloc_zeroed` and `realloc` count one call each; `dealloc`
//! does not count a call (it lowers this thread's live bytes).
//!
//! A path that should allocate nothing per call is measured in
//! [`Windows`] ([`CountingAlloc::windows`]): a bound on one window's count
//! would also count buffers growing to a depth the scheduling decided.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether each allocation in a window prints its backtrace (the
/// `TESTKIT_ALLOC_TRACE` variable set: see [`CountingAlloc::windows`]).
static TRACING: AtomicBool = AtomicBool::new(false);

/// Forwards every call to [`System`] unchanged and counts allocations
/// (`alloc`, `alloc_zeroed` and `realloc` calls) across all threads, and
/// per thread (see [`this_thread`]).
#[derive(Debug)]
pub struct CountingAlloc {
    allocations: AtomicU64,
}

impl CountingAlloc {
    /// A counter at zero, usable in a `static`.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            allocations: AtomicU64::new(0),
        }
    }

    /// `alloc`, `alloc_zeroed` and `realloc` calls seen so far, on every
    /// thread.
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }

    /// Allocations on every thread during each of `count` runs of
    /// `window` (given its index), one after the other. Run enough calls
    /// in a window that the rate to catch shows in each: a window of `k`
    /// calls sees every allocation made once per `k` calls or more often.
    ///
    /// With the environment variable `TESTKIT_ALLOC_TRACE` set, each
    /// allocation in a window prints its size, thread and backtrace to
    /// stderr (what the tracer allocates is not counted): where a path
    /// that should allocate nothing does.
    pub fn windows(&self, count: usize, mut window: impl FnMut(usize)) -> Windows {
        // Allocated before the first window; pushing stays within it.
        let mut counts = Vec::with_capacity(count);
        let trace = std::env::var_os("TESTKIT_ALLOC_TRACE").is_some();
        for i in 0..count {
            TRACING.store(trace, Ordering::Relaxed);
            let before = self.allocations();
            window(i);
            TRACING.store(false, Ordering::Relaxed);
            counts.push(self.allocations() - before);
        }
        Windows(counts)
    }

    fn counted(&self, p: *mut u8, grown_by: isize) -> *mut u8 {
        thread_local! {
            static TRACING_HERE: Cell<bool> = const { Cell::new(false) };
        }
        if TRACING.load(Ordering::Relaxed) {
            // Not the tracer's own allocations: neither traced nor counted.
            if TRACING_HERE.try_with(|c| c.replace(true)).unwrap_or(true) {
                return p;
            }
            let bt = std::backtrace::Backtrace::force_capture();
            let thread = std::thread::current();
            eprintln!(
                "testkit alloc trace: {grown_by} bytes on thread {:?}\n{bt}",
                thread.name().unwrap_or("?")
            );
            drop(thread);
            let _ = TRACING_HERE.try_with(|c| c.set(false));
        }
        self.allocations.fetch_add(1, Ordering::Relaxed);
        if !p.is_null() {
            this_thread::record(1, grown_by);
        }
        p
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        Self::new()
    }
}

/// Allocations (on every thread) in each of a run of equal windows of a
/// path in steady state ([`CountingAlloc::windows`]).
///
/// [`Windows::fewest`] is the measure that scheduling cannot move. A
/// buffer grows when requests pile up deeper than ever before, which
/// depends on when each thread ran: it may grow in any window, but it keeps
/// what it grew to, so the same growth does not come back window after
/// window. An allocation made per call (or per `k` calls) comes back in
/// every window. So `fewest() == 0` holds however the threads were
/// scheduled when nothing is allocated per call, and fails when something
/// is, at any rate of one per window's calls or more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Windows(pub Vec<u64>);

impl Windows {
    /// The fewest allocations any window made (0 with no windows).
    pub fn fewest(&self) -> u64 {
        self.0.iter().copied().min().unwrap_or(0)
    }

    /// All windows' allocations together.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

// SAFETY: every call is forwarded to `System` unchanged; the only extra
// work is a relaxed atomic increment and const-initialised thread-local
// `Cell`s (no destructor, never allocate), so counting never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let p = unsafe { System.alloc(layout) };
        self.counted(p, layout.size() as isize)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        self.counted(p, layout.size() as isize)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        this_thread::record(0, -(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        self.counted(p, new_size as isize - layout.size() as isize)
    }
}

/// What [`CountingAlloc`] counted on the calling thread. Frees count on
/// the thread that frees, so live bytes can drop below a starting point
/// when the thread frees memory allocated elsewhere: measure what the
/// thread owns.
pub mod this_thread {
    use std::cell::Cell;

    thread_local! {
        static CALLS: Cell<u64> = const { Cell::new(0) };
        static LIVE: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
        static PAUSED: Cell<bool> = const { Cell::new(false) };
    }

    /// Counts `calls` allocation calls and `grown_by` bytes, unless
    /// paused (or the thread's locals are gone: it is exiting).
    pub(super) fn record(calls: u64, grown_by: isize) {
        if PAUSED.try_with(Cell::get).unwrap_or(true) {
            return;
        }
        let _ = CALLS.try_with(|c| c.set(c.get() + calls));
        let _ = LIVE.try_with(|live| {
            let v = live.get() + grown_by;
            live.set(v);
            let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
        });
    }

    /// `alloc`, `alloc_zeroed` and `realloc` calls of this thread so far
    /// (not while paused).
    pub fn allocations() -> u64 {
        CALLS.try_with(Cell::get).unwrap_or(0)
    }

    /// Bytes this thread allocated and has not freed (not while paused).
    pub fn live_bytes() -> isize {
        LIVE.try_with(Cell::get).unwrap_or(0)
    }

    /// The most [`live_bytes`] has been since the last [`reset_peak`].
    pub fn peak_bytes() -> isize {
        PEAK.try_with(Cell::get).unwrap_or(0)
    }

    /// Starts a new peak from the current live bytes.
    pub fn reset_peak() {
        let _ = PEAK.try_with(|p| p.set(live_bytes()));
    }

    /// Runs `f` without counting what this thread allocates or frees in
    /// it (a harness's own bookkeeping).
    pub fn paused<R>(f: impl FnOnce() -> R) -> R {
        let was = PAUSED.try_with(|p| p.replace(true)).unwrap_or(false);
        let r = f();
        let _ = PAUSED.try_with(|p| p.set(was));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_alloc_and_realloc_but_not_dealloc() {
        let a = CountingAlloc::new();
        let layout = Layout::from_size_align(16, 8).unwrap();
        // SAFETY: a non-zero-size layout; the pointer is freed with the
        // layout `realloc` was given the new size for.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            assert_eq!(a.allocations(), 1);
            let q = a.realloc(p, layout, 64);
            assert!(!q.is_null());
            assert_eq!(a.allocations(), 2);
            a.dealloc(q, Layout::from_size_align(64, 8).unwrap());
        }
        assert_eq!(a.allocations(), 2);
    }

    #[test]
    fn windows_tell_a_one_off_growth_from_a_per_call_allocation() {
        let a = CountingAlloc::new();
        let layout = Layout::from_size_align(16, 8).unwrap();
        let alloc_one = || {
            // SAFETY: a non-zero-size layout, freed with it.
            unsafe { a.dealloc(a.alloc(layout), layout) }
        };
        // A growth in one window only: the steady state is 0.
        let once = a.windows(4, |i| {
            if i == 1 {
                alloc_one();
                alloc_one();
            }
        });
        assert_eq!(once, Windows(vec![0, 2, 0, 0]));
        assert_eq!((once.fewest(), once.total()), (0, 2));
        // One per 1,000 calls, windows of 2,000 calls: 2 in each.
        let mut n = 0u64;
        let per_call = a.windows(3, |_| {
            for _ in 0..2_000 {
                n += 1;
                if n % 1_000 == 0 {
                    alloc_one();
                }
            }
        });
        assert_eq!(per_call.fewest(), 2, "{per_call:?}");
        assert_eq!(Windows(Vec::new()).fewest(), 0);
    }

    #[test]
    fn this_thread_counts_calls_live_bytes_and_peak_unless_paused() {
        let a = CountingAlloc::new();
        let small = Layout::from_size_align(16, 8).unwrap();
        let big = Layout::from_size_align(64, 8).unwrap();
        let (calls, live) = (this_thread::allocations(), this_thread::live_bytes());
        this_thread::reset_peak();
        // SAFETY: non-zero-size layouts; each pointer is freed with the
        // layout it has at that point.
        unsafe {
            let p = a.alloc(small);
            let q = a.realloc(p, small, 64);
            assert_eq!(this_thread::allocations() - calls, 2);
            assert_eq!(this_thread::live_bytes() - live, 64);
            a.dealloc(q, big);
            assert_eq!(this_thread::live_bytes() - live, 0);
            assert_eq!(this_thread::peak_bytes() - live, 64);
            let r = this_thread::paused(|| a.alloc(big));
            assert_eq!(this_thread::allocations() - calls, 2);
            assert_eq!(this_thread::live_bytes() - live, 0);
            this_thread::paused(|| a.dealloc(r, big));
        }
        assert_eq!(a.allocations(), 3, "the process-wide count is never paused");
    }
}
