//! Parses raw replies captured from real 6-master / 6-replica clusters
//! (Redis 7.0 and Valkey 9.1; see tests/fixtures/capture_fixtures.py).

mod common;

use std::collections::BTreeSet;

use common::{fixture, golden};
use topology::{
    parse_topology_bytes, plan_rewire, Health, Layout, ParseOptions, SlotMap, TopologyCommand,
};

const SLOTS: TopologyCommand = TopologyCommand::ClusterSlots;
const SHARDS: TopologyCommand = TopologyCommand::ClusterShards;

fn parse(cmd: TopologyCommand, name: &str, opts: &ParseOptions<'_>) -> SlotMap {
    parse_topology_bytes(cmd, &fixture(name), opts).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Primaries and slot ownership only (health and offsets differ by
/// command), as runs of slots with their owner's id and address.
fn owners(m: &SlotMap) -> Vec<(std::ops::RangeInclusive<u16>, Option<String>)> {
    m.ranges()
        .into_iter()
        .map(|(r, o)| {
            let who = o.map(|i| {
                let p = &m.shards()[i].primary;
                format!("{}@{}", p.id, p.addr.as_ref().unwrap())
            });
            (r, who)
        })
        .collect()
}

fn replica_ids(m: &SlotMap) -> Vec<Vec<String>> {
    m.shards()
        .iter()
        .map(|s| s.replicas.iter().map(|r| r.id.clone()).collect())
        .collect()
}

#[test]
fn six_by_six_every_shape_agrees() {
    let opts = ParseOptions::default();
    for server in ["redis7", "valkey9"] {
        let base = parse(SLOTS, &format!("{server}_slots_resp2.bin"), &opts);
        assert_eq!(base.shards().len(), 6, "{server}");
        assert_eq!(base.unowned_count(), 0, "{server}");
        assert!(
            base.shards().iter().all(|s| s.replicas.len() == 1),
            "{server}"
        );
        assert_eq!(base.ranges().len(), 6, "{server}: contiguous ranges");
        for name in ["slots_resp3", "shards_resp2", "shards_resp3"] {
            let cmd = if name.starts_with("shards") {
                SHARDS
            } else {
                SLOTS
            };
            let other = parse(cmd, &format!("{server}_{name}.bin"), &opts);
            assert_eq!(owners(&other), owners(&base), "{server} {name}");
            assert_eq!(replica_ids(&other), replica_ids(&base), "{server} {name}");
            if cmd == SHARDS {
                for s in other.shards() {
                    assert_eq!(s.primary.health, Health::Online, "{server} {name}");
                    assert!(s.primary.replication_offset.is_some());
                    assert!(s.replicas.iter().all(|r| r.health == Health::Online));
                }
            }
        }
    }
}

#[test]
fn hostnames_are_used_only_when_asked() {
    for server in ["redis7", "valkey9"] {
        for (cmd, name) in [
            (SLOTS, "hostnames_slots_resp3"),
            (SHARDS, "hostnames_shards_resp3"),
        ] {
            let file = format!("{server}_{name}.bin");
            let by_ip = parse(cmd, &file, &ParseOptions::default());
            let by_name = parse(
                cmd,
                &file,
                &ParseOptions {
                    prefer_hostname: true,
                    ..Default::default()
                },
            );
            for (a, b) in by_ip.shards().iter().zip(by_name.shards()) {
                assert_eq!(a.primary.addr.as_ref().unwrap().host, "127.0.0.1", "{file}");
                let h = b.primary.hostname.as_deref().unwrap();
                assert!(h.starts_with("node") && h.ends_with(".test"), "{file}: {h}");
                assert_eq!(b.primary.addr.as_ref().unwrap().host, h, "{file}");
                assert_eq!(
                    a.primary.addr.as_ref().unwrap().port,
                    b.primary.addr.as_ref().unwrap().port
                );
            }
        }
    }
}

#[test]
fn failed_primary_keeps_its_slots_and_reports_failure() {
    let opts = ParseOptions::default();
    let parts = shardcore::Partitions::new(128).unwrap();
    let mut out = String::new();
    for server in ["redis7", "valkey9"] {
        // The state just before the kill (after the kill -9 failover capture).
        let healthy = parse(
            SHARDS,
            &format!("{server}_failover_shards_resp3.bin"),
            &opts,
        );
        let slots = parse(SLOTS, &format!("{server}_failed_slots_resp2.bin"), &opts);
        let shards = parse(SHARDS, &format!("{server}_failed_shards_resp3.bin"), &opts);
        // These servers still list the failed primary in CLUSTER SLOTS.
        assert_eq!(owners(&slots), owners(&healthy), "{server}");
        assert_eq!(owners(&shards), owners(&healthy), "{server}");
        // One failed primary owns slots (Redis 7.0 also lists the primary
        // killed earlier, failed and slot-less, in a shard of its own).
        let failed_owners: BTreeSet<usize> = (0..16384u16)
            .filter_map(|s| shards.owner_index(s))
            .filter(|&i| shards.shards()[i].primary.health == Health::Failed)
            .collect();
        assert_eq!(failed_owners.len(), 1, "{server}");
        // The capture killed the owner of slot 16383.
        assert_eq!(shards.owner(16383).unwrap().primary.health, Health::Failed);
        let before = Layout::compute(&healthy, &parts);
        let after = Layout::compute(&shards, &parts);
        let plan = plan_rewire(&before, &after);
        assert!(
            plan.is_empty(),
            "{server}: a failed primary that is still the owner moves nothing"
        );
        out += &format!("== {server}: before (CLUSTER SHARDS, RESP3)\n{before}\n");
        out += &format!("== {server}: owner of slot 16383 killed, no failover (CLUSTER SHARDS, RESP3)\n{after}\n");
        out += &format!("== plan\n{plan}\n");
    }
    golden("fixture_failed_primary", &out);
}

#[test]
fn six_by_six_layout_golden() {
    let parts = shardcore::Partitions::new(128).unwrap();
    let mut out = String::new();
    for server in ["redis7", "valkey9"] {
        let map = parse(
            SLOTS,
            &format!("{server}_slots_resp2.bin"),
            &ParseOptions::default(),
        );
        let layout = Layout::compute(&map, &parts);
        let counts: Vec<usize> = layout.nodes().iter().map(|n| n.partitions.len()).collect();
        assert_eq!(counts.iter().sum::<usize>(), 128);
        assert!(layout.unresolved().is_empty());
        // Balanced tags: every master gets 21 or 22 of the 128 partitions.
        assert!(
            counts.iter().all(|&c| (21..=22).contains(&c)),
            "{server}: {counts:?}"
        );
        out += &format!("== {server} CLUSTER SLOTS (RESP2), P = 128\n{map}\n{layout}\n");
    }
    golden("fixture_6x6_layout", &out);
}

#[test]
fn truncated_fixtures_are_incomplete_not_errors_in_the_middle() {
    let bytes = fixture("valkey9_shards_resp3.bin");
    for cut in [1, bytes.len() / 2, bytes.len() - 1] {
        let e = parse_topology_bytes(SHARDS, &bytes[..cut], &ParseOptions::default()).unwrap_err();
        assert_eq!(e.problem, topology::Problem::Incomplete, "cut at {cut}");
    }
}

#[test]
fn kill_9_failover_promotes_the_replica() {
    // Captured after SIGKILL of the owner of slot 8192 and the promotion of
    // its replica. Valkey 9 keeps the dead primary in the same shard, as a
    // second master with health `fail`; Redis 7.0 lists it in a shard of
    // its own with no slots. CLUSTER SLOTS no longer mentions it.
    let parts = shardcore::Partitions::new(128).unwrap();
    let opts = ParseOptions::default();
    let mut out = String::new();
    for server in ["redis7", "valkey9"] {
        let healthy = parse(SHARDS, &format!("{server}_shards_resp3.bin"), &opts);
        let slots = parse(SLOTS, &format!("{server}_failover_slots_resp2.bin"), &opts);
        let shards = parse(
            SHARDS,
            &format!("{server}_failover_shards_resp3.bin"),
            &opts,
        );
        assert_eq!(owners(&slots), owners(&shards), "{server}");
        let new_owner = shards.owner(8192).unwrap();
        assert_eq!(new_owner.primary.health, Health::Online, "{server}");
        // The new primary was the old one's replica.
        let old_owner = healthy.owner(8192).unwrap();
        assert_eq!(old_owner.replicas[0].id, new_owner.primary.id, "{server}");
        let (before, after) = (
            Layout::compute(&healthy, &parts),
            Layout::compute(&shards, &parts),
        );
        let plan = plan_rewire(&before, &after);
        assert_eq!(plan.open.len(), 1, "{server}");
        assert_eq!(plan.close.len(), 1, "{server}");
        assert_eq!(plan.open[0].id, new_owner.primary.id);
        assert_eq!(plan.close[0].id, old_owner.primary.id);
        let moved: Vec<u32> = plan.resubscribe.iter().map(|m| m.partition).collect();
        assert_eq!(
            moved,
            before.node(&plan.close[0]).unwrap().partitions,
            "{server}"
        );
        out += &format!("== {server}: after kill -9 of the owner of slot 8192 and failover (CLUSTER SHARDS, RESP3)\n{shards}\n{after}\n== plan from the healthy layout\n{plan}\n");
    }
    golden("fixture_kill9_failover", &out);
}
