//! The command half of the publish core: a command routed by its key's
//! slot (the engine's `PubSub::command` on a cluster) goes where a publish
//! to that slot would, under the same rules. The core knows a command by
//! its id and slot only; its arguments and its caller stay with the
//! driver.
//!
//! - It goes to the slot's owner ([`Output::SendCommand`]); with no owner
//!   known it waits for one (a refresh asked, [`Output::RefreshSoon`]) up
//!   to the retry window, then fails ([`Failure::NoOwner`]).
//! - `MOVED` moves the slot's route, as a publish's does (the same code:
//!   the table changes, the slot is gated, the subscribe core hears of
//!   it), and the command follows it; `ASK` sends it once with `ASKING`,
//!   the route kept. Redirects are bounded as a publish's.
//! - `TRYAGAIN`, `CLUSTERDOWN` and a redirect with no usable address are
//!   refusals for now: it goes again on the core's timer (the publishes'
//!   schedule, a refresh asked) within the retry window.
//! - Any other reply is the caller's, and ends it.

use core::time::Duration;

use super::{Failure, Output, PublishCore, Reply, Target};
use crate::hold::Held;
use crate::time::Time;

/// A command given to [`PublishCore::handle_command`] (the driver's
/// numbering).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct CmdId(pub u64);

/// What a command waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// Its reply: it is on a node's wire.
    Reply,
    /// An owner of its slot (until its window ends).
    Owner,
    /// Its retry, due then.
    Retry(Time),
}

/// A command the core routes.
#[derive(Clone, Copy, Debug)]
pub(super) struct CmdState {
    slot: u16,
    redirects: u32,
    tries: u32,
    /// Its first wait for an owner or refusal for now: the start of its
    /// retry window.
    first: Option<Time>,
    wait: Wait,
}

impl<A: Clone + PartialEq, M: Held> PublishCore<A, M> {
    /// A command for `slot`'s owner: sent to it, or kept until one is
    /// known (failed at once while closing).
    pub fn handle_command(&mut self, now: Time, id: CmdId, slot: u16) {
        let c = CmdState {
            slot,
            redirects: 0,
            tries: 0,
            first: None,
            wait: Wait::Reply,
        };
        self.commands.insert(id, c);
        self.route_command(now, id);
    }

    /// What came back for command `id`: a redirect or a refusal for now
    /// is the core's to follow; anything else is the caller's outcome,
    /// and ends it (as [`PublishCore::handle_command_done`]).
    pub fn handle_command_reply(&mut self, now: Time, id: CmdId, reply: Reply) {
        let Some(c) = self.commands.get_mut(&id) else {
            return;
        };
        let (slot, to, asking) = match reply {
            Reply::Moved { slot, to } => (slot, to, false),
            Reply::Ask { slot, to } => (slot, to, true),
            Reply::TryAgain | Reply::ClusterDown => return self.command_refused(now, id),
            Reply::Taken | Reply::Lost | Reply::NotConnected | Reply::NotWritten | Reply::Other => {
                self.commands.remove(&id);
                return;
            }
        };
        if let Err(e) = self.policy.redirect(&mut c.redirects) {
            return self.command_failed(id, e.into());
        }
        let node = match to {
            Target::Node(n) => n,
            // No usable address: the refreshed map says where it lives.
            Target::NoAddress => return self.command_refused(now, id),
            Target::CannotConnect => return self.command_failed(id, Failure::CannotConnect),
        };
        if self.closing {
            return self.command_failed(id, Failure::Shutdown);
        }
        c.wait = Wait::Reply;
        if !asking {
            // The publishes' own rule: the route moves, behind a gate.
            self.route_slot(now, slot, node);
        }
        self.out.push_back(Output::SendCommand { id, node, asking });
    }

    /// Command `id` ended (its caller has its outcome): forgotten.
    pub fn handle_command_done(&mut self, id: CmdId) {
        self.commands.remove(&id);
    }

    /// Commands the core keeps (sent, waiting for an owner or a retry).
    pub fn commands(&self) -> usize {
        self.commands.len()
    }

    /// Sends command `id` to its slot's owner, or keeps it for one until
    /// its window ends.
    fn route_command(&mut self, now: Time, id: CmdId) {
        if self.closing {
            return self.command_failed(id, Failure::Shutdown);
        }
        let Some(c) = self.commands.get_mut(&id) else {
            return;
        };
        if let Some(&node) = self.routes.owner(c.slot) {
            c.wait = Wait::Reply;
            self.out.push_back(Output::SendCommand {
                id,
                node,
                asking: false,
            });
            return;
        }
        let waited = now.since(*c.first.get_or_insert(now));
        if waited >= self.cfg.retry_window {
            return self.command_failed(id, Failure::NoOwner { waited });
        }
        if c.wait != Wait::Owner {
            c.wait = Wait::Owner;
            self.out.push_back(Output::RefreshSoon);
        }
    }

    /// Command `id` was refused for now: tried again on the publishes'
    /// schedule within its window (with a refresh soon), or failed.
    fn command_refused(&mut self, now: Time, id: CmdId) {
        if self.closing {
            return self.command_failed(id, Failure::Shutdown);
        }
        let Some(c) = self.commands.get_mut(&id) else {
            return;
        };
        let first = *c.first.get_or_insert(now);
        match self.policy.retry(now, first, &mut c.tries) {
            Ok(at) => {
                c.wait = Wait::Retry(at);
                self.out.push_back(Output::RefreshSoon);
            }
            Err(e) => self.command_failed(id, e.into()),
        }
    }

    fn command_failed(&mut self, id: CmdId, why: Failure) {
        if self.commands.remove(&id).is_some() {
            self.out.push_back(Output::CommandFailed { id, why });
        }
    }

    /// Commands due now: retries whose time came, and those waiting for
    /// an owner that has one now or whose window ended.
    pub(super) fn commands_due(&mut self, now: Time) {
        if self.commands.is_empty() {
            return;
        }
        let window = self.cfg.retry_window;
        let routes = &self.routes;
        let due: alloc::vec::Vec<CmdId> = self
            .commands
            .iter()
            .filter(|(_, c)| match c.wait {
                Wait::Reply => false,
                Wait::Retry(at) => at <= now,
                Wait::Owner => routes.owner(c.slot).is_some() || Self::window_end(c, window) <= now,
            })
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.route_command(now, id);
        }
    }

    /// When the earliest command is due (a retry, the end of a wait for
    /// an owner).
    pub(super) fn commands_timeout(&self) -> Option<Time> {
        let window = self.cfg.retry_window;
        self.commands
            .values()
            .filter_map(|c| match c.wait {
                Wait::Reply => None,
                Wait::Retry(at) => Some(at),
                Wait::Owner => Some(Self::window_end(c, window)),
            })
            .min()
    }

    /// The end of `c`'s window (from its first wait).
    fn window_end(c: &CmdState, window: Duration) -> Time {
        c.first.map_or(Time::ZERO, |t| t + window)
    }

    /// Closing: every command fails with [`Failure::Shutdown`].
    pub(super) fn close_commands(&mut self) {
        for id in core::mem::take(&mut self.commands).into_keys() {
            self.out.push_back(Output::CommandFailed {
                id,
                why: Failure::Shutdown,
            });
        }
    }
}
