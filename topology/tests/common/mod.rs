//! Shared test helpers: a small cluster model that encodes itself as real
//! `CLUSTER SLOTS` / `CLUSTER SHARDS` replies, and golden-file comparison.
#![allow(dead_code)]

use std::path::PathBuf;

use resp::Value;
use topology::{parse_topology_bytes, ParseOptions, SlotMap, TopologyCommand};

/// One node of the model.
#[derive(Clone, Debug)]
pub struct N {
    pub id: String,
    pub ip: String,
    pub port: u16,
    pub hostname: Option<String>,
    pub health: &'static str,
}

pub fn n(id: &str, port: u16) -> N {
    N {
        id: id.into(),
        ip: "10.0.0.1".into(),
        port,
        hostname: None,
        health: "online",
    }
}

/// A primary with its replicas.
#[derive(Clone, Debug)]
pub struct Master {
    pub node: N,
    pub replicas: Vec<N>,
}

/// A cluster: masters and, for each slot, the index of its master.
#[derive(Clone, Debug)]
pub struct Model {
    pub masters: Vec<Master>,
    pub owner: Vec<Option<usize>>,
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

/// A RESP3 map, or the RESP2 flat key-value array.
fn kv(pairs: Vec<(&str, Value)>, resp3: bool) -> Value {
    if resp3 {
        Value::Map(pairs.into_iter().map(|(k, v)| (bulk(k), v)).collect())
    } else {
        Value::Array(pairs.into_iter().flat_map(|(k, v)| [bulk(k), v]).collect())
    }
}

impl Model {
    /// `masters` masters named m0, m1 … (ports 7000 …) with one replica each
    /// (r0, r1 …, ports 7100 …), slots split like `redis-cli --cluster create`.
    pub fn new(masters: u16) -> Model {
        let mut m = Model {
            masters: Vec::new(),
            owner: vec![None; 16384],
        };
        for (i, r) in shardcore::cluster_create_ranges(masters)
            .into_iter()
            .enumerate()
        {
            let idx = m.add_master(&format!("m{i}"), 7000 + i as u16);
            m.masters[idx]
                .replicas
                .push(n(&format!("r{i}"), 7100 + i as u16));
            m.assign(r, Some(idx));
        }
        m
    }

    pub fn add_master(&mut self, id: &str, port: u16) -> usize {
        self.masters.push(Master {
            node: n(id, port),
            replicas: Vec::new(),
        });
        self.masters.len() - 1
    }

    pub fn assign(&mut self, slots: std::ops::RangeInclusive<u16>, owner: Option<usize>) {
        for s in slots {
            self.owner[s as usize] = owner;
        }
    }

    /// The replica takes over: same slots, new primary id and address.
    pub fn failover(&mut self, master: usize) {
        let m = &mut self.masters[master];
        let promoted = m.replicas.remove(0);
        let old = std::mem::replace(&mut m.node, promoted);
        m.replicas.push(old);
    }

    /// Runs of slots with the same owner.
    pub fn ranges(&self) -> Vec<(u16, u16, Option<usize>)> {
        let mut out: Vec<(u16, u16, Option<usize>)> = Vec::new();
        for (s, &o) in self.owner.iter().enumerate() {
            match out.last_mut() {
                Some(last) if last.2 == o => last.1 = s as u16,
                _ => out.push((s as u16, s as u16, o)),
            }
        }
        out
    }

    fn slots_node(node: &N, resp3: bool) -> Value {
        let meta = match &node.hostname {
            Some(h) => vec![("hostname", bulk(h))],
            None => vec![],
        };
        Value::Array(vec![
            bulk(&node.ip),
            Value::Integer(node.port as i64),
            bulk(&node.id),
            kv(meta, resp3),
        ])
    }

    /// `CLUSTER SLOTS`, Redis 7 shape: one entry per run of slots.
    pub fn slots_reply(&self, resp3: bool) -> Value {
        let mut entries = Vec::new();
        for (a, b, o) in self.ranges() {
            let Some(o) = o else { continue };
            let m = &self.masters[o];
            let mut e = vec![Value::Integer(a as i64), Value::Integer(b as i64)];
            e.push(Self::slots_node(&m.node, resp3));
            e.extend(m.replicas.iter().map(|r| Self::slots_node(r, resp3)));
            entries.push(Value::Array(e));
        }
        Value::Array(entries)
    }

    fn shards_node(node: &N, role: &str, resp3: bool) -> Value {
        let mut f = vec![
            ("id", bulk(&node.id)),
            ("port", Value::Integer(node.port as i64)),
            ("ip", bulk(&node.ip)),
            ("endpoint", bulk(&node.ip)),
        ];
        if let Some(h) = &node.hostname {
            f.push(("hostname", bulk(h)));
        }
        f.push(("role", bulk(role)));
        f.push(("replication-offset", Value::Integer(1234)));
        f.push(("health", bulk(node.health)));
        kv(f, resp3)
    }

    /// `CLUSTER SHARDS`: one entry per master (slot-less ones included).
    pub fn shards_reply(&self, resp3: bool) -> Value {
        let ranges = self.ranges();
        let shards = self
            .masters
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let slots = ranges
                    .iter()
                    .filter(|r| r.2 == Some(i))
                    .flat_map(|r| [Value::Integer(r.0 as i64), Value::Integer(r.1 as i64)])
                    .collect();
                let mut nodes = vec![Self::shards_node(&m.node, "master", resp3)];
                nodes.extend(
                    m.replicas
                        .iter()
                        .map(|r| Self::shards_node(r, "replica", resp3)),
                );
                kv(
                    vec![
                        ("slots", Value::Array(slots)),
                        ("nodes", Value::Array(nodes)),
                    ],
                    resp3,
                )
            })
            .collect();
        Value::Array(shards)
    }

    /// Encodes the reply to `cmd` and parses it back.
    pub fn parse(&self, cmd: TopologyCommand, resp3: bool) -> SlotMap {
        let v = match cmd {
            TopologyCommand::ClusterSlots => self.slots_reply(resp3),
            TopologyCommand::ClusterShards => self.shards_reply(resp3),
        };
        encode_and_parse(cmd, &v)
    }
}

pub fn encode_and_parse(cmd: TopologyCommand, v: &Value) -> SlotMap {
    let mut buf = Vec::new();
    resp::encode_value(&mut buf, v);
    parse_topology_bytes(cmd, &buf, &ParseOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

pub fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Compares `actual` with `tests/golden/<name>.txt`; with `UPDATE_GOLDEN=1`
/// (re)writes the file instead.
pub fn golden(name: &str, actual: &str) {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(&p, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            p.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "golden {} differs from line {}:\n--- expected\n{}\n--- actual\n{}\n(run with UPDATE_GOLDEN=1 to accept)",
            p.display(),
            first + 1,
            expected.lines().skip(first).take(8).collect::<Vec<_>>().join("\n"),
            actual.lines().skip(first).take(8).collect::<Vec<_>>().join("\n"),
        );
    }
}
