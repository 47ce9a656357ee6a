//! Every committed seed passes its target's checks; `write_seeds` (run with
//! `cargo test -- --ignored write_seeds`) regenerates the seeds built from
//! schedules and from the real-server captures in `resp/tests/data` and
//! `topology/tests/fixtures`.

use std::path::{Path, PathBuf};

use crate::conn::{op, FRAMES};

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

fn each_seed(target: &str, min: usize, check: impl Fn(&[u8])) {
    let mut n = 0;
    for entry in std::fs::read_dir(corpus(target)).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        eprintln!("{}", path.display());
        check(&data);
        n += 1;
    }
    assert!(n >= min, "{target}: {n} seeds");
}

#[test]
fn parse_seeds_pass() {
    for target in ["parse_whole", "parse_chunked"] {
        each_seed(target, 24, |data| {
            crate::check_whole(data);
            if let Some((&size, rest)) = data.split_first() {
                crate::check_chunked(rest, usize::from(size % 64) + 1);
            }
        });
    }
}

#[test]
fn conn_seeds_pass() {
    each_seed("conn_core", 10, crate::conn::check);
}

#[test]
fn topology_seeds_pass() {
    each_seed("topology_reply", 10, crate::topo::check);
}

#[test]
fn rewire_seeds_pass() {
    each_seed("rewire_plan", 8, crate::rewire::check);
}

#[test]
fn history_seeds_pass() {
    each_seed("history_header", 4, crate::history::check);
}

#[test]
fn publish_seeds_pass() {
    each_seed("publish_side", 4, crate::publish::check);
}

#[test]
fn control_seeds_pass() {
    each_seed("control_core", 4, crate::control::check);
}

/// Inputs saved from fuzz findings (`regressions/<target>/`) pass.
#[test]
fn regressions_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    for (target, check) in [
        ("conn_core", crate::conn::check as fn(&[u8])),
        ("topology_reply", crate::topo::check),
        ("rewire_plan", crate::rewire::check),
        ("control_core", crate::control::check),
    ] {
        let Ok(entries) = std::fs::read_dir(dir.join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            eprintln!("{}", path.display());
            check(&std::fs::read(path).unwrap());
        }
    }
}

/// Every schedule op on an empty or junk input: no false alarm.
#[test]
fn short_inputs_pass() {
    for a in 0..=255u8 {
        crate::conn::check(&[a, a.rotate_left(3), a % crate::conn::OPS, a, a]);
        crate::topo::check(&[a, b'*', b'1', b'\r', b'\n', a]);
        crate::rewire::check(&[a, a, a, a, a, a, a, a]);
    }
    for a in (0..=255u8).step_by(17) {
        crate::control::check(&[a, a, a, a, a, a, a, a, a, a, a, a]);
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn raw(s: &mut Vec<u8>, bytes: &[u8]) {
    for chunk in bytes.chunks(255) {
        s.extend([op::RAW, chunk.len() as u8]);
        s.extend_from_slice(chunk);
    }
}

fn frame(s: &mut Vec<u8>, wire: &[u8]) {
    let i = FRAMES
        .iter()
        .position(|f| *f == wire)
        .expect("a canned frame");
    s.extend([op::FRAME, i as u8]);
}

const HELLO: &[u8] = b"%1\r\n$6\r\nserver\r\n$5\r\nredis\r\n";
const WRITE_ALL: [u8; 3] = [op::WRITE, 0xff, 0xff];
const DELIVER_ALL: [u8; 3] = [op::DELIVER, 0, 0];

/// Schedules for `conn_core`: handshakes, replies in small chunks,
/// subscriptions with real-server confirmations, timeouts, failures.
fn conn_seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    // RESP3, four requests answered in 5-byte reads, an attributed reply.
    let mut s = vec![0, 0];
    s.extend(WRITE_ALL);
    frame(&mut s, HELLO);
    s.extend(DELIVER_ALL);
    s.extend([op::SUBMIT, 3, 0, 1, 0, 1]);
    s.extend(WRITE_ALL);
    for f in [
        &b"+OK\r\n"[..],
        b":1\r\n",
        b"$1\r\nx\r\n",
        b"|1\r\n+key\r\n:7\r\n+OK\r\n",
    ] {
        frame(&mut s, f);
    }
    for _ in 0..12 {
        s.extend([op::DELIVER, 5, 0]);
    }
    out.push(("resp3_replies".to_string(), s));

    // Real Pub/Sub captures on a RESP3 Subscribe connection, 3-byte reads,
    // after SSUBSCRIBE / SUBSCRIBE requests of one or two confirmations.
    let data = root().join("resp/tests/data/valkey-9.1");
    for name in [
        "ssubscribe",
        "subscribe",
        "smessage",
        "unsubscribe_all",
        "ping_subscribed",
    ] {
        let bytes = std::fs::read(data.join(format!("{name}.resp"))).unwrap();
        let mut s = vec![2, 0];
        s.extend(WRITE_ALL);
        frame(&mut s, HELLO);
        s.extend(DELIVER_ALL);
        s.extend([op::SUBMIT, 1, 4, 0x12, op::WRITE, 0xff, 0xff]);
        raw(&mut s, &bytes);
        for _ in 0..bytes.len() / 3 + 1 {
            s.extend([op::DELIVER, 3, 0]);
        }
        s.extend([op::PUMP]);
        out.push((format!("resp3_{name}"), s));
    }
    // The same in RESP2 (no handshake): confirmations and messages are arrays.
    let data = root().join("resp/tests/data/redis-7.0");
    for name in [
        "resp2_subscribe",
        "resp2_unsubscribe",
        "resp2_ping_subscribed",
    ] {
        let bytes = std::fs::read(data.join(format!("{name}.resp"))).unwrap();
        let mut s = vec![3, 0];
        s.extend([op::SUBMIT, 0, 2, op::WRITE, 0xff, 0xff]);
        raw(&mut s, &bytes);
        s.extend([
            op::READ,
            7,
            0,
            op::PUMP,
            op::SUBMIT,
            0,
            0,
            op::WRITE,
            0xff,
            0xff,
        ]);
        frame(&mut s, b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
        s.extend([op::PUMP]);
        out.push((name.to_string(), s));
    }
    // HELLO refused, fallback to RESP2 AUTH + CLIENT SETNAME.
    let mut s = vec![4 | 16, 0];
    s.extend([op::SUBMIT, 4, 0]);
    s.extend(WRITE_ALL);
    frame(&mut s, b"-ERR unknown command 'HELLO'\r\n");
    s.extend(DELIVER_ALL);
    s.extend(WRITE_ALL);
    frame(&mut s, b"+OK\r\n");
    frame(&mut s, b"+OK\r\n");
    frame(&mut s, b":1\r\n");
    s.extend([op::PUMP, op::PUMP]);
    out.push(("hello_fallback".to_string(), s));
    // Wrong password.
    let mut s = vec![4 | 8, 0];
    s.extend([op::SUBMIT, 1, 0, 0]);
    s.extend(WRITE_ALL);
    frame(&mut s, b"-WRONGPASS invalid username-password pair\r\n");
    s.extend([op::PUMP, op::SUBMIT, 0, 0]);
    out.push(("wrong_password".to_string(), s));
    // Request timeout (1 s), then a late reply to a closed connection.
    let mut s = vec![0, 0];
    s.extend([op::PUMP]);
    frame(&mut s, HELLO);
    s.extend([
        op::PUMP,
        op::SUBMIT,
        1,
        0,
        0,
        op::PUMP,
        op::TICK,
        6,
        op::TICK,
        7,
    ]);
    frame(&mut s, b"+OK\r\n");
    s.extend([op::PUMP]);
    out.push(("request_timeout".to_string(), s));
    // Handshake timeout (1 ms).
    out.push((
        "handshake_timeout".to_string(),
        vec![0, 16, op::PUMP, op::SUBMIT, 0, 0, op::TICK, 4],
    ));
    // Flush delay (10 ms): pipelined requests held back, big ones not.
    let mut s = vec![2 << 5, 2];
    s.extend([op::PUMP]);
    frame(&mut s, HELLO);
    s.extend([
        op::PUMP,
        op::SUBMIT,
        3,
        0,
        0,
        0,
        0,
        op::WRITE,
        10,
        0,
        op::SUBMIT,
        7,
        0,
        0,
        0,
        0,
    ]);
    s.extend([
        op::WRITE,
        0xff,
        0xff,
        op::TICK,
        3,
        op::WRITE,
        0xff,
        0xff,
        op::TICK,
        5,
        op::PUMP,
    ]);
    s.extend([
        op::BIG,
        0,
        op::SUBMIT,
        11,
        0,
        0,
        0,
        0,
        op::WRITE,
        0,
        1,
        op::PUMP,
        op::RAW_COMMAND,
    ]);
    s.extend([op::TICK, 5, op::PUMP]);
    out.push(("flush_delay".to_string(), s));
    // Big commands written 1000 bytes at a time (compaction).
    let mut s = vec![0, 1];
    s.extend([op::PUMP]);
    frame(&mut s, HELLO);
    s.extend([op::PUMP]);
    for _ in 0..4 {
        s.extend([op::BIG, 127]);
    }
    for _ in 0..40 {
        s.extend([op::WRITE, 0xe8, 0x03, op::WRITE, 0, 0x80]);
    }
    out.push(("big_writes".to_string(), s));
    // Small limits: a bulk past 64 bytes, then filler.
    let mut s = vec![0, 4 << 5];
    s.extend([op::PUMP]);
    frame(&mut s, HELLO);
    s.extend([op::PUMP, op::SUBMIT, 0, 0]);
    raw(&mut s, b"$1000\r\n");
    s.extend([op::FILL, b'x', 3, op::DELIVER, 0, 1, op::PUMP]);
    out.push(("limits".to_string(), s));
    // EOF, socket error and close with requests pending and bytes queued.
    for (name, end) in [
        ("eof", op::EOF),
        ("io_error", op::IO_ERROR),
        ("close", op::CLOSE),
    ] {
        let mut s = vec![0, 0];
        s.extend([op::PUMP]);
        frame(&mut s, HELLO);
        s.extend([op::PUMP, op::SUBMIT, 2, 0, 2, 0, op::WRITE, 3, 0]);
        frame(&mut s, b"+OK\r\n");
        s.extend([op::DELIVER, 2, 0, end, op::SUBMIT, 0, 0, op::PUMP]);
        out.push((name.to_string(), s));
    }
    out
}

/// Seeds for `topology_reply`: every real-server fixture, with and without
/// an asked host and host-name preference.
fn topology_seeds() -> Vec<(String, Vec<u8>)> {
    let dir = root().join("topology/tests/fixtures");
    let mut out = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".bin"))
        .collect();
    names.sort();
    for (i, name) in names.iter().enumerate() {
        let mut s = vec![(i % 8) as u8];
        s.extend(std::fs::read(dir.join(name)).unwrap());
        s.extend([i as u8, 0x40, 0x1f, 3]);
        out.push((name.trim_end_matches(".bin").to_string(), s));
    }
    out
}

/// Seeds for `rewire_plan`: real before/after reply pairs (failover, a
/// failed primary, start-up from nothing) and compact edits.
fn rewire_seeds() -> Vec<(String, Vec<u8>)> {
    let dir = root().join("topology/tests/fixtures");
    let read = |n: &str| std::fs::read(dir.join(format!("{n}.bin"))).unwrap();
    let mut out = Vec::new();
    for (before, after, shards) in [
        ("redis7_shards_resp3", "redis7_failover_shards_resp3", true),
        (
            "valkey9_shards_resp3",
            "valkey9_failover_shards_resp3",
            true,
        ),
        ("valkey9_shards_resp3", "valkey9_failed_shards_resp3", true),
        ("redis7_slots_resp2", "redis7_failover_slots_resp2", false),
        ("valkey9_slots_resp2", "valkey9_failed_slots_resp2", false),
    ] {
        let mode = if shards { 1 | 2 | 4 } else { 1 };
        let mut s = vec![mode, 6, 4, 4, 7];
        s.extend(read(before));
        s.extend(read(after));
        out.push((format!("{before}__{after}"), s));
    }
    // From an empty map (a reply that does not parse) to a real one.
    let mut s = vec![1 | 4, 14, 2, 1, 3, b'-', b'\r', b'\n'];
    s.extend(read("valkey9_shards_resp3"));
    out.push(("startup".to_string(), s));
    // Compact: six shards; a range moves, a MOVED, a failover to a new id.
    let mut six = vec![5];
    for i in 0..6u8 {
        six.extend([i, i, 1, 100 + i]);
    }
    six.push(0);
    let mut s = vec![0, 6, 4, 4, 9];
    s.extend(&six);
    s.extend([
        0, 3, 0, 0x00, 0x05, 0xff, 0x00, 2, 1, 0x80, 0x05, 9, 2, 2, 4,
    ]);
    out.push(("compact_edits".to_string(), s));
    // Compact: an unrelated cluster of three, random partition slots.
    let mut s = vec![0, 250, 40];
    for i in 0..41u16 {
        s.extend((i * 397).to_le_bytes());
    }
    s.extend([3, 1, 200]);
    s.extend(&six);
    s.extend([1, 2, 1, 0x41, 0, 2, 0x42, 0, 3, 0x43, 0, 0]);
    out.push(("compact_new_cluster".to_string(), s));
    out
}

#[test]
#[ignore = "writes the generated seeds into corpus/"]
fn write_seeds() {
    for (target, seeds) in [
        ("conn_core", conn_seeds()),
        ("topology_reply", topology_seeds()),
        ("rewire_plan", rewire_seeds()),
    ] {
        let dir = corpus(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, data) in seeds {
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
}
