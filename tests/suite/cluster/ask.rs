//! `ASK` on a publish, which neither real server sends for `SPUBLISH` (Redis
//! 7 and Valkey 9 serve it on a migrating slot's source), so two
//! [`FakeServer`]s play the cluster nodes:
//!
//! - node 1 (the seed) answers the handshake, `INFO server` (a Redis 7.0,
//!   so `CLUSTER SLOTS` is asked) and `CLUSTER SLOTS` (it owns every slot);
//!   its publish connection answers the first `SPUBLISH` with
//!   `-ASK <slot> <node 2>` and the second one with a count;
//! - node 2 must get `ASKING` and then the `SPUBLISH`, on one connection,
//!   in that order, and answers both.
//!
//! The publish then succeeds with node 2's count, the slot's route stays
//! on node 1 (the second publish goes there), and the ASK is counted.
//! Every script must play exactly: a missing `ASKING`, a reordered pair or
//! an extra connection fails the test.
//!
//! A `MOVED` on a command (`PubSub::command`) moves the slot's route as a
//! publish's does: node 1 answers a `SET` with `-MOVED <slot> <node 2>`
//! and then nothing (no topology refresh can move the route), node 2 takes
//! the `SET` and then the next publish to that slot.

use std::time::Duration;

use shardsub::PubSub;
use testkit::{FakeServer, Step};

fn cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_command(&mut out, args.iter().copied());
    out
}

/// What a Redis 7.0 says to `HELLO 3`.
const HELLO_REPLY: &[u8] = b"%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n\
    $7\r\nversion\r\n$5\r\n7.0.0\r\n$5\r\nproto\r\n:3\r\n";

/// The handshake of a cluster connection (`role` is its client name).
fn hello(role: &str) -> [Step; 2] {
    [
        Step::expect(cmd(&[b"HELLO", b"3", b"SETNAME", role.as_bytes()])),
        Step::send(HELLO_REPLY),
    ]
}

/// The limits a publish connection reads at build, refused (so none is
/// known).
fn limits_refused() -> [Step; 2] {
    [
        Step::expect(
            [
                cmd(&[b"CONFIG", b"GET", b"client-output-buffer-limit"]),
                cmd(&[b"CONFIG", b"GET", b"proto-max-bulk-len"]),
            ]
            .concat(),
        ),
        Step::send(b"-ERR not here\r\n-ERR not here\r\n"),
    ]
}

/// A seed's topology connection: its version, then a map of one owner
/// (at `owner_port`) for every slot.
fn first_map(owner_port: u16) -> Vec<Step> {
    hello("shardsub-pub")
        .into_iter()
        .chain([
            Step::expect(cmd(&[b"INFO", b"server"])),
            Step::send(bulk(b"# Server\r\nredis_version:7.0.0\r\n")),
            Step::expect(cmd(&[b"CLUSTER", b"SLOTS"])),
            Step::send(slots_reply(owner_port)),
            Step::Silence,
        ])
        .collect()
}

/// A cluster instance on the fakes behind `seed`.
fn built_on(seed: &FakeServer) -> PubSub {
    PubSub::builder()
        .seed(seed.addr().to_string())
        .handler(|_: &[u8], _: &[u8]| {})
        .workers(1)
        .max_message_size(0)
        .build()
        .expect("cluster pubsub on the fakes")
}

fn bulk(text: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", text.len()).into_bytes();
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
    out
}

/// `CLUSTER SLOTS`: one primary at `port` owns every slot.
fn slots_reply(port: u16) -> Vec<u8> {
    let mut out = b"*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n".to_vec();
    out.extend(bulk(b"127.0.0.1"));
    out.extend(format!(":{port}\r\n").into_bytes());
    out.extend(bulk(&[b'a'; 40]));
    out
}

#[test]
fn ask_sends_asking_then_the_publish_to_the_named_node_and_keeps_the_route() {
    let channel = b"ask:channel".as_slice();
    let parts = shardcore::Partitions::new(128).unwrap();
    let wire = parts.redis_channel(channel);
    let slot = parts.slot(parts.partition_of(channel));
    let spublish = |payload: &[u8]| cmd(&[b"SPUBLISH", &wire, payload]);

    // The node the ASK names: one connection, the publish engine the ASK
    // opens; ASKING and the publish arrive on it in that order.
    let target = FakeServer::start_each(vec![hello("shardsub-pub")
        .into_iter()
        .chain([
            Step::expect([cmd(&[b"ASKING"]), spublish(b"first")].concat()),
            Step::send(b"+OK\r\n:2\r\n"),
            Step::Silence,
        ])
        .collect()])
    .unwrap();
    // The slot's owner: its publish connection and its subscribe
    // connection, in whatever order they open (two I/O threads).
    let ask = format!("-ASK {slot} {}\r\n", target.addr());
    let owner = FakeServer::start_matched(vec![
        hello("shardsub-pub")
            .into_iter()
            // The limits read at build: refused, so none is known.
            .chain(limits_refused())
            .chain([
                Step::expect(spublish(b"first")),
                Step::send(ask.as_bytes()),
                Step::expect(spublish(b"second")),
                Step::send(b":7\r\n"),
                Step::Silence,
            ])
            .collect(),
        hello("shardsub-sub")
            .into_iter()
            .chain([Step::Silence])
            .collect(),
    ])
    .unwrap();
    // The seed (its own port is not known before it listens, so it is not
    // in the map it serves): one throwaway topology connection.
    let seed = FakeServer::start_each(vec![first_map(owner.addr().port())]).unwrap();

    let ps = built_on(&seed);
    assert_eq!(ps.server_channel(channel), wire);

    let first = ps.publish_wait(channel, b"first", Duration::from_secs(5));
    assert_eq!(
        first.as_ref().ok(),
        Some(&2),
        "the ASK target's count: {first:?}; scripts: {:?} {:?}",
        owner.failures(),
        target.failures()
    );
    let m = ps.cluster_metrics().unwrap();
    assert_eq!(m.redirects.ask, 1, "{m:?}");
    assert_eq!(m.redirects.moved, 0, "{m:?}");
    assert_eq!(m.publish_failed, 0, "{m:?}");
    // The route did not change: the next publish goes to the owner again.
    let second = ps.publish_wait(channel, b"second", Duration::from_secs(5));
    assert_eq!(
        second.as_ref().ok(),
        Some(&7),
        "the owner's count: {second:?}; scripts: {:?} {:?}",
        owner.failures(),
        target.failures()
    );
    let m = ps.cluster_metrics().unwrap();
    assert_eq!(m.redirects.ask, 1, "{m:?}");
    assert_eq!(m.publish_failed, 0, "{m:?}");
    ps.shutdown();

    assert_eq!(
        (seed.accepted(), owner.accepted(), target.accepted()),
        (1, 2, 1),
        "connections per fake node"
    );
    for (name, fake) in [("seed", seed), ("owner", owner), ("ASK target", target)] {
        fake.finish()
            .unwrap_or_else(|e| panic!("{name}'s script: {e}"));
    }
}

#[test]
fn a_commands_moved_moves_the_route_and_the_next_publish_follows_it() {
    let channel = b"moved:channel".as_slice();
    let parts = shardcore::Partitions::new(128).unwrap();
    let wire = parts.redis_channel(channel);
    let slot = parts.slot(parts.partition_of(channel));
    // A key in the channel's slot.
    let set = cmd(&[b"SET", &wire, b"v"]);

    // The node the MOVED names: the command, then the publish.
    let target = FakeServer::start_each(vec![hello("shardsub-pub")
        .into_iter()
        .chain([
            Step::expect(&set),
            Step::send(b"+OK\r\n"),
            Step::expect(cmd(&[b"SPUBLISH", &wire, b"after"])),
            Step::send(b":1\r\n"),
            Step::Silence,
        ])
        .collect()])
    .unwrap();
    // The slot's owner in the map: it redirects the command, then answers
    // nothing (the gate's barrier, a topology refresh): only the MOVED
    // can move the route.
    let moved = format!("-MOVED {slot} {}\r\n", target.addr());
    let owner = FakeServer::start_matched(vec![
        hello("shardsub-pub")
            .into_iter()
            .chain(limits_refused())
            .chain([
                Step::expect(&set),
                Step::send(moved.as_bytes()),
                Step::Silence,
            ])
            .collect(),
        hello("shardsub-sub")
            .into_iter()
            .chain([Step::Silence])
            .collect(),
    ])
    .unwrap();
    // The seed: the first map; the refreshes the MOVED asks for (a
    // connection each, the next ones after a failed one) get no answer.
    let refreshes = std::iter::repeat_n(vec![Step::Silence], 8);
    let seed = std::iter::once(first_map(owner.addr().port())).chain(refreshes);
    let seed = FakeServer::start_each(seed.collect()).unwrap();

    let ps = built_on(&seed);
    let scripts = || format!("{:?} {:?}", owner.failures(), target.failures());
    let r = ps.command(&wire, [&b"SET"[..], &wire, b"v"]);
    assert_eq!(
        r.as_ref().ok(),
        Some(&resp::Value::Simple("OK".into())),
        "the command follows the MOVED: {r:?}; scripts: {}",
        scripts()
    );
    // The next publish goes to node 2: held while the slot's gate is
    // closed (node 1 never answers its barrier, so it opens at its
    // timeout, 1 s), never to node 1.
    let t = std::time::Instant::now();
    let after = ps.publish_wait(channel, b"after", Duration::from_secs(10));
    let took = t.elapsed();
    assert_eq!(
        after.as_ref().ok(),
        Some(&1),
        "node 2's count: {after:?} after {took:?}; scripts: {}",
        scripts()
    );
    eprintln!("the publish after the command's MOVED took {took:?} (the gate)");
    let m = ps.cluster_metrics().unwrap();
    assert_eq!(m.redirects.moved, 0, "no publish was redirected: {m:?}");
    assert_eq!(m.publish_failed, 0, "{m:?}");
    ps.shutdown();

    assert_eq!(
        (owner.accepted(), target.accepted()),
        (2, 1),
        "connections per fake node"
    );
    for (name, fake) in [("seed", seed), ("owner", owner), ("MOVED target", target)] {
        fake.finish()
            .unwrap_or_else(|e| panic!("{name}'s script: {e}"));
    }
}
