//! The pure part of the checker: one (subscriber, channel) stream against
//! what was published, classified message by message.

/// A time on the ledger's clock, in ticks of [`TICK_US`] microseconds since
/// the ledger was made (a `u32` lasts 119 hours).
pub(crate) type Ticks = u32;

/// Microseconds per [`Ticks`] unit.
pub(crate) const TICK_US: u64 = 100;

/// What a handler saw, in order: a message (its sequence number) or a
/// signal that messages may have been lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The message's sequence number, or [`GAP`] / [`DROP`].
    pub seq: u32,
    /// When the handler saw it.
    pub at: Ticks,
}

/// `seq` of a gap event (a resubscribe after a possible loss).
pub(crate) const GAP: u32 = u32::MAX;
/// `seq` of a drop event (a full worker queue dropped messages).
pub(crate) const DROP: u32 = u32::MAX - 1;
/// `seq` of an unrecoverable event (a recoverable channel's history could
/// not give back what it missed).
pub(crate) const UNRECOVERABLE: u32 = u32::MAX - 2;
/// The highest real sequence number.
pub(crate) const MAX_SEQ: u32 = u32::MAX - 3;

impl Entry {
    pub(crate) fn is_signal(self) -> bool {
        self.seq > MAX_SEQ
    }
}

/// What became of one expected message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Lost, inside a window that a gap or drop event covered.
    Signalled,
    /// Lost, and nothing told the handler. On a recoverable channel (see
    /// [`Ledger::mark_recoverable`](super::Ledger::mark_recoverable)) a
    /// gap or drop event does not excuse a loss: it is counted here too.
    Silent,
    /// Lost on a recoverable channel, inside a window that an
    /// unrecoverable event covered (the history no longer had it).
    Unrecoverable,
}

/// One lost message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loss {
    pub seq: u32,
    pub fate: Fate,
}

/// Counts for one stream (and, added up, for a whole run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Expected messages delivered once, in order.
    pub delivered: u64,
    /// Expected messages lost inside a signalled window.
    pub lost_signalled: u64,
    /// Expected messages lost with no signal: must be 0. On a recoverable
    /// channel, every loss that no unrecoverable event covers.
    pub lost_silent: u64,
    /// Expected messages of recoverable channels lost inside a window an
    /// unrecoverable event covered (allowed only where the history had
    /// lost them: the caller checks that against the server).
    pub lost_unrecoverable: u64,
    /// Deliveries of a message already delivered: must be 0.
    pub duplicated: u64,
    /// Deliveries after a newer message of the same channel: must be 0.
    pub reordered: u64,
    /// Deliveries of a sequence number never published: must be 0.
    pub unexpected: u64,
    /// Deliveries of messages whose publish failed (allowed: a timed-out
    /// publish may still have reached the server).
    pub delivered_failed: u64,
    /// Deliveries of messages published before the subscriber's window
    /// opened (allowed, not counted as expected).
    pub before_window: u64,
    /// Gap and drop events seen.
    pub signals: u64,
}

impl Counts {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Counts) {
        self.delivered += other.delivered;
        self.lost_signalled += other.lost_signalled;
        self.lost_silent += other.lost_silent;
        self.lost_unrecoverable += other.lost_unrecoverable;
        self.duplicated += other.duplicated;
        self.reordered += other.reordered;
        self.unexpected += other.unexpected;
        self.delivered_failed += other.delivered_failed;
        self.before_window += other.before_window;
        self.signals += other.signals;
    }
}

/// Classifies `stream` against the messages `from..published` of one
/// channel; `expected(seq)` says whether the publish of `seq` succeeded
/// (a failed publish is not expected). Losses are appended to `losses` in
/// sequence order. On a `strict` (recoverable) channel only an
/// unrecoverable event signals a loss; gap and drop events are counted
/// but excuse nothing.
///
/// The walk keeps the highest sequence delivered so far: every expected
/// message skipped over between two deliveries is lost, and the loss is
/// signalled when a gap or drop event came between those two deliveries
/// (or, for the messages after the last delivery, after it). A delivery
/// below the highest one is a reorder; if it was counted lost when it was
/// skipped, that loss is taken back.
pub(crate) fn classify(
    stream: &[Entry],
    from: u32,
    published: u32,
    expected: impl Fn(u32) -> bool,
    strict: bool,
    counts: &mut Counts,
    losses: &mut Vec<Loss>,
) {
    let len = published.saturating_sub(from) as usize;
    // Per message in the window: 0 = not seen, 1 = delivered, 2 = lost
    // signalled, 3 = lost silently, 4 = lost unrecoverable. Below the
    // window: seen or not.
    let lost = if strict { 4 } else { 2 };
    let mut state = vec![0u8; len];
    let mut seen_before = std::collections::HashSet::new();
    let mut next = from; // lowest sequence not yet passed
    let mut signalled = false;
    let mut local = Counts::default();
    for e in stream {
        if e.is_signal() {
            local.signals += 1;
            signalled |= !strict || e.seq == UNRECOVERABLE;
            continue;
        }
        if e.seq >= published {
            local.unexpected += 1;
            continue;
        }
        if e.seq < from {
            if seen_before.insert(e.seq) {
                local.before_window += 1;
            } else {
                local.duplicated += 1;
            }
            continue;
        }
        let i = (e.seq - from) as usize;
        match state[i] {
            1 => {
                local.duplicated += 1;
                continue;
            }
            0 if e.seq >= next => {
                for s in next..e.seq {
                    if expected(s) {
                        state[(s - from) as usize] = if signalled { lost } else { 3 };
                    }
                }
                next = e.seq + 1;
                signalled = false;
            }
            _ => {
                // Below `next`: passed already (and counted lost if it was
                // expected): a reorder, not a loss.
                state[i] = 1;
                local.reordered += 1;
                continue;
            }
        }
        state[i] = 1;
        if expected(e.seq) {
            local.delivered += 1;
        } else {
            local.delivered_failed += 1;
        }
    }
    for s in next..published {
        if expected(s) {
            state[(s - from) as usize] = if signalled { lost } else { 3 };
        }
    }
    for (i, &st) in state.iter().enumerate() {
        let fate = match st {
            2 => Fate::Signalled,
            3 => Fate::Silent,
            4 => Fate::Unrecoverable,
            _ => continue,
        };
        match fate {
            Fate::Signalled => local.lost_signalled += 1,
            Fate::Silent => local.lost_silent += 1,
            Fate::Unrecoverable => local.lost_unrecoverable += 1,
        }
        losses.push(Loss {
            seq: from + i as u32,
            fate,
        });
    }
    counts.add(&local);
}
