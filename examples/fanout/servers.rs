//! What the demo reads from the servers (`INFO`, `CLIENT LIST`) and from
//! this process (`getrusage`), and how it prints numbers.

use std::time::Duration;

use testkit::values::{info_field, text};
use testkit::Cluster;

/// One `INFO` section of node `i`, empty if the node does not answer.
pub fn info(cluster: &Cluster, i: usize, section: &str) -> String {
    cluster
        .node(i)
        .cmd(&[b"INFO", section.as_bytes()])
        .ok()
        .as_ref()
        .and_then(text)
        .unwrap_or_default()
}

/// The server's version, from `INFO server`.
pub fn version(cluster: &Cluster, i: usize) -> String {
    let server = info(cluster, i, "server");
    info_field(&server, "valkey_version")
        .or_else(|| info_field(&server, "redis_version"))
        .unwrap_or_else(|| "?".into())
}

/// `used_cpu_sys + used_cpu_user` of node `i`, in seconds.
pub fn server_cpu(cluster: &Cluster, i: usize) -> f64 {
    let cpu = info(cluster, i, "cpu");
    let field = |f: &str| {
        info_field(&cpu, f)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    field("used_cpu_sys") + field("used_cpu_user")
}

/// `SSUBSCRIBE` calls node `i` has executed (`INFO commandstats`).
pub fn ssubscribe_calls(cluster: &Cluster, i: usize) -> u64 {
    let stats = info(cluster, i, "commandstats");
    info_field(&stats, "cmdstat_ssubscribe")
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The same reading for every node, by index.
pub fn per_node<T>(cluster: &Cluster, read: impl Fn(&Cluster, usize) -> T) -> Vec<T> {
    (0..cluster.nodes().len())
        .map(|i| read(cluster, i))
        .collect()
}

/// Connections on node `i` whose client name is `name` (`CLIENT LIST`).
/// shardsub names its subscribe connections `shardsub-sub` and its publish
/// connections `shardsub-pub`.
pub fn named_clients(cluster: &Cluster, i: usize, name: &str) -> usize {
    let want = format!("name={name}");
    let list = cluster
        .node(i)
        .cmd(&[b"CLIENT", b"LIST"])
        .ok()
        .as_ref()
        .and_then(text)
        .unwrap_or_default();
    list.lines()
        .filter(|l| l.split(' ').any(|f| f == want))
        .count()
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

/// shardsub's connections per node index, as the servers count them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conns {
    /// `shardsub-sub` (subscribe) connections.
    pub sub: Vec<usize>,
    /// `shardsub-pub` (publish and topology) connections.
    pub publ: Vec<usize>,
}

impl Conns {
    pub fn read(cluster: &Cluster) -> Conns {
        Conns {
            sub: per_node(cluster, |c, i| named_clients(c, i, "shardsub-sub")),
            publ: per_node(cluster, |c, i| named_clients(c, i, "shardsub-pub")),
        }
    }

    /// Whether every master in `masters` holds exactly `sub` and `publ`
    /// connections and every other node none.
    pub fn exactly(&self, masters: &[usize], sub: usize, publ: usize) -> bool {
        (0..self.sub.len()).all(|i| {
            let (s, p) = if masters.contains(&i) {
                (sub, publ)
            } else {
                (0, 0)
            };
            self.sub[i] == s && self.publ[i] == p
        })
    }
}

/// Waits (≤ `bound`) until the servers show exactly `sub` subscribe and
/// `publ` publish connections on every master and none elsewhere. Returns
/// the last counts and whether they got there.
pub fn settle_conns(cluster: &Cluster, sub: usize, publ: usize, bound: Duration) -> (Conns, bool) {
    let mut last = Conns::default();
    let settled = testkit::wait_for("exact connection counts", bound, || {
        last = Conns::read(cluster);
        Ok(last.exactly(&cluster.masters(), sub, publ).then_some(()))
    });
    (last, settled.is_ok())
}
