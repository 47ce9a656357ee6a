//! The wire format's exported files (`shardcore/wire/`, described in
//! `WIRE_FORMAT.md`) are what the code computes: the tag table of every
//! power-of-two partition count up to 4096, and the test vectors other
//! implementations check themselves against (the channel placements
//! here; the history keys, payload bytes and script hashes in the suite's
//! `examples::wire_files`). A file that differs fails
//! here; `SHARDSUB_BLESS=1 cargo test -p shardsub-shardcore --test
//! wire_files` rewrites them (which must only ever happen for a new file:
//! a changed table would move live channels).

use std::fmt::Write as _;

use shardcore::{channel_hash, key_slot, shard_of, worker_of, Partitions};
use testkit::wire_files::{check, hex};

/// `partition<TAB>slot<TAB>tag`, one line per partition, after a header.
fn table(p: u32) -> String {
    let parts = Partitions::new(p).expect("count in range");
    let mut out = format!("# shardsub partition tags, P = {p}: partition, slot, tag\n");
    for k in 0..p {
        let tag = String::from_utf8_lossy(parts.tag(k));
        let _ = writeln!(out, "{k}\t{}\t{tag}", parts.slot(k));
    }
    out
}

/// Channel names and what every implementation must compute for them.
fn vectors() -> String {
    let mut out = String::from(
        "# shardsub wire vectors: channel (hex), channel_hash (hex), partition of 128, \
         server name in 128 partitions (hex), its key slot, shard of 3, shard of 10, worker of 4\n",
    );
    let parts = Partitions::new(128).expect("128");
    for n in names() {
        let wire = parts.redis_channel(&n);
        let _ = writeln!(
            out,
            "{}\t{:016x}\t{}\t{}\t{}\t{}\t{}\t{}",
            hex(&n),
            channel_hash(&n),
            parts.partition_of(&n),
            hex(&wire),
            key_slot(&wire),
            shard_of(&n, 3),
            shard_of(&n, 10),
            worker_of(&n, 4),
        );
    }
    out
}

/// The channel names of every vector file.
fn names() -> Vec<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = vec![b"".to_vec(), b"a".to_vec(), b"news".to_vec()];
    names.extend((0..40).map(|i| format!("room:{i}").into_bytes()));
    names.push(b"{braces}.in.name".to_vec());
    names.push("çà unicode ✓".as_bytes().to_vec());
    names.push((0u8..=255).collect());
    names
}

/// The partition counts of `vectors-partitions.tsv`: one, not a power of
/// two, the default, neither, and the largest exported table.
const PARTITION_COUNTS: [u32; 5] = [1, 3, 128, 1000, 4096];

/// The server and worker counts of `vectors-shards.tsv` (0 is treated as
/// 1).
const SHARD_COUNTS: [u32; 6] = [0, 1, 2, 3, 10, 1024];

/// Per channel and partition count: the partition, its tag and slot, and
/// the server name with its key slot.
fn partition_vectors() -> String {
    let mut out = String::from(
        "# shardsub wire vectors per partition count: channel (hex), P, partition, tag, \
         partition's slot, server name (hex), its key slot\n",
    );
    for p in PARTITION_COUNTS {
        let parts = Partitions::new(p).expect("count in range");
        for n in names() {
            let k = parts.partition_of(&n);
            let wire = parts.redis_channel(&n);
            let _ = writeln!(
                out,
                "{}\t{p}\t{k}\t{}\t{}\t{}\t{}",
                hex(&n),
                String::from_utf8_lossy(parts.tag(k)),
                parts.slot(k),
                hex(&wire),
                key_slot(&wire),
            );
        }
    }
    out
}

/// The raw-prefix sets of `vectors-raw.tsv`, each with its P: one prefix
/// that some `room:` names start with; several, one inside another, one
/// of non-ASCII bytes (the every-byte name starts with it).
const RAW_SETS: [(u32, &[&[u8]]); 2] = [
    (128, &[b"room:1"]),
    (1000, &[b"room:", b"room:2", b"news", b"\x00\x01"]),
];

/// Partitions off (`Partitions::raw`): every channel keeps its name, and
/// its lane is that name's key slot.
fn kept_vectors() -> String {
    let mut out = String::from(
        "# shardsub wire vectors, partitions off (names kept): channel (hex), \
         server name (hex), its key slot, lane\n",
    );
    let parts = Partitions::raw(b"").expect("no prefix");
    for n in names() {
        let wire = parts.redis_channel(&n);
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}",
            hex(&n),
            hex(&wire),
            key_slot(&wire),
            parts.partition_of(&n),
        );
    }
    out
}

/// Raw prefixes (`Partitions::raw_prefix`) beside P tagged partitions:
/// whether the channel keeps its name, its lane, its server name and that
/// name's key slot.
fn raw_vectors() -> String {
    let mut out = String::from(
        "# shardsub wire vectors with raw prefixes: channel (hex), P, raw prefixes \
         (hex, comma-separated), keeps its name (1/0), lane, server name (hex), its key slot\n",
    );
    for (p, raws) in RAW_SETS {
        let parts = raws
            .iter()
            .try_fold(Partitions::new(p).expect("count in range"), |t, r| {
                t.raw_prefix(r)
            })
            .expect("valid raw prefixes");
        let listed: Vec<String> = raws.iter().map(|r| hex(r)).collect();
        for n in names() {
            let wire = parts.redis_channel(&n);
            let _ = writeln!(
                out,
                "{}\t{p}\t{}\t{}\t{}\t{}\t{}",
                hex(&n),
                listed.join(","),
                u8::from(parts.keeps_name(&n)),
                parts.partition_of(&n),
                hex(&wire),
                key_slot(&wire),
            );
        }
    }
    out
}

/// Per channel and count: `shard_of` and `worker_of`.
fn shard_vectors() -> String {
    let mut out = String::from(
        "# shardsub wire vectors per server count: channel (hex), N, shard_of(N), worker_of(N)\n",
    );
    for count in SHARD_COUNTS {
        for n in names() {
            let _ = writeln!(
                out,
                "{}\t{count}\t{}\t{}",
                hex(&n),
                shard_of(&n, count),
                worker_of(&n, count),
            );
        }
    }
    out
}

#[test]
fn the_exported_tag_tables_are_the_code_s() {
    let mut p = 1;
    while p <= 4096 {
        check(&format!("tags-{p}.tsv"), &table(p));
        p *= 2;
    }
}

#[test]
fn the_exported_vectors_are_the_code_s() {
    check("vectors.tsv", &vectors());
    check("vectors-partitions.tsv", &partition_vectors());
    check("vectors-shards.tsv", &shard_vectors());
    check("vectors-kept.tsv", &kept_vectors());
    check("vectors-raw.tsv", &raw_vectors());
}
