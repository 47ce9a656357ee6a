//! What the demo reads from the servers (`INFO`, `CLIENT LIST`) and from
//! this process (`getrusage`), and how it prints numbers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use testkit::values::info_field;

use crate::target::{cmd_text, Probe};

/// One `INFO` section of the server at `addr`, empty if it does not answer.
pub fn info(addr: SocketAddr, section: &str) -> String {
    cmd_text(addr, &[b"INFO", section.as_bytes()]).unwrap_or_default()
}

/// The server's version, from `INFO server`.
pub fn version(addr: SocketAddr) -> String {
    let server = info(addr, "server");
    info_field(&server, "valkey_version")
        .or_else(|| info_field(&server, "redis_version"))
        .unwrap_or_else(|| "?".into())
}

/// `calls=` of `cmdstat_<command>` in an `INFO commandstats` text.
pub fn calls(stats: &str, command: &str) -> u64 {
    info_field(stats, &format!("cmdstat_{command}"))
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The counters of one node the report takes deltas of.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub ssubscribe: u64,
    pub subscribe: u64,
    /// `PUBLISH` + `SPUBLISH`.
    pub publish: u64,
    /// `used_cpu_sys + used_cpu_user`, seconds.
    pub cpu: f64,
}

impl Counters {
    /// Reads node `addr` (zeros if it does not answer).
    pub fn read(addr: SocketAddr) -> Counters {
        let stats = info(addr, "commandstats");
        let cpu = info(addr, "cpu");
        let field = |f: &str| {
            info_field(&cpu, f)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Counters {
            ssubscribe: calls(&stats, "ssubscribe"),
            subscribe: calls(&stats, "subscribe"),
            publish: calls(&stats, "publish") + calls(&stats, "spublish"),
            cpu: field("used_cpu_sys") + field("used_cpu_user"),
        }
    }

    /// `self - before`, never negative (a restarted node starts at 0).
    pub fn since(&self, before: &Counters) -> Counters {
        Counters {
            ssubscribe: self.ssubscribe.saturating_sub(before.ssubscribe),
            subscribe: self.subscribe.saturating_sub(before.subscribe),
            publish: self.publish.saturating_sub(before.publish),
            cpu: (self.cpu - before.cpu).max(0.0),
        }
    }
}

/// Counters of every node of `probe`, by address.
pub fn snapshot(probe: &Probe) -> BTreeMap<SocketAddr, Counters> {
    probe
        .nodes()
        .iter()
        .map(|n| (n.addr, Counters::read(n.addr)))
        .collect()
}

/// `after - before` per node; a node absent before counts from zero.
pub fn delta(
    after: &BTreeMap<SocketAddr, Counters>,
    before: &BTreeMap<SocketAddr, Counters>,
) -> BTreeMap<SocketAddr, Counters> {
    after
        .iter()
        .map(|(a, c)| (*a, c.since(&before.get(a).copied().unwrap_or_default())))
        .collect()
}

/// Connections on one node as `CLIENT LIST` shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conns {
    /// Every client connection but this reading's own.
    pub total: usize,
    /// With subscriptions (`sub`/`ssub` > 0 or flag `P`).
    pub subscribed: usize,
    /// Named `shardsub-sub` (shardsub's subscribe connections).
    pub sub: usize,
    /// Named `shardsub-pub` (publish and topology connections).
    pub publ: usize,
    /// Named as the publisher instances (every one of their connections).
    pub publisher: usize,
    /// The publisher instances' connections with subscriptions.
    pub publisher_subscribed: usize,
}

/// Reads `CLIENT LIST` of `addr`.
pub fn conns(addr: SocketAddr) -> Conns {
    let list = cmd_text(addr, &[b"CLIENT", b"LIST"]).unwrap_or_default();
    let mut c = Conns::default();
    for line in list.lines() {
        let field = |k: &str| {
            line.split(' ')
                .find_map(|f| f.strip_prefix(k))
                .unwrap_or("")
        };
        let n = |k: &str| field(k).parse::<u64>().unwrap_or(0);
        c.total += 1;
        let subscribed = n("sub=") > 0 || n("ssub=") > 0 || field("flags=").contains('P');
        if subscribed {
            c.subscribed += 1;
        }
        match field("name=") {
            "shardsub-sub" => c.sub += 1,
            "shardsub-pub" => c.publ += 1,
            crate::fleet::PUBLISHER_NAME => {
                c.publisher += 1;
                c.publisher_subscribed += usize::from(subscribed);
            }
            _ => {}
        }
    }
    c.total = c.total.saturating_sub(1);
    c
}

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

/// CPU seconds so far of this process's threads named `shardsub-*`: the
/// library's I/O, control and worker threads (the runtime's), from
/// [`testkit::threads::cpu_by_thread`]. The demo's own threads
/// (publishing loop, accounting, live view) are not in it.
pub fn library_cpu() -> f64 {
    testkit::threads::cpu_by_thread()
        .iter()
        .filter(|(name, _)| name.starts_with("shardsub-"))
        .map(|(_, s)| s)
        .sum()
}

/// User + system CPU seconds of this process (every thread) so far.
pub fn client_cpu() -> f64 {
    let mut u = Rusage {
        utime: [0; 2],
        stime: [0; 2],
        rest: [0; 14],
    };
    // SAFETY: `u` is a valid, writable `struct rusage`; RUSAGE_SELF is 0.
    if unsafe { getrusage(0, &mut u) } != 0 {
        return 0.0;
    }
    let tv = |t: [i64; 2]| t[0] as f64 + t[1] as f64 / 1e6;
    tv(u.utime) + tv(u.stime)
}

/// 12345678 → "12,345,678".
pub fn n(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in whole milliseconds.
pub fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_calls_parse() {
        let s = "# Commandstats\r\ncmdstat_ssubscribe:calls=42,usec=10,usec_per_call=0.2\r\n\
                 cmdstat_spublish:calls=7,usec=1\r\n";
        assert_eq!(calls(s, "ssubscribe"), 42);
        assert_eq!(calls(s, "spublish"), 7);
        assert_eq!(calls(s, "subscribe"), 0);
        assert_eq!(n(1234567), "1,234,567");
    }
}
