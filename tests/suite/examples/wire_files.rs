//! The wire format's exported files that need shardsub itself (beside
//! `shardcore`'s, checked by `shardcore/tests/wire_files.rs`): the history
//! keys of a recoverable channel, the bytes a publisher puts in front of a
//! payload (history header, lag envelope), what a subscriber strips from
//! what it receives, and the SHA-1 of each history script. Computed here
//! from the code (`history::keys_into`, `history::header`,
//! `pubsub::envelope`, `history::script`) and compared with the files; a
//! file that differs fails (`SHARDSUB_BLESS=1` writes a new one). No
//! server: `examples::wire_python` recomputes every column from
//! `WIRE_FORMAT.md`.

use std::fmt::Write as _;

use shardcore::{key_slot, Partitions};
use shardsub::history::{header, keys_into, script, Position};
use shardsub::pubsub::envelope;
use testkit::wire_files::{check, dir, hex};

/// The channel names of every vector file: `vectors.tsv`'s first column.
fn names() -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(dir().join("vectors.tsv")).expect("vectors.tsv");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| unhex(l.split('\t').next().unwrap_or_default()))
        .collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// The partition counts of `vectors-history-keys.tsv`; 0 stands for the
/// servers' placements (one server, N shards), where the base is the
/// channel itself.
const HISTORY_COUNTS: [u32; 3] = [0, 128, 1000];

/// Per channel and placement: the base, the stream and meta keys, and
/// their key slots.
fn history_keys() -> String {
    let mut out = String::from(
        "# shardsub history keys: channel (hex), P (0: one server or N shards), base (hex), \
         stream key (hex), its key slot, meta key (hex), its key slot\n",
    );
    for p in HISTORY_COUNTS {
        let parts = (p > 0).then(|| Partitions::new(p).expect("count in range"));
        for n in names() {
            let base = parts
                .as_ref()
                .map_or_else(|| n.clone(), |t| t.redis_channel(&n));
            let (mut meta, mut stream) = (Vec::new(), Vec::new());
            keys_into(&base, &mut meta, &mut stream);
            let _ = writeln!(
                out,
                "{}\t{p}\t{}\t{}\t{}\t{}\t{}",
                hex(&n),
                hex(&base),
                hex(&stream),
                key_slot(&stream),
                hex(&meta),
                key_slot(&meta),
            );
        }
    }
    out
}

/// What a publisher sends: the history header (a recoverable channel;
/// the script writes it), then the lag envelope (when on), then the
/// application's payload.
fn payloads() -> String {
    let mut out = String::from(
        "# shardsub message payloads: position epoch.offset (- when not recoverable), \
         envelope time in µs (- when off), application payload (hex), message payload (hex)\n",
    );
    let positions = [
        None,
        Some((1_765_000_000_123_456, 1)),
        Some((17_650_000_001_234_561, 42)),
        Some((u64::MAX, u64::MAX)),
    ];
    let times = [None, Some(0), Some(1_765_000_000_654_321), Some(u64::MAX)];
    let apps: [&[u8]; 3] = [b"", b"hello", b"\0SH1\0SS1\n\xff"];
    for at in positions {
        for sent in times {
            for app in apps {
                let mut inner = Vec::new();
                match sent {
                    Some(t) => envelope::encode_into(&mut inner, app, t),
                    None => inner.extend_from_slice(app),
                }
                let mut wire = Vec::new();
                match at {
                    Some((epoch, offset)) => {
                        header::encode_into(&mut wire, Position { epoch, offset }, &inner)
                    }
                    None => wire = inner,
                }
                let _ = writeln!(
                    out,
                    "{}\t{}\t{}\t{}",
                    at.map_or("-".into(), |(e, o)| format!("{e}.{o}")),
                    sent.map_or("-".into(), |t| t.to_string()),
                    hex(app),
                    hex(&wire),
                );
            }
        }
    }
    out
}

/// Received payloads, well and badly formed: leading zeros, zero, the
/// largest and one past, too many digits, signs, blanks, a missing or
/// `\r\n` end, the header and envelope in the wrong order or twice.
fn received() -> Vec<Vec<u8>> {
    let env = |t: u64, rest: &[u8]| {
        let mut v = Vec::new();
        envelope::encode_into(&mut v, rest, t);
        v
    };
    let cat = |a: &[u8], b: &[u8]| [a, b].concat();
    let plain: Vec<&[u8]> = vec![
        b"",
        b"hello",
        b"\0SH11.1\n",
        b"\0SH11765000000123456.1\nhello",
        b"\0SH117650000001234561.42\nhello",
        b"\0SH1007.08\nhello",
        b"\0SH10.0\nhello",
        b"\0SH100000000000000000001.00000000000000000001\nx",
        b"\0SH1000000000000000000001.1\nx",
        b"\0SH11.000000000000000000001\nx",
        b"\0SH118446744073709551615.18446744073709551615\nx",
        b"\0SH118446744073709551616.1\nx",
        b"\0SH11.18446744073709551616\nx",
        b"\0SH1",
        b"\0SH1.1\nx",
        b"\0SH11.\nx",
        b"\0SH11.1",
        b"\0SH11.1x",
        b"\0SH11.1\r\nx",
        b"\0SH11x.1\nx",
        b"\0SH1-1.1\nx",
        b"\0SH1+1.1\nx",
        b"\0SH1 1.1\nx",
        b"\0SH11,1\nx",
        b"\0SH21.1\nx",
        b"SH11.1\nx",
        b"\0SS1",
        b"\0SS1\x01\x02\x03\x04\x05\x06\x07",
        b"\0SS2\x01\x02\x03\x04\x05\x06\x07\x08x",
    ];
    let mut all: Vec<Vec<u8>> = plain.into_iter().map(<[u8]>::to_vec).collect();
    all.push(env(1_765_000_000_654_321, b"hello"));
    all.push(env(0, b""));
    all.push(cat(b"\0SH19.3\n", &env(1_765_000_000_654_321, b"hello")));
    all.push(cat(b"\0SH19.3\n", b"\0SS1\x01\x02\x03\x04\x05\x06\x07"));
    all.push(env(1, b"\0SH19.3\nhello"));
    all.push(cat(b"\0SH19.3\n", b"\0SH19.4\nhello"));
    all.push(cat(b"\0SH19.3\n", &env(2, &env(3, b"hello"))));
    all
}

/// What a subscriber strips from each received payload, for each of its
/// settings: the header when the channel is recoverable for it, then the
/// envelope when it has envelopes on (the order of the subscribe side,
/// `control_loop::dispatch`).
fn stripped() -> String {
    let mut out = String::from(
        "# shardsub received payloads: recoverable for the subscriber (1/0), envelope on (1/0), \
         message payload (hex), position stripped (epoch.offset, - for none), envelope time \
         stripped (µs, - for none), payload delivered (hex)\n",
    );
    for recoverable in [false, true] {
        for enveloped in [false, true] {
            for msg in received() {
                let (at, rest) = match recoverable.then(|| header::decode(&msg)).flatten() {
                    Some((at, rest)) => (Some(at), rest),
                    None => (None, &msg[..]),
                };
                let (sent, rest) = match enveloped.then(|| envelope::decode(rest)).flatten() {
                    Some((t, rest)) => (Some(t), rest),
                    None => (None, rest),
                };
                let _ = writeln!(
                    out,
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    u8::from(recoverable),
                    u8::from(enveloped),
                    hex(&msg),
                    at.map_or("-".into(), |p| format!("{}.{}", p.epoch, p.offset)),
                    sent.map_or("-".into(), |t| t.to_string()),
                    hex(rest),
                );
            }
        }
    }
    out
}

/// Each history script's file (`src/history/`) and the SHA-1 that
/// `EVALSHA` names it by (the servers' own, checked by
/// `history::basics::the_scripts_hashes_are_what_the_servers_compute`).
fn scripts() -> String {
    format!(
        "# shardsub history scripts: file (in src/history), SHA-1 of its bytes (hex)\n\
         publish.lua\t{}\nread.lua\t{}\n",
        script::PUBLISH_SHA,
        script::READ_SHA,
    )
}

#[test]
fn the_exported_history_and_payload_vectors_are_the_code_s() {
    check("vectors-history-keys.tsv", &history_keys());
    check("vectors-payloads.tsv", &payloads());
    check("vectors-strip.tsv", &stripped());
    check("vectors-scripts.tsv", &scripts());
}
