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
