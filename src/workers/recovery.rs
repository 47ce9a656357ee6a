//! Recovery of recoverable channels at the worker (sans-IO): the last
//! offset seen per channel, and what to do with each message, gap and
//! history read, in order with delivery.
//!
//! Fed by the worker: [`Tracker::handle_message`] for every message of a
//! recoverable channel (with the position from its header),
//! [`Tracker::handle_gap`] for every channel of a gap event,
//! [`Tracker::handle_confirmed`] when the server confirms a subscription,
//! [`Tracker::handle_drop`] for every channel of a drop event, and
//! [`Tracker::handle_read`] with a history read's outcome. Its outputs
//! ([`Action`]) are messages to deliver, [`Unrecoverable`] events, and
//! reads to start; the worker carries them out in order.
//!
//! - An in-order message (the next offset of the same epoch, or the first
//!   one seen) is delivered at once (no allocation); one at or below the
//!   last offset is a duplicate and is skipped.
//! - A jump (a later offset, or another epoch) or a drop starts a read of
//!   what follows the last offset. Until it comes back, the channel's live
//!   messages are held (at most [`HOLD`]; past that the channel gives up
//!   with [`Unrecoverable`] and delivers what it holds).
//! - A gap reads once the server confirms the channel's new subscription,
//!   not before: a read that ran on the server before the subscription did
//!   would miss what was published in between, and a channel's last
//!   message has no later one to show the jump. After the confirmation,
//!   whatever was published before it is in the history and whatever
//!   comes after arrives live (duplicates are skipped by offset).
//! - A gap, a confirmation or a drop that comes while a read is out reads
//!   once more after it, whatever that read's outcome (a failed read is
//!   tried again once per such event, never in a loop).
//! - A continuous read is delivered, then the held messages that follow it
//!   (duplicates skipped); a full page reads on. A read that is not
//!   continuous (trimmed, expired, a new epoch) or that failed gives
//!   [`Unrecoverable`], then what the same epoch still has, then the held
//!   messages. Reads that fail in a row (one outage) give one event until
//!   a read succeeds; a new epoch is read from its first offset.
//!
//! [`Unrecoverable`]: Action::Unrecoverable

use std::collections::{HashMap, VecDeque};

use crate::error::Error;
use crate::history::{History, Position};

/// The most live messages one channel holds while its read is out.
pub(crate) const HOLD: usize = 4096;

/// Messages one recovery read asks for (a full page reads on).
pub(crate) const PAGE: usize = 1000;

/// What the worker does next, in order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Deliver this payload of the channel.
    Deliver(Vec<u8>),
    /// Tell the handler the channel lost messages that history cannot give
    /// back.
    Unrecoverable {
        /// The last position delivered before the loss.
        since: Option<Position>,
        /// The channel's position in its history, when the read got one.
        now: Option<Position>,
        /// Why.
        reason: String,
    },
    /// Read up to [`PAGE`] messages after `since`; hand the outcome to
    /// [`Tracker::handle_read`] with `id`.
    Read {
        /// Read after this position.
        since: Position,
        /// The read's id.
        id: u64,
    },
}

#[derive(Default)]
struct Chan {
    last: Option<Position>,
    reading: Option<Reading>,
    /// The last read failed and said so: further failures before a read
    /// succeeds are the same outage, and give no further event.
    read_failed: bool,
    /// A gap came: read once the new subscription is confirmed (see
    /// [`Tracker::handle_gap`]).
    resubscribing: bool,
    /// The earlier epochs the last read that crossed into a new epoch
    /// named, with where each ended: their late live messages are
    /// duplicates up to that end.
    earlier: Box<[Position]>,
}

struct Reading {
    id: u64,
    since: Position,
    held: VecDeque<(Position, Vec<u8>)>,
    /// A gap's confirmation or a drop came while the read was out: read
    /// once more after it.
    again: bool,
}

/// The recovery state of one worker's recoverable channels.
#[derive(Default)]
pub(crate) struct Tracker {
    chans: HashMap<Vec<u8>, Chan>,
    next_id: u64,
    /// The channel count at which [`Tracker::sweep`] looks again.
    sweep_at: usize,
    /// Counts since the last [`Tracker::take_counts`].
    counts: Counts,
}

/// What the tracker did, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Messages delivered from history reads.
    pub(crate) recovered: u64,
    /// Messages skipped as duplicates (an offset already delivered).
    pub(crate) duplicates: u64,
    /// Unrecoverable events.
    pub(crate) unrecoverable: u64,
}

/// The fewest channels worth a sweep.
const SWEEP_MIN: usize = 1024;

impl Tracker {
    /// Forgets channels that are no longer subscribed (`wanted` says),
    /// once the map has doubled since the last look: with many short-lived
    /// channels the map stays about twice the subscribed set, at an
    /// amortised constant cost per new channel. A channel still reading
    /// is kept until its read is back.
    pub(crate) fn sweep(&mut self, wanted: impl Fn(&[u8]) -> bool) {
        if self.chans.len() < self.sweep_at.max(SWEEP_MIN) {
            return;
        }
        self.chans.retain(|ch, c| c.reading.is_some() || wanted(ch));
        self.sweep_at = self.chans.len() * 2;
    }

    /// Forgets `channel` (given up): a later subscription starts afresh.
    pub(crate) fn forget(&mut self, channel: &[u8]) {
        self.chans.remove(channel);
    }

    /// The counts since the last call, reset.
    pub(crate) fn take_counts(&mut self) -> Counts {
        std::mem::take(&mut self.counts)
    }

    /// Channels tracked now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.chans.len()
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A message of `channel` at `at`: true to deliver `payload` now;
    /// otherwise it was held or skipped, and `out` says what else to do.
    pub(crate) fn handle_message(
        &mut self,
        channel: &[u8],
        at: Position,
        payload: &[u8],
        out: &mut Vec<Action>,
    ) -> bool {
        let id = self.id();
        let n = &mut self.counts;
        let c = chan(&mut self.chans, channel);
        if let Some(r) = &mut c.reading {
            if r.held.len() < HOLD {
                r.held.push_back((at, payload.to_vec()));
                return false;
            }
            // Too far behind: give up on the read, deliver what is held.
            let r = c.reading.take().expect("reading");
            n.unrecoverable += 1;
            out.push(Action::Unrecoverable {
                since: Some(r.since),
                now: None,
                reason: format!("more than {HOLD} live messages came while recovering"),
            });
            c.last = None;
            drain(c, r.held, out, || id, n);
            return match c.reading {
                Some(ref mut r) => {
                    r.held.push_back((at, payload.to_vec()));
                    false
                }
                None => step(c, at, payload, id, out, n),
            };
        }
        step(c, at, payload, id, out, n)
    }

    /// A gap event named `channel`: its subscription is being made again.
    /// What it missed is read once the server confirms the new
    /// subscription ([`Tracker::handle_confirmed`]), so that the read runs
    /// on the server after the subscription does.
    pub(crate) fn handle_gap(&mut self, channel: &[u8]) {
        if let Some(c) = self.chans.get_mut(channel) {
            c.resubscribing = true;
        }
        // Unknown: nothing delivered yet, nothing to recover from.
    }

    /// The server confirmed `channel`'s subscription: after a gap, read
    /// what it missed (or once more after the read that is out).
    pub(crate) fn handle_confirmed(&mut self, channel: &[u8], out: &mut Vec<Action>) {
        let id = self.id();
        let Some(c) = self.chans.get_mut(channel) else {
            return;
        };
        if std::mem::take(&mut c.resubscribing) {
            start_read(c, id, out);
        }
    }

    /// A drop event named `channel` (its subscription stayed up): read what
    /// it missed now (or once more after the read that is out).
    pub(crate) fn handle_drop(&mut self, channel: &[u8], out: &mut Vec<Action>) {
        let id = self.id();
        if let Some(c) = self.chans.get_mut(channel) {
            start_read(c, id, out);
        }
    }

    /// The outcome of read `id` of `channel`.
    pub(crate) fn handle_read(
        &mut self,
        channel: &[u8],
        id: u64,
        result: Result<History, Error>,
        out: &mut Vec<Action>,
    ) {
        let next = self.id();
        let Some(c) = self.chans.get_mut(channel) else {
            return;
        };
        if c.reading.as_ref().is_none_or(|r| r.id != id) {
            return; // given up meanwhile
        }
        let mut r = c.reading.take().expect("reading");
        let since = r.since;
        if result.is_ok() {
            c.read_failed = false;
        }
        match result {
            Ok(h) if h.continuous => {
                let full = h.messages.len() >= PAGE;
                let (now, from) = (
                    h.position.map_or(since.epoch, |p| p.epoch),
                    h.resumes(since),
                );
                let from = from.unwrap_or(since.offset);
                if now != since.epoch {
                    c.earlier = retired(h.earlier, since);
                }
                if from < since.offset {
                    self.counts.unrecoverable += 1;
                    out.push(Action::Unrecoverable {
                        since: Some(since),
                        now: h.position,
                        reason: lost_writes(since, from),
                    });
                }
                let mut last = Position {
                    epoch: now,
                    offset: from,
                };
                self.counts.recovered += deliver_after(&mut last, h.messages, out);
                c.last = Some(last);
                // A full page reads on (below).
                r.again |= full;
            }
            Ok(h) => {
                self.counts.unrecoverable += 1;
                out.push(Action::Unrecoverable {
                    since: Some(since),
                    now: h.position,
                    reason: "the history no longer has every message since (trimmed, \
                             expired, or a new epoch)"
                        .into(),
                });
                match (h.position, h.resumes(since)) {
                    (Some(p), Some(from)) => {
                        // The same epoch, or one this history continues:
                        // what is left after the trimmed range.
                        if p.epoch != since.epoch {
                            c.earlier = retired(h.earlier, since);
                        }
                        let mut last = Position {
                            epoch: p.epoch,
                            offset: from,
                        };
                        self.counts.recovered += deliver_after(&mut last, h.messages, out);
                        c.last = Some(last);
                    }
                    (Some(p), None) => {
                        let start = Position {
                            epoch: p.epoch,
                            offset: h.epoch_start(),
                        };
                        read_new_epoch(c, r, start, h.earlier, next, out);
                        return;
                    }
                    (None, _) => c.last = None,
                }
            }
            Err(e) => {
                // The held messages are kept for the next read (the next
                // jump among them reads again at once). When a read once
                // more is owed (below), only its failure is told.
                if !c.read_failed && !r.again {
                    c.read_failed = true;
                    self.counts.unrecoverable += 1;
                    out.push(Action::Unrecoverable {
                        since: Some(since),
                        now: None,
                        reason: format!("the history read failed: {e}"),
                    });
                }
            }
        }
        if std::mem::take(&mut r.again) {
            if let Some(last) = c.last {
                // A full page, or a gap's confirmation or a drop that came
                // while this read was out: what that stood for may be newer
                // than what this read found, or, if it failed, the history
                // may be back.
                r.id = next;
                r.since = last;
                c.reading = Some(r);
                out.push(Action::Read {
                    since: last,
                    id: next,
                });
                return;
            }
        }
        drain(c, r.held, out, || next, &mut self.counts);
    }
}

/// A read of `c` (`r`) that found a new epoch beginning at `start`: only
/// the old one's tail is gone. The new one is read from its start (its
/// first offsets may have come while this one was away) as read `next`,
/// after the held messages of the old epoch.
fn read_new_epoch(
    c: &mut Chan,
    mut r: Reading,
    start: Position,
    earlier: Vec<Position>,
    next: u64,
    out: &mut Vec<Action>,
) {
    let mut last = r.since;
    let (old, new): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut r.held)
        .into_iter()
        .partition(|(at, _)| at.epoch == last.epoch);
    for (at, payload) in old {
        if at.offset > last.offset {
            last = at;
            out.push(Action::Deliver(payload));
        }
    }
    c.earlier = retired(earlier, last);
    r.held = new;
    r.id = next;
    r.since = start;
    r.again = false;
    c.last = Some(start);
    c.reading = Some(r);
    out.push(Action::Read {
        since: start,
        id: next,
    });
}

/// Reads what follows `c`'s last offset as read `id`, or once more after
/// the read that is out (nothing before a first message).
fn start_read(c: &mut Chan, id: u64, out: &mut Vec<Action>) {
    match (&mut c.reading, c.last) {
        (Some(r), _) => r.again = true,
        (None, Some(since)) => {
            c.reading = Some(Reading {
                id,
                since,
                held: VecDeque::new(),
                again: false,
            });
            out.push(Action::Read { since, id });
        }
        (None, None) => {}
    }
}

/// Why a read that crossed into a new epoch gives `Unrecoverable`
/// although it is continuous: the node that now has the history never got
/// offsets `from + 1 ..= since.offset` of `since`'s epoch (the subscriber
/// had them; writes to the old node after them, if any, are gone).
fn lost_writes(since: Position, from: u64) -> String {
    format!(
        "the channel's history moved to a node without the last writes of epoch {} \
         (offsets {}..={}, which were delivered); any later ones to the old node are lost",
        since.epoch,
        from + 1,
        since.offset
    )
}

/// What a channel keeps of the epochs a read moved it on from: each with
/// the last offset that is no longer news (where it ended on the node
/// that now has the history, or the last one delivered, if later).
fn retired(mut earlier: Vec<Position>, seen: Position) -> Box<[Position]> {
    match earlier.iter_mut().find(|e| e.epoch == seen.epoch) {
        Some(e) => e.offset = e.offset.max(seen.offset),
        None => earlier.push(seen),
    }
    earlier.into_boxed_slice()
}

/// `channel`'s state, made on first sight.
fn chan<'a>(chans: &'a mut HashMap<Vec<u8>, Chan>, channel: &[u8]) -> &'a mut Chan {
    if !chans.contains_key(channel) {
        chans.insert(channel.to_vec(), Chan::default());
    }
    chans.get_mut(channel).expect("just inserted")
}

/// Delivers `messages` past `last`, in order, moving `last`.
fn deliver_after(
    last: &mut Position,
    messages: Vec<crate::history::HistoryMessage>,
    out: &mut Vec<Action>,
) -> u64 {
    let mut n = 0;
    for m in messages {
        if m.offset > last.offset {
            last.offset = m.offset;
            out.push(Action::Deliver(m.payload));
            n += 1;
        }
    }
    n
}

/// Runs the held messages through [`step`] as if live; a new jump holds
/// the rest behind a new read.
fn drain(
    c: &mut Chan,
    held: VecDeque<(Position, Vec<u8>)>,
    out: &mut Vec<Action>,
    id: impl Fn() -> u64,
    n: &mut Counts,
) {
    let mut held = held.into_iter();
    for (at, payload) in held.by_ref() {
        if step(c, at, &payload, id(), out, n) {
            out.push(Action::Deliver(payload));
        }
        if let Some(r) = &mut c.reading {
            r.held.extend(held.by_ref());
            return;
        }
    }
}

/// A live message of a channel that is not reading: deliver, skip, or
/// hold it behind a new read.
fn step(
    c: &mut Chan,
    at: Position,
    payload: &[u8],
    id: u64,
    out: &mut Vec<Action>,
    n: &mut Counts,
) -> bool {
    match c.last {
        None => {
            c.last = Some(at);
            true
        }
        Some(last) if at.epoch == last.epoch && at.offset <= last.offset => {
            n.duplicates += 1;
            false
        }
        Some(last) if at.epoch == last.epoch && Some(at.offset) == last.offset.checked_add(1) => {
            c.last = Some(at);
            true
        }
        Some(_) if c.earlier.iter().any(|e| e.epoch == at.epoch) => {
            // A late message of an epoch the history has moved on from:
            // read already up to the epoch's end here; past it, a write
            // the node that now has the history never got (delivered, as
            // nothing else has it, once: the end moves past it).
            let Some(e) = c.earlier.iter_mut().find(|e| e.epoch == at.epoch) else {
                return false;
            };
            if at.offset <= e.offset {
                n.duplicates += 1;
                return false;
            }
            e.offset = at.offset;
            true
        }
        Some(since) => {
            let mut held = VecDeque::new();
            held.push_back((at, payload.to_vec()));
            c.reading = Some(Reading {
                id,
                since,
                held,
                again: false,
            });
            out.push(Action::Read { since, id });
            false
        }
    }
}

#[cfg(test)]
mod tests;
