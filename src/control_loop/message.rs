//! A cluster publish as the publish path and the publish core carry it:
//! whole ([`PubMsg`]), or kept with its request while in flight
//! ([`KeptMsg`], small), and what the engine does with it at its reply.

use crate::control_loop::outcome::Done;
use crate::engine::clock::Stamp;
use crate::engine::kept::{KeptItem, Staged};
use crate::error::Error;

/// A publish on its way again (a redirect, a retry, the hold), or about to
/// be sent from a buffer of its own: its whole command, encoded (`SPUBLISH
/// name payload` in RESP, in one buffer), its slot, and how often it was
/// redirected or retried. A redirect or retry sends the same bytes again.
/// A new publish on the common path is a [`NewMsg`] until it needs these.
pub(crate) struct PubMsg {
    pub(crate) data: Vec<u8>,
    /// The length of the server's channel name.
    pub(crate) wire_len: u32,
    /// The payload's length (what the hold counts is name plus payload;
    /// past 4 GiB, 4 GiB).
    pub(crate) payload_len: u32,
    pub(crate) slot: u16,
    pub(crate) redirects: u32,
    pub(crate) retries: u32,
    /// When its first `TRYAGAIN`/`CLUSTERDOWN` (or no-owner) retry began:
    /// the start of its retry window (set then, so a publish that is never
    /// refused reads no clock).
    pub(crate) first: Stamp,
    /// Publish order (per instance): held publishes leave in this order.
    pub(crate) seq: u64,
    /// When it was first held.
    pub(crate) held_at: Stamp,
    /// A refused publish sent again alone: its slot stays parked (the
    /// slot's later publishes held) until its outcome, so none of them can
    /// be taken by a node that refuses this one a moment earlier.
    pub(crate) probe: bool,
    pub(crate) done: Option<Done>,
}

/// A publish kept with its request until its reply (see
/// [`crate::engine::Engine::submit_kept`]): a new one by where its bytes lie in the
/// staged bytes (small, since its connection's queue is as long as the
/// publishes in flight), or one sent again, whole.
pub(crate) enum KeptMsg {
    New(NewMsg),
    Again(Box<PubMsg>),
}

/// A new publish on its first send: what a [`PubMsg`] holds but its bytes
/// (they lie in the staged bytes, then in its I/O thread's copy of them)
/// and the counts and times of sends that have not happened.
pub(crate) struct NewMsg {
    pub(crate) staged: Staged,
    pub(crate) wire_len: u32,
    pub(crate) payload_len: u32,
    pub(crate) slot: u16,
    pub(crate) seq: u64,
    pub(crate) done: Option<Done>,
}

impl NewMsg {
    /// The whole message, with `data` its bytes.
    pub(crate) fn with_bytes(self, data: Vec<u8>) -> PubMsg {
        PubMsg {
            data,
            wire_len: self.wire_len,
            payload_len: self.payload_len,
            slot: self.slot,
            redirects: 0,
            retries: 0,
            first: Stamp::UNSET,
            seq: self.seq,
            held_at: Stamp::UNSET,
            probe: false,
            done: self.done,
        }
    }
}

impl KeptMsg {
    /// Where its bytes lie in the staged bytes, for a new one.
    pub(crate) fn staged(&self) -> Option<Staged> {
        match self {
            KeptMsg::New(n) => Some(n.staged),
            KeptMsg::Again(_) => None,
        }
    }

    pub(crate) fn is_probe(&self) -> bool {
        matches!(self, KeptMsg::Again(m) if m.probe)
    }

    pub(crate) fn take_done(&mut self) -> Option<Done> {
        match self {
            KeptMsg::New(n) => n.done.take(),
            KeptMsg::Again(m) => m.done.take(),
        }
    }

    /// The whole message; a new one's bytes copied out of `staged`, the
    /// bytes it was encoded into.
    pub(crate) fn into_msg(self, staged: &[u8]) -> PubMsg {
        match self {
            KeptMsg::New(n) => {
                let bytes = staged.get(n.staged.range()).unwrap_or_default();
                n.with_bytes(bytes.to_vec())
            }
            KeptMsg::Again(m) => *m,
        }
    }
}

impl PubMsg {
    /// What the publish hold counts: name plus payload bytes.
    pub(crate) fn cost(&self) -> usize {
        self.wire_len as usize + self.payload_len as usize
    }
}

impl KeptItem for KeptMsg {
    type Whole = PubMsg;

    fn staged(&self) -> Option<Staged> {
        KeptMsg::staged(self)
    }

    /// A probe's reply unparks its slot: it goes to the sink.
    fn wants_reply(&self) -> bool {
        self.is_probe()
    }

    #[inline]
    fn complete(&mut self, n: i64) {
        if let Some(done) = self.take_done() {
            done.run(Ok(n));
        }
    }

    fn into_whole(self, staged: &[u8]) -> PubMsg {
        self.into_msg(staged)
    }

    fn orphan(mut whole: PubMsg) {
        if let Some(done) = whole.done.take() {
            done.run(Err(Error::Shutdown));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::KeptMsg;

    #[test]
    fn a_kept_publish_is_small() {
        // Its connection's queue is as long as the publishes in flight (tens
        // of thousands under load): every byte of it is moved twice.
        let n = std::mem::size_of::<KeptMsg>();
        assert!(n <= 56, "{n} bytes");
    }
}
