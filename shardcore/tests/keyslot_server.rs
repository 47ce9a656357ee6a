//! Differential tests against real servers: `CLUSTER KEYSLOT` for a few
//! thousand generated keys, and the slot split `redis-cli --cluster create`
//! really makes.

use shardcore::{cluster_create_ranges, key_slot, Partitions};
use testkit::{Cluster, Rng, Server, Value};

/// Seeded, so a failure names its seed and key.
const SEED: u64 = 0x6b65_7973_6c6f_7401;

/// Hand-picked edge cases, then random keys over bytes weighted toward
/// braces, NUL and high bytes, then partitioned channel names.
fn keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = [
        &b""[..],
        b"{",
        b"}",
        b"{}",
        b"}{",
        b"{}{}",
        b"{a}",
        b"{{a}}",
        b"a{b}c",
        b"a{}b{c}",
        b"{a",
        b"a}",
        b"foo{}{bar}",
        b"foo{{bar}}zap",
        b"foo{bar}{zap}",
        b"{\x00}",
        b"\x00{\xff}\x00",
        b"123456789",
        b"{user1000}.following",
    ]
    .iter()
    .map(|k| k.to_vec())
    .collect();
    let mut rng = Rng::new(SEED);
    let alphabet: &[u8] = b"{}{}{}ab.\x00\xff\x7f\r\n ";
    for _ in 0..3000 {
        let len = (rng.next_u64() % 24) as usize;
        let key = (0..len)
            .map(|_| {
                let r = rng.next_u64();
                if r % 3 == 0 {
                    (r >> 8) as u8
                } else {
                    alphabet[(r >> 8) as usize % alphabet.len()]
                }
            })
            .collect();
        keys.push(key);
    }
    let table = Partitions::new(1024).expect("valid count");
    for i in 0..500 {
        keys.push(table.redis_channel(format!("room:{{{i}}}:chat").as_bytes()));
    }
    keys
}

#[test]
fn key_slot_matches_cluster_keyslot() {
    let keys = keys();
    for kind in testkit::kinds() {
        let server = Server::builder(kind)
            .cluster(true)
            .start()
            .expect("start server");
        let mut client = server.connect().expect("connect");
        // Pipelined: all commands out, then all replies in.
        for key in &keys {
            client.send(&[b"CLUSTER", b"KEYSLOT", key]).expect("send");
        }
        for key in &keys {
            let reply = client.read_value().expect("reply");
            let want = Value::Integer(i64::from(key_slot(key)));
            assert_eq!(reply, want, "{} (seed {SEED:#x}): key {key:?}", kind.name());
        }
    }
}

/// Slot ranges from a `CLUSTER SLOTS` reply, sorted.
fn cluster_slots(reply: &Value) -> Vec<(u16, u16)> {
    let Value::Array(entries) = reply else {
        panic!("CLUSTER SLOTS: {reply:?}")
    };
    let mut ranges: Vec<(u16, u16)> = entries
        .iter()
        .map(|e| match e {
            Value::Array(fields) => match (&fields[0], &fields[1]) {
                (Value::Integer(a), Value::Integer(b)) => (*a as u16, *b as u16),
                other => panic!("slot range fields: {other:?}"),
            },
            other => panic!("CLUSTER SLOTS entry: {other:?}"),
        })
        .collect();
    ranges.sort_unstable();
    ranges
}

/// `cluster_create_ranges` is what redis-cli really does: 7 masters (a
/// fractional 2340.57 slots each) through testkit, which runs
/// `redis-cli --cluster create`.
#[test]
fn redis_cli_split_matches_a_real_cluster() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 7, 0).expect("start cluster");
        let reply = cluster
            .node(0)
            .cmd(&[b"CLUSTER", b"SLOTS"])
            .expect("CLUSTER SLOTS");
        let want: Vec<(u16, u16)> = cluster_create_ranges(7)
            .into_iter()
            .map(|r| (*r.start(), *r.end()))
            .collect();
        assert_eq!(cluster_slots(&reply), want, "{}", kind.name());
    }
}
