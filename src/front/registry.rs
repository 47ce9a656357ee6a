//! The registry of wanted subscriptions, split into lanes.
//!
//! A lane is a group of channels that always travel on the same subscribe
//! connection (see [`Routing`](super::routing::Routing)): in standalone and
//! client-side sharding mode one lane per connection; a cluster mode can use
//! one lane per partition and move lanes between connections.
//!
//! Each channel has one byte of flags. `subscribe`/`unsubscribe` only set
//! or clear [`WANT`] and queue the name on the lane's dirty list; the
//! control thread turns the difference between [`WANT`] and [`SENT`] into
//! commands, so whatever was asked last wins. [`SENT`] means "the last
//! command for this channel on the live connection was a subscribe",
//! [`ACTIVE`] that the server confirmed it.
//!
//! Names are [`Channel`]s: one allocation per channel, shared by the lane's
//! table, its dirty list and the control core's wanted set (a clone is a
//! reference count, not a copy of the name). The flag byte is the name's
//! own [`Channel::mark`]: the lane's table made the allocation, and only
//! this module reads or writes the mark, under the lane's lock.
//!
//! Memory per channel beyond its name: the allocation's 9-byte header
//! (reference count, length, the flags) and an 8-byte pointer in a hash
//! table slot plus the table's control byte and free slots, 19–28 bytes
//! depending on the load factor (the `memory_per_channel` test below
//! measures it at 1M channels; `cluster::memory_tests` measures it with the
//! control core's share).

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};

use control::Channel;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::Ordering::Relaxed;

/// The application wants the channel.
pub(crate) const WANT: u8 = 1;
/// A subscribe for it was the last command sent on the live connection.
pub(crate) const SENT: u8 = 2;
/// The server confirmed a subscribe (see [`Registry::confirm`]).
pub(crate) const ACTIVE: u8 = 4;
/// Its name is on the lane's dirty list.
pub(crate) const QUEUED: u8 = 8;
/// The server refused to subscribe it (alone, see [`Registry::refuse`]):
/// not sent again until the application subscribes it again.
pub(crate) const REFUSED: u8 = 16;
/// Given up while subscribed, and (so far) asked for again before the
/// control thread looked: if it comes back wanted, the subscription never
/// lapsed, and the application is told it is active again.
pub(crate) const TAKEN_BACK: u8 = 32;

/// FNV-1a over the written bytes, finished with a seeded 64-bit mix.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChannelHasher {
    seed: u64,
}

impl ChannelHasher {
    pub(crate) fn new(seed: u64) -> Self {
        ChannelHasher { seed }
    }
}

pub(crate) struct FnvMix {
    h: u64,
    seed: u64,
}

impl Hasher for FnvMix {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.h ^= u64::from(b);
            self.h = self.h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        let mut k = self.h ^ self.seed;
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ (k >> 33)
    }
}

impl BuildHasher for ChannelHasher {
    type Hasher = FnvMix;

    fn build_hasher(&self) -> FnvMix {
        FnvMix {
            h: 0xcbf2_9ce4_8422_2325,
            seed: self.seed,
        }
    }
}

/// What a dirty channel needs, from [`Lane::settle`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Send a subscribe.
    Subscribe,
    /// Send an unsubscribe.
    Unsubscribe,
    /// Still wanted and sent: nothing to send. `reactivated`: it is
    /// confirmed and was given up and asked for again meanwhile, so the
    /// application hears it is active again (no other path gives it an
    /// active event: no gap, no resubscribe).
    Kept { reactivated: bool },
    /// Nothing to send.
    Nothing,
}

/// One lane's channels.
pub(crate) struct Lane {
    /// The channels; each one's flags are its [`Channel::mark`] (made by
    /// this table, read and written under the lane's lock only).
    pub(crate) map: HashSet<Channel, ChannelHasher>,
    /// Channels whose wanted state changed since the control thread looked
    /// (the table's names, shared).
    pub(crate) dirty: Vec<Channel>,
}

impl Lane {
    /// [`Registry::set_wanted`] on a lane already locked (for callers that
    /// set many channels of one lane under one lock).
    pub(crate) fn set_wanted(&mut self, channel: &[u8], want: bool) -> bool {
        let fresh;
        let name = match self.map.get(channel) {
            Some(name) => name,
            None if want => {
                // The table holds a clone: one insert, no second lookup.
                fresh = Channel::new(channel);
                self.map.insert(fresh.clone());
                &fresh
            }
            None => return false,
        };
        let mut flags = name.mark().load(Relaxed);
        if want {
            // Asked for again: a refusal is forgotten and the subscribe is
            // tried anew (the server's ACL may have changed).
            flags &= !REFUSED;
            flags |= WANT;
        } else {
            if flags & SENT != 0 {
                flags |= TAKEN_BACK;
            }
            flags &= !WANT;
        }
        let settled = (flags & WANT != 0) == (flags & SENT != 0) && flags & WANT != 0;
        let queue = !settled && flags & QUEUED == 0;
        if queue {
            flags |= QUEUED;
        }
        name.mark().store(flags, Relaxed);
        if queue {
            self.dirty.push(name.clone());
        }
        queue
    }

    /// Makes room for `more` names not yet in the table, beyond those it
    /// holds (none when it already has the room).
    pub(crate) fn reserve(&mut self, more: usize) {
        self.map.reserve(more);
    }

    /// Names the table holds.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Changes `channel`'s flags with `f`, if the lane knows it, and
    /// returns what `f` returned.
    pub(crate) fn update<R>(&self, channel: &[u8], f: impl FnOnce(&mut u8) -> R) -> Option<R> {
        let mark = self.map.get(channel)?.mark();
        let mut flags = mark.load(Relaxed);
        let r = f(&mut flags);
        mark.store(flags, Relaxed);
        Some(r)
    }

    /// `channel`'s flags, if the lane knows it.
    pub(crate) fn flags(&self, channel: &[u8]) -> Option<u8> {
        self.map.get(channel).map(|c| c.mark().load(Relaxed))
    }

    /// Takes a channel off the dirty list's flags (clears `QUEUED`) and
    /// says what it needs on a connection that is up (`ready`) or not:
    /// a subscribe (now marked `SENT`), an unsubscribe, or nothing. A
    /// channel no longer wanted is forgotten.
    ///
    /// `channel` is a name taken from the dirty list: the table's own
    /// allocation (a name leaves the table only here, after it left the
    /// list, and is queued once), so its flags are read from it without a
    /// lookup.
    pub(crate) fn settle(&mut self, channel: &Channel, ready: bool) -> Settled {
        debug_assert!(
            self.map
                .get(channel.as_bytes())
                .is_some_and(|c| Channel::ptr_eq(c, channel)),
            "a queued name is the table's own"
        );
        let mark = channel.mark();
        let mut f = mark.load(Relaxed);
        f &= !QUEUED;
        let (settled, forget) = match (f & WANT != 0, f & SENT != 0) {
            (true, false) if ready => {
                f |= SENT;
                (Settled::Subscribe, false)
            }
            (true, false) => (Settled::Nothing, false),
            (true, true) => {
                let reactivated = f & (ACTIVE | TAKEN_BACK) == ACTIVE | TAKEN_BACK;
                f &= !TAKEN_BACK;
                (Settled::Kept { reactivated }, false)
            }
            (false, true) if ready => (Settled::Unsubscribe, true),
            (false, _) => (Settled::Nothing, true),
        };
        mark.store(f, Relaxed);
        if forget {
            self.map.remove(channel.as_bytes());
        }
        settled
    }
}

/// Every lane, each behind its own lock.
pub(crate) struct Registry {
    lanes: Vec<Mutex<Lane>>,
}

impl Registry {
    pub(crate) fn new(lanes: usize, seed: u64) -> Self {
        Registry {
            lanes: (0..lanes)
                .map(|i| {
                    Mutex::new(Lane {
                        map: HashSet::with_hasher(ChannelHasher::new(seed ^ i as u64)),
                        dirty: Vec::new(),
                    })
                })
                .collect(),
        }
    }

    /// How many lanes there are.
    pub(crate) fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Locks lane `i`.
    pub(crate) fn lane(&self, i: usize) -> Option<MutexGuard<'_, Lane>> {
        self.lanes.get(i).map(Mutex::lock)
    }

    /// Records that `channel` is (`want`) or is not wanted. Returns true
    /// when the control thread has something to do for it.
    pub(crate) fn set_wanted(&self, lane: usize, channel: &[u8], want: bool) -> bool {
        match self.lane(lane) {
            Some(mut l) => l.set_wanted(channel, want),
            None => false,
        }
    }

    /// A subscribe confirmation for `channel`: marks it active if a
    /// subscribe was the last command sent for it, wanted or not (an
    /// unsubscribe asked for meanwhile may be taken back before the control
    /// thread looks, and then nothing more is sent). Returns true when it
    /// became active and is wanted.
    ///
    /// With a subscribe, an unsubscribe and a subscribe in flight at once,
    /// the first confirmation already marks the channel active, slightly
    /// before the server has processed the last subscribe.
    pub(crate) fn confirm(&self, lane: usize, channel: &[u8]) -> bool {
        let Some(l) = self.lane(lane) else {
            return false;
        };
        l.update(channel, |f| {
            if *f & SENT != 0 && *f & ACTIVE == 0 {
                *f |= ACTIVE;
                *f & WANT != 0
            } else {
                false
            }
        })
        .unwrap_or(false)
    }

    /// The server refused a subscribe that carried `channel` alone: marks
    /// it refused (not sent, not active) if that subscribe is still the
    /// last word for it. Returns true when it was marked.
    pub(crate) fn refuse(&self, lane: usize, channel: &[u8]) -> bool {
        let Some(l) = self.lane(lane) else {
            return false;
        };
        l.update(channel, |f| {
            let refuse = *f & (WANT | SENT | ACTIVE | REFUSED) == WANT | SENT;
            if refuse {
                *f = (*f & QUEUED) | WANT | REFUSED;
            }
            refuse
        })
        .unwrap_or(false)
    }

    /// The channel's flags (0 when unknown).
    pub(crate) fn flags(&self, lane: usize, channel: &[u8]) -> u8 {
        self.lane(lane).and_then(|l| l.flags(channel)).unwrap_or(0)
    }

    /// Channels known to the registry (wanted, or with an unsubscribe not
    /// yet sent).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len_in(0..self.lanes.len())
    }

    /// [`Registry::len`] of the lanes in `lanes`.
    pub(crate) fn len_in(&self, lanes: std::ops::Range<usize>) -> usize {
        let lanes = self.lanes.get(lanes).unwrap_or_default();
        lanes.iter().map(|l| l.lock().map.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Lane::settle`] of the table's own `channel` (as the dirty list
    /// holds it).
    fn settle_in(l: &mut Lane, channel: &[u8], ready: bool) -> Settled {
        let name = l.map.get(channel).cloned().expect("a name the table holds");
        l.settle(&name, ready)
    }

    fn settle(r: &Registry, lane: usize, channel: &[u8], ready: bool) -> Settled {
        settle_in(&mut r.lane(lane).expect("lane"), channel, ready)
    }

    /// Puts `channel` in lane `lane`'s table with `flags`, off the dirty
    /// list (as if the control thread had settled it).
    fn known(r: &Registry, lane: usize, channel: &[u8], flags: u8) {
        let name = Channel::new(channel);
        name.mark().store(flags, Relaxed);
        r.lane(lane).expect("lane").map.insert(name);
    }

    #[test]
    fn last_request_wins() {
        let r = Registry::new(1, 7);
        assert!(r.set_wanted(0, b"a", true));
        assert!(!r.set_wanted(0, b"a", false), "already queued");
        assert!(!r.set_wanted(0, b"a", true));
        assert_eq!(r.flags(0, b"a"), WANT | QUEUED);
        assert!(!r.set_wanted(0, b"unknown", false));
        assert_eq!(r.flags(0, b"unknown"), 0);
        assert_eq!(r.lane(0).unwrap().dirty.len(), 1);
    }

    #[test]
    fn settled_channels_are_not_requeued() {
        let r = Registry::new(1, 7);
        known(&r, 0, b"a", WANT | SENT);
        assert!(!r.set_wanted(0, b"a", true));
        assert!(r.set_wanted(0, b"a", false));
        assert_eq!(r.flags(0, b"a"), SENT | QUEUED | TAKEN_BACK);
    }

    /// The race the delivery test found: subscribe sent, unsubscribe asked,
    /// the confirmation arrives, subscribe asked again before the control
    /// thread looked. Nothing more is sent, so the channel must already be
    /// active.
    #[test]
    fn confirmation_between_unsubscribe_and_resubscribe_counts() {
        let r = Registry::new(1, 7);
        known(&r, 0, b"c", WANT | SENT);
        assert!(r.set_wanted(0, b"c", false));
        assert!(!r.confirm(0, b"c"));
        assert!(!r.set_wanted(0, b"c", true));
        assert_eq!(r.flags(0, b"c"), WANT | SENT | ACTIVE | QUEUED | TAKEN_BACK);
        // The confirmation came while it was not wanted (no active event
        // then): the take-back owes the application one.
        let kept = settle(&r, 0, b"c", true);
        assert_eq!(kept, Settled::Kept { reactivated: true });
    }

    #[test]
    fn a_refused_channel_is_not_resent_until_asked_for_again() {
        let r = Registry::new(1, 7);
        known(&r, 0, b"a", WANT | SENT);
        known(&r, 0, b"b", WANT | SENT | ACTIVE);
        assert!(r.refuse(0, b"a"));
        assert!(!r.refuse(0, b"a"), "once");
        assert!(!r.refuse(0, b"b"), "confirmed channels are not refused");
        assert_eq!(r.flags(0, b"a"), WANT | REFUSED);
        // Subscribing again retries it.
        assert!(r.set_wanted(0, b"a", true));
        assert_eq!(settle(&r, 0, b"a", true), Settled::Subscribe);
        assert_eq!(r.flags(0, b"a"), WANT | SENT);
        // Unsubscribing a refused channel forgets it.
        assert!(r.refuse(0, b"a"));
        assert!(r.set_wanted(0, b"a", false));
        assert_eq!(settle(&r, 0, b"a", true), Settled::Nothing);
        assert_eq!(r.flags(0, b"a"), 0);
    }

    #[test]
    fn settle_sends_subscribes_only_when_ready_and_forgets_unwanted() {
        let r = Registry::new(1, 7);
        let mut l = r.lane(0).expect("lane 0");
        assert!(l.set_wanted(b"a", true));
        assert_eq!(settle_in(&mut l, b"a", false), Settled::Nothing);
        assert_eq!(l.flags(b"a"), Some(WANT));
        assert_eq!(settle_in(&mut l, b"a", true), Settled::Subscribe);
        assert_eq!(
            settle_in(&mut l, b"a", true),
            Settled::Kept { reactivated: false }
        );
        l.set_wanted(b"a", false);
        assert_eq!(settle_in(&mut l, b"a", true), Settled::Unsubscribe);
        assert!(l.map.is_empty());
    }

    #[test]
    fn only_a_take_back_reactivates_a_confirmed_channel() {
        let r = Registry::new(1, 7);
        // Sent and confirmed: its confirmation was the news.
        assert!(r.set_wanted(0, b"a", true));
        assert_eq!(settle(&r, 0, b"a", true), Settled::Subscribe);
        assert!(r.confirm(0, b"a"));
        // Given up and asked for again before the control thread looks:
        // the subscription never lapsed; it is active again, once.
        assert!(r.set_wanted(0, b"a", false));
        assert!(!r.set_wanted(0, b"a", true));
        let kept = settle(&r, 0, b"a", true);
        assert_eq!(kept, Settled::Kept { reactivated: true });
        let kept = settle(&r, 0, b"a", true);
        assert_eq!(kept, Settled::Kept { reactivated: false });
    }

    #[test]
    fn confirm_needs_sent() {
        let r = Registry::new(2, 7);
        known(&r, 1, b"a", WANT | SENT);
        known(&r, 1, b"b", SENT);
        assert!(r.confirm(1, b"a"));
        assert!(!r.confirm(1, b"a"));
        // Sent but no longer wanted: active (a later subscribe may take the
        // unsubscribe back before anything is sent), but not reported.
        assert!(!r.confirm(1, b"b"));
        assert_eq!(r.flags(1, b"b"), SENT | ACTIVE);
        assert!(!r.confirm(0, b"a"));
        assert!(!r.confirm(9, b"a"));
        assert!(!r.confirm(1, b"unknown"));
        assert_eq!(r.flags(1, b"a"), WANT | SENT | ACTIVE);
        assert_eq!(r.len(), 2);
    }

    /// What `Registry` keeps per subscribed channel beyond the name, at 1M
    /// channels: the settled state after the control thread has sent
    /// everything (dirty lists empty).
    fn bytes_per_channel(lanes: usize, n: usize) -> f64 {
        use testkit::alloc::this_thread::live_bytes;
        let before = live_bytes();
        let r = Registry::new(lanes, 7);
        let mut names = 0usize;
        let mut name = Vec::with_capacity(32);
        for i in 0..n {
            name.clear();
            name.extend_from_slice(b"user:");
            name.extend_from_slice(i.to_string().as_bytes());
            names += name.len();
            r.set_wanted(i % lanes, &name, true);
        }
        for lane in 0..lanes {
            let mut l = r.lane(lane).unwrap();
            let l = &mut *l;
            for name in std::mem::take(&mut l.dirty) {
                l.update(&name, |f| *f = WANT | SENT | ACTIVE);
            }
        }
        drop(name);
        let live = live_bytes() - before;
        assert_eq!(r.len(), n);
        (live as f64 - names as f64) / n as f64
    }

    /// 27.9 at 1M channels in 8 lanes, where each lane's table has just
    /// doubled (48 % full): 9 bytes of header (shared with the control
    /// core, whose share `cluster::memory_tests` adds) and 2.1 slots of 9
    /// bytes. With the flags in a slot of their own and an `Arc<[u8]>`
    /// name it was 73.5.
    #[test]
    fn memory_per_channel_at_1m() {
        let per = bytes_per_channel(8, 1_000_000);
        println!("registry: {per:.1} bytes per channel beyond the name (8 lanes, 1M)");
        assert!(per < 30.0, "{per} bytes per channel");
    }
}
