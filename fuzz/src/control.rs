//! The cluster control core (`shardsub-control`) under simulator schedules
//! read from fuzz bytes (`control_core`).
//!
//! Input: a header of 7 bytes (simulator seed, 2 bytes; primaries; channels;
//! connection multiplier; batch size pick; flags: bit 0 ACL, bit 1
//! per-partition connections, bit 2 the channel split of resubscribes,
//! bits 3-4 resubscribe workers − 1, bit 5 classic mode), then up to
//! [`MAX_FAULTS`] faults of 5 bytes each: the time since the previous one
//! (× 10 ms), the fault kind, two pick bytes (node, partition, connection
//! or channel, taken modulo what exists when it runs), and a duration byte
//! (× 12 ms, for black holes, stale maps and orphaned slots). Every schedule ends with the
//! simulator's settle time, so the settle property applies to every input.
//!
//! Invariants (`control_sim`, which panics on a violation): no panic in the
//! core; every `SSUBSCRIBE` / `SUNSUBSCRIBE` holds 1..=batch channels of one
//! partition with its slot, and no channel twice in flight on one
//! connection; a gap precedes the resubscribe of every channel
//! whose subscription broke, and none names a channel with no subscribe
//! since its last gap; fetches and probes stay under their per-second
//! bounds and the fetch backoff holds; `poll_timeout` always lies after the
//! current time; after the settle every wanted channel is subscribed once,
//! on its owner, nothing unwanted stays, refused channels are reported.

use core::time::Duration;

use control::Time;
use control_sim::{run, Fault, Schedule};

use crate::input::Input;

/// Most faults read from one input (keeps one run short).
pub const MAX_FAULTS: usize = 48;

/// The schedule `data` describes.
pub fn schedule(data: &[u8]) -> Schedule {
    let mut input = Input::new(data);
    let seed = u64::from(input.u16());
    let primaries = 1 + u32::from(input.u8() % 5);
    let channels = 1 + u32::from(input.u8() % 48);
    let multiplier = 1 + u32::from(input.u8() % 3);
    let batch = input.pick(&[1, 2, 3, 512]);
    let flags = input.u8();
    let mut faults = Vec::new();
    let mut t = 0u64;
    while !input.is_empty() && faults.len() < MAX_FAULTS {
        t += u64::from(input.u8()) * 10;
        let kind = input.u8();
        let a = u32::from(input.u8());
        let b = u32::from(input.u8());
        let ms = u32::from(input.u8()) * 12;
        let f = match kind % 15 {
            0 => Fault::Migrate {
                partition: a,
                to: b,
            },
            1 => Fault::Failover { node: a },
            2 => Fault::Kill { node: a },
            3 => Fault::AddNode { partition: a },
            4 => Fault::RemoveNode { node: a },
            5 => Fault::Bounce { partition: a },
            6 => Fault::DropConn { conn: a },
            7 => Fault::BlackHole { node: a, ms },
            8 => Fault::Stale { ms },
            9 => Fault::Orphan { partition: a, ms },
            10 => Fault::Burst { channel: a },
            11 => Fault::Storm { node: a },
            13 => Fault::Chatter { conn: a },
            14 => Fault::Replicate { node: a, to: b },
            _ => Fault::Toggle { channel: a },
        };
        faults.push((Time::from_millis(t), f));
    }
    // Subscribing on replicas (sharded modes only) is where replicas are
    // re-pointed; a removed primary's replicas may follow the primary a
    // re-pointed one left, which the simulator leaves out (as its own
    // replica schedules do).
    let replicas = flags & 64 != 0 && flags & 32 == 0;
    faults.retain(|(_, f)| match f {
        Fault::Replicate { .. } => replicas,
        Fault::RemoveNode { .. } => !replicas,
        _ => true,
    });
    Schedule {
        seed,
        primaries,
        channels,
        multiplier,
        per_partition: flags & 2 != 0,
        batch,
        acl: flags & 1 != 0,
        workers: 1 + u32::from((flags >> 3) & 3),
        split_channels: flags & 4 != 0,
        classic: flags & 32 != 0,
        replicas,
        valkey: flags & 128 != 0,
        faults,
        settle: Duration::from_secs(45),
    }
}

/// Runs the schedule of `data` in the simulator (which checks everything).
pub fn check(data: &[u8]) {
    run(&schedule(data));
}
