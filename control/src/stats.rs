//! What the core counts ([`Core::stats`]): the numbers the engine's
//! `ClusterMetrics` reports from the control thread, with its names.

use core::time::Duration;

use crate::command::Command;
use crate::core::{ConnState, Core};
use crate::time::Time;

/// Why a topology fetch was asked for. Requests that fall together cost one
/// fetch, counted under the trigger of the earliest one.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The first fetch, at [`Core::new`].
    #[default]
    Startup,
    /// The periodic poll.
    Poll,
    /// A server-pushed `sunsubscribe` of a wanted channel.
    Sunsubscribe,
    /// A `MOVED` reply to a publish ([`Core::handle_redirect`]).
    Moved,
    /// A subscribe connection went down or could not be opened.
    Disconnect,
    /// A subscribe got a routing error (stale map).
    SubscribeError,
    /// A retry: the last fetch failed, or the layout is still degraded.
    Retry,
    /// The application asked ([`Core::handle_refresh`]).
    Manual,
}

/// Topology fetches started, by what asked for them (the engine's
/// `RebuildCounts`).
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebuilds {
    /// The first one, at [`Core::new`].
    pub startup: u64,
    /// The periodic poll.
    pub poll: u64,
    /// A server-pushed `sunsubscribe` of a channel still wanted.
    pub sunsubscribe: u64,
    /// A `MOVED` reply to a publish ([`Core::handle_redirect`]).
    pub moved: u64,
    /// A subscribe connection was lost (or could not be opened).
    pub disconnect: u64,
    /// A subscribe command got `MOVED`, `ASK`, `TRYAGAIN` or `CLUSTERDOWN`.
    pub subscribe_error: u64,
    /// A retry after a failed fetch, or while the layout was incomplete.
    pub retry: u64,
    /// [`Core::handle_refresh`] (`PubSub::refresh`).
    pub manual: u64,
}

impl Rebuilds {
    /// All fetches started.
    pub fn total(&self) -> u64 {
        self.startup
            + self.poll
            + self.sunsubscribe
            + self.moved
            + self.disconnect
            + self.subscribe_error
            + self.retry
            + self.manual
    }

    fn count(&mut self, t: Trigger) {
        let n = match t {
            Trigger::Startup => &mut self.startup,
            Trigger::Poll => &mut self.poll,
            Trigger::Sunsubscribe => &mut self.sunsubscribe,
            Trigger::Moved => &mut self.moved,
            Trigger::Disconnect => &mut self.disconnect,
            Trigger::SubscribeError => &mut self.subscribe_error,
            Trigger::Retry => &mut self.retry,
            Trigger::Manual => &mut self.manual,
        };
        *n += 1;
    }
}

/// Topology errors, by the step that failed (the engine's
/// `TopologyErrors`, less `version`, which the core does not see).
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TopologyErrors {
    /// A version request (`INFO server`) failed or named no version (it
    /// also counts as a failed or unparsable fetch).
    pub version: u64,
    /// A fetch failed ([`FetchError::Unreachable`](crate::FetchError)),
    /// timed out, or described no shard.
    pub fetch: u64,
    /// A fetch's reply did not parse ([`FetchError::BadReply`](crate::FetchError)).
    pub parse: u64,
    /// A probe got neither a value nor a `MOVED`, or timed out.
    pub probe: u64,
    /// A subscribe connection could not be opened (down or timed out
    /// before it came up).
    pub connect: u64,
}

/// A snapshot of the core's counters and gauges, from [`Core::stats`].
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Topology fetches started, by trigger.
    pub rebuilds: Rebuilds,
    /// Topology errors by stage.
    pub topology_errors: TopologyErrors,
    /// Partitions whose slot has no reachable owner now.
    pub unknown_slot_owners: u64,
    /// Partitions moved to another node by rewires (resubscribed elsewhere).
    pub moved_partitions: u64,
    /// Restores measured: from a change noticed (a dropped subscription, a
    /// connection lost, a rewire that moved channels) to every wanted
    /// channel confirmed again.
    pub restores: u64,
    /// The last restore's duration.
    pub last_restore: Option<Duration>,
    /// The longest restore.
    pub max_restore: Option<Duration>,
    /// Subscribe replies that were errors (refusals and routing errors).
    pub subscribe_errors: u64,
    /// `SSUBSCRIBE` commands given.
    pub subscribe_commands: u64,
    /// `SUNSUBSCRIBE` commands given.
    pub unsubscribe_commands: u64,
    /// Gap events given.
    pub gaps: u64,
    /// Channels named by them.
    pub gap_channels: u64,
    /// Liveness `PING`s given.
    pub pings: u64,
    /// Connections closed and reopened because a `PING` went unanswered.
    pub ping_restarts: u64,
    /// Subscribe connections opened again after one ended, whatever ended
    /// it (lost, never came up, closed for not answering): each attempt
    /// counts.
    pub reconnects: u64,
    /// Primaries the core holds subscribe connections for now.
    pub nodes: usize,
    /// Subscribe connections up now.
    pub subscribe_connections: usize,
}

/// The running counters (the gauges are read off the state).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) stats: Stats,
    /// When the change being restored from was noticed.
    pub(crate) restore_from: Option<Time>,
}

impl Core {
    /// The counters, and the gauges as they are now.
    pub fn stats(&self) -> Stats {
        let mut s = self.counters.stats;
        s.unknown_slot_owners = self.layout.unresolved().len() as u64;
        s.nodes = self.nodes.len();
        s.subscribe_connections = self
            .conns
            .values()
            .filter(|c| c.state == ConnState::Up)
            .count();
        s
    }

    /// Queues `cmd`, counting it.
    pub(crate) fn emit(&mut self, cmd: Command) {
        let s = &mut self.counters.stats;
        match &cmd {
            Command::Subscribe { .. } => s.subscribe_commands += 1,
            Command::Unsubscribe { .. } => s.unsubscribe_commands += 1,
            Command::Gap { channels, .. } => {
                s.gaps += 1;
                s.gap_channels += channels.len() as u64;
            }
            Command::Ping { .. } => s.pings += 1,
            _ => {}
        }
        self.out.push_back(cmd);
    }

    /// A fetch starts, asked for by `t`.
    pub(crate) fn count_rebuild(&mut self, t: Trigger) {
        self.counters.stats.rebuilds.count(t);
    }

    /// A change was noticed that the channels must be restored from (the
    /// first one of a restore starts its clock).
    pub(crate) fn disrupted(&mut self, now: Time) {
        if self.counters.restore_from.is_none() && !self.is_settled() {
            self.counters.restore_from = Some(now);
        }
    }

    /// Ends the restore in progress when every wanted channel is confirmed
    /// (checked after the inputs that can confirm the last one). While a
    /// subscribe awaits its reply the restore is not over: the walk over
    /// every channel runs only once none does.
    pub(crate) fn check_restored(&mut self, now: Time) {
        let Some(from) = self.counters.restore_from else {
            return;
        };
        if self.conns.values().any(|c| !c.pending.is_empty()) || !self.is_settled() {
            return;
        }
        let d = now.since(from);
        let s = &mut self.counters.stats;
        s.restores += 1;
        s.last_restore = Some(d);
        s.max_restore = Some(s.max_restore.map_or(d, |m| m.max(d)));
        self.counters.restore_from = None;
    }
}
