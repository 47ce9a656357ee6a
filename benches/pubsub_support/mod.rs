//! Shared by the Pub/Sub benches: process CPU (getrusage), RSS, server CPU
//! and memory from `INFO`.
#![allow(dead_code)]

use std::time::Duration;

/// `struct rusage` on Linux (x86_64 and aarch64): two `timeval`s, then 14
/// `long`s.
#[repr(C)]
struct Rusage {
    utime: [i64; 2],
    stime: [i64; 2],
    rest: [i64; 14],
}

extern "C" {
    fn getrusage(who: i32, usage: *mut Rusage) -> i32;
}

/// User + system CPU time of this process so far (all threads).
pub fn process_cpu() -> Duration {
    let mut u = Rusage {
        utime: [0; 2],
        stime: [0; 2],
        rest: [0; 14],
    };
    // SAFETY: `u` is a valid, writable `struct rusage`; RUSAGE_SELF is 0.
    let rc = unsafe { getrusage(0, &mut u) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: [i64; 2]| Duration::from_secs(t[0] as u64) + Duration::from_micros(t[1] as u64);
    tv(u.utime) + tv(u.stime)
}

/// Resident set size of this process, in bytes.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn info_field(server: &testkit::Server, section: &str, field: &str) -> f64 {
    let Ok(v) = server.cmd(&[b"INFO", section.as_bytes()]) else {
        return 0.0;
    };
    let text = match v {
        testkit::Value::Bulk(b) | testkit::Value::Verbatim { text: b, .. } => b,
        _ => return 0.0,
    };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Server CPU seconds (user + system) from `INFO CPU`.
pub fn server_cpu(server: &testkit::Server) -> f64 {
    info_field(server, "CPU", "used_cpu_sys") + info_field(server, "CPU", "used_cpu_user")
}

/// Server `used_memory` in bytes.
pub fn server_memory(server: &testkit::Server) -> f64 {
    info_field(server, "MEMORY", "used_memory")
}

/// 256-byte payloads.
pub const PAYLOAD: [u8; 256] = [b'x'; 256];

/// Channel `i` as redis-benchmark's `__rand_int__` spells it.
pub fn channel(i: usize) -> Vec<u8> {
    format!("bench:{i:012}").into_bytes()
}
