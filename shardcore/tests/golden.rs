//! Golden vectors: these functions decide where every channel of a live fleet
//! lives, so any change to their outputs must fail here, loudly. The channel
//! hash and jump hash vectors were cross-checked against an independent
//! Python implementation of the same specifications.

use shardcore::{
    channel_hash, crc16, fnv1a64, jump_consistent_hash, key_slot, shard_of, worker_of, Partitions,
};

/// FNV-1a 64 over every tag of every power-of-two table, each tag followed
/// by `\n`, each table followed by `#`, P = 1, 2, 4, …, 16384.
const TABLES_FNV: u64 = 0xfcad_a770_b536_1459;

#[test]
fn every_generated_table_is_pinned() {
    let mut bytes = Vec::new();
    let mut p = 1;
    while p <= 16384 {
        let table = Partitions::new(p).expect("power of two in range");
        for k in 0..p {
            bytes.extend_from_slice(table.tag(k));
            bytes.push(b'\n');
        }
        bytes.push(b'#');
        p *= 2;
    }
    assert_eq!(
        fnv1a64(&bytes),
        TABLES_FNV,
        "a tag table changed: this would re-map live fleets"
    );
}

#[test]
fn explicit_tags() {
    let cases: &[(u32, u32, &[u8], u16)] = &[
        (128, 0, b"5n3", 64),
        (128, 1, b"2KV", 192),
        (128, 2, b"69L", 320),
        (128, 63, b"4So", 8128),
        (128, 64, b"5L7", 8256),
        (128, 127, b"45c", 16320),
        (16384, 0, b"06S", 0),
        (16384, 1, b"Qi", 1),
        (16384, 8191, b"6xN", 8191),
        (16384, 16383, b"6ZJ", 16383),
        (1000, 0, b"0QG", 8),
        (1000, 999, b"5I5", 16375),
    ];
    for &(count, p, tag, slot) in cases {
        let table = Partitions::new(count).expect("valid count");
        assert_eq!(table.tag(p), tag, "P={count} partition {p}");
        assert_eq!(table.slot(p), slot, "P={count} partition {p}");
        assert_eq!(crc16(tag) % 16384, slot);
    }
}

#[test]
fn channel_vectors() {
    // channel, fnv1a64, channel_hash, partition at P=128, 1024, 1000,
    // shard_of(8), worker_of(16)
    type Row = (&'static [u8], u64, u64, [u32; 3], u32, u32);
    let rows: &[Row] = &[
        (
            b"",
            0xcbf2_9ce4_8422_2325,
            0xefd0_1f60_ba99_2926,
            [119, 959, 936],
            1,
            11,
        ),
        (
            b"news",
            0xe549_5bba_a03a_6526,
            0x5125_38bf_a8bf_202f,
            [40, 324, 316],
            3,
            6,
        ),
        (
            b"sports",
            0xa1a9_a8be_7af7_d8fa,
            0xbed2_1bad_28bf_3c3b,
            [95, 763, 745],
            6,
            9,
        ),
        (
            b"user:42",
            0x6c15_1ea4_dcd2_21c2,
            0x9988_17be_e671_8248,
            [76, 614, 599],
            0,
            11,
        ),
        (
            b"chat:{room}",
            0x9b1c_4d38_4b39_b892,
            0x21b4_2191_8067_19cf,
            [16, 134, 131],
            2,
            7,
        ),
        (
            b"\x00\xff",
            0x0831_c907_b4ea_2b60,
            0xacb6_4f88_d28b_68b8,
            [86, 690, 674],
            5,
            5,
        ),
    ];
    let tables = [128, 1024, 1000].map(|p| Partitions::new(p).expect("valid count"));
    for &(ch, fnv, hash, parts, shard, worker) in rows {
        assert_eq!(fnv1a64(ch), fnv, "{ch:?}");
        assert_eq!(channel_hash(ch), hash, "{ch:?}");
        for (table, want) in tables.iter().zip(parts) {
            assert_eq!(table.partition_of(ch), want, "{ch:?} P={}", table.count());
        }
        assert_eq!(shard_of(ch, 8), shard, "{ch:?}");
        assert_eq!(worker_of(ch, 16), worker, "{ch:?}");
    }
    assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn jump_vectors() {
    let buckets = [1, 2, 10, 1000, 1 << 20];
    let rows: &[(u64, [u32; 5])] = &[
        (0, [0, 0, 0, 0, 0]),
        (1, [0, 0, 6, 555, 549_949]),
        (0xdead_beef, [0, 1, 7, 525, 997_888]),
        (u64::MAX, [0, 1, 9, 276, 837_000]),
    ];
    for &(key, want) in rows {
        assert_eq!(
            buckets.map(|n| jump_consistent_hash(key, n)),
            want,
            "key {key:#x}"
        );
    }
    assert_eq!(jump_consistent_hash(1, 0), 0, "zero buckets act as one");
}

#[test]
fn key_slot_vectors() {
    let rows: &[(&[u8], u16)] = &[
        (b"123456789", 0x31C3), // crc16 below 16384: the slot is the CRC
        (b"foo", 12182),
        (b"{user1000}.following", 3443),
        (b"{user1000}.followers", 3443),
        (b"\xff{}x", 8896),
    ];
    for &(key, slot) in rows {
        assert_eq!(key_slot(key), slot, "{key:?}");
    }
}
