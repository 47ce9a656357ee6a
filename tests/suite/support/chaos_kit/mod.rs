//! The chaos suite's parts: a seeded schedule of cluster faults ([`Rng`],
//! [`FaultKind`], [`Schedule`]), the cluster behind fault proxies with
//! subscriber instances and a publisher ([`rig`]), the faults themselves
//! ([`faults`]) and the per-fault table ([`table`]).

pub mod faults;
pub mod rig;
pub mod table;

use std::time::Duration;

use testkit::ServerKind;

/// The schedule's seeded generator (one seed, one schedule).
pub use testkit::Rng;

/// A fault the schedule can draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// A slot range moved with the legacy `CLUSTER SETSLOT` sequence.
    MigrateLegacy,
    /// A slot range moved with Valkey's `CLUSTER MIGRATESLOTS` (Valkey only).
    MigrateAtomic,
    /// `CLUSTER FAILOVER` on a replica.
    Failover,
    /// `kill -9` of a primary, then the node restarted as a replica.
    KillPrimary,
    /// `CLIENT KILL TYPE pubsub` on every primary at once.
    ClientKillPubsub,
    /// A new primary, and slots moved to it.
    AddPrimary,
    /// Slots moved away from an added primary, which is then removed.
    RemovePrimary,
    /// One primary black-holed behind its proxy for longer than the
    /// engine's probe and request timeouts.
    BlackHole,
}

impl FaultKind {
    pub const ALL: [FaultKind; 8] = [
        FaultKind::MigrateLegacy,
        FaultKind::MigrateAtomic,
        FaultKind::Failover,
        FaultKind::KillPrimary,
        FaultKind::ClientKillPubsub,
        FaultKind::AddPrimary,
        FaultKind::RemovePrimary,
        FaultKind::BlackHole,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::MigrateLegacy => "migrate (SETSLOT)",
            FaultKind::MigrateAtomic => "migrate (MIGRATESLOTS)",
            FaultKind::Failover => "CLUSTER FAILOVER",
            FaultKind::KillPrimary => "kill -9 primary",
            FaultKind::ClientKillPubsub => "CLIENT KILL TYPE pubsub",
            FaultKind::AddPrimary => "add primary",
            FaultKind::RemovePrimary => "remove primary",
            FaultKind::BlackHole => "black hole",
        }
    }

    /// The kinds a server supports.
    pub fn for_server(kind: ServerKind) -> Vec<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(|f| *f != FaultKind::MigrateAtomic || kind == ServerKind::Valkey)
            .collect()
    }
}

/// The order of faults: rounds, each a seeded shuffle of every kind the
/// server supports, so that even a short run sees every kind once.
#[derive(Debug)]
pub struct Schedule {
    rng: Rng,
    kinds: Vec<FaultKind>,
    queue: Vec<FaultKind>,
}

impl Schedule {
    pub fn new(seed: u64, server: ServerKind) -> Schedule {
        Schedule {
            rng: Rng::new(seed ^ server as u64),
            kinds: FaultKind::for_server(server),
            queue: Vec::new(),
        }
    }

    /// The next fault and a generator for its details (which node, which
    /// slots, how long to pause after it).
    pub fn next(&mut self) -> (FaultKind, Rng) {
        if self.queue.is_empty() {
            self.queue = self.kinds.clone();
            self.rng.shuffle(&mut self.queue);
            self.queue.reverse();
        }
        let kind = self.queue.pop().expect("a refilled queue");
        (kind, Rng::new(self.rng.next_u64()))
    }
}

/// Settings read from the environment (see `tests/suite/chaos.rs`).
#[derive(Clone, Debug)]
pub struct Settings {
    pub seed: u64,
    /// Fault time per server.
    pub duration: Duration,
    pub servers: Vec<ServerKind>,
    pub channels: usize,
    pub subscribers: usize,
    /// Pause between publish rounds (one message to every channel).
    pub pace: Duration,
    /// Where to write the per-fault table as Markdown, if anywhere.
    pub report: Option<std::path::PathBuf>,
    /// How many of the channels are recoverable (the first ones, named
    /// `hist:N`; the others `chaos:N`): 0 for none.
    pub history: usize,
    /// Partitions off (`partitions(0)`): channels keep their names.
    pub raw: bool,
}

/// The prefix of the recoverable channels.
pub const HISTORY_PREFIX: &str = "hist:";

/// Caps of the recoverable channels: large enough that nothing is trimmed
/// or expires in a run (a run publishes a few thousand messages per
/// channel), so an unrecoverable event is owed only where a server lost a
/// stream.
pub const HISTORY_CAPS: shardsub::history::HistoryOptions = shardsub::history::HistoryOptions {
    max_len: 200_000,
    max_age: Duration::from_secs(3_600),
};

impl Settings {
    /// With `on`, half the channels (at least one) recoverable.
    pub fn with_history(mut self, on: bool) -> Settings {
        self.history = if on { self.channels.div_ceil(2) } else { 0 };
        self
    }

    /// Channel `i`'s name.
    pub fn channel(&self, i: usize) -> String {
        if i < self.history {
            format!("{HISTORY_PREFIX}{i}")
        } else {
            format!("chaos:{i}")
        }
    }
}

/// The peak resident set of this process (`VmHWM`), in KiB.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_schedule() {
        let draw = |seed| {
            let mut s = Schedule::new(seed, ServerKind::Valkey);
            (0..20)
                .map(|_| {
                    let (k, mut r) = s.next();
                    (k, r.next_u64())
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        // Every round holds every kind once.
        let mut s = Schedule::new(7, ServerKind::Redis);
        let mut round: Vec<FaultKind> = (0..7).map(|_| s.next().0).collect();
        round.sort();
        assert_eq!(round, FaultKind::for_server(ServerKind::Redis));
    }
}
