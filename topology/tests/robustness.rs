//! Hostile input: mutated real replies and random reply-shaped trees must
//! give a map or an error, never a panic; whatever parses must lay out and
//! render. A failure prints the input that caused it.

use proptest::prelude::*;
use resp::Value;
use topology::{parse_topology_bytes, plan_rewire, Layout, ParseOptions, TopologyCommand};

const FIXTURES: [&[u8]; 6] = [
    include_bytes!("fixtures/redis7_slots_resp2.bin"),
    include_bytes!("fixtures/redis7_hostnames_slots_resp3.bin"),
    include_bytes!("fixtures/redis7_shards_resp2.bin"),
    include_bytes!("fixtures/valkey9_shards_resp3.bin"),
    include_bytes!("fixtures/valkey9_hostnames_shards_resp3.bin"),
    include_bytes!("fixtures/valkey9_failed_shards_resp3.bin"),
];

const CMDS: [TopologyCommand; 2] = [
    TopologyCommand::ClusterSlots,
    TopologyCommand::ClusterShards,
];

/// Parses with both commands; anything that parses is laid out, planned
/// against the empty layout, and rendered.
fn exercise(bytes: &[u8]) {
    let parts = shardcore::Partitions::new(64).unwrap();
    let empty = Layout::compute(&topology::SlotMap::new(), &parts);
    for cmd in CMDS {
        for prefer_hostname in [false, true] {
            let opts = ParseOptions {
                asked_host: Some("h"),
                prefer_hostname,
                prefer_tls_port: prefer_hostname,
            };
            match parse_topology_bytes(cmd, bytes, &opts) {
                Ok(map) => {
                    let layout = Layout::compute(&map, &parts);
                    let plan = plan_rewire(&empty, &layout);
                    assert_eq!(
                        plan.resubscribe.len() + layout.unresolved().len(),
                        64,
                        "every partition is either placed or unresolved"
                    );
                    let _ = format!("{map}{layout}{plan}");
                }
                Err(e) => {
                    let _ = e.to_string();
                }
            }
        }
    }
}

fn word() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just("slots"),
        Just("nodes"),
        Just("id"),
        Just("port"),
        Just("tls-port"),
        Just("ip"),
        Just("endpoint"),
        Just("hostname"),
        Just("role"),
        Just("master"),
        Just("replica"),
        Just("health"),
        Just("online"),
        Just("fail"),
        Just("replication-offset"),
        Just(""),
        Just("?"),
        Just("10.0.0.1"),
        Just("abc"),
    ]
    .prop_map(|s| Value::Bulk(s.as_bytes().to_vec()))
}

fn tree() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        word(),
        (-2i64..70000).prop_map(Value::Integer),
        prop_oneof![
            Just(0i64),
            Just(16383),
            Just(16384),
            Just(-1),
            Just(i64::MAX)
        ]
        .prop_map(Value::Integer),
        Just(Value::Null),
        Just(Value::Error(b"ERR nope".to_vec())),
        any::<Vec<u8>>().prop_map(Value::Bulk),
    ];
    leaf.prop_recursive(5, 200, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((word(), inner.clone()), 0..8).prop_map(Value::Map),
            prop::collection::vec(inner, 0..4).prop_map(Value::Set),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mutated_real_replies(which in 0..FIXTURES.len(), flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6), keep in any::<usize>()) {
        let mut bytes = FIXTURES[which].to_vec();
        for (pos, byte) in flips {
            let i = pos % bytes.len();
            bytes[i] = byte;
        }
        bytes.truncate(1 + keep % bytes.len());
        exercise(&bytes);
    }

    #[test]
    fn random_reply_shaped_trees(v in tree()) {
        let mut bytes = Vec::new();
        resp::encode_value(&mut bytes, &v);
        exercise(&bytes);
    }
}

#[test]
fn fixtures_themselves() {
    for f in FIXTURES {
        exercise(f);
    }
}
