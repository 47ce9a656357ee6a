//! Subscriptions the server refused (an ACL denial, say), shared by every
//! placement: the control core sends a refused command of several
//! channels again in halves until each refused channel stands alone; that
//! one is marked refused in the registry and recorded here
//! ([`Refusals::refuse`]),
//! its lane's worker hears of it, and `wait_active` fails with the server's text
//! ([`Refusals::error`]).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::Error;
use crate::front::active::ActiveWait;
use crate::front::registry::{Registry, REFUSED};
use crate::metrics::{add, Counters};
use crate::workers::{Homes, Queue};

/// The server's text for each refused channel. An entry is read only
/// while the channel's registry flag says refused, so the entry of a
/// channel subscribed again since is stale but harmless.
/// Patterns' refusals are kept apart (a pattern and a channel may share a
/// name).
#[derive(Default)]
pub(crate) struct Refusals {
    channels: Mutex<HashMap<Box<[u8]>, Arc<str>>>,
    patterns: Mutex<HashMap<Box<[u8]>, Arc<str>>>,
}

/// What a refusal touches besides this record.
pub(crate) struct Targets<'a> {
    pub(crate) registry: &'a Registry,
    pub(crate) queues: &'a [Arc<Queue>],
    pub(crate) homes: &'a Homes,
    pub(crate) counters: &'a Counters,
    pub(crate) active: &'a ActiveWait,
}

impl Refusals {
    /// The server refused a subscribe that carried `channel` (of `lane`)
    /// alone: marks it refused if that subscribe is still the last word
    /// for it, records `message`, counts it, tells its worker
    /// ([`Event::Refused`](crate::pubsub::Event::Refused), or for a
    /// `pattern` [`Event::PatternRefused`](crate::pubsub::Event::PatternRefused))
    /// and wakes `wait_active`. Returns true when it was marked.
    pub(crate) fn refuse(
        &self,
        t: &Targets<'_>,
        lane: usize,
        channel: &[u8],
        message: &Arc<str>,
        pattern: bool,
    ) -> bool {
        if !t.registry.refuse(lane, channel) {
            return false;
        }
        self.map(pattern)
            .lock()
            .insert(channel.into(), message.clone());
        add(&t.counters.refused_channels, 1);
        let what = if pattern { "pattern" } else { "channel" };
        log::warn!(
            "the server refused the subscription to {what} {:?}: {message}",
            String::from_utf8_lossy(channel)
        );
        if let Some(q) = t.queues.get(t.homes.home(lane)) {
            q.push_refused(channel, message.clone(), pattern);
        }
        t.active.wake();
        true
    }

    /// The error for `wait_active` on `channel` (registry `flags`), while
    /// it stands refused.
    /// `pattern`: of a pattern.
    pub(crate) fn error(&self, flags: u8, channel: &[u8], pattern: bool) -> Option<Error> {
        if flags & REFUSED == 0 {
            return None;
        }
        let message = self.map(pattern).lock().get(channel).cloned()?;
        Some(Error::SubscribeRefused {
            channel: channel.into(),
            message,
        })
    }

    fn map(&self, pattern: bool) -> &Mutex<HashMap<Box<[u8]>, Arc<str>>> {
        match pattern {
            true => &self.patterns,
            false => &self.channels,
        }
    }
}
