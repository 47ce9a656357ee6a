//! A counting global allocator for allocation-free-path tests.
//!
//! Install it once per test binary and read the count around the code
//! under test:
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
//! The count is global: it sees every thread (I/O threads, workers), so
//! it covers a whole path, and a test that needs an exact figure must be
//! the only one running in its binary. `alloc` and `realloc` count one
//! each; `dealloc` does not count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Forwards every call to [`System`] unchanged and counts allocations
/// (`alloc` and `realloc` calls) across all threads.
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

    /// `alloc` plus `realloc` calls seen so far, on every thread.
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every call is forwarded to `System` unchanged; the only extra
// work is a relaxed atomic increment, which never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
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
}
