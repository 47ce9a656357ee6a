//! The properties the simulator checks, as a ledger fed with every command
//! the core gives and every subscription the cluster drops.

use alloc::collections::{BTreeSet, VecDeque};
use alloc::string::String;

use control::Time;
use control::{Channel, Command};

/// Most fetch starts in any one second of virtual time (the core spaces
/// them by at least `min_refresh_gap`, 20 ms: 50, plus one).
pub const MAX_FETCHES_PER_SECOND: usize = 51;
/// Most probes in any one second (`max_probes` per fetch or probe answer,
/// bounded by the fetch rate times the 16 in flight).
pub const MAX_PROBES_PER_SECOND: usize = 16 * MAX_FETCHES_PER_SECOND;

/// After this many failed fetches in a row, a fetch starts at least
/// [`MIN_BACKOFF`] after the previous one (the core waits its
/// `degraded_retry`, doubled per failure, after each failure).
pub const BACKOFF_AFTER: u32 = 2;
/// See [`BACKOFF_AFTER`].
pub const MIN_BACKOFF: core::time::Duration = core::time::Duration::from_millis(100);
/// Fetches allowed in the last [`QUIET`] of a run, once the cluster is
/// healthy (the 30 s poll may fall there).
pub const QUIET_FETCHES: usize = 1;
/// See [`QUIET_FETCHES`].
pub const QUIET: core::time::Duration = core::time::Duration::from_secs(10);

/// The ledger.
#[derive(Debug, Default)]
pub struct Checker {
    /// The schedule's seed, for the failure message.
    pub seed: u64,
    /// The batch size.
    pub batch: usize,
    /// Channels whose subscription the server dropped while wanted, and
    /// that have had no gap since.
    needs_gap: BTreeSet<Channel>,
    /// Channels with a subscribe sent since their last gap.
    sent: BTreeSet<Channel>,
    /// Channels reported refused since they were last wanted.
    pub refused: BTreeSet<Channel>,
    fetches: VecDeque<Time>,
    probes: VecDeque<Time>,
    /// Failed fetch replies in a row, and when the last one arrived.
    fetch_failures: (u32, Time),
    /// Every fetch start.
    pub fetch_starts: alloc::vec::Vec<Time>,
    /// The fetch that started with a version request.
    versioned: Option<u64>,
    /// Gap events seen.
    pub gaps: u64,
    /// Subscribe commands seen.
    pub subscribes: u64,
    /// Probes seen.
    pub probe_count: u64,
    /// `SUNSUBSCRIBE`s seen.
    pub unsubscribes: u64,
    /// Gap events seen, counting their channels.
    pub gap_channels: u64,
    /// Liveness pings seen.
    pub pings: u64,
}

impl Checker {
    /// A ledger for a run of `seed` with batch size `batch`.
    pub fn new(seed: u64, batch: usize) -> Checker {
        Checker {
            seed,
            batch,
            ..Checker::default()
        }
    }

    /// Fails the run: panics with the seed.
    pub fn fail(&self, what: &str) -> ! {
        let seed = self.seed;
        panic!(
            "control sim seed {seed}: {what} (a random schedule reruns with CONTROL_SIM_SEED={seed}; \
             a fuzz input with its artifact)"
        )
    }

    /// The server dropped `channel` while the application wanted it.
    pub fn broke(&mut self, channel: &Channel) {
        self.needs_gap.insert(channel.clone());
    }

    /// Whether a loss of `channel` still waits for its gap.
    pub fn owes_gap(&self, channel: &Channel) -> bool {
        self.needs_gap.contains(channel)
    }

    /// The application stopped wanting `channel`: nothing is owed for it.
    pub fn unwanted(&mut self, channel: &Channel) {
        self.needs_gap.remove(channel);
        self.sent.remove(channel);
        self.refused.remove(channel);
    }

    /// Checks one command from the core at `now`; `slot_of` gives a
    /// partition's slot and `partition_of` a channel's partition.
    pub fn command(
        &mut self,
        now: Time,
        cmd: &Command,
        partition_of: impl Fn(&[u8]) -> u32,
        slot_of: impl Fn(u32) -> Option<u16>,
    ) {
        match cmd {
            Command::Subscribe {
                partition,
                slot,
                channels,
                ..
            }
            | Command::Unsubscribe {
                partition,
                slot,
                channels,
                ..
            } => {
                let sub = matches!(cmd, Command::Subscribe { .. });
                if channels.is_empty() || channels.len() > self.batch {
                    self.fail(&alloc::format!("{} channels in `{cmd}`", channels.len()));
                }
                if slot_of(*partition) != Some(*slot)
                    || channels.iter().any(|c| partition_of(c) != *partition)
                {
                    self.fail(&alloc::format!("`{cmd}` mixes partitions or slots"));
                }
                if !sub {
                    self.unsubscribes += 1;
                }
                if sub {
                    self.subscribes += 1;
                    for c in channels {
                        if self.needs_gap.contains(c) {
                            self.fail(&alloc::format!(
                                "`{cmd}` resubscribes {} without a gap after its loss",
                                String::from_utf8_lossy(c)
                            ));
                        }
                        self.sent.insert(c.clone());
                    }
                }
            }
            Command::Gap { channels, .. } => {
                self.gaps += 1;
                self.gap_channels += channels.len() as u64;
                for c in channels {
                    if !self.sent.remove(c) {
                        self.fail(&alloc::format!(
                            "gap for {}, never subscribed since its last gap",
                            String::from_utf8_lossy(c)
                        ));
                    }
                    self.needs_gap.remove(c);
                }
            }
            Command::Refused { channel, .. } => {
                self.refused.insert(channel.clone());
            }
            // A fetch goes on under its version request's id: one start.
            Command::FetchTopology { id, .. } if self.versioned == Some(*id) => {}
            Command::AskVersion { id, .. } | Command::FetchTopology { id, .. } => {
                if matches!(cmd, Command::AskVersion { .. }) {
                    self.versioned = Some(*id);
                }
                let failed = self.fetch_failures.0;
                let last = self.fetch_starts.last().copied().unwrap_or_default();
                if failed >= BACKOFF_AFTER && now.since(last) < MIN_BACKOFF {
                    self.fail(&alloc::format!(
                        "fetch {:?} after the previous one, {failed} failures in a row: no backoff",
                        now.since(last)
                    ));
                }
                self.fetch_starts.push(now);
                Self::count(&mut self.fetches, now);
                if self.fetches.len() > MAX_FETCHES_PER_SECOND {
                    self.fail(&alloc::format!("{} fetches within 1 s", self.fetches.len()));
                }
            }
            Command::ProbeSlot { .. } => {
                self.probe_count += 1;
                Self::count(&mut self.probes, now);
                if self.probes.len() > MAX_PROBES_PER_SECOND {
                    self.fail(&alloc::format!("{} probes within 1 s", self.probes.len()));
                }
            }
            Command::Ping { .. } => self.pings += 1,
            Command::Open { .. } | Command::Close { .. } => {}
        }
    }

    /// A fetch reply reached the core: `ok` or a failure.
    pub fn fetch_reply(&mut self, now: Time, ok: bool) {
        self.fetch_failures = if ok {
            (0, now)
        } else {
            (self.fetch_failures.0 + 1, now)
        };
    }

    fn count(times: &mut VecDeque<Time>, now: Time) {
        times.push_back(now);
        while times
            .front()
            .is_some_and(|&t| now.since(t) >= core::time::Duration::from_secs(1))
        {
            times.pop_front();
        }
    }
}
