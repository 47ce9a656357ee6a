//! The topology reply parsers on arbitrary RESP: `CLUSTER SLOTS`,
//! `CLUSTER SHARDS`, the version parsers and the redirect parser.
//!
//! Input: one flags byte (bit 1: an asked host, bit 2: prefer host names,
//! bit 3: prefer TLS ports),
//! one RESP frame, then optional bytes that pick a partition count and a
//! `MOVED` to apply.
//!
//! Invariants: no panic; `parse_topology_bytes` agrees with parsing the frame
//! first; a parsed [`SlotMap`] covers slots 0..=16383 with maximal runs whose
//! owners are real shard indices, has its shard table sorted by primary id
//! (ids unique, replicas sorted, roles right), and owns exactly as many slots
//! as the reply claimed (no claim overlapped another); its layout is
//! consistent ([`crate::rewire::check_layout`]); a `MOVED` gives the slot to
//! the named address and keeps the map consistent.

use resp::{AggregateKind, Frame, Limits, Status};
use shardcore::SLOT_COUNT;
use topology::{
    parse_cluster_error, parse_hello_version, parse_info_version, parse_topology,
    parse_topology_bytes, Layout, NodeAddr, ParseOptions, Role, SlotMap, TopologyCommand,
};

use crate::input::Input;
use crate::rewire::{check_layout, partitions, COUNTS};

/// Parses `data` as described in the module docs and checks every invariant.
pub fn check(data: &[u8]) {
    let Some((&flags, wire)) = data.split_first() else {
        return;
    };
    let asked_host = (flags & 2 != 0).then_some("asked.invalid");
    let options = ParseOptions {
        asked_host,
        prefer_hostname: flags & 4 != 0,
        prefer_tls_port: flags & 8 != 0,
    };
    let commands = [
        TopologyCommand::ClusterSlots,
        TopologyCommand::ClusterShards,
    ];
    let parsed = match resp::parse(wire, &Limits::default()) {
        Ok(Status::Complete(p)) => p,
        _ => {
            for command in commands {
                assert!(parse_topology_bytes(command, wire, &options).is_err());
            }
            return;
        }
    };
    let frame = &parsed.frame;
    let mut tail = Input::new(&wire[parsed.consumed..]);
    for command in commands {
        let result = parse_topology(command, frame, &options);
        assert_eq!(parse_topology_bytes(command, wire, &options), result);
        match result {
            Ok(mut map) => {
                check_map(&map, true);
                assert_eq!(
                    usize::from(SLOT_COUNT) - map.unowned_count(),
                    claimed_slots(command, frame),
                    "owned slots differ from the slots the reply claimed"
                );
                let _ = map.to_string();
                let parts = partitions(tail.below(COUNTS.len()));
                let layout = Layout::compute(&map, parts);
                check_layout(&map, parts.slots(), &layout);
                let slot = tail.u16() % SLOT_COUNT;
                let addr = NodeAddr {
                    host: "10.0.0.1".into(),
                    port: 7000 + u16::from(tail.u8() % 8),
                };
                map.apply_moved(slot, addr.clone());
                check_map(&map, false);
                if map.shards().len() < usize::from(SLOT_COUNT) {
                    let owner = map.owner(slot).and_then(|s| s.primary.addr.as_ref());
                    assert_eq!(owner, Some(&addr), "MOVED {slot} not applied");
                }
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
    let _ = parse_hello_version(frame);
    match frame {
        Frame::Error(text) | Frame::BlobError(text) => {
            let _ = parse_cluster_error(text, asked_host);
        }
        _ => {
            if let Some(text) = frame.as_bytes() {
                let _ = parse_info_version(text);
                let _ = parse_cluster_error(text, asked_host);
            }
        }
    }
}

/// What the crate promises of every slot map; `sorted` for one fresh from
/// a parser (a `MOVED` appends a shard at the end).
pub fn check_map(map: &SlotMap, sorted: bool) {
    let shards = map.shards();
    assert!(shards.len() <= usize::from(SLOT_COUNT));
    let ranges = map.ranges();
    let mut next = 0usize;
    let mut unowned = 0usize;
    let mut last_owner = None;
    for (i, (range, owner)) in ranges.iter().enumerate() {
        let (start, end) = (usize::from(*range.start()), usize::from(*range.end()));
        assert_eq!(start, next, "ranges leave a gap or overlap at {start}");
        assert!(end >= start && end < usize::from(SLOT_COUNT));
        if i > 0 {
            assert_ne!(Some(*owner), last_owner, "runs not maximal at {start}");
        }
        if let Some(o) = owner {
            assert!(*o < shards.len(), "owner {o} of {} shards", shards.len());
        } else {
            unowned += end - start + 1;
        }
        for slot in start..=end {
            assert_eq!(map.owner_index(slot as u16), *owner);
        }
        last_owner = Some(*owner);
        next = end + 1;
    }
    assert_eq!(next, usize::from(SLOT_COUNT), "ranges end at {next}");
    assert_eq!(map.unowned_count(), unowned);
    assert_eq!(map.owner_index(SLOT_COUNT), None);
    assert!(map.owner(u16::MAX).is_none());
    for (i, shard) in shards.iter().enumerate() {
        assert_eq!(shard.primary.role, Role::Primary);
        for r in &shard.replicas {
            assert_eq!(r.role, Role::Replica);
        }
        if sorted {
            assert!(shard
                .replicas
                .windows(2)
                .all(|w| (&w[0].id, &w[0].addr) <= (&w[1].id, &w[1].addr)));
            if let Some(prev) = i.checked_sub(1).and_then(|p| shards.get(p)) {
                assert!(
                    prev.primary.id < shard.primary.id,
                    "shard table not sorted by unique primary id"
                );
            }
        }
    }
}

/// Slots the reply's entries claim, counted without the parser: its map
/// owns exactly these when no two claims overlap.
fn claimed_slots(command: TopologyCommand, reply: &Frame<'_>) -> usize {
    let mut total = 0;
    for entry in entries(reply) {
        match command {
            TopologyCommand::ClusterSlots => {
                let mut it = entries(&entry);
                if let (Some(s), Some(e)) = (it.next(), it.next()) {
                    total += span(&s, &e);
                }
            }
            TopologyCommand::ClusterShards => {
                let (mut slots, mut primary) = (Vec::new(), false);
                for (k, v) in pairs(&entry) {
                    match k.as_bytes() {
                        Some(b"slots") => slots = entries(&v).collect(),
                        Some(b"nodes") => primary = entries(&v).any(|n| is_primary(&n)),
                        _ => {}
                    }
                }
                if primary {
                    total += slots
                        .chunks(2)
                        .map(|p| span(&p[0], &p[p.len() - 1]))
                        .sum::<usize>();
                }
            }
        }
    }
    total
}

fn entries<'a>(f: &Frame<'a>) -> impl Iterator<Item = Frame<'a>> {
    f.as_aggregate()
        .filter(|a| matches!(a.kind(), AggregateKind::Array | AggregateKind::Set))
        .into_iter()
        .flat_map(|a| a.iter())
}

fn pairs<'a>(f: &Frame<'a>) -> Vec<(Frame<'a>, Frame<'a>)> {
    let items: Vec<Frame<'a>> = match f.as_aggregate() {
        Some(a) if matches!(a.kind(), AggregateKind::Map | AggregateKind::Array) => {
            a.iter().collect()
        }
        _ => Vec::new(),
    };
    items.chunks_exact(2).map(|kv| (kv[0], kv[1])).collect()
}

fn is_primary(node: &Frame<'_>) -> bool {
    pairs(node).iter().any(|(k, v)| {
        k.as_bytes() == Some(b"role") && matches!(v.as_bytes(), Some(b"master" | b"primary"))
    })
}

fn int(f: &Frame<'_>) -> i64 {
    f.as_int()
        .or_else(|| std::str::from_utf8(f.as_bytes()?).ok()?.parse().ok())
        .unwrap_or(-1)
}

fn span(start: &Frame<'_>, end: &Frame<'_>) -> usize {
    usize::try_from(int(end) - int(start) + 1).unwrap_or(0)
}
