//! Table-driven checks of malformed and unusual topology replies: each bad
//! reply must give an error that names the right entry, node and field, and
//! each unusual but valid reply must parse to the right map.

use resp::Value;
use topology::{
    parse_topology_bytes, Field, Health, ParseOptions, Problem, ReplyError, SlotMap,
    TopologyCommand,
};

const SLOTS: TopologyCommand = TopologyCommand::ClusterSlots;
const SHARDS: TopologyCommand = TopologyCommand::ClusterShards;

fn b(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}
fn i(n: i64) -> Value {
    Value::Integer(n)
}
fn arr(v: Vec<Value>) -> Value {
    Value::Array(v)
}
fn map(v: Vec<(&str, Value)>) -> Value {
    Value::Map(v.into_iter().map(|(k, v)| (b(k), v)).collect())
}
fn slots_node(ip: &str, port: i64, id: &str) -> Value {
    arr(vec![b(ip), i(port), b(id)])
}
fn shards_node(id: &str, port: i64, role: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("id", b(id)),
        ("port", i(port)),
        ("ip", b("10.0.0.1")),
        ("role", b(role)),
        ("health", b("online")),
    ]
}

fn parse(cmd: TopologyCommand, v: &Value, opts: &ParseOptions<'_>) -> Result<SlotMap, ReplyError> {
    let mut buf = Vec::new();
    resp::encode_value(&mut buf, v);
    parse_topology_bytes(cmd, &buf, opts)
}

/// Entry, node, field and problem of an error.
type Where = (Option<u32>, Option<u32>, Field, Problem);

fn err(cmd: TopologyCommand, v: Value) -> Where {
    let e = parse(cmd, &v, &ParseOptions::default()).expect_err("should fail");
    assert!(!e.to_string().is_empty());
    (e.entry, e.node, e.field, e.problem)
}

#[test]
fn bad_cluster_slots_replies() {
    let good = || slots_node("10.0.0.1", 7000, "a");
    let cases: Vec<(Value, Where)> = vec![
        (
            Value::Error(b"ERR This instance has cluster support disabled".to_vec()),
            (None, None, Field::Reply, Problem::ServerError),
        ),
        (i(3), (None, None, Field::Reply, Problem::WrongType)),
        (
            arr(vec![i(1)]),
            (Some(0), None, Field::Entry, Problem::WrongType),
        ),
        (
            arr(vec![arr(vec![])]),
            (Some(0), None, Field::SlotStart, Problem::Missing),
        ),
        (
            arr(vec![arr(vec![i(0)])]),
            (Some(0), None, Field::SlotEnd, Problem::Missing),
        ),
        (
            arr(vec![arr(vec![i(0), i(16384), good()])]),
            (Some(0), None, Field::SlotEnd, Problem::OutOfRange),
        ),
        (
            arr(vec![arr(vec![i(-1), i(5), good()])]),
            (Some(0), None, Field::SlotStart, Problem::OutOfRange),
        ),
        (
            arr(vec![arr(vec![i(9), i(5), good()])]),
            (Some(0), None, Field::SlotEnd, Problem::OutOfRange),
        ),
        (
            arr(vec![arr(vec![b("x"), i(5), good()])]),
            (Some(0), None, Field::SlotStart, Problem::WrongType),
        ),
        (
            arr(vec![arr(vec![i(0), i(5)])]),
            (Some(0), Some(0), Field::Node, Problem::Missing),
        ),
        (
            arr(vec![arr(vec![
                i(0),
                i(5),
                arr(vec![b("10.0.0.1"), i(7000)]),
            ])]),
            (Some(0), Some(0), Field::Id, Problem::Missing),
        ),
        (
            arr(vec![arr(vec![
                i(0),
                i(5),
                slots_node("10.0.0.1", 70000, "a"),
            ])]),
            (Some(0), Some(0), Field::Port, Problem::OutOfRange),
        ),
        (
            arr(vec![arr(vec![i(0), i(5), good(), arr(vec![i(1), b("x")])])]),
            (Some(0), Some(1), Field::Ip, Problem::WrongType),
        ),
        (
            arr(vec![arr(vec![
                i(0),
                i(5),
                arr(vec![Value::Bulk(vec![0xff]), i(1), b("a")]),
            ])]),
            (Some(0), Some(0), Field::Ip, Problem::NotUtf8),
        ),
        (
            arr(vec![arr(vec![
                i(0),
                i(5),
                arr(vec![b("h"), i(1), b("a"), arr(vec![b("hostname")])]),
            ])]),
            (Some(0), Some(0), Field::Metadata, Problem::OddLength),
        ),
        (
            arr(vec![
                arr(vec![i(0), i(5), good()]),
                arr(vec![i(5), i(9), slots_node("10.0.0.2", 7001, "b")]),
            ]),
            (Some(1), None, Field::SlotStart, Problem::Overlap),
        ),
        (
            arr(vec![
                arr(vec![i(0), i(5), good()]),
                arr(vec![i(6), i(9), slots_node("10.0.0.2", 7001, "a")]),
            ]),
            (Some(1), Some(0), Field::Ip, Problem::Conflict),
        ),
    ];
    for (n, (reply, want)) in cases.into_iter().enumerate() {
        assert_eq!(err(SLOTS, reply), want, "case {n}");
    }
}

#[test]
fn bad_cluster_shards_replies() {
    let shard = |slots: Vec<Value>, nodes: Vec<Value>| {
        map(vec![("slots", arr(slots)), ("nodes", arr(nodes))])
    };
    let primary = || map(shards_node("a", 7000, "master"));
    let cases: Vec<(Value, Where)> = vec![
        (
            Value::BlobError(b"ERR unknown subcommand".to_vec()),
            (None, None, Field::Reply, Problem::ServerError),
        ),
        (
            arr(vec![b("x")]),
            (Some(0), None, Field::Entry, Problem::WrongType),
        ),
        (
            arr(vec![arr(vec![b("slots")])]),
            (Some(0), None, Field::Entry, Problem::OddLength),
        ),
        (
            arr(vec![map(vec![("nodes", arr(vec![]))])]),
            (Some(0), None, Field::Slots, Problem::Missing),
        ),
        (
            arr(vec![map(vec![("slots", arr(vec![]))])]),
            (Some(0), None, Field::Nodes, Problem::Missing),
        ),
        (
            arr(vec![shard(vec![i(0)], vec![primary()])]),
            (Some(0), None, Field::Slots, Problem::OddLength),
        ),
        (
            arr(vec![shard(vec![i(0), i(20000)], vec![primary()])]),
            (Some(0), None, Field::SlotEnd, Problem::OutOfRange),
        ),
        (
            arr(vec![shard(vec![i(0), i(5)], vec![i(1)])]),
            (Some(0), Some(0), Field::Node, Problem::WrongType),
        ),
        (
            arr(vec![shard(
                vec![i(0), i(5)],
                vec![map(vec![("port", i(1)), ("role", b("master"))])],
            )]),
            (Some(0), Some(0), Field::Id, Problem::Missing),
        ),
        (
            arr(vec![shard(
                vec![i(0), i(5)],
                vec![map(vec![
                    ("id", b("a")),
                    ("ip", b("h")),
                    ("role", b("master")),
                ])],
            )]),
            (Some(0), Some(0), Field::Port, Problem::Missing),
        ),
        (
            arr(vec![shard(
                vec![i(0), i(5)],
                vec![map(vec![("id", b("a")), ("port", i(1)), ("ip", b("h"))])],
            )]),
            (Some(0), Some(0), Field::Role, Problem::Missing),
        ),
        (
            arr(vec![shard(
                vec![i(0), i(5)],
                vec![map(vec![
                    ("id", b("a")),
                    ("port", i(1)),
                    ("ip", b("h")),
                    ("role", b("boss")),
                ])],
            )]),
            (Some(0), Some(0), Field::Role, Problem::OutOfRange),
        ),
        (
            arr(vec![
                shard(vec![i(0), i(5)], vec![primary()]),
                shard(
                    vec![i(3), i(9)],
                    vec![map(shards_node("b", 7001, "master"))],
                ),
            ]),
            (Some(1), None, Field::SlotStart, Problem::Overlap),
        ),
        (
            arr(vec![shard(
                vec![i(0), i(5)],
                vec![map(vec![
                    ("id", b("a")),
                    ("port", b("x")),
                    ("ip", b("h")),
                    ("role", b("master")),
                ])],
            )]),
            (Some(0), Some(0), Field::Port, Problem::WrongType),
        ),
    ];
    for (n, (reply, want)) in cases.into_iter().enumerate() {
        assert_eq!(err(SHARDS, reply), want, "case {n}");
    }
}

#[test]
fn endpoints_empty_unknown_and_hostnames() {
    let reply = arr(vec![
        arr(vec![i(0), i(99), slots_node("", 7000, "a")]),
        arr(vec![i(100), i(199), slots_node("?", 7001, "b")]),
        arr(vec![
            i(200),
            i(299),
            arr(vec![
                b("10.0.0.3"),
                i(7002),
                b("c"),
                Value::Map(vec![(b("hostname"), b("c.example"))]),
            ]),
        ]),
    ]);
    let plain = parse(SLOTS, &reply, &ParseOptions::default()).unwrap();
    assert_eq!(
        plain.owner(0).unwrap().primary.addr,
        None,
        "empty ip without an asked host"
    );
    assert_eq!(plain.owner(100).unwrap().primary.addr, None, "? is unknown");
    assert_eq!(
        plain
            .owner(200)
            .unwrap()
            .primary
            .addr
            .as_ref()
            .unwrap()
            .host,
        "10.0.0.3"
    );
    assert_eq!(plain.owner(300), None);
    assert_eq!(plain.unowned_count(), 16384 - 300);
    let opts = ParseOptions {
        asked_host: Some("seed.example"),
        prefer_hostname: true,
        prefer_tls_port: false,
    };
    let asked = parse(SLOTS, &reply, &opts).unwrap();
    assert_eq!(
        asked
            .owner(0)
            .unwrap()
            .primary
            .addr
            .as_ref()
            .unwrap()
            .to_string(),
        "seed.example:7000"
    );
    assert_eq!(asked.owner(100).unwrap().primary.addr, None);
    assert_eq!(
        asked
            .owner(200)
            .unwrap()
            .primary
            .addr
            .as_ref()
            .unwrap()
            .to_string(),
        "c.example:7002"
    );

    // The unresolved partitions say why.
    let parts = shardcore::Partitions::new(128).unwrap();
    let layout = topology::Layout::compute(&plain, &parts);
    assert!(layout.unresolved().iter().all(|u| match u.slot {
        0..=199 => u.reason == topology::UnresolvedReason::UnknownEndpoint,
        _ => u.reason == topology::UnresolvedReason::NoOwner,
    }));
    assert!(layout.slots_to_probe().iter().all(|&s| s >= 300));
}

#[test]
fn unusual_but_valid_cluster_shards() {
    let reply = arr(vec![
        // TLS only, IPv6, loading, unknown keys and health values.
        map(vec![
            ("slots", arr(vec![i(0), i(9), i(20), i(29)])),
            ("id", b("shard-id-is-ignored")),
            (
                "nodes",
                arr(vec![
                    map(vec![
                        ("id", b("a")),
                        ("tls-port", i(7443)),
                        ("ip", b("::1")),
                        ("role", b("master")),
                        ("health", b("loading")),
                        ("availability-zone", b("z1")),
                    ]),
                    map(vec![
                        ("id", b("r")),
                        ("port", i(7001)),
                        ("endpoint", b("r.example")),
                        ("ip", b("10.0.0.2")),
                        ("role", b("replica")),
                        ("health", b("fail")),
                    ]),
                    map(vec![
                        ("id", b("s")),
                        ("port", i(7002)),
                        ("ip", b("10.0.0.3")),
                        ("role", b("replica")),
                        ("health", b("weird")),
                    ]),
                ]),
            ),
        ]),
        // A shard whose primary is gone: its slots have no owner.
        map(vec![
            ("slots", arr(vec![i(10), i(19)])),
            ("nodes", arr(vec![map(shards_node("z", 7009, "replica"))])),
        ]),
        // A new primary with no slots yet.
        map(vec![
            ("slots", arr(vec![])),
            ("nodes", arr(vec![map(shards_node("n", 7010, "master"))])),
        ]),
    ]);
    let m = parse(SHARDS, &reply, &ParseOptions::default()).unwrap();
    let a = m.owner(0).unwrap();
    assert_eq!(m.owner_index(25), m.owner_index(0));
    assert_eq!(m.owner(15), None);
    assert_eq!(a.primary.addr.as_ref().unwrap().to_string(), "[::1]:7443");
    assert_eq!(a.primary.tls_port, Some(7443));
    assert_eq!(a.primary.health, Health::Loading);
    let health: Vec<_> = a
        .replicas
        .iter()
        .map(|r| (r.id.as_str(), r.health))
        .collect();
    assert_eq!(health, vec![("r", Health::Failed), ("s", Health::Unknown)]);
    assert_eq!(
        a.replicas[0].addr.as_ref().unwrap().host,
        "r.example",
        "endpoint wins over ip"
    );
    assert_eq!(
        m.shards().len(),
        2,
        "slot-less primary kept, primary-less shard dropped"
    );
    assert_eq!(m.unowned_count(), 16384 - 20);
}

#[test]
fn cut_and_garbled_bytes() {
    let e =
        parse_topology_bytes(SLOTS, b"*1\r\n*3\r\n:0\r\n", &ParseOptions::default()).unwrap_err();
    assert_eq!((e.field, e.problem), (Field::Reply, Problem::Incomplete));
    let e = parse_topology_bytes(SLOTS, b"?what\r\n", &ParseOptions::default()).unwrap_err();
    assert_eq!((e.field, e.problem), (Field::Reply, Problem::NotResp));
    assert_eq!(e.to_string(), "CLUSTER SLOTS reply: reply: not valid RESP");
    let e = err(
        SLOTS,
        arr(vec![arr(vec![i(0), i(5), slots_node("h", 99999, "a")])]),
    );
    assert_eq!(e.2, Field::Port);
}

#[test]
fn several_primaries_in_one_shard_pick_the_healthiest() {
    let node = |id: &str, port: i64, health: &str, offset: i64| {
        map(vec![
            ("id", b(id)),
            ("port", i(port)),
            ("ip", b("10.0.0.1")),
            ("role", b("master")),
            ("replication-offset", i(offset)),
            ("health", b(health)),
        ])
    };
    let cases = [
        (
            vec![node("dead", 1, "fail", 900), node("new", 2, "online", 100)],
            "new",
        ),
        (
            vec![node("new", 2, "online", 100), node("dead", 1, "fail", 900)],
            "new",
        ),
        (
            vec![node("a", 1, "loading", 5), node("b", 2, "fail", 9)],
            "a",
        ),
        (
            vec![node("a", 1, "online", 5), node("b", 2, "online", 9)],
            "b",
        ),
        (
            vec![node("b", 2, "online", 5), node("a", 1, "online", 5)],
            "a",
        ),
    ];
    for (n, (nodes, want)) in cases.into_iter().enumerate() {
        let reply = arr(vec![map(vec![
            ("slots", arr(vec![i(0), i(16383)])),
            ("nodes", arr(nodes)),
        ])]);
        let m = parse(SHARDS, &reply, &ParseOptions::default()).unwrap();
        assert_eq!(m.owner(0).unwrap().primary.id, want, "case {n}");
        assert_eq!(m.shards().len(), 1, "case {n}");
    }
}

#[test]
fn a_node_with_both_ports_is_reached_on_the_one_asked_for() {
    let node = |id: &str, role: &str| {
        map(vec![
            ("id", b(id)),
            ("port", i(7000)),
            ("tls-port", i(7443)),
            ("ip", b("10.0.0.1")),
            ("role", b(role)),
            ("health", b("online")),
        ])
    };
    let reply = arr(vec![map(vec![
        ("slots", arr(vec![i(0), i(16383)])),
        (
            "nodes",
            arr(vec![node("a", "master"), node("r", "replica")]),
        ),
    ])]);
    for (prefer_tls_port, port) in [(false, 7000), (true, 7443)] {
        let opts = ParseOptions {
            prefer_tls_port,
            ..ParseOptions::default()
        };
        let m = parse(SHARDS, &reply, &opts).unwrap();
        let owner = m.owner(0).unwrap();
        assert_eq!(owner.primary.addr.as_ref().unwrap().port, port);
        assert_eq!(owner.replicas[0].addr.as_ref().unwrap().port, port);
        assert_eq!(owner.primary.tls_port, Some(7443));
    }
}
