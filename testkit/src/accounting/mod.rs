//! Message accounting: the checker every delivery test goes through.
//!
//! Delivery is at most once, but a possible loss must never be silent and
//! one channel's messages must arrive in order. A [`Ledger`] checks exactly
//! that:
//!
//! - The publisher [`stamp`](Ledger::stamp)s every message: the payload
//!   carries (channel, per-channel sequence, publish time). It then records
//!   the publish's [`Outcome`] (a failed publish is not expected anywhere).
//! - Each subscriber instance gets a [`Tap`]; its handler passes every
//!   message and every gap or drop event to it, per channel, in the order
//!   it saw them. A tap expects every message published after it was made.
//! - At the end, [`Ledger::report`] classifies every expected message of
//!   every (tap, channel): delivered once in order, lost inside a signalled
//!   window (a gap or drop event between the deliveries around it, or after
//!   the last one), **lost silently**, duplicated or reordered; it also
//!   counts deliveries on the wrong channel, undecodable payloads and
//!   channels whose messages changed handler thread: once, one way, a
//!   move ([`Ledger::allow_moves`]); any change after that, a split.
//!   [`Report::assert_clean`] fails the test on any of those.
//!
//! ```
//! use testkit::accounting::{Ledger, Outcome, Signal};
//! let ledger = Ledger::new(["a", "b"]);
//! let tap = ledger.tap("subscriber");
//! let mut payload = Vec::new();
//! for round in 0..3 {
//!     for ch in 0..2 {
//!         let stamp = ledger.stamp(ch, &mut payload, 32);
//!         ledger.outcome(stamp, Outcome::Acked);
//!         // A handler that loses "b" round 1 but says so:
//!         if ch == 1 && round == 1 {
//!             tap.signal(b"b", Signal::Gap);
//!             continue;
//!         }
//!         tap.message(ledger.name(ch), &payload);
//!     }
//! }
//! let report = ledger.report();
//! report.assert_clean();
//! assert_eq!(report.counts.delivered, 5);
//! assert_eq!(report.counts.lost_signalled, 1);
//! ```

mod classify;
mod report;
mod tap;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking::Mutex;

pub use classify::{Counts, Fate};
use classify::{Ticks, MAX_SEQ, TICK_US};
use report::{incidents, ticks};
pub use report::{Incident, Report};
pub use tap::Tap;
use tap::{TapLog, Threads, NOT_EXPECTED};

/// A tiny lock wrapper over `std::sync::Mutex` that ignores poisoning (a
/// panicking test thread must not hide the report of the others).
mod parking {
    pub(crate) struct Mutex<T>(std::sync::Mutex<T>);
    impl<T> Mutex<T> {
        pub(crate) fn new(t: T) -> Self {
            Mutex(std::sync::Mutex::new(t))
        }
        pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|p| p.into_inner())
        }
    }
}

/// Bytes a stamped payload needs: sequence (8), publish time (8), channel
/// index (4).
pub const STAMP_LEN: usize = 20;

/// The identity of one published message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Index of the channel in the ledger.
    pub channel: usize,
    /// Its sequence number on that channel (0, 1, 2, …).
    pub seq: u32,
}

/// What became of a publish, as the publisher learned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// The server acknowledged it.
    Acked,
    /// Handed over without an acknowledgement (fire-and-forget): expected.
    Sent,
    /// It failed (the kind, for the report): not expected.
    Failed(&'a str),
}

/// Loss signals a handler passes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// A gap event: the channel was resubscribed after a possible loss.
    Gap,
    /// A drop event: messages of the channel were dropped (queue full).
    Drop,
    /// An unrecoverable event: a recoverable channel's history could not
    /// give back what it missed (the only signal that excuses a loss on a
    /// channel marked with [`Ledger::mark_recoverable`]).
    Unrecoverable,
}

const PENDING: u8 = 0;
const ACKED: u8 = 1;
const SENT: u8 = 2;
/// Failure kinds are `FAILED + index` into `Published::kinds`.
const FAILED: u8 = 3;

#[derive(Clone, Copy)]
pub(super) struct PubRec {
    pub(super) at: Ticks,
    pub(super) outcome: u8,
}

#[derive(Default)]
struct Published {
    per_channel: Vec<Vec<PubRec>>,
    kinds: Vec<String>,
}

pub(super) struct Names {
    pub(super) names: Vec<Vec<u8>>,
    pub(super) index: HashMap<Vec<u8>, u32>,
    pub(super) epoch: Instant,
}

impl Names {
    pub(super) fn now(&self) -> Ticks {
        let us = self.epoch.elapsed().as_micros() as u64 / TICK_US;
        us.min(u64::from(u32::MAX)) as Ticks
    }
}

/// The publish record and the taps of one test run. Share it with an
/// `Arc`; every method takes `&self`.
pub struct Ledger {
    names: Arc<Names>,
    published: Mutex<Published>,
    taps: Mutex<Vec<Arc<Tap>>>,
    /// Per channel: recoverable (the strict verdict).
    strict: Mutex<Vec<bool>>,
    /// Moves of a channel to another handler thread that
    /// [`Report::is_clean`] allows ([`Ledger::allow_moves`]).
    allowed_moves: AtomicU64,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("channels", &self.names.names.len())
            .field("taps", &self.taps.lock().len())
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// A ledger over a fixed set of channels (their index is their position).
    ///
    /// # Panics
    ///
    /// When a name repeats.
    pub fn new<I>(channels: I) -> Ledger
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let names: Vec<Vec<u8>> = channels.into_iter().map(|c| c.as_ref().to_vec()).collect();
        let n = names.len();
        let index: HashMap<Vec<u8>, u32> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u32))
            .collect();
        assert_eq!(index.len(), names.len(), "channel names repeat");
        let published = Published {
            per_channel: vec![Vec::new(); names.len()],
            kinds: Vec::new(),
        };
        Ledger {
            names: Arc::new(Names {
                names,
                index,
                epoch: Instant::now(),
            }),
            published: Mutex::new(published),
            taps: Mutex::new(Vec::new()),
            strict: Mutex::new(vec![false; n]),
            allowed_moves: AtomicU64::new(0),
        }
    }

    /// Marks channels (indexes) as recoverable: their verdict is strict.
    /// Every expected message must be delivered once and in order; a gap
    /// or drop event excuses no loss, only an unrecoverable event does
    /// (counted apart, in [`Counts::lost_unrecoverable`]); a loss it does
    /// not cover is counted in [`Counts::lost_silent`]. [`Report::recoverable`]
    /// totals these channels alone.
    ///
    /// # Panics
    ///
    /// When an index is out of range.
    pub fn mark_recoverable(&self, channels: &[usize]) {
        let mut strict = self.strict.lock();
        for &c in channels {
            strict[c] = true;
        }
    }

    /// Allows `n` moves in all ([`Report::moved`]): one-way changes of a
    /// channel's handler thread, each from a thread the channel never
    /// comes back to. The library moves a channel it found slow and counts
    /// it; a test passes that count here. 0 (the default) allows none. A
    /// channel that changes thread again after its move is a
    /// [`Report::split`], never allowed.
    pub fn allow_moves(&self, n: u64) {
        self.allowed_moves.store(n, Ordering::Relaxed);
    }

    /// Whether channel `i` is marked recoverable.
    pub fn is_recoverable(&self, i: usize) -> bool {
        self.strict.lock().get(i).copied().unwrap_or(false)
    }

    /// The channels, in index order.
    pub fn names(&self) -> &[Vec<u8>] {
        &self.names.names
    }

    /// Channel `i`'s name.
    ///
    /// # Panics
    ///
    /// When `i` is out of range.
    pub fn name(&self, i: usize) -> &[u8] {
        &self.names.names[i]
    }

    /// The index of `channel`, if it is in the ledger.
    pub fn index_of(&self, channel: &[u8]) -> Option<usize> {
        self.names.index.get(channel).map(|&i| i as usize)
    }

    /// Time since the ledger was made (the clock of every record).
    pub fn elapsed(&self) -> Duration {
        self.names.epoch.elapsed()
    }

    /// A new subscriber instance that expects every message published from
    /// now on, on every channel.
    pub fn tap(&self, name: &str) -> Arc<Tap> {
        let all: Vec<usize> = (0..self.names.names.len()).collect();
        self.tap_for(name, &all)
    }

    /// A new subscriber instance that expects the messages published from
    /// now on to `channels` (indexes), and none on the others.
    pub fn tap_for(&self, name: &str, channels: &[usize]) -> Arc<Tap> {
        let n = self.names.names.len();
        let mut from = vec![NOT_EXPECTED; n];
        {
            let p = self.published.lock();
            for &c in channels {
                from[c] = p.per_channel[c].len() as u32;
            }
        }
        let tap = Arc::new(Tap {
            name: name.to_string(),
            names: self.names.clone(),
            from,
            log: Mutex::new(TapLog {
                streams: vec![Vec::new(); n],
                threads: vec![Threads::default(); n],
                ..TapLog::default()
            }),
        });
        self.taps.lock().push(tap.clone());
        tap
    }

    /// Stamps the next message of channel `channel`: clears `payload` and
    /// writes (sequence, time, channel) padded with `x` to `len` bytes
    /// (at least [`STAMP_LEN`]). Record its outcome with
    /// [`Ledger::outcome`].
    ///
    /// # Panics
    ///
    /// When `channel` is out of range or a channel passes 2^32 - 3 messages.
    pub fn stamp(&self, channel: usize, payload: &mut Vec<u8>, len: usize) -> Stamp {
        let at = self.names.now();
        let seq = {
            let mut p = self.published.lock();
            let log = &mut p.per_channel[channel];
            let seq = log.len() as u32;
            assert!(seq <= MAX_SEQ, "too many messages on one channel");
            log.push(PubRec {
                at,
                outcome: PENDING,
            });
            seq
        };
        payload.clear();
        payload.extend_from_slice(&u64::from(seq).to_le_bytes());
        payload.extend_from_slice(&u64::from(at).to_le_bytes());
        payload.extend_from_slice(&(channel as u32).to_le_bytes());
        payload.resize(len.max(STAMP_LEN), b'x');
        Stamp { channel, seq }
    }

    /// Records what became of a stamped publish (the last call wins).
    pub fn outcome(&self, stamp: Stamp, outcome: Outcome<'_>) {
        let mut p = self.published.lock();
        let code = match outcome {
            Outcome::Acked => ACKED,
            Outcome::Sent => SENT,
            Outcome::Failed(kind) => {
                let i = match p.kinds.iter().position(|k| k == kind) {
                    Some(i) => i,
                    None => {
                        p.kinds.push(kind.to_string());
                        p.kinds.len() - 1
                    }
                };
                FAILED.saturating_add(i.min(250) as u8)
            }
        };
        if let Some(rec) = p
            .per_channel
            .get_mut(stamp.channel)
            .and_then(|l| l.get_mut(stamp.seq as usize))
        {
            rec.outcome = code;
        }
    }

    /// Publishes whose outcome is not recorded yet.
    pub fn pending(&self) -> u64 {
        let p = self.published.lock();
        p.per_channel
            .iter()
            .flatten()
            .filter(|r| r.outcome == PENDING)
            .count() as u64
    }

    /// Waits (bounded) until every publish has an outcome.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Timeout`] with the count still pending.
    pub fn wait_outcomes(&self, bound: Duration) -> Result<(), crate::Error> {
        crate::wait_for("every publish's outcome", bound, || {
            Ok((self.pending() == 0).then_some(()))
        })
        .map_err(|e| annotate(e, format!("{} still pending", self.pending())))
    }

    /// Whether every tap has delivered the last expected message of every
    /// channel it expects (so that nothing is still in flight).
    pub fn caught_up(&self) -> bool {
        self.lagging(1).is_empty()
    }

    /// Up to `limit` (tap, channel) pairs that have not delivered their
    /// last expected message yet.
    pub fn lagging(&self, limit: usize) -> Vec<(String, Vec<u8>)> {
        let last: Vec<Option<u32>> = {
            let p = self.published.lock();
            p.per_channel
                .iter()
                .map(|l| l.iter().rposition(|r| r.outcome < FAILED).map(|i| i as u32))
                .collect()
        };
        let mut out = Vec::new();
        for tap in self.taps.lock().iter() {
            let log = tap.log.lock();
            for (c, &from) in tap.from.iter().enumerate() {
                let Some(want) = last[c].filter(|&l| from != NOT_EXPECTED && l >= from) else {
                    continue;
                };
                // The last message sits near the end: search from there.
                let got = log.streams[c].iter().rev().any(|e| e.seq == want);
                if !got {
                    out.push((tap.name.clone(), self.names.names[c].clone()));
                    if out.len() >= limit {
                        return out;
                    }
                }
            }
        }
        out
    }

    /// Waits (bounded) until [`Ledger::caught_up`]: publish a last round
    /// after the faults, then call this before [`Ledger::report`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::Timeout`] naming a few lagging (tap, channel) pairs.
    pub fn wait_caught_up(&self, bound: Duration) -> Result<(), crate::Error> {
        crate::wait_for("every subscriber's last message", bound, || {
            Ok(self.caught_up().then_some(()))
        })
        .map_err(|e| {
            let lag: Vec<String> = self
                .lagging(5)
                .into_iter()
                .map(|(t, c)| format!("{t}/{}", String::from_utf8_lossy(&c)))
                .collect();
            annotate(e, format!("lagging: {}", lag.join(", ")))
        })
    }

    /// Up to `limit` (tap, channel) pairs whose handler has not yet got a
    /// message published at or after `since` (ledger clock).
    pub fn stale(&self, since: Duration, limit: usize) -> Vec<(String, Vec<u8>)> {
        let since = (since.as_micros() as u64 / TICK_US).min(u64::from(u32::MAX)) as Ticks;
        let p = self.published.lock();
        let mut out = Vec::new();
        for tap in self.taps.lock().iter() {
            let log = tap.log.lock();
            for (c, &from) in tap.from.iter().enumerate() {
                if from == NOT_EXPECTED {
                    continue;
                }
                let recs = &p.per_channel[c];
                let fresh = log.streams[c].iter().rev().any(|e| {
                    !e.is_signal() && recs.get(e.seq as usize).is_some_and(|r| r.at >= since)
                });
                if !fresh {
                    out.push((tap.name.clone(), self.names.names[c].clone()));
                    if out.len() >= limit {
                        return out;
                    }
                }
            }
        }
        out
    }

    /// Waits (bounded) until every tap has got, on every channel it
    /// expects, a message published at or after `since` (ledger clock):
    /// "delivery is back everywhere". Keep publishing meanwhile. Returns
    /// how long it took from `since`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Timeout`] naming a few stale (tap, channel) pairs.
    pub fn wait_fresh(&self, since: Duration, bound: Duration) -> Result<Duration, crate::Error> {
        crate::wait_for("delivery of fresh messages everywhere", bound, || {
            Ok(self
                .stale(since, 1)
                .is_empty()
                .then(|| self.elapsed().saturating_sub(since)))
        })
        .map_err(|e| {
            let stale: Vec<String> = self
                .stale(since, 5)
                .into_iter()
                .map(|(t, c)| format!("{t}/{}", String::from_utf8_lossy(&c)))
                .collect();
            annotate(e, format!("stale: {}", stale.join(", ")))
        })
    }

    /// Classifies everything recorded so far.
    pub fn report(&self) -> Report {
        let strict = self.strict.lock().clone();
        let p = self.published.lock();
        let taps = self.taps.lock();
        let mut report = Report {
            allowed_moves: self.allowed_moves.load(Ordering::Relaxed),
            ..Report::default()
        };
        for l in &p.per_channel {
            for r in l {
                report.published += 1;
                match r.outcome {
                    PENDING => report.pending += 1,
                    ACKED => report.acked += 1,
                    SENT => report.sent += 1,
                    k => {
                        let kind = p
                            .kinds
                            .get(usize::from(k - FAILED))
                            .cloned()
                            .unwrap_or_default();
                        *report.failed.entry(kind).or_default() += 1;
                    }
                }
            }
        }
        let mut losses = Vec::new();
        for (t, tap) in taps.iter().enumerate() {
            let log = tap.log.lock();
            let mut counts = Counts::default();
            for (c, &from) in tap.from.iter().enumerate() {
                let recs = &p.per_channel[c];
                let stream = &log.streams[c];
                if from == NOT_EXPECTED {
                    let n = stream.iter().filter(|e| !e.is_signal()).count() as u64;
                    report.unwanted += n;
                    if n > 0 && report.examples.len() < 10 {
                        report.examples.push(format!(
                            "{}: {n} messages of {}, which it does not want",
                            tap.name,
                            String::from_utf8_lossy(&self.names.names[c])
                        ));
                    }
                    continue;
                }
                losses.clear();
                let (dup0, reo0) = (counts.duplicated, counts.reordered);
                let mut one = Counts::default();
                classify::classify(
                    stream,
                    from,
                    recs.len() as u32,
                    |s| recs[s as usize].outcome < FAILED,
                    strict[c],
                    &mut one,
                    &mut losses,
                );
                counts.add(&one);
                if strict[c] {
                    report.recoverable.add(&one);
                }
                incidents(t, c, stream, recs, &losses, &mut report.incidents);
                let (dup, reo) = (counts.duplicated - dup0, counts.reordered - reo0);
                if dup + reo > 0 && report.examples.len() < 10 {
                    let first = stream.first().map_or(Duration::ZERO, |e| ticks(e.at));
                    report.examples.push(format!(
                        "{}: {dup} duplicated, {reo} reordered on {} (stream from {first:?}; {})",
                        tap.name,
                        String::from_utf8_lossy(&self.names.names[c]),
                        first_out_of_order(stream, recs)
                    ));
                }
            }
            counts.unexpected += log.unknown_channel + log.garbled + log.misrouted;
            report.split += log.split;
            report.moved += log.moved;
            report.examples.extend(log.examples.iter().cloned());
            report.counts.add(&counts);
            report.taps.push((tap.name.clone(), counts));
        }
        for i in &report.incidents {
            if i.fate == Fate::Silent && report.examples.len() < 10 {
                report.examples.push(format!(
                    "{}: {} messages of {} lost silently (published {:?}..{:?})",
                    report.taps[i.tap].0,
                    i.lost,
                    String::from_utf8_lossy(&self.names.names[i.channel]),
                    i.first_published,
                    i.last_published
                ));
            }
        }
        report
    }
}

/// Where a stream first goes back: the sequence after which an older
/// one came, with both publish times and the delivery time.
fn first_out_of_order(stream: &[classify::Entry], recs: &[PubRec]) -> String {
    let mut high: Option<classify::Entry> = None;
    for e in stream.iter().filter(|e| !e.is_signal()) {
        match high {
            Some(h) if e.seq <= h.seq => {
                let at = |s: u32| recs.get(s as usize).map_or(Duration::ZERO, |r| ticks(r.at));
                return format!(
                    "first: {} (published {:?}) delivered at {:?} after {} (published {:?})",
                    e.seq,
                    at(e.seq),
                    ticks(e.at),
                    h.seq,
                    at(h.seq)
                );
            }
            _ => high = Some(*e),
        }
    }
    String::new()
}

fn annotate(e: crate::Error, note: String) -> crate::Error {
    match e {
        crate::Error::Timeout { what, waited } => crate::Error::Timeout {
            what: format!("{what}; {note}"),
            waited,
        },
        other => other,
    }
}
