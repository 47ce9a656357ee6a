//! Publishes in flight, and a pool of their buffers: what lets a
//! fire-and-forget cluster publish allocate nothing in steady state.
//!
//! A publish keeps its server channel name and payload until its reply
//! (a `MOVED`, `ASK` or `TRYAGAIN` sends it again). Its buffer comes from
//! the pool; on the way to a node it waits in the table, under an index the
//! node's engine hands back with the reply (no boxed callback per publish);
//! an ordinary reply gives the buffer back to the pool.
//!
//! The order of calls for one send: reserve an index ([`InFlight::start`]
//! reserves one with the message's buffer, [`InFlight::reserve`] for a
//! later send; [`InFlight::release`] gives back one never used), encode
//! the message (still the caller's, so its bytes are encoded where they
//! are, not from a copy) with that index, then [`InFlight::fill`] the entry
//! with it. The reply goes to [`InFlight::complete`]; one that came before
//! `fill` (a fast reply, or a send that failed at once) is kept in the
//! entry and handed to `fill`'s caller.
//!
//! Memory stays bounded: the table has one entry per publish in flight at
//! the peak (each node's staged bytes are bounded by backpressure), and the
//! pool keeps at most [`POOL_BYTES`] of buffers, none over [`BUF_MAX`].

use parking_lot::Mutex;

use crate::cluster::publish::{Done, PubMsg};
use crate::error::Error;

/// Buffer bytes the pool keeps at most.
pub(crate) const POOL_BYTES: usize = 32 * 1024 * 1024;
/// A buffer larger than this goes back to the allocator, not the pool.
pub(crate) const BUF_MAX: usize = 64 * 1024;

/// One index of the table.
enum Entry {
    Free,
    /// Reserved by a sender that has not filled it yet.
    Reserved,
    /// The outcome came before the sender filled the entry.
    Early(Result<i64, Error>),
    /// Waiting for its reply.
    Waiting(PubMsg),
}

#[derive(Default)]
struct Table {
    entries: Vec<Entry>,
    /// Indices of free entries (the most recently freed last).
    free: Vec<u32>,
    /// Spare buffers (empty, with their capacity).
    pool: Vec<Vec<u8>>,
    /// Capacity of the buffers in `pool`.
    pooled: usize,
}

impl Table {
    #[inline]
    fn reserve(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            if let Some(e) = self.entries.get_mut(i as usize) {
                *e = Entry::Reserved;
                return Some(i);
            }
        }
        let i = u32::try_from(self.entries.len()).ok()?;
        self.entries.push(Entry::Reserved);
        Some(i)
    }

    #[inline]
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

/// What [`InFlight::complete`] found.
pub(crate) enum Completed {
    /// A final reply: the message's buffer is back in the pool; run its
    /// callback, if any, with the receiver count.
    Ok(Option<Done>, i64),
    /// A final reply to a probe ([`PubMsg::probe`]): finish the message
    /// (which unparks its slot).
    Probe(PubMsg, i64),
    /// An error: the message, with its bytes, for a retry or its outcome.
    Err(PubMsg, Error),
    /// Kept for the sender, which has not filled the entry yet (or nothing
    /// is at that index).
    Kept,
}

/// The publishes in flight of one instance, and the buffer pool.
#[derive(Default)]
pub(crate) struct InFlight {
    table: Mutex<Table>,
}

impl InFlight {
    /// An empty buffer for a new publish (from the pool when it has one),
    /// and an index reserved for its first send (`None` when the table is
    /// at `u32::MAX` entries): one lock for both.
    #[inline]
    pub(crate) fn start(&self) -> (Vec<u8>, Option<u32>) {
        let mut t = self.table.lock();
        let buf = match t.pool.pop() {
            Some(b) => {
                t.pooled -= b.capacity();
                b
            }
            None => Vec::new(),
        };
        (buf, t.reserve())
    }

    /// Gives back an index reserved and never filled (its message finished
    /// without being sent).
    pub(crate) fn release(&self, index: u32) {
        let mut t = self.table.lock();
        if let Some(e) = t.entries.get_mut(index as usize) {
            if matches!(e, Entry::Reserved) {
                *e = Entry::Free;
                t.free.push(index);
            }
        }
    }

    /// Gives a buffer back to the pool (or the allocator, past its limits).
    #[cfg(test)]
    pub(crate) fn recycle(&self, buf: Vec<u8>) {
        if buf.capacity() > 0 {
            self.table.lock().recycle(buf);
        }
    }

    /// Reserves an index for a message about to be sent. `None` when the
    /// table is at `u32::MAX` entries (the caller fails the publish).
    pub(crate) fn reserve(&self) -> Option<u32> {
        self.table.lock().reserve()
    }

    /// Keeps `msg` at its reserved `index` until its reply (`None`). When
    /// the outcome came first, gives the message back with it (with a final
    /// reply, its buffer is back in the pool and it keeps an empty one).
    pub(crate) fn fill(&self, index: u32, mut msg: PubMsg) -> Option<(PubMsg, Result<i64, Error>)> {
        let mut t = self.table.lock();
        let t = &mut *t;
        let Some(e) = t.entries.get_mut(index as usize) else {
            return Some((msg, Err(Error::Shutdown)));
        };
        if matches!(e, Entry::Reserved) {
            *e = Entry::Waiting(msg);
            return None;
        }
        if !matches!(e, Entry::Early(_)) {
            // Not reserved: never happens (the entry stays as it was).
            return Some((msg, Err(Error::Shutdown)));
        }
        let Entry::Early(r) = std::mem::replace(e, Entry::Free) else {
            return Some((msg, Err(Error::Shutdown)));
        };
        t.free.push(index);
        if r.is_ok() {
            let buf = std::mem::take(&mut msg.data);
            t.recycle(buf);
        }
        Some((msg, r))
    }

    /// The outcome of the publish at `index`. A final reply gives its
    /// buffer back to the pool without moving the message out.
    pub(crate) fn complete(&self, index: u32, result: Result<i64, Error>) -> Completed {
        let mut t = self.table.lock();
        let t = &mut *t;
        let Some(e) = t.entries.get_mut(index as usize) else {
            return Completed::Kept;
        };
        match (&mut *e, result) {
            (Entry::Waiting(msg), Ok(n)) if msg.probe => {
                let Entry::Waiting(msg) = std::mem::replace(e, Entry::Free) else {
                    return Completed::Kept;
                };
                t.free.push(index);
                Completed::Probe(msg, n)
            }
            (Entry::Waiting(msg), Ok(n)) => {
                let done = msg.done.take();
                let buf = std::mem::take(&mut msg.data);
                *e = Entry::Free;
                t.free.push(index);
                t.recycle(buf);
                Completed::Ok(done, n)
            }
            (Entry::Waiting(_), Err(err)) => {
                let Entry::Waiting(msg) = std::mem::replace(e, Entry::Free) else {
                    return Completed::Kept;
                };
                t.free.push(index);
                Completed::Err(msg, err)
            }
            (Entry::Reserved, r) => {
                *e = Entry::Early(r);
                Completed::Kept
            }
            (Entry::Free | Entry::Early(_), _) => Completed::Kept,
        }
    }

    /// Publishes in flight (reserved or waiting) and pooled buffer bytes.
    #[cfg(test)]
    pub(crate) fn size(&self) -> (usize, usize) {
        let t = self.table.lock();
        (t.entries.len() - t.free.len(), t.pooled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(data: Vec<u8>) -> PubMsg {
        PubMsg {
            data,
            wire_at: 0,
            wire_len: 1,
            payload_len: 0,
            token: None,
            slot: 7,
            redirects: 0,
            retries: 0,
            first: crate::cluster::publish::Stamp::UNSET,
            seq: 0,
            held_at: crate::cluster::publish::Stamp::UNSET,
            probe: false,
            done: None,
        }
    }

    fn err() -> Error {
        Error::NotConnected {
            addr: "127.0.0.1:1".parse().unwrap(),
        }
    }

    #[test]
    fn entries_and_buffers_are_reused() {
        let f = InFlight::default();
        let (mut b, i) = f.start();
        b.extend_from_slice(b"xhello");
        let cap = b.capacity();
        let i = i.unwrap();
        assert!(f.fill(i, msg(b)).is_none());
        assert_eq!(f.size(), (1, 0));
        // An error: the bytes stay with the message, for a retry.
        let Completed::Err(m, _) = f.complete(i, Err(err())) else {
            panic!("the message comes back with an error")
        };
        assert_eq!(m.data, b"xhello");
        assert!(
            matches!(f.complete(i, Ok(1)), Completed::Kept),
            "taken once"
        );
        let j = f.reserve().unwrap();
        assert_eq!(j, i, "the freed entry is reused");
        assert!(f.fill(j, m).is_none());
        // Final: the buffer goes back to the pool, emptied.
        assert!(matches!(f.complete(j, Ok(3)), Completed::Ok(None, 3)));
        assert_eq!(f.size(), (0, cap));
        let (b, k) = f.start();
        assert_eq!((b.len(), b.capacity()), (0, cap));
        assert_eq!(f.size(), (1, 0), "one index reserved");
        // Never sent: the index comes back.
        f.release(k.unwrap());
        assert_eq!(f.size(), (0, 0));
        assert_eq!(f.reserve(), k, "and is reused");
    }

    #[test]
    fn an_outcome_before_fill_goes_to_the_sender() {
        let f = InFlight::default();
        let (mut b, i) = f.start();
        b.extend_from_slice(b"xhello");
        let cap = b.capacity();
        // A reply before the sender filled the entry: kept for it.
        let i = i.unwrap();
        assert!(matches!(f.complete(i, Ok(2)), Completed::Kept));
        let Some((m, Ok(2))) = f.fill(i, msg(b)) else {
            panic!("fill hands the early reply back")
        };
        assert!(m.data.is_empty(), "a final reply recycles the buffer");
        assert_eq!(f.size(), (0, cap));
        // An error before fill (the send failed at once): bytes kept.
        let (mut b, j) = f.start();
        b.extend_from_slice(b"xagain");
        let j = j.unwrap();
        assert_eq!(j, i);
        assert!(matches!(f.complete(j, Err(err())), Completed::Kept));
        let Some((m, Err(Error::NotConnected { .. }))) = f.fill(j, msg(b)) else {
            panic!("fill hands the early error back")
        };
        assert_eq!(m.data, b"xagain");
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
