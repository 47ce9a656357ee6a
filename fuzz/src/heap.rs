//! A counting global allocator: live heap bytes and their peak, per thread,
//! so a harness can bound what the code under test holds.
//!
//! Counters are thread-local (each fuzz run and each unit test is on one
//! thread) and can be paused around the harness's own bookkeeping.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts what [`System`] hands out on the current thread.
pub struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
    static PAUSED: Cell<bool> = const { Cell::new(false) };
}

fn grow(n: usize) {
    if PAUSED.try_with(Cell::get).unwrap_or(true) {
        return;
    }
    let _ = LIVE.try_with(|live| {
        let v = live.get().saturating_add(n);
        live.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

fn shrink(n: usize) {
    if PAUSED.try_with(Cell::get).unwrap_or(true) {
        return;
    }
    let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(n)));
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the counting around it neither allocates nor touches the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract; forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`.
        unsafe { System.dealloc(ptr, layout) };
        shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrink(layout.size());
            grow(new_size);
        }
        p
    }
}

/// Live bytes allocated (and not freed) on this thread while not paused.
pub fn live() -> usize {
    LIVE.try_with(Cell::get).unwrap_or(0)
}

/// The most [`live`] has been since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.try_with(Cell::get).unwrap_or(0)
}

/// Starts a new peak from the current live count.
pub fn reset_peak() {
    let _ = PEAK.try_with(|p| p.set(live()));
}

/// Runs `f` without counting what it allocates or frees.
pub fn paused<R>(f: impl FnOnce() -> R) -> R {
    let was = PAUSED.try_with(|p| p.replace(true)).unwrap_or(false);
    let r = f();
    let _ = PAUSED.try_with(|p| p.set(was));
    r
}
