//! Unit tests of [`ConnLayout::Fixed`]: one server or N client-side shards on
//! the same core as the cluster modes.

use alloc::format;
use alloc::vec::Vec;
use core::time::Duration;

use shardcore::Partitions;
use topology::NodeAddr;

use crate::test_maps::drain;
use crate::{Command, Config, ConnId, ConnLayout, Core, Time};

fn ms(n: u64) -> Time {
    Time::from_millis(n)
}

fn servers(n: u16) -> Vec<NodeAddr> {
    (0..n)
        .map(|i| NodeAddr {
            host: "127.0.0.1".into(),
            port: 6379 + i,
        })
        .collect()
}

/// A fixed core on `n` servers with `mult` connections each, every
/// connection up at 1 ms; the connections by lane.
fn start(n: u16, mult: u32) -> (Core, Vec<ConnId>) {
    let mut cfg = Config::new(Partitions::new(16).unwrap(), servers(n));
    cfg.mode = ConnLayout::Fixed;
    cfg.multiplier = mult;
    cfg.ping_interval = Duration::ZERO;
    let mut core = Core::new(cfg, Time::ZERO).unwrap();
    let opened: Vec<(ConnId, u16)> = drain(&mut core)
        .into_iter()
        .map(|c| match c {
            Command::Open { conn, node } => (conn, node.addr.port),
            other => panic!("a fixed core starts with opens only, got {other}"),
        })
        .collect();
    assert_eq!(opened.len(), usize::from(n) * mult as usize);
    for &(c, _) in &opened {
        core.handle_conn_up(ms(1), c);
    }
    assert!(drain(&mut core).is_empty(), "nothing wanted yet");
    let lanes = (0..u32::from(n) * mult)
        .map(|l| core.conn_of(l).expect("every lane has a connection"))
        .collect::<Vec<_>>();
    for (l, c) in lanes.iter().enumerate() {
        let port = opened.iter().find(|(o, _)| o == c).map(|x| x.1);
        assert_eq!(port, Some(6379 + (l as u32 / mult) as u16), "lane {l}");
    }
    (core, lanes)
}

fn names(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("ch:{i}").into_bytes()).collect()
}

#[test]
fn lanes_are_the_shard_of_the_channel_then_a_connection_of_its_server() {
    let (core, _) = start(3, 2);
    for name in names(300) {
        let lane = core.lane_of(&name);
        assert_eq!(lane / 2, shardcore::shard_of(&name, 3), "{name:?}");
        assert!(lane < 6);
    }
    let (one, _) = start(1, 1);
    assert_eq!(one.lane_of(b"anything"), 0);
}

#[test]
fn wanted_channels_go_to_their_lane_and_nothing_is_ever_fetched() {
    let (mut core, lanes) = start(3, 2);
    let all = names(60);
    core.handle_want(ms(2), all.iter().map(|n| &n[..]));
    let cmds = drain(&mut core);
    let mut sent = 0;
    for c in &cmds {
        let Command::Subscribe {
            conn,
            partition,
            slot,
            channels,
        } = c
        else {
            panic!("only subscribes, got {c}");
        };
        assert_eq!(Some(conn), lanes.get(*partition as usize));
        assert_eq!(u32::from(*slot), partition / 2, "slot = server number");
        for ch in channels {
            assert_eq!(core.lane_of(ch), *partition);
        }
        sent += channels.len();
    }
    assert_eq!(sent, 60);
    core.handle_refresh(ms(3));
    core.handle_degraded(ms(3));
    core.handle_slot_lost(ms(3));
    assert!(drain(&mut core).is_empty());
    assert_eq!(core.stats().rebuilds.total(), 0);
    assert_eq!(core.stats().unknown_slot_owners, 0);
}

#[test]
fn a_lost_connection_reopens_and_resends_its_lane_with_a_gap_first() {
    let (mut core, lanes) = start(2, 1);
    let all = names(40);
    core.handle_want(ms(2), all.iter().map(|n| &n[..]));
    for c in drain(&mut core) {
        if let Command::Subscribe { conn, .. } = c {
            core.handle_subscribe_reply(ms(3), conn, crate::SubscribeReply::Ok);
        }
    }
    assert!(core.is_settled());
    let lost = lanes[1];
    core.handle_conn_down(ms(10), lost);
    assert!(drain(&mut core).is_empty(), "a backoff first, no fetch");
    let mut t = core.poll_timeout().unwrap();
    let new = loop {
        core.handle_timeout(t);
        let cmds = drain(&mut core);
        if let Some(Command::Open { conn, node }) = cmds.first() {
            assert_eq!(node.addr.port, 6380);
            break *conn;
        }
        t = core.poll_timeout().unwrap();
        assert!(t < ms(10_000), "reopened within the backoff");
    };
    assert_ne!(new, lost);
    core.handle_conn_up(t, new);
    let cmds = drain(&mut core);
    let on_lane: Vec<Vec<u8>> = all
        .iter()
        .filter(|n| core.lane_of(n) == 1)
        .cloned()
        .collect();
    match cmds.first() {
        Some(Command::Gap {
            partition: 1,
            channels,
        }) => {
            let mut got: Vec<Vec<u8>> = channels.iter().map(|c| c.to_vec()).collect();
            got.sort();
            let mut want = on_lane.clone();
            want.sort();
            assert_eq!(got, want, "the gap names exactly the lost lane's channels");
        }
        other => panic!("a gap first, got {other:?}"),
    }
    let resent: usize = cmds
        .iter()
        .map(|c| match c {
            Command::Subscribe { conn, channels, .. } => {
                assert_eq!(*conn, new);
                channels.len()
            }
            _ => 0,
        })
        .sum();
    assert_eq!(resent, on_lane.len());
    assert_eq!(core.stats().rebuilds.total(), 0);
}
