//! The per-message path allocates nothing: channel → partition → Redis
//! channel name into a buffer that has room, key_slot, worker_of.

use shardcore::{key_slot, worker_of, Partitions};
use testkit::alloc::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::new();

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
    let before = GLOBAL.allocations();
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
    let after = GLOBAL.allocations();
    assert!(sink > 0);
    assert_eq!(after - before, 0, "allocations on the per-message path");
}
