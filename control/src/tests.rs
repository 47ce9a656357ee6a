//! Unit tests of the core's edges (the scenarios are golden transcripts
//! under `tests/golden/`, the properties are the simulator's).

use alloc::vec;
use alloc::vec::Vec;
use core::time::Duration;

use crate::test_maps::{addr, drain, map};
use shardcore::Partitions;

use crate::{Command, Config, ConfigError, ConnId, Core, FetchError, SubscribeReply, Time};

fn config(batch: usize) -> Config {
    let mut c = Config::new(Partitions::new(4).unwrap(), vec![addr("n0")]);
    c.batch = batch;
    c
}

/// A core with one node and its connection up.
fn up(batch: usize) -> (Core, ConnId) {
    let mut core = Core::new(config(batch), Time::ZERO).unwrap();
    let Some(Command::FetchTopology { id, .. }) =
        crate::test_maps::next_after_version(&mut core, Time::ZERO)
    else {
        panic!("no fetch first")
    };
    core.handle_topology(Time(1), id, Ok(map(&[("a", "n0", 0, 16383)])));
    let Some(Command::Open { conn, .. }) = core.poll_command() else {
        panic!("no open")
    };
    core.handle_conn_up(Time(2), conn);
    (core, conn)
}

#[test]
fn settings_out_of_range_are_refused() {
    let mut c = config(1);
    c.seeds.clear();
    assert_eq!(Core::new(c, Time::ZERO).err(), Some(ConfigError::NoSeeds));
    let mut c = config(0);
    assert_eq!(
        Core::new(c.clone(), Time::ZERO).err(),
        Some(ConfigError::ZeroBatch)
    );
    c.batch = 1;
    c.multiplier = 0;
    assert_eq!(
        Core::new(c.clone(), Time::ZERO).err(),
        Some(ConfigError::ZeroMultiplier)
    );
    c.multiplier = 1;
    c.reply_timeout = Duration::ZERO;
    assert_eq!(Core::new(c, Time::ZERO).err(), Some(ConfigError::ZeroDelay));
}

#[test]
fn a_want_sends_each_partition_once_in_batches() {
    let (mut core, conn) = up(3);
    let names: Vec<Vec<u8>> = (0..40)
        .map(|i| alloc::format!("c{i}").into_bytes())
        .collect();
    core.handle_want(Time(3), names.iter().map(Vec::as_slice));
    let subs: Vec<(u32, usize)> = drain(&mut core)
        .into_iter()
        .filter_map(|c| match c {
            Command::Subscribe {
                conn: c,
                partition,
                channels,
                ..
            } if c == conn => Some((partition, channels.len())),
            _ => None,
        })
        .collect();
    let total: usize = subs.iter().map(|s| s.1).sum();
    assert_eq!(total, 40, "{subs:?}");
    assert!(subs.iter().all(|s| s.1 <= 3), "{subs:?}");
    // ceil(n / 3) commands per partition, nothing sent twice.
    let parts = Partitions::new(4).unwrap();
    let mut expect = 0;
    for p in 0..4 {
        let n = names.iter().filter(|c| parts.partition_of(c) == p).count();
        expect += n.div_ceil(3);
    }
    assert_eq!(subs.len(), expect);
}

#[test]
fn replies_and_pushes_for_unknown_connections_are_ignored() {
    let (mut core, conn) = up(512);
    core.handle_want(Time(3), [&b"news"[..]]);
    drain(&mut core);
    let ghost = ConnId(conn.0 + 100);
    core.handle_subscribe_reply(Time(4), ghost, SubscribeReply::Ok);
    core.handle_sunsubscribe(Time(4), ghost, b"news");
    core.handle_conn_down(Time(4), ghost);
    core.handle_conn_up(Time(4), ghost);
    assert!(drain(&mut core).is_empty());
    assert!(!core.is_settled());
    core.handle_subscribe_reply(Time(5), conn, SubscribeReply::Ok);
    assert!(core.is_settled());
    assert_eq!(core.subscribed_on(b"news"), Some(conn));
    // A second reply with nothing in flight changes nothing.
    core.handle_subscribe_reply(Time(6), conn, SubscribeReply::Ok);
    assert_eq!(core.subscribed_on(b"news"), Some(conn));
}

#[test]
fn a_late_topology_reply_is_ignored() {
    let mut core = Core::new(config(512), Time::ZERO).unwrap();
    let Some(Command::FetchTopology { id, .. }) =
        crate::test_maps::next_after_version(&mut core, Time::ZERO)
    else {
        panic!("no fetch first")
    };
    let deadline = core.poll_timeout().unwrap();
    assert_eq!(deadline, Time::ZERO + Duration::from_secs(2));
    core.handle_timeout(deadline);
    assert!(drain(&mut core).is_empty(), "a retry waits for the backoff");
    core.handle_topology(deadline, id, Ok(map(&[("a", "n0", 0, 16383)])));
    assert!(drain(&mut core).is_empty(), "the timed-out request's reply");
    assert!(core.layout().nodes().is_empty());
    let next = core.poll_timeout().unwrap();
    assert!(next > deadline);
    core.handle_timeout(next);
    let Some(Command::FetchTopology { id: id2, .. }) =
        crate::test_maps::next_after_version(&mut core, Time::ZERO)
    else {
        panic!("no retry")
    };
    assert_ne!(id, id2);
    core.handle_topology(next, id2, Err(FetchError::BadReply));
    assert!(core.poll_timeout().unwrap() > next);
}

/// Runs the core's timers (connections it opens come up at once) until it
/// asks for a topology fetch; returns the fetch id, the node asked, and when.
fn next_fetch(core: &mut Core, mut now: Time) -> (u64, topology::NodeAddr, Time) {
    for _ in 0..100 {
        for cmd in drain(core) {
            match cmd {
                Command::FetchTopology { id, node, .. } => return (id, node, now),
                Command::Open { conn, .. } => core.handle_conn_up(now, conn),
                _ => {}
            }
        }
        now = core.poll_timeout().expect("a timer");
        core.handle_timeout(now);
    }
    panic!("no fetch in 100 timers")
}

#[test]
fn the_poll_asks_the_node_that_answered_last_not_a_dead_seed() {
    // Found by fuzzing (`fuzz/regressions/control_core/poll_on_dead_seeds`):
    // the cursor kept its index into a candidate list the new map had
    // reordered, so the 30 s poll went through dead seeds first.
    let seeds = vec![addr("n0"), addr("n1"), addr("n2")];
    let mut core = Core::new(Config::new(Partitions::new(4).unwrap(), seeds), Time::ZERO).unwrap();
    let Some(Command::FetchTopology { id, node, .. }) =
        crate::test_maps::next_after_version(&mut core, Time::ZERO)
    else {
        panic!("no fetch first")
    };
    assert_eq!(node, addr("n0"));
    core.handle_topology(Time(1), id, Err(FetchError::Unreachable));
    let (id, node, at) = next_fetch(&mut core, Time(1));
    assert_eq!(node, addr("n1"));
    core.handle_topology(at, id, Err(FetchError::Unreachable));
    let (id, node, at) = next_fetch(&mut core, at);
    assert_eq!(node, addr("n2"));
    let answered = at;
    core.handle_topology(
        at,
        id,
        Ok(map(&[("a", "n2", 0, 8191), ("b", "n3", 8192, 16383)])),
    );
    let (_, node, at) = next_fetch(&mut core, at);
    assert_eq!(node, addr("n2"), "the poll asks the node that answered");
    assert_eq!(at, answered + Duration::from_secs(30), "and it is the poll");
}

#[test]
fn unwant_unsubscribes_where_it_was_sent() {
    let (mut core, conn) = up(512);
    core.handle_want(Time(3), [&b"news"[..], b"chat"]);
    drain(&mut core);
    core.handle_unwant(Time(4), [&b"news"[..], b"never-wanted"]);
    let cmds = drain(&mut core);
    assert!(
        matches!(&cmds[..], [Command::Unsubscribe { conn: c, channels, .. }] if *c == conn && channels.len() == 1),
        "{cmds:?}"
    );
}

#[test]
fn a_second_down_report_changes_nothing() {
    let (mut core, conn) = up(512);
    core.handle_conn_down(Time(3), conn);
    core.handle_conn_down(Time(4), conn);
    // The reconnect keeps its first backoff (50 ms), not a doubled one.
    for _ in 0..10 {
        let t = core.poll_timeout().unwrap();
        core.handle_timeout(t);
        if drain(&mut core)
            .iter()
            .any(|c| matches!(c, Command::Open { .. }))
        {
            assert_eq!(t, Time(3) + Duration::from_millis(50));
            return;
        }
    }
    panic!("no reconnect");
}

#[test]
fn a_wanted_channels_packed_state_reads_back_what_was_set() {
    use crate::core::{Chan, Sub};
    let subs = [
        Sub::Idle,
        Sub::Sent(ConnId(0)),
        Sub::Sent(ConnId(7)),
        Sub::Active(ConnId(1 << 40)),
        Sub::Active(ConnId((1 << 60) - 1)),
        Sub::Refused,
    ];
    for &sub in &subs {
        for gap in [false, true] {
            let mut c = Chan::default();
            c.set_gap(gap);
            c.set_sub(sub);
            assert_eq!((c.sub(), c.gap()), (sub, gap), "{c:?}");
            // Each part is set without touching the other.
            for &other in &subs {
                c.set_sub(other);
                assert_eq!((c.sub(), c.gap()), (other, gap));
            }
            c.set_gap(!gap);
            assert_eq!(c.gap(), !gap);
            assert_eq!(c.take_gap(), !gap);
            assert!(!c.gap());
            c.break_off();
            assert_eq!((c.sub(), c.gap()), (Sub::Idle, true));
            // The lingering flag stays while sent, and only then.
            c.set_linger();
            c.set_sub(Sub::Sent(ConnId(3)));
            assert!(c.lingers(), "{c:?}");
            assert_eq!((c.sub(), c.gap()), (Sub::Sent(ConnId(3)), true));
            c.set_sub(sub);
            assert_eq!(c.lingers(), matches!(sub, Sub::Sent(_)), "{c:?}");
        }
    }
}

#[test]
fn a_bulk_want_keeps_channels_already_known_and_subscribes_each_once() {
    // More than the bulk threshold in each partition, a third of them
    // already wanted and confirmed: the batch merges into the sets
    // without touching those.
    fn subscribed(core: &mut Core, conn: ConnId) -> Vec<Vec<u8>> {
        let mut names = Vec::new();
        for c in drain(core) {
            let Command::Subscribe { channels, .. } = c else {
                panic!("only subscribes, got {c}")
            };
            names.extend(channels.iter().map(|c| c.to_vec()));
            core.handle_subscribe_reply(Time(4), conn, SubscribeReply::Ok);
        }
        names.sort();
        names
    }
    let names: Vec<Vec<u8>> = (0..1200)
        .map(|i| alloc::format!("a{i:04}").into_bytes())
        .collect();
    let (mut core, conn) = up(10_000);
    core.handle_want(Time(3), names[..400].iter().map(|n| &n[..]));
    assert_eq!(subscribed(&mut core, conn), names[..400].to_vec());
    assert!(core.is_settled());
    core.handle_want(Time(5), names.iter().map(|n| &n[..]));
    assert!(!core.is_settled());
    assert_eq!(subscribed(&mut core, conn), names[400..].to_vec());
    assert!(core.is_settled(), "the first 400 stayed confirmed");
    core.handle_want(Time(6), names.iter().map(|n| &n[..]));
    assert!(drain(&mut core).is_empty(), "all known: nothing sent");
}

/// Whether a gap is due for `name` before its next subscribe.
fn gap_due(core: &Core, name: &[u8]) -> bool {
    let p = core.lane_of(name) as usize;
    core.parts[p].channels.get(name).is_some_and(|c| c.gap())
}

/// A `MOVED` for `conn`'s oldest subscribe.
fn moved(core: &mut Core, now: Time, conn: ConnId) {
    let e = topology::ClusterError::Moved {
        slot: 0,
        addr: Some(addr("n9")),
    };
    core.handle_subscribe_reply(now, conn, SubscribeReply::Routing(e));
}

/// `news` confirmed on the one connection, given up and wanted again at
/// once (its unsubscribe and its new subscribe are both unanswered; the
/// commands are not drained).
fn wanted_again() -> (Core, ConnId) {
    let (mut core, conn) = up(512);
    core.handle_want(Time(3), [&b"news"[..]]);
    drain(&mut core);
    core.handle_subscribe_reply(Time(4), conn, SubscribeReply::Ok);
    core.handle_unwant(Time(5), [&b"news"[..]]);
    core.handle_want(Time(6), [&b"news"[..]]);
    (core, conn)
}

#[test]
fn a_channel_wanted_again_before_its_unsubscribe_was_read_owes_a_gap_when_turned_away() {
    // Found by fuzzing (`fuzz/regressions/control_core/rewant_then_moved`):
    // the old subscription may still deliver (the channel is wanted, so the
    // application takes its messages) until the server reads the
    // unsubscribe or stops serving the slot; a `MOVED` for the new
    // subscribe leaves a loss whose start nobody saw.
    let (mut core, conn) = wanted_again();
    let cmds = drain(&mut core);
    assert!(
        matches!(&cmds[..], [Command::Unsubscribe { .. }, Command::Subscribe { conn: c, .. }] if *c == conn),
        "{cmds:?}"
    );
    assert!(!gap_due(&core, b"news"));
    moved(&mut core, Time(7), conn);
    assert!(gap_due(&core, b"news"), "the lingering subscription's loss");
}

#[test]
fn a_moved_subscribe_owes_no_gap_when_no_older_subscription_can_be_live() {
    let (mut core, conn) = up(512);
    // Never subscribed before.
    core.handle_want(Time(3), [&b"news"[..]]);
    drain(&mut core);
    moved(&mut core, Time(4), conn);
    assert!(!gap_due(&core, b"news"));
    // Given up and wanted again after a reply showed the server had read
    // the unsubscribe.
    let (mut core, conn) = up(512);
    core.handle_want(Time(3), [&b"chat"[..]]);
    drain(&mut core);
    core.handle_subscribe_reply(Time(4), conn, SubscribeReply::Ok);
    core.handle_unwant(Time(5), [&b"chat"[..]]);
    core.handle_want(Time(6), [&b"other"[..]]);
    drain(&mut core);
    core.handle_subscribe_reply(Time(7), conn, SubscribeReply::Ok);
    core.handle_want(Time(8), [&b"chat"[..]]);
    drain(&mut core);
    moved(&mut core, Time(9), conn);
    assert!(!gap_due(&core, b"chat"), "its unsubscribe was read before");
}

#[test]
fn the_answer_to_our_own_unsubscribe_of_a_channel_wanted_again_is_not_a_drop() {
    let (mut core, conn) = wanted_again();
    drain(&mut core);
    // The push answering the unsubscribe, then the new subscribe's reply.
    core.handle_sunsubscribe(Time(7), conn, b"news");
    assert!(drain(&mut core).is_empty(), "no refresh, no resubscribe");
    assert!(!gap_due(&core, b"news"));
    core.handle_subscribe_reply(Time(8), conn, SubscribeReply::Ok);
    assert_eq!(core.subscribed_on(b"news"), Some(conn));
    assert!(core.is_settled());
    // A second push is the server's own: the subscription broke.
    core.handle_sunsubscribe(Time(9), conn, b"news");
    assert!(gap_due(&core, b"news"));
    assert_eq!(core.subscribed_on(b"news"), None);
}

#[test]
fn a_drop_pushed_before_a_subscribe_in_flight_is_answered_leaves_the_reply_to_decide() {
    // Found by fuzzing (`fuzz/regressions/control_core/drop_before_reply`
    // and `unwanted_left_subscribed`): the push speaks of an older
    // subscription; breaking the channel off resent it while the first
    // subscribe was in flight, or, when the reply then confirmed it, left
    // the server holding a channel the core thought idle (and never
    // unsubscribed when it was given up).
    let (mut core, conn) = up(512);
    core.handle_want(Time(3), [&b"news"[..]]);
    drain(&mut core);
    core.handle_sunsubscribe(Time(4), conn, b"news");
    assert!(drain(&mut core).is_empty(), "no resend, no gap, no refresh");
    core.handle_subscribe_reply(Time(5), conn, SubscribeReply::Ok);
    assert_eq!(core.subscribed_on(b"news"), Some(conn));
    core.handle_unwant(Time(6), [&b"news"[..]]);
    let cmds = drain(&mut core);
    assert!(
        matches!(&cmds[..], [Command::Unsubscribe { conn: c, .. }] if *c == conn),
        "{cmds:?}"
    );
}

#[test]
fn a_drop_of_a_lingering_subscription_voids_the_subscribe_in_flight() {
    let (mut core, conn) = wanted_again();
    drain(&mut core);
    // Our unsubscribe's answer, then the server drops the old subscription
    // too (two pushes for one unsubscribe: one is the server's).
    core.handle_sunsubscribe(Time(7), conn, b"news");
    core.handle_sunsubscribe(Time(8), conn, b"news");
    assert!(drain(&mut core).is_empty(), "the reply decides when");
    assert!(gap_due(&core, b"news"));
    // Its reply: the server holds it, unsubscribed; the gap event, then
    // the channel again, on the same connection (found by fuzzing,
    // `fuzz/regressions/control_core/lingering_drop_then_close`: a gap at
    // the push and another when the connection closed before the reply
    // named one loss twice; `void_left_subscribed`: a void subscribe taken
    // as idle left the channel on the server after it was given up).
    core.handle_subscribe_reply(Time(9), conn, SubscribeReply::Ok);
    crate::test_maps::assert_voided(&mut core, conn);
    assert_eq!(core.subscribed_on(b"news"), None);
    core.handle_subscribe_reply(Time(10), conn, SubscribeReply::Ok);
    assert_eq!(core.subscribed_on(b"news"), Some(conn));
    assert!(!gap_due(&core, b"news"), "signalled once");
}

/// Answers every subscribe `cmds` holds with `OK`.
fn confirm_all(core: &mut Core, now: Time, cmds: &[Command]) {
    for c in cmds {
        if let Command::Subscribe { conn, .. } = c {
            core.handle_subscribe_reply(now, *conn, SubscribeReply::Ok);
        }
    }
}

#[test]
fn a_confirmed_channels_drop_is_never_taken_for_an_answer_still_due() {
    // From a review: the answer to our unsubscribe of `news` was not passed
    // on (the channel was not wanted when it came), so one answer stayed
    // due; a confirmed channel's drop must not be taken for it.
    let (mut core, conn) = up(512);
    core.handle_want(Time(3), [&b"news"[..], b"z"]);
    let cmds = drain(&mut core);
    confirm_all(&mut core, Time(4), &cmds);
    assert!(core.is_settled());
    core.handle_unwant(Time(5), [&b"news"[..]]);
    core.handle_want(Time(6), [&b"news"[..]]);
    core.handle_unwant(Time(7), [&b"z"[..]]);
    drain(&mut core);
    core.handle_subscribe_reply(Time(8), conn, SubscribeReply::Ok);
    assert_eq!(core.subscribed_on(b"news"), Some(conn));
    core.handle_sunsubscribe(Time(9), conn, b"news");
    assert_eq!(core.subscribed_on(b"news"), None, "broke");
    assert!(gap_due(&core, b"news"));
}

#[test]
fn a_channel_wanted_again_after_its_connection_dropped_does_not_linger() {
    // From a review: the old connection's unsubscribes cannot be answered
    // any more; the channel's old subscription ended with it.
    let (mut core, conn) = up(512);
    core.handle_want(Time(3), [&b"news"[..]]);
    drain(&mut core);
    core.handle_subscribe_reply(Time(4), conn, SubscribeReply::Ok);
    core.handle_unwant(Time(5), [&b"news"[..]]);
    drain(&mut core);
    core.handle_conn_down(Time(6), conn);
    core.handle_want(Time(7), [&b"news"[..]]);
    let (_, _, at) = next_fetch(&mut core, Time(7));
    // Timers run until the new connection is up and the subscribe left.
    let mut now = at;
    let mut new_conn = None;
    for _ in 0..100 {
        for cmd in drain(&mut core) {
            match cmd {
                Command::Open { conn, .. } => core.handle_conn_up(now, conn),
                Command::Subscribe { conn, .. } => new_conn = Some(conn),
                _ => {}
            }
        }
        if new_conn.is_some() {
            break;
        }
        now = core.poll_timeout().expect("a timer");
        core.handle_timeout(now);
    }
    let new_conn = new_conn.expect("resubscribed");
    assert_ne!(new_conn, conn);
    moved(&mut core, now, new_conn);
    assert!(!gap_due(&core, b"news"), "nothing could be lost");
}
