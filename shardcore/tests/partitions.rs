//! Partitions: tags, Redis channel names, the inverse mapping, errors.

use proptest::prelude::*;
use shardcore::{crc16, key_slot, PartitionError, Partitions};

#[test]
fn rejects_bad_counts_and_prefixes() {
    assert_eq!(Partitions::new(0), Err(PartitionError::InvalidCount(0)));
    assert_eq!(
        Partitions::new(16385),
        Err(PartitionError::InvalidCount(16385))
    );
    assert_eq!(
        Partitions::with_prefix(8, b"app{x:"),
        Err(PartitionError::PrefixHasBrace)
    );
    assert!(Partitions::with_prefix(8, b"app}:").is_ok());
    assert!(
        Partitions::new(1).is_ok()
            && Partitions::new(16384).is_ok()
            && Partitions::new(777).is_ok()
    );
    assert_eq!(
        PartitionError::InvalidCount(0).to_string(),
        "partition count 0 is outside 1..=16384"
    );
}

#[test]
fn tags_are_short_printable_and_hash_to_their_slot() {
    for p in [1, 2, 3, 100, 128, 1000, 4096, 16383, 16384] {
        let table = Partitions::new(p).expect("valid count");
        assert_eq!(table.count(), p);
        assert!(
            table.slots().windows(2).all(|w| w[0] < w[1]),
            "P={p}: slots strictly increase"
        );
        for k in 0..p {
            let tag = table.tag(k);
            assert!((1..=3).contains(&tag.len()), "P={p} k={k}");
            assert!(tag.iter().all(u8::is_ascii_alphanumeric), "P={p} k={k}");
            assert_eq!(crc16(tag) % 16384, table.slot(k));
            assert_eq!(table.partition_at_slot(table.slot(k)), Some(k));
        }
    }
}

/// An independent rebuild of the slot → shortest tag index: each slot's tag
/// is the first alphanumeric string, by length then alphabet order, that
/// hashes to it.
#[test]
fn baked_slot_tags_are_the_shortest_first_found() {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut first: Vec<Option<Vec<u8>>> = vec![None; 16384];
    let mut candidates: Vec<Vec<u8>> = vec![Vec::new()];
    for _ in 0..3 {
        candidates = candidates
            .iter()
            .flat_map(|c| ALPHABET.iter().map(move |&b| [c.as_slice(), &[b]].concat()))
            .collect();
        for c in &candidates {
            let slot = usize::from(key_slot(c));
            if first[slot].is_none() {
                first[slot] = Some(c.clone());
            }
        }
    }
    let table = Partitions::new(16384).expect("valid count");
    for (slot, tag) in first.iter().enumerate() {
        assert_eq!(Some(table.tag(slot as u32)), tag.as_deref(), "slot {slot}");
    }
}

#[test]
fn braces_in_user_channels_do_not_move_them() {
    let table = Partitions::with_prefix(128, b"app:").expect("valid");
    for ch in [
        &b"{"[..],
        b"}",
        b"{}",
        b"{x}",
        b"a{b}c",
        b"}{",
        b"{{}}",
        b"{room}.chat",
        b"",
    ] {
        let name = table.redis_channel(ch);
        let p = table.partition_of(ch);
        assert!(name.starts_with(b"app:{"));
        assert_eq!(key_slot(&name), table.slot(p), "{ch:?}");
        assert_eq!(table.user_channel(&name), Some((p, ch)), "{ch:?}");
    }
}

#[test]
fn user_channel_rejects_foreign_names() {
    let table = Partitions::new(128).expect("valid");
    let name = table.redis_channel(b"news");
    assert_eq!(table.user_channel(&name[1..]), None, "no opening brace");
    let mut no_dot = name.clone();
    let dot = no_dot.iter().position(|&b| b == b'.').expect("has dot");
    no_dot[dot] = b':';
    assert_eq!(table.user_channel(&no_dot), None);
    // Same shape, another partition's tag.
    let p = table.partition_of(b"news");
    let other = table.tag((p + 1) % 128);
    let forged = [b"{", other, b"}.news"].concat();
    assert_eq!(table.user_channel(&forged), None);
    assert_eq!(table.user_channel(b"{zzzz}.news"), None, "tag too long");
    let prefixed = Partitions::with_prefix(128, b"x:").expect("valid");
    assert_eq!(prefixed.user_channel(&name), None, "missing prefix");
}

#[test]
fn redis_channel_into_appends_without_allocating() {
    let table = Partitions::with_prefix(1024, b"p.").expect("valid");
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"keep|");
    let ptr = out.as_ptr();
    table.redis_channel_into(b"sports", &mut out);
    assert_eq!(out.as_ptr(), ptr, "reused the buffer");
    assert!(out.starts_with(b"keep|p.{") && out.ends_with(b"}.sports"));
}

proptest! {
    #[test]
    fn any_channel_round_trips(
        count in 1u32..=16384,
        prefix in proptest::collection::vec(any::<u8>().prop_filter("no {", |b| *b != b'{'), 0..8),
        channel in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let table = Partitions::with_prefix(count, &prefix).expect("valid");
        let p = table.partition_of(&channel);
        prop_assert!(p < count);
        let name = table.redis_channel(&channel);
        prop_assert_eq!(key_slot(&name), table.slot(p));
        prop_assert_eq!(table.user_channel(&name), Some((p, channel.as_slice())));
    }
}

/// A partitioned table whose `room:` channels keep their names.
fn mixed(count: u32, prefix: &[u8]) -> Partitions {
    Partitions::with_prefix(count, prefix)
        .and_then(|t| t.raw_prefix(b"room:"))
        .expect("valid")
}

#[test]
fn raw_prefixes_keep_names_on_lanes_after_the_partitions() {
    for prefix in [&b""[..], b"app:"] {
        let table = mixed(128, prefix);
        assert_eq!((table.tagged_count(), table.count()), (128, 128 + 16384));
        assert!(!table.is_raw());
        for ch in [&b"room:1"[..], b"room:", b"room:{x}7", b"room:\xff"] {
            let name = table.redis_channel(ch);
            assert_eq!(name, [prefix, ch].concat(), "{ch:?}");
            let p = table.partition_of(ch);
            assert_eq!(p, 128 + u32::from(key_slot(&name)), "{ch:?}");
            assert_eq!(table.slot(p), key_slot(&name), "{ch:?}");
            assert_eq!(table.user_channel(&name), Some((p, ch)), "{ch:?}");
        }
        // Everything else is partitioned exactly as without raw prefixes.
        let plain = Partitions::with_prefix(128, prefix).expect("valid");
        for ch in [&b"news:1"[..], b"room", b"roo", b"Room:1", b"", b"{room:}1"] {
            let p = table.partition_of(ch);
            assert_eq!(p, plain.partition_of(ch), "{ch:?}");
            assert_eq!(table.redis_channel(ch), plain.redis_channel(ch), "{ch:?}");
            assert_eq!(table.user_channel(&plain.redis_channel(ch)), Some((p, ch)));
            assert_eq!(table.user_channel(&[prefix, ch].concat()), None, "{ch:?}");
        }
    }
}

#[test]
fn raw_prefix_lanes_hold_every_slot_once() {
    let table = mixed(100, b"");
    let plain = Partitions::new(100).expect("valid");
    let slots = table.slots();
    assert_eq!(slots.get(..100), Some(plain.slots()));
    assert!(slots[100..].iter().copied().eq(0..16384));
    for k in 0..100 {
        assert_eq!(table.partition_at_slot(table.slot(k)), Some(k));
    }
    // Only the tagged partitions are found by slot.
    let free = (0..16384)
        .find(|s| !plain.slots().contains(s))
        .expect("a free slot");
    assert_eq!(table.partition_at_slot(free), None);
    // Each range holds its tagged partitions plus one lane per slot.
    let ranges = shardcore::cluster_create_ranges(3);
    let with = table.counts_per_range(&ranges);
    let without = plain.counts_per_range(&ranges);
    for ((r, a), b) in ranges.iter().zip(with).zip(without) {
        assert_eq!(a, b + u32::from(r.end() - r.start()) + 1, "{r:?}");
    }
    // The wire heads: a tag for a partition, the prefix alone for a slot lane.
    let mut head = Vec::new();
    mixed(100, b"app:").redis_channel_at(100 + 7, b"", &mut head);
    assert_eq!(head, b"app:");
}

#[test]
fn a_tagged_name_of_a_raw_channel_is_foreign() {
    let table = mixed(128, b"");
    let plain = Partitions::new(128).expect("valid");
    // An instance without the raw prefix names `room:1` with a tag: this
    // table subscribes the plain name, so that one is not its own.
    assert_eq!(table.user_channel(&plain.redis_channel(b"room:1")), None);
    assert_eq!(table.user_channel(b"other:1"), None);
}

#[test]
fn raw_prefixes_are_refused_where_they_mean_nothing() {
    let table = Partitions::new(8).expect("valid");
    assert_eq!(
        table.clone().raw_prefix(b""),
        Err(PartitionError::RawPrefixEmpty)
    );
    assert_eq!(
        table.clone().raw_prefix(b"room{"),
        Err(PartitionError::RawPrefixHasBrace)
    );
    assert_eq!(
        Partitions::raw(b"").and_then(|t| t.raw_prefix(b"room:")),
        Err(PartitionError::RawPrefixOnRaw)
    );
    assert!(PartitionError::RawPrefixHasBrace.to_string().contains('{'));
    // Order and repeats do not matter.
    let a = table
        .clone()
        .raw_prefix(b"a:")
        .and_then(|t| t.raw_prefix(b"b:"));
    let b = table
        .raw_prefix(b"b:")
        .and_then(|t| t.raw_prefix(b"a:"))
        .and_then(|t| t.raw_prefix(b"b:"));
    assert_eq!(a, b);
    let a = a.expect("valid");
    assert_eq!(a.raw_prefixes().collect::<Vec<_>>(), [&b"a:"[..], b"b:"]);
    assert_eq!(a.count(), 8 + 16384);
}

/// The first `room:N` whose Redis name (`prefix` + it) hashes to `slot`.
fn room_at_slot(prefix: &[u8], slot: u16) -> Vec<u8> {
    (0u32..)
        .map(|n| format!("room:{n}").into_bytes())
        .find(|ch| key_slot(&[prefix, ch].concat()) == slot)
        .expect("some room:N hashes to every slot")
}

/// The lanes at the boundaries: the first slot lane (P, slot 0) comes
/// right after the last tagged partition, the last (P + 16383) ends the
/// table. An off-by-one there tags a kept name or keeps a tagged one.
#[test]
fn raw_names_at_slots_0_and_16383_keep_their_names_on_the_boundary_lanes() {
    for (count, prefix) in [(128, &b""[..]), (128, b"app:"), (1, b""), (16384, b"x")] {
        let table = mixed(count, prefix);
        for (slot, lane) in [(0u16, count), (16383, count + 16383)] {
            let ch = room_at_slot(prefix, slot);
            let name = table.redis_channel(&ch);
            let text = |b: &[u8]| b.escape_ascii().to_string();
            let at = format!(
                "P={count} prefix {:?} slot {slot} ({})",
                text(prefix),
                text(&ch)
            );
            assert_eq!(
                text(&name),
                text(&[prefix, &ch].concat()),
                "{at}: the name is kept"
            );
            assert_eq!(table.partition_of(&ch), lane, "{at}");
            assert_eq!(table.slot(lane), slot, "{at}");
            assert_eq!(key_slot(&name), slot, "{at}");
            assert_eq!(table.user_channel(&name), Some((lane, &ch[..])), "{at}");
            let mut head = Vec::new();
            table.redis_channel_at(lane, b"", &mut head);
            assert_eq!(
                head, prefix,
                "{at}: the lane's wire head is the prefix alone"
            );
        }
        // The last tagged partition, right before them, stays tagged.
        let mut head = Vec::new();
        table.redis_channel_at(count - 1, b"", &mut head);
        assert!(
            head.starts_with(&[prefix, b"{"].concat()),
            "P={count}: {head:?}"
        );
    }
}

/// A channel for the proptest below: any bytes, or (half the time) the raw
/// prefix and a suffix, which is either any bytes or a hash tag that pins
/// its slot to one of the boundary lanes' (0, 16383) or any slot.
fn raw_test_channel(raw: &[u8], kind: u8, slot: u16, suffix: &[u8]) -> Vec<u8> {
    let tags = Partitions::new(16384).expect("valid");
    let pinned = |slot: u16| [raw, b"{", tags.tag(u32::from(slot)), b"}", suffix].concat();
    match kind % 8 {
        0..=3 => suffix.to_vec(),
        4 => [raw, suffix].concat(),
        5 => pinned(0),
        6 => pinned(16383),
        _ => pinned(slot),
    }
}

proptest! {
    #[test]
    fn any_channel_round_trips_with_raw_prefixes(
        count in 1u32..=16384,
        prefix in proptest::collection::vec(any::<u8>().prop_filter("no {", |b| *b != b'{'), 0..4),
        raw in proptest::collection::vec(any::<u8>().prop_filter("no {", |b| *b != b'{'), 1..3),
        kind in any::<u8>(),
        slot in 0u16..16384,
        suffix in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let table = Partitions::with_prefix(count, &prefix)
            .and_then(|t| t.raw_prefix(&raw))
            .expect("valid");
        let channel = raw_test_channel(&raw, kind, slot, &suffix);
        let p = table.partition_of(&channel);
        prop_assert!(p < table.count());
        prop_assert_eq!(p >= count, channel.starts_with(&raw));
        let name = table.redis_channel(&channel);
        prop_assert_eq!(key_slot(&name), table.slot(p));
        if p >= count {
            prop_assert_eq!(&name, &[prefix.as_slice(), &channel].concat(), "a kept name");
            prop_assert_eq!(p, count + u32::from(key_slot(&name)));
        }
        prop_assert_eq!(table.user_channel(&name), Some((p, channel.as_slice())));
    }
}
