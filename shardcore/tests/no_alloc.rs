//! The per-message path allocates nothing: channel → partition → Redis
//! channel name into a buffer that has room, key_slot, worker_of.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use shardcore::{key_slot, worker_of, Partitions};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates every call to the system allocator unchanged; it only
// counts allocations.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_path_does_not_allocate() {
    let tables = [
        Partitions::with_prefix(1024, b"app:").expect("valid"),
        Partitions::new(1000).expect("valid"),
    ];
    let channels: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("room:{{{i}}}:chat").into_bytes())
        .collect();
    let mut out = Vec::with_capacity(256);
    let before = ALLOCS.load(Ordering::Relaxed);
    let mut sink = 0usize;
    for table in &tables {
        for ch in &channels {
            out.clear();
            table.redis_channel_into(ch, &mut out);
            sink += usize::from(key_slot(&out)) + worker_of(ch, 16) as usize;
            sink += table
                .user_channel(&out)
                .map_or(0, |(p, c)| p as usize + c.len());
        }
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    assert!(sink > 0);
    assert_eq!(after - before, 0, "allocations on the per-message path");
}
