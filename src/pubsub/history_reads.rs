//! Reading a channel's history through an instance: one atomic read on
//! the channel's server, blocking or on a helper thread.

use crate::engine::Pending;
use crate::error::Error;
use crate::history::{History, Position};
use crate::pubsub::awaiting;
use crate::pubsub::instance::{Placed, PubSub};

impl PubSub {
    /// Reads a channel's history (see [`PubSubBuilder::history`](crate::PubSubBuilder::history)): the
    /// `limit` messages after `since` (in its epoch), or without `since`
    /// the last `limit` messages, oldest first, with the channel's
    /// position now. [`History::continuous`] says whether nothing is
    /// missing between `since` and the first message returned: when it is
    /// false, what was published since `since` is partly gone (trimmed by
    /// the caps, or a new epoch began). Read again from the last offset
    /// returned for more.
    ///
    /// One atomic read on the channel's server (its slot's owner on a
    /// cluster), blocking like [`PubSub::command`] (the async form:
    /// [`PubSub::history_pending`]). Works for any channel;
    /// one that never had history reads as empty, with no position.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a `limit` of 0 or past 100,000;
    /// [`Error::TooLarge`] at once for a channel name the servers cannot
    /// take (as [`PubSub::subscribe`]: no such channel can have
    /// history); [`Error::History`] when the keys hold something else;
    /// otherwise as [`PubSub::command`].
    pub fn history(
        &self,
        channel: impl AsRef<[u8]>,
        since: Option<Position>,
        limit: usize,
    ) -> Result<History, Error> {
        let channel = channel.as_ref();
        self.limits.check_name(channel, false)?;
        read_history(&self.placed, channel, since, limit)
    }

    /// The awaitable form of [`PubSub::history`]: the read runs on a
    /// helper thread, so no executor thread blocks.
    ///
    /// # Errors
    ///
    /// Through the handle: as [`PubSub::history`].
    pub fn history_pending(
        &self,
        channel: impl AsRef<[u8]>,
        since: Option<Position>,
        limit: usize,
    ) -> Pending<History> {
        if let Err(e) = self.limits.check_name(channel.as_ref(), false) {
            return Pending::ready(Err(e));
        }
        let (placed, channel) = (self.placed.clone(), channel.as_ref().to_vec());
        awaiting::off_thread("history", move || {
            read_history(&placed, &channel, since, limit)
        })
    }

    /// The channel's position in its history now: its epoch and last
    /// offset, `None` when it has none (never published with history, or
    /// expired). One read, as [`PubSub::history`].
    ///
    /// # Errors
    ///
    /// As [`PubSub::history`].
    pub fn position(&self, channel: impl AsRef<[u8]>) -> Result<Option<Position>, Error> {
        Ok(self.history(channel, None, 1)?.position)
    }

    /// The awaitable form of [`PubSub::position`] (on a helper thread, as
    /// [`PubSub::history_pending`]).
    ///
    /// # Errors
    ///
    /// Through the handle: as [`PubSub::history`].
    pub fn position_pending(&self, channel: impl AsRef<[u8]>) -> Pending<Option<Position>> {
        if let Err(e) = self.limits.check_name(channel.as_ref(), false) {
            return Pending::ready(Err(e));
        }
        let (placed, channel) = (self.placed.clone(), channel.as_ref().to_vec());
        awaiting::off_thread("history", move || {
            Ok(read_history(&placed, &channel, None, 1)?.position)
        })
    }
}

/// Reads `channel`'s history on its server (see [`PubSub::history`]).
fn read_history(
    placed: &Placed,
    channel: &[u8],
    since: Option<Position>,
    limit: usize,
) -> Result<History, Error> {
    let (mut meta, mut stream) = (Vec::new(), Vec::new());
    let (route, envelope): (Vec<u8>, bool) = match placed {
        Placed::Fixed(p) => {
            crate::history::keys_into(channel, &mut meta, &mut stream);
            (channel.to_vec(), p.sub.shared.config.envelope)
        }
        Placed::Cluster(p) => {
            let parts = p.partitions();
            let mut base = Vec::new();
            parts.redis_channel_at(parts.partition_of(channel), channel, &mut base);
            crate::history::keys_into(&base, &mut meta, &mut stream);
            (meta.clone(), p.shared.config.envelope)
        }
    };
    let run = |args: &[Vec<u8>]| match placed {
        Placed::Fixed(p) => p.command(&route, args),
        Placed::Cluster(p) => p.command(&route, args.to_vec()).wait(),
    };
    crate::history::read::read(run, &meta, &stream, since, limit, envelope)
}
