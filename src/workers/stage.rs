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
//! Order: a stage is flushed before its observer queues anything else
//! (an event, or a reply that completes a fence), so what one I/O thread
//! queues reaches each worker in the order it was read. A full queue
//! drops the rest of a batch and notes their channels, as
//! [`Queue::push_message`] would have one by one.

use std::sync::Arc;

use super::{Item, Queue, KEEP_BUFFER};
use crate::history::Position;

/// Messages staged per worker before they are queued without waiting for
/// the end of the read; also the spare buffers kept per worker.
pub(crate) const STAGE: usize = 64;

/// One worker's staged messages and spare buffers.
#[derive(Default)]
pub(super) struct Batch {
    items: Vec<Item>,
    spare: Vec<Vec<u8>>,
}

/// Messages read and not yet queued, per worker.
pub(crate) struct Stage {
    batches: Vec<Batch>,
}

impl Stage {
    /// A stage for `workers` queues.
    pub(crate) fn new(workers: usize) -> Self {
        Stage {
            batches: (0..workers.max(1)).map(|_| Batch::default()).collect(),
        }
    }

    /// Whether nothing is staged.
    pub(crate) fn is_empty(&self) -> bool {
        self.batches.iter().all(|b| b.items.is_empty())
    }

    /// Stages a message for `queues[w]`; returns how many messages a full
    /// batch's flush dropped (queue full or closed).
    pub(crate) fn message(
        &mut self,
        queues: &[Arc<Queue>],
        w: usize,
        channel: &[u8],
        payload: &[u8],
        sent_us: u64,
        at: Option<Position>,
    ) -> u64 {
        let (Some(b), Some(q)) = (self.batches.get_mut(w), queues.get(w)) else {
            return 1;
        };
        let mut dropped = 0;
        if b.items.len() >= STAGE {
            dropped = q.put(b);
        }
        let buf = b.spare.pop().unwrap_or_default();
        b.items
            .push(Queue::message(channel, payload, sent_us, at)(buf));
        dropped
    }

    /// Queues everything staged (one lock per worker that has messages)
    /// and wakes the workers that wait; returns the messages dropped.
    pub(crate) fn flush(&mut self, queues: &[Arc<Queue>]) -> u64 {
        let batches = self.batches.iter_mut().zip(queues);
        batches.map(|(b, q)| q.put(b)).sum()
    }
}

impl Queue {
    /// Moves `b`'s messages into the queue under one lock: as many as fit,
    /// the rest dropped and noted (every one of them once closed); refills
    /// `b`'s spare buffers. Wakes the worker if it waits. Returns the
    /// messages dropped.
    pub(super) fn put(&self, b: &mut Batch) -> u64 {
        if b.items.is_empty() {
            return 0;
        }
        let mut dropped = 0u64;
        let mut g = self.inner.lock();
        let room = match g.closed {
            true => 0,
            false => self.capacity.saturating_sub(g.messages),
        };
        let take = room.min(b.items.len());
        g.messages += take;
        g.items.extend(b.items.drain(..take));
        for item in b.items.drain(..) {
            if let Item::Message {
                buf, channel_len, ..
            } = item
            {
                dropped += 1;
                if !g.closed {
                    g.drops.note(&buf[..channel_len.min(buf.len())]);
                }
                if buf.capacity() <= KEEP_BUFFER && b.spare.len() < STAGE {
                    b.spare.push(buf);
                }
            }
        }
        while b.spare.len() < STAGE {
            match g.free.pop() {
                Some(buf) => b.spare.push(buf),
                None => break,
            }
        }
        let wake = g.waiting;
        drop(g);
        if wake {
            self.cond.notify_one();
        }
        dropped
    }
}
