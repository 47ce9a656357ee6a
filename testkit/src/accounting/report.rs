//! The checker's verdict: counts, runs of lost messages, and the text a
//! failing test prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::classify::{Counts, Entry, Fate, Loss, Ticks, MAX_SEQ, TICK_US};
use super::PubRec;

pub(super) fn ticks(t: Ticks) -> Duration {
    Duration::from_micros(u64::from(t) * TICK_US)
}

/// Groups one stream's losses into runs of consecutive sequence numbers.
pub(super) fn incidents(
    tap: usize,
    channel: usize,
    stream: &[Entry],
    recs: &[PubRec],
    losses: &[Loss],
    out: &mut Vec<Incident>,
) {
    let mut i = 0;
    while i < losses.len() {
        let start = losses[i];
        let mut end = i;
        while end + 1 < losses.len()
            && losses[end + 1].seq == losses[end].seq + 1
            && losses[end + 1].fate == start.fate
        {
            end += 1;
        }
        let last = losses[end].seq;
        let resumed = stream
            .iter()
            .find(|e| !e.is_signal() && e.seq > last && e.seq < MAX_SEQ)
            .map(|e| ticks(e.at));
        out.push(Incident {
            tap,
            channel,
            fate: start.fate,
            lost: (end - i + 1) as u64,
            first_seq: start.seq,
            last_seq: last,
            first_published: ticks(recs[start.seq as usize].at),
            last_published: ticks(recs[last as usize].at),
            resumed,
        });
        i = end + 1;
    }
}

/// A run of consecutive lost messages in one (tap, channel) stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incident {
    /// Index of the tap (creation order).
    pub tap: usize,
    /// Index of the channel.
    pub channel: usize,
    /// Signalled or silent.
    pub fate: Fate,
    /// Messages in the run.
    pub lost: u64,
    /// The run's first sequence number (on its channel).
    pub first_seq: u32,
    /// The run's last sequence number.
    pub last_seq: u32,
    /// When the first lost message was published (ledger clock).
    pub first_published: Duration,
    /// When the last lost message was published.
    pub last_published: Duration,
    /// When the handler next got a message of the channel, if it did.
    pub resumed: Option<Duration>,
}

/// Everything a run recorded, classified.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Messages stamped.
    pub published: u64,
    /// Publishes acknowledged.
    pub acked: u64,
    /// Publishes handed over without acknowledgement.
    pub sent: u64,
    /// Publishes with no outcome recorded.
    pub pending: u64,
    /// Failed publishes by kind.
    pub failed: BTreeMap<String, u64>,
    /// Totals over every tap and channel. `unexpected` also counts
    /// deliveries on an unknown channel, undecodable payloads and messages
    /// delivered on another channel than they were published to.
    pub counts: Counts,
    /// Totals over the channels marked recoverable
    /// ([`Ledger::mark_recoverable`](super::Ledger::mark_recoverable)).
    pub recoverable: Counts,
    /// Per tap: its name and its counts.
    pub taps: Vec<(String, Counts)>,
    /// Times a channel's messages changed handler thread after it had
    /// moved once: back to the thread it left, or on to a third. Must be 0.
    pub split: u64,
    /// Channels whose messages changed handler thread once, one way (the
    /// first change; a second is a split). At most
    /// [`Report::allowed_moves`].
    pub moved: u64,
    /// The moves allowed ([`Ledger::allow_moves`](super::Ledger::allow_moves);
    /// 0 unless set).
    pub allowed_moves: u64,
    /// Messages delivered to a tap on a channel it does not expect (see
    /// [`Ledger::tap_for`](super::Ledger::tap_for)): must be 0.
    pub unwanted: u64,
    /// Runs of lost messages, signalled or not.
    pub incidents: Vec<Incident>,
    /// A few described problems, for the failure message.
    pub examples: Vec<String>,
}

impl Report {
    /// Whether nothing was lost silently, duplicated, reordered, corrupted
    /// or split over threads, and no more channels moved thread than
    /// allowed.
    pub fn is_clean(&self) -> bool {
        let c = &self.counts;
        c.lost_silent == 0
            && c.duplicated == 0
            && c.reordered == 0
            && c.unexpected == 0
            && self.split == 0
            && self.moved <= self.allowed_moves
            && self.unwanted == 0
    }

    /// Publishes that failed, all kinds.
    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum()
    }

    /// Panics with the summary unless [`Report::is_clean`].
    ///
    /// # Panics
    ///
    /// On a silent loss, a duplicate, a reorder, a corrupt or unwanted
    /// delivery, a channel split over threads, or more moves than allowed.
    pub fn assert_clean(&self) {
        assert!(self.is_clean(), "delivery accounting failed:\n{self}");
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.counts;
        let mut failed = String::new();
        for (k, n) in &self.failed {
            let _ = write!(failed, " {k}={n}");
        }
        writeln!(
            f,
            "published {} (acked {}, sent {}, pending {}, failed {}{})",
            self.published,
            self.acked,
            self.sent,
            self.pending,
            self.failed_total(),
            failed
        )?;
        writeln!(
            f,
            "delivered {} lost_signalled {} lost_silent {} duplicated {} reordered {} \
             unexpected {} split {} moved {} (allowed {}) unwanted {} signals {} delivered_failed {} \
             before_window {}",
            c.delivered,
            c.lost_signalled,
            c.lost_silent,
            c.duplicated,
            c.reordered,
            c.unexpected,
            self.split,
            self.moved,
            self.allowed_moves,
            self.unwanted,
            c.signals,
            c.delivered_failed,
            c.before_window
        )?;
        let r = &self.recoverable;
        if r.delivered + r.lost_silent + r.lost_unrecoverable + r.signals > 0 {
            writeln!(
                f,
                "recoverable channels: delivered {} lost {} lost_unrecoverable {} duplicated {} \
                 reordered {} signals {} delivered_failed {}",
                r.delivered,
                r.lost_silent,
                r.lost_unrecoverable,
                r.duplicated,
                r.reordered,
                r.signals,
                r.delivered_failed
            )?;
        }
        for e in &self.examples {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}
