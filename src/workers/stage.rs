//! The I/O side of the worker queues: the messages of one read, held per
//! worker and queued under one lock per worker when the read is done,
//! instead of one lock per message.
//!
//! Each subscribe connection's observer owns a [`Stage`] (only its I/O
//! thread touches it). A batch holds at most [`STAGE`] messages; a read
//! that brings more queues each full batch at once. The stage keeps a few
//! spare buffers per worker, refilled from the queue's free list while its
//! lock is held, so staging allocates nothing once warm.
//!
//! Wake-ups: a full batch queued in the middle of a read does not wake its
//! worker (unless the queue is a quarter full); the flush at the read's
//! end does, so a read wakes each worker it brought messages once.
//!
//! Order: a stage is flushed before its observer queues anything else
//! (an event, or a reply that completes a fence), so what one I/O thread
//! queues reaches each worker in the order it was read. A full queue
//! drops the rest of a batch and notes their channels, as
//! [`Queue::push_message`] would have one by one.
//!
//! Across connections: when a lane moves (its slot changed owner, or its
//! connection was replaced), the old connection may still hold messages
//! read before the move. Queued after the new connection's first, they
//! would reorder the channel. So [`LaneOwners`] names the one connection
//! whose messages a lane takes, and the queue checks it under its lock: a
//! message from any other connection is dropped and noted, like a full
//! queue's. The control thread moves the owner before the new
//! subscription goes out (and at the lane's gap event), so whatever the
//! new connection queues comes after the switch, and under the same lock
//! every later message of the old connection is refused. A lane that
//! comes back to a connection it left takes that connection's messages
//! only after the connection has read the confirmation of its new
//! subscription (the old subscription's late messages come before it on
//! the same stream). A connection that never lost a lane (the common case:
//! it is told after each move) only reads its counter per batch: it cannot
//! hold messages of an old subscription.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::history::Position;
use crate::workers::queue::{Inner, Item, Queue, KEEP_BUFFER};

/// Messages staged per worker before they are queued without waiting for
/// the end of the read; also the spare buffers kept per worker.
pub(crate) const STAGE: usize = 64;

/// What [`LaneOwners`] holds for a lane no connection carries.
const NO_OWNER: u64 = u64::MAX;
/// Set on a lane's owner until that connection has confirmed a
/// subscription of the lane: a connection the lane comes back to may still
/// hold messages from its old subscription, and the server sends them
/// before that confirmation.
const UNCONFIRMED: u64 = 1 << 63;

/// The connection an owner word names.
fn owner_of(word: u64) -> Option<u64> {
    (word != NO_OWNER).then_some(word & !UNCONFIRMED)
}

/// Per lane, the subscribe connection whose messages it delivers now (the
/// control thread sets it; the queues read it under their lock).
pub(crate) struct LaneOwners {
    owners: Box<[AtomicU64]>,
    /// Messages dropped because their lane had moved.
    late: AtomicU64,
}

impl LaneOwners {
    /// `lanes` lanes, none carried.
    pub(crate) fn new(lanes: usize) -> Self {
        LaneOwners {
            owners: (0..lanes).map(|_| AtomicU64::new(NO_OWNER)).collect(),
            late: AtomicU64::new(0),
        }
    }

    /// Makes `conn` (or nobody) the connection `lane` takes messages from,
    /// once `conn` confirms a subscription of it ([`LaneOwners::confirm`]);
    /// returns the connection it took them from before, if another. Only
    /// the control thread calls it.
    pub(crate) fn set(&self, lane: usize, conn: Option<u64>) -> Option<u64> {
        let slot = self.owners.get(lane)?;
        let old = owner_of(slot.load(Ordering::Acquire));
        if old == conn {
            return None;
        }
        slot.store(
            conn.map_or(NO_OWNER, |c| c | UNCONFIRMED),
            Ordering::Release,
        );
        old
    }

    /// `conn` read a confirmation of a subscription of `lane` (everything
    /// it read before is queued or dropped by now): its later messages of
    /// the lane are delivered, if it is the lane's owner.
    pub(crate) fn confirm(&self, lane: u32, conn: u64) {
        if let Some(slot) = self.owners.get(lane as usize) {
            if slot.load(Ordering::Relaxed) == conn | UNCONFIRMED {
                let _ = slot.compare_exchange(
                    conn | UNCONFIRMED,
                    conn,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// Messages dropped so far because they came from a connection their
    /// lane had left.
    pub(crate) fn late(&self) -> u64 {
        self.late.load(Ordering::Relaxed)
    }

    /// Whether `lane` has moved from `conn` to another connection (a push
    /// of `conn` about it is about the old subscription).
    pub(crate) fn moved_from(&self, lane: u32, conn: u64) -> bool {
        self.owners
            .get(lane as usize)
            .is_some_and(|o| owner_of(o.load(Ordering::Acquire)).is_some_and(|now| now != conn))
    }

    /// Whether `lane`'s messages from `conn` are delivered: it owns the
    /// lane and has confirmed a subscription of it since it got it.
    pub(crate) fn owns(&self, lane: u32, conn: u64) -> bool {
        self.owners
            .get(lane as usize)
            .is_some_and(|o| o.load(Ordering::Acquire) == conn)
    }
}

/// One worker's staged messages and spare buffers.
#[derive(Default)]
pub(super) struct Batch {
    items: Vec<Item>,
    spare: Vec<Vec<u8>>,
}

/// The lane of a channel (the placement's rule), for the rare check of a
/// connection that lost a lane.
pub(crate) type LaneOf = Arc<dyn Fn(&[u8]) -> usize + Send + Sync>;

/// Where a stage's messages come from: the connection, and what tells
/// whether it still carries their lanes.
pub(crate) struct Origin {
    /// The connection whose messages these are.
    pub(crate) conn: u64,
    /// The lane of its pattern subscriptions' messages (one per server),
    /// when the placement has patterns.
    pub(crate) pattern_lane: Option<u32>,
    pub(crate) owners: Arc<LaneOwners>,
    /// Lanes this connection has lost to another: bumped by the control
    /// thread after it moved one ([`LaneOwners::set`] names the loser).
    /// Until then every message it reads is of a lane it carries (it only
    /// subscribes lanes it owns), and queueing checks nothing.
    pub(crate) lost: Arc<AtomicU64>,
    pub(crate) lane_of: LaneOf,
}

/// Messages read and not yet queued, per worker, from one connection.
pub(crate) struct Stage {
    batches: Vec<Batch>,
    origin: Origin,
}

impl Stage {
    /// A stage for `workers` queues, of the connection `origin` names.
    pub(crate) fn new(workers: usize, origin: Origin) -> Self {
        Stage {
            batches: (0..workers.max(1)).map(|_| Batch::default()).collect(),
            origin,
        }
    }

    /// Whether nothing is staged.
    pub(crate) fn is_empty(&self) -> bool {
        self.batches.iter().all(|b| b.items.is_empty())
    }

    /// Stages a message for `queues[w]`; returns how many messages a full
    /// batch's flush dropped for want of room (queue full or closed; those
    /// of a lane that moved are counted in the owners).
    pub(crate) fn message(
        &mut self,
        queues: &[Arc<Queue>],
        w: usize,
        channel: &[u8],
        payload: &[u8],
        sent_us: u64,
        at: Option<Position>,
    ) -> u64 {
        self.stage(queues, w, Queue::message(channel, payload, sent_us, at))
    }

    /// [`Stage::message`] for a message of pattern subscription `pattern`.
    pub(crate) fn pmessage(
        &mut self,
        queues: &[Arc<Queue>],
        w: usize,
        pattern: &[u8],
        channel: &[u8],
        payload: &[u8],
        sent_us: u64,
    ) -> u64 {
        self.stage(
            queues,
            w,
            Queue::pmessage(pattern, channel, payload, sent_us),
        )
    }

    /// Stages the message `item` makes (from a spare buffer) for
    /// `queues[w]`.
    fn stage(
        &mut self,
        queues: &[Arc<Queue>],
        w: usize,
        item: impl FnOnce(Vec<u8>) -> Item,
    ) -> u64 {
        let (Some(b), Some(q)) = (self.batches.get_mut(w), queues.get(w)) else {
            return 1;
        };
        let mut dropped = 0;
        if b.items.len() >= STAGE {
            // Mid-read: the worker is woken at the read's end (this
            // message stays staged for that flush), or by a quarter-full
            // queue.
            dropped = q.put(b, &self.origin, false);
        }
        let buf = b.spare.pop().unwrap_or_default();
        b.items.push(item(buf));
        dropped
    }

    /// Queues everything staged (one lock per worker that has messages)
    /// and wakes the workers that wait; returns the messages dropped for
    /// want of room.
    pub(crate) fn flush(&mut self, queues: &[Arc<Queue>]) -> u64 {
        let origin = &self.origin;
        let batches = self.batches.iter_mut().zip(queues);
        batches.map(|(b, q)| q.put(b, origin, true)).sum()
    }
}

impl Batch {
    /// Drops and notes the messages of lanes their connection no longer
    /// carries (rare: a lane moved while the connection still had its
    /// messages) and counts them in the owners; the others keep their
    /// order.
    fn drop_moved(&mut self, g: &mut Inner, from: &Origin) {
        let carried = |item: &Item| match item {
            Item::Message {
                buf, channel_len, ..
            } => {
                let lane = (from.lane_of)(&buf[..(*channel_len).min(buf.len())]);
                from.owners.owns(lane as u32, from.conn)
            }
            Item::PMessage { .. } => from
                .pattern_lane
                .is_some_and(|lane| from.owners.owns(lane, from.conn)),
            _ => true,
        };
        let mut keep = 0;
        for i in 0..self.items.len() {
            if self.items.get(i).is_some_and(carried) {
                self.items.swap(keep, i);
                keep += 1;
            }
        }
        let mut dropped = 0;
        for item in self.items.drain(keep..) {
            dropped += drop_one(g, &mut self.spare, item);
        }
        from.owners.late.fetch_add(dropped, Ordering::Relaxed);
    }
}

/// Notes a message that is not queued (unless the queue is closed) and
/// keeps its buffer in `spare`; returns 1 for a message, 0 otherwise.
fn drop_one(g: &mut Inner, spare: &mut Vec<Vec<u8>>, item: Item) -> u64 {
    let buf = match item {
        Item::Message {
            buf, channel_len, ..
        } => {
            if !g.closed {
                g.drops.note(&buf[..channel_len.min(buf.len())]);
            }
            buf
        }
        // Its loss is signalled per pattern, as its gaps are.
        Item::PMessage {
            buf, pattern_len, ..
        } => {
            if !g.closed {
                g.pattern_drops.note(&buf[..pattern_len.min(buf.len())]);
            }
            buf
        }
        _ => return 0,
    };
    if buf.capacity() <= KEEP_BUFFER && spare.len() < STAGE {
        spare.push(buf);
    }
    1
}

impl Queue {
    /// Moves `b`'s messages into the queue under one lock: as many as fit,
    /// the rest dropped and noted (every one of them once closed), and
    /// those of lanes their connection no longer carries dropped, noted
    /// and counted in the owners; refills `b`'s spare buffers. Wakes the
    /// worker if it waits and this is the read's last put for it (`last`:
    /// a flush), or the queue is a quarter full: a long read wakes each
    /// worker once, not once per full batch. Returns the messages dropped
    /// for want of room.
    pub(super) fn put(&self, b: &mut Batch, from: &Origin, last: bool) -> u64 {
        if b.items.is_empty() {
            return 0;
        }
        let mut dropped = 0u64;
        let mut g = self.inner.lock();
        // Under the lock: whatever the lane's new connection queued before
        // is in, so the move is seen (it is made before `lost` is bumped).
        if from.lost.load(Ordering::Acquire) != 0 {
            b.drop_moved(&mut g, from);
        }
        let room = match g.closed {
            true => 0,
            false => self.capacity.saturating_sub(g.messages),
        };
        let take = room.min(b.items.len());
        g.messages += take;
        g.items.extend(b.items.drain(..take));
        for item in b.items.drain(..) {
            dropped += drop_one(&mut g, &mut b.spare, item);
        }
        while b.spare.len() < STAGE {
            match g.free.pop() {
                Some(buf) => b.spare.push(buf),
                None => break,
            }
        }
        let wake = g.waiting && (last || g.messages >= self.capacity.div_ceil(4));
        drop(g);
        if wake {
            self.wake();
        }
        dropped
    }
}
