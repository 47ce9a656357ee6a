//! Publishes in flight, and a pool of their buffers: what lets a
//! fire-and-forget cluster publish allocate nothing in steady state.
//!
//! A publish keeps its server channel name and payload until its reply
//! (a `MOVED`, `ASK` or `TRYAGAIN` sends it again). Its buffer comes from
//! the pool; on the way to a node it waits in the table, under an index the
//! node's engine hands back with the reply (no boxed callback per publish);
//! an ordinary reply gives the buffer back to the pool.
//!
//! Memory stays bounded: the table has one entry per publish in flight at
//! the peak (each node's staged bytes are bounded by backpressure), and the
//! pool keeps at most [`POOL_BYTES`] of buffers, none over [`BUF_MAX`].

use parking_lot::Mutex;

use crate::cluster::publish::PubMsg;

/// Buffer bytes the pool keeps at most.
pub(crate) const POOL_BYTES: usize = 32 * 1024 * 1024;
/// A buffer larger than this goes back to the allocator, not the pool.
pub(crate) const BUF_MAX: usize = 64 * 1024;

#[derive(Default)]
struct Table {
    entries: Vec<Option<PubMsg>>,
    /// Indices of empty entries (the most recently freed last).
    free: Vec<u32>,
    /// Spare buffers (empty, with their capacity).
    pool: Vec<Vec<u8>>,
    /// Capacity of the buffers in `pool`.
    pooled: usize,
}

impl Table {
    fn recycle(&mut self, mut buf: Vec<u8>) {
        let c = buf.capacity();
        if c == 0 || c > BUF_MAX || self.pooled + c > POOL_BYTES {
            return;
        }
        buf.clear();
        self.pooled += c;
        self.pool.push(buf);
    }
}

/// The publishes in flight of one instance, and the buffer pool.
#[derive(Default)]
pub(crate) struct InFlight {
    table: Mutex<Table>,
}

impl InFlight {
    /// An empty buffer for a new publish (from the pool when it has one).
    pub(crate) fn buffer(&self) -> Vec<u8> {
        let mut t = self.table.lock();
        match t.pool.pop() {
            Some(b) => {
                t.pooled -= b.capacity();
                b
            }
            None => Vec::new(),
        }
    }

    /// Gives a buffer back to the pool (or the allocator, past its limits).
    #[cfg(test)]
    pub(crate) fn recycle(&self, buf: Vec<u8>) {
        if buf.capacity() > 0 {
            self.table.lock().recycle(buf);
        }
    }

    /// Keeps `msg` until its reply; returns its index. `None` when the
    /// table is at `u32::MAX` entries (the caller fails the publish).
    pub(crate) fn insert(&self, msg: PubMsg) -> Result<u32, PubMsg> {
        let mut t = self.table.lock();
        if let Some(i) = t.free.pop() {
            if let Some(e) = t.entries.get_mut(i as usize) {
                *e = Some(msg);
                return Ok(i);
            }
        }
        let Ok(i) = u32::try_from(t.entries.len()) else {
            return Err(msg);
        };
        t.entries.push(Some(msg));
        Ok(i)
    }

    /// Takes the publish at `index` out of the table. With `done` (its
    /// outcome is final) its buffer goes back to the pool and the message
    /// keeps an empty one.
    pub(crate) fn remove(&self, index: u32, done: bool) -> Option<PubMsg> {
        let mut t = self.table.lock();
        let mut msg = t.entries.get_mut(index as usize)?.take()?;
        t.free.push(index);
        if done {
            let buf = std::mem::take(&mut msg.data);
            t.recycle(buf);
        }
        Some(msg)
    }

    /// Publishes in flight and pooled buffer bytes now.
    #[cfg(test)]
    pub(crate) fn size(&self) -> (usize, usize) {
        let t = self.table.lock();
        (t.entries.len() - t.free.len(), t.pooled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn msg(data: Vec<u8>) -> PubMsg {
        PubMsg {
            data,
            wire_len: 1,
            slot: 7,
            redirects: 0,
            retries: 0,
            first: Instant::now(),
            seq: 0,
            held_at: None,
            done: None,
        }
    }

    #[test]
    fn entries_and_buffers_are_reused() {
        let f = InFlight::default();
        let mut b = f.buffer();
        b.extend_from_slice(b"xhello");
        let cap = b.capacity();
        let i = f.insert(msg(b)).ok().unwrap();
        assert_eq!(f.size(), (1, 0));
        // Kept for a retry: the bytes stay with the message.
        let m = f.remove(i, false).unwrap();
        assert_eq!(m.data, b"xhello");
        assert!(f.remove(i, false).is_none(), "taken once");
        let j = f.insert(m).ok().unwrap();
        assert_eq!(j, i, "the freed entry is reused");
        // Done: the buffer goes back to the pool, emptied.
        let m = f.remove(j, true).unwrap();
        assert!(m.data.is_empty());
        assert_eq!(f.size(), (0, cap));
        let b = f.buffer();
        assert_eq!((b.len(), b.capacity()), (0, cap));
        assert_eq!(f.size(), (0, 0));
    }

    #[test]
    fn the_pool_is_bounded() {
        let f = InFlight::default();
        f.recycle(Vec::with_capacity(BUF_MAX + 1));
        assert_eq!(f.size().1, 0, "too large to keep");
        let n = POOL_BYTES / BUF_MAX;
        for _ in 0..n + 3 {
            f.recycle(Vec::with_capacity(BUF_MAX));
        }
        assert!(f.size().1 <= POOL_BYTES, "{}", f.size().1);
        assert!(f.size().1 >= POOL_BYTES - BUF_MAX, "{}", f.size().1);
    }
}
