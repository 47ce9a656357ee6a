//! What the subscribe side keeps per subscribed channel beyond its name:
//! the registry's lanes and the control core's wanted sets together,
//! filled the way the control thread fills them (the registry's dirty
//! lists settled into [`control::Core::handle_want`], every subscribe
//! confirmed), counted exactly by the test allocator.

use std::time::Duration;

use control::{Command, Config, ConnLayout, Core, SubscribeReply, Time};
use shardcore::Partitions;
use testkit::alloc::this_thread::live_bytes;
use topology::NodeAddr;

use crate::front::registry::{Registry, Settled, ACTIVE};

/// One server with `conns` subscribe connections (lanes), `n` channels
/// `bench:%012d` (the 1M-channel bench's names), handed to the core
/// `batch` at a time per lane: the bytes this thread keeps allocated per
/// channel once all are confirmed, less the names.
fn bytes_per_channel(conns: u32, n: usize, batch: usize) -> f64 {
    let before = live_bytes();
    let registry = Registry::new(conns as usize, 7);
    let mut cfg = Config::new(
        Partitions::new(1).expect("one partition"),
        vec![NodeAddr {
            host: "127.0.0.1".into(),
            port: 6379,
        }],
    );
    cfg.mode = ConnLayout::Fixed;
    cfg.multiplier = conns;
    cfg.ping_interval = Duration::ZERO;
    let mut core = Core::new(cfg, Time::ZERO).expect("a fixed core");
    let now = Time::from_millis(1);
    let opened: Vec<_> = std::iter::from_fn(|| core.poll_command()).collect();
    for c in opened {
        if let Command::Open { conn, .. } = c {
            core.handle_conn_up(now, conn);
        }
    }
    let mut names = 0usize;
    let mut name = Vec::with_capacity(32);
    for i in 0..n {
        name.clear();
        name.extend_from_slice(format!("bench:{i:012}").as_bytes());
        names += name.len();
        registry.set_wanted(core.lane_of(&name) as usize, &name, true);
    }
    drop(name);
    // What the driver's `flush_lane` does, lane by lane.
    for lane in 0..conns as usize {
        let mut want = Vec::new();
        {
            let mut l = registry.lane(lane).expect("lane");
            for name in std::mem::take(&mut l.dirty) {
                if l.settle(&name, true) == Settled::Subscribe {
                    want.push(name);
                }
            }
        }
        for part in want.chunks(batch) {
            core.handle_want(now, part.iter().cloned());
        }
        drop(want);
        while let Some(c) = core.poll_command() {
            if let Command::Subscribe { conn, channels, .. } = c {
                for ch in &channels {
                    assert!(registry.confirm(lane, ch) || registry.flags(lane, ch) & ACTIVE != 0);
                }
                drop(channels);
                core.handle_subscribe_reply(now, conn, SubscribeReply::Ok);
            }
        }
    }
    assert!(core.is_settled(), "every channel confirmed");
    assert_eq!(registry.len(), n);
    let live = live_bytes() - before;
    let per = (live as f64 - names as f64) / n as f64;
    drop((core, registry));
    per
}

/// Issue 11 target 4 asks for under 64 bytes per channel beyond the name.
/// The bound here is what the code keeps today (46.2: the name's 9-byte
/// header, the registry's 8-byte table slots at 2.1 per channel, about 19,
/// and the core's B-tree entry, about 18), so a change that adds to it
/// fails; lower it as the number comes down. With `Arc<[u8]>` names (16
/// bytes of counts, 16-byte pointers) and the flags in a slot of their own
/// it was 100.8; before the names were shared and the core's entry packed,
/// 170.9.
#[test]
fn registry_and_control_core_bytes_per_channel_at_1m() {
    let per = bytes_per_channel(4, 1_000_000, usize::MAX);
    println!(
        "registry + control core: {per:.1} bytes per channel beyond the name \
         (1 server, 4 connections, 1M)"
    );
    assert!(per < 48.0, "{per} bytes per channel");
}

/// The same handed over 4,096 at a time, as the control thread takes a
/// large subscribe call while the application is still making it: the
/// core's set, grown by small batches, is rebuilt in bulk as it doubles
/// (one by one in ascending order, its B-tree nodes would stay half full:
/// 54.0 bytes here).
#[test]
fn channels_handed_over_in_small_batches_cost_about_as_much() {
    let per = bytes_per_channel(4, 400_000, 4096);
    println!(
        "registry + control core, batches of 4,096: {per:.1} bytes per channel beyond the name"
    );
    assert!(per < 52.0, "{per} bytes per channel");
}
