//! The subscriber side of the checker: what one instance's handler saw.

use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Duration;

use super::classify::{Entry, Ticks, DROP, GAP, MAX_SEQ, TICK_US, UNRECOVERABLE};
use super::parking::Mutex;
use super::{Names, Signal};

/// `Tap::from` of a channel the tap does not expect.
pub(super) const NOT_EXPECTED: u32 = u32::MAX;

/// The handler threads a channel's messages reached: two words, however
/// many messages.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Threads {
    /// The thread of its last message.
    last: Option<ThreadId>,
    /// The thread it left at its one allowed change (a move), once made.
    left: Option<ThreadId>,
}

/// A change of a channel's thread, as [`Threads::reached`] tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// Its first change: one way, from the thread it left.
    Moved,
    /// A change after the move: back to the thread it left, or on to
    /// another one.
    Split { back: bool },
}

impl Threads {
    /// Records that a message reached thread `me`; says how its thread
    /// changed, if it did. Only the first change is a move: any later one
    /// is a split, a return or a third thread alike.
    pub(super) fn reached(&mut self, me: ThreadId) -> Option<Change> {
        let last = self.last.replace(me)?;
        if last == me {
            return None;
        }
        match self.left.replace(last) {
            None => Some(Change::Moved),
            Some(left) => Some(Change::Split { back: left == me }),
        }
    }
}

#[derive(Default)]
pub(super) struct TapLog {
    pub(super) streams: Vec<Vec<Entry>>,
    pub(super) threads: Vec<Threads>,
    pub(super) split: u64,
    pub(super) moved: u64,
    pub(super) unknown_channel: u64,
    pub(super) garbled: u64,
    pub(super) misrouted: u64,
    pub(super) examples: Vec<String>,
}

impl TapLog {
    pub(super) fn example(&mut self, text: impl FnOnce() -> String) {
        if self.examples.len() < 5 {
            self.examples.push(text());
        }
    }
}

/// What one subscriber instance's handler saw. Call [`Tap::message`] and
/// [`Tap::signal`] from the handler, on the thread that runs it.
pub struct Tap {
    pub(super) name: String,
    pub(super) names: Arc<Names>,
    pub(super) from: Vec<u32>,
    pub(super) log: Mutex<TapLog>,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Tap {
    /// The tap's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A message the handler got.
    pub fn message(&self, channel: &[u8], payload: &[u8]) {
        let at = self.names.now();
        let me = std::thread::current().id();
        let mut log = self.log.lock();
        let Some(&c) = self.names.index.get(channel) else {
            log.unknown_channel += 1;
            log.example(|| format!("{}: unknown channel {channel:?}", self.name));
            return;
        };
        let c = c as usize;
        let Some((seq, stamped_channel)) = decode(payload) else {
            log.garbled += 1;
            log.example(|| format!("{}: undecodable payload {payload:?}", self.name));
            return;
        };
        if stamped_channel != c as u64 {
            log.misrouted += 1;
            log.example(|| {
                format!(
                    "{}: a message of channel #{stamped_channel} arrived on {}",
                    self.name,
                    String::from_utf8_lossy(channel)
                )
            });
            return;
        }
        let Some(seq) = u32::try_from(seq).ok().filter(|&s| s <= MAX_SEQ) else {
            log.garbled += 1;
            log.example(|| format!("{}: sequence {seq} out of range", self.name));
            return;
        };
        log.streams[c].push(Entry { seq, at });
        let change = log.threads[c].reached(me);
        let note = match change {
            None => return,
            Some(Change::Moved) => {
                log.moved += 1;
                return;
            }
            Some(Change::Split { back: true }) => "back on the handler thread it had left",
            Some(Change::Split { back: false }) => "on a third handler thread",
        };
        log.split += 1;
        log.example(|| {
            format!(
                "{}: channel {} changed thread again after its move: {note}",
                self.name,
                String::from_utf8_lossy(channel)
            )
        });
    }

    /// A gap, drop or unrecoverable event naming `channel`.
    pub fn signal(&self, channel: &[u8], signal: Signal) {
        let at = self.names.now();
        let mut log = self.log.lock();
        let Some(&c) = self.names.index.get(channel) else {
            // A signal for a channel outside the ledger is harmless.
            return;
        };
        let seq = match signal {
            Signal::Gap => GAP,
            Signal::Drop => DROP,
            Signal::Unrecoverable => UNRECOVERABLE,
        };
        log.streams[c as usize].push(Entry { seq, at });
    }

    /// Messages recorded so far (all channels).
    pub fn messages(&self) -> u64 {
        let log = self.log.lock();
        log.streams
            .iter()
            .flatten()
            .filter(|e| !e.is_signal())
            .count() as u64
    }

    /// Unrecoverable events recorded so far (all channels).
    pub fn unrecoverable(&self) -> u64 {
        let log = self.log.lock();
        log.streams
            .iter()
            .flatten()
            .filter(|e| e.seq == UNRECOVERABLE)
            .count() as u64
    }

    /// Signals recorded so far for `channel`.
    pub fn signals_for(&self, channel: &[u8]) -> u64 {
        let Some(&c) = self.names.index.get(channel) else {
            return 0;
        };
        let log = self.log.lock();
        log.streams[c as usize]
            .iter()
            .filter(|e| e.is_signal())
            .count() as u64
    }

    /// The channels (indexes) that got a signal (gap or drop) at or after
    /// `since` (time since the ledger was made).
    pub fn signalled_since(&self, since: Duration) -> Vec<usize> {
        self.marked_since(since, |e| e.is_signal())
    }

    /// The channels (indexes) that got a gap event at or after `since`.
    pub fn gapped_since(&self, since: Duration) -> Vec<usize> {
        self.marked_since(since, |e| e.seq == GAP)
    }

    fn marked_since(&self, since: Duration, mark: impl Fn(&Entry) -> bool) -> Vec<usize> {
        let log = self.log.lock();
        let since = (since.as_micros() as u64 / TICK_US).min(u64::from(u32::MAX)) as Ticks;
        log.streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.iter().any(|e| mark(e) && e.at >= since))
            .map(|(c, _)| c)
            .collect()
    }
}

/// (sequence, channel index) from a stamped payload.
fn decode(payload: &[u8]) -> Option<(u64, u64)> {
    let seq = u64::from_le_bytes(payload.get(0..8)?.try_into().ok()?);
    let channel = u32::from_le_bytes(payload.get(16..20)?.try_into().ok()?);
    Some((seq, u64::from(channel)))
}
