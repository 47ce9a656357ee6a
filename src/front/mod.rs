//! The part of a Pub/Sub instance that every placement shares: what the
//! application wants (the registry), where messages go (the worker
//! queues), what it is told (refusals, `wait_active`, active events) and
//! the counters.
//!
//! One server, N shards and a cluster differ only in how a channel maps to
//! a lane and a connection; that is passed in (`lane_of`, `is_active`).
//! Subscribing, waiting, delivery and confirmation are written here once.

pub(crate) mod active;
pub(crate) mod leaving;
pub(crate) mod mailbox;
pub(crate) mod refusal;
pub(crate) mod registry;

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::front::active::ActiveWait;
use crate::front::refusal::{Refusals, Targets};
use crate::front::registry::Registry;
use crate::metrics::Counters;
use crate::workers::{Homes, Queue};

/// What a placement tells the front: how a channel maps to a lane, how the
/// control thread hears of a lane with work, whether a channel's
/// subscription is confirmed on a connection that is up, and whether the
/// instance is still open. Subscribing and waiting are written once, over
/// it ([`set_wanted`], [`wait_active`]). Its one implementor is the control
/// loop's instance (`control_loop::ClusterPubSub`, every placement's
/// subscribe side), a layer above this one: the trait is what lets the
/// front stay below it.
pub(crate) trait Placement {
    fn front(&self) -> &Front;
    fn lane_of(&self, channel: &[u8]) -> usize;
    fn mark_dirty(&self, lane: usize);
    fn is_active(&self, channel: &[u8]) -> bool;
    /// How many of `channels`, from the first, are active (up to the first
    /// that is not; it may look at only some of them).
    fn active_prefix<C: AsRef<[u8]>>(&self, channels: &[C]) -> usize {
        channels
            .iter()
            .take_while(|c| self.is_active(c.as_ref()))
            .count()
    }
    fn check_open(&self) -> Result<(), Error>;
    /// Asks the control thread for a fence (see [`crate::front::leaving`]).
    fn request_fence(&self);
}

/// Marks `channels` wanted (or not) on placement `p`; the subscribe or
/// unsubscribe commands leave from its control thread.
///
/// # Errors
///
/// [`Error::Shutdown`] after shutdown.
pub(crate) fn set_wanted<P, I>(
    p: &P,
    channels: I,
    want: bool,
    fits: impl Fn(&[u8]) -> Result<(), Error>,
) -> Result<(), Error>
where
    P: Placement,
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    p.check_open()?;
    p.front()
        .set_wanted(channels, want, fits, |c| p.lane_of(c), |l| p.mark_dirty(l))?;
    if !want {
        // After the registry changed: a fence that counts this leave
        // begins after the control thread has seen the change.
        p.front().leaving.request();
        p.request_fence();
    }
    Ok(())
}

/// Blocks until the servers have stopped sending `channels` (given up
/// before) and every message of theirs already received has been passed
/// over, it shuts down, or `timeout` passes.
///
/// # Errors
///
/// As [`PubSub::wait_inactive`](crate::PubSub::wait_inactive).
pub(crate) fn wait_inactive<P: Placement, C: AsRef<[u8]>>(
    p: &P,
    channels: &[C],
    timeout: Duration,
) -> Result<(), Error> {
    p.check_open()?;
    let f = p.front();
    for c in channels {
        let c = c.as_ref();
        if f.registry.flags(p.lane_of(c), c) & crate::front::registry::WANT != 0 {
            let name = String::from_utf8_lossy(c);
            return Err(Error::InvalidArgument(
                format!("channel {name:?} is subscribed (unsubscribe it first)").into(),
            ));
        }
    }
    let target = f.leaving.requested();
    p.request_fence();
    let deadline = crate::engine::wait::Deadline::after(timeout);
    if f.leaving
        .wait(target, deadline.instant(), || p.check_open().is_ok())
    {
        return Ok(());
    }
    p.check_open()?;
    Err(Error::WaitTimeout { after: timeout })
}

/// Blocks until every channel is active on placement `p`, one is refused,
/// it shuts down or `timeout` passes.
///
/// # Errors
///
/// As [`PubSub::wait_active`](crate::PubSub::wait_active).
pub(crate) fn wait_active<P: Placement, C: AsRef<[u8]>>(
    p: &P,
    channels: &[C],
    timeout: Duration,
) -> Result<(), Error> {
    p.front().wait_active(
        channels,
        timeout,
        || p.check_open(),
        |cs| p.active_prefix(cs),
        |c| p.lane_of(c),
    )
}

pub(crate) struct Front {
    pub(crate) registry: Registry,
    pub(crate) queues: Vec<Arc<Queue>>,
    /// Each lane's worker queue (an index into `queues`).
    pub(crate) homes: Homes,
    pub(crate) counters: Arc<Counters>,
    /// Waiters in `wait_active`, woken on confirmations.
    pub(crate) active: ActiveWait,
    /// The server's text for each refused channel (see
    /// [`REFUSED`](crate::front::registry::REFUSED)); entries of channels
    /// subscribed again are stale and only read while the flag is set.
    pub(crate) refusals: Refusals,
    /// Whether confirmations become [`Event::Active`](crate::pubsub::Event)
    /// events for the handler.
    pub(crate) active_events: bool,
    /// Channels given up whose last messages may still be on their way.
    pub(crate) leaving: Arc<crate::front::leaving::Leaving>,
}

/// [`Error::InvalidArgument`] for a name (`what`: "a channel name", "a
/// pattern") longer than [`control::MAX_CHANNEL_LEN`].
pub(crate) fn check_len(name: &[u8], what: &str) -> Result<(), Error> {
    if name.len() <= control::MAX_CHANNEL_LEN {
        return Ok(());
    }
    let max = control::MAX_CHANNEL_LEN;
    let what = format!("{what} of {} bytes (at most {max})", name.len());
    Err(Error::InvalidArgument(what.into()))
}

/// Channels per chunk of a large subscribe call: each chunk is sorted by
/// lane, so each lane's lock is taken once per chunk.
const CHUNK: usize = 4096;

/// A call of at least this many names to subscribe reserves room in each
/// lane's table first (see [`Front::set_wanted`]).
const RESERVE_FROM: usize = 16 * CHUNK;

/// The fewest names of a lane in the first chunk for its share to be
/// estimated from them.
const RESERVE_RUN: usize = 64;

impl Front {
    pub(crate) fn new(
        registry: Registry,
        queues: Vec<Arc<Queue>>,
        counters: Arc<Counters>,
        active: ActiveWait,
        active_events: bool,
    ) -> Self {
        Front {
            homes: Homes::new(registry.lanes(), queues.len()),
            registry,
            queues,
            counters,
            active,
            refusals: Refusals::default(),
            active_events,
            leaving: Arc::default(),
        }
    }

    /// The worker queue of `lane`'s channels: its home (see
    /// [`Homes`]), so a channel's messages and events stay in order.
    pub(crate) fn queue_of(&self, lane: usize) -> Option<&Arc<Queue>> {
        self.queues.get(self.homes.home(lane))
    }

    /// The server confirmed `channel` (of `lane`; `pattern`: a pattern):
    /// mark it active, tell the handler when asked to, wake `wait_active`.
    pub(crate) fn confirm(&self, lane: usize, channel: &[u8], pattern: bool) {
        crate::metrics::add(&self.counters.confirmations, 1);
        if pattern {
            if self.registry.confirm(lane, channel) {
                self.push_active(lane, channel, true);
                self.active.wake();
            }
            return;
        }
        if self.registry.confirm(lane, channel) {
            // A recoverable channel's worker hears of it with active
            // events off too: its recovery after a gap reads then.
            let recovers = || self.queues.first().is_some_and(|q| q.recovers());
            if self.active_events || recovers() {
                if let Some(q) = self.queue_of(lane) {
                    q.push_confirmed(channel, self.active_events);
                }
            }
            self.active.wake();
        }
    }

    /// An [`Event::Active`](crate::pubsub::Event) for the handler, when
    /// active events are on (`channel` of `lane`).
    pub(crate) fn push_active(&self, lane: usize, channel: &[u8], pattern: bool) {
        if self.active_events {
            if let Some(q) = self.queue_of(lane) {
                q.push_active(channel, pattern);
            }
        }
    }

    /// Marks `channels` wanted (or not) and calls `dirty(lane)` for every
    /// lane that now has work for the control thread. Many channels are
    /// sorted by lane in chunks, so each lane's lock is taken once per
    /// chunk (fewer hand-offs with the control and I/O threads); within a
    /// lane the call's order is kept.
    ///
    /// A name longer than [`control::MAX_CHANNEL_LEN`] asked for is an
    /// [`Error::InvalidArgument`], one that `fits` refuses (the servers'
    /// limits) its error, and the names after it in the call are not
    /// looked at (those before it may stay asked for).
    pub(crate) fn set_wanted<I>(
        &self,
        channels: I,
        want: bool,
        fits: impl Fn(&[u8]) -> Result<(), Error>,
        lane_of: impl Fn(&[u8]) -> usize,
        dirty: impl Fn(usize),
    ) -> Result<(), Error>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let too_long = |ch: &[u8]| match want {
            true => check_len(ch, "a channel name").and_then(|()| fits(ch)),
            false => Ok(()),
        };
        let mut it = channels.into_iter();
        if it.size_hint().1.is_some_and(|n| n <= 8) {
            for ch in it {
                let ch = ch.as_ref();
                too_long(ch)?;
                let lane = lane_of(ch);
                if self.registry.set_wanted(lane, ch, want) {
                    dirty(lane);
                }
            }
            return Ok(());
        }
        let mut chunk: Vec<I::Item> = Vec::with_capacity(CHUNK);
        let mut order: Vec<(u32, u32)> = Vec::with_capacity(CHUNK);
        // A call of many names grows each lane's table once, to its share
        // of the call as the first chunk shows it, rather than doubling it
        // all the way (each doubling hashes every name the table holds
        // again). Only where the first chunk is a fair sample: it reaches
        // half the lanes (pattern lanes included) or 4, and the lane has a
        // run of at least `RESERVE_RUN` names in it; a table already that
        // large (the same names again) gets nothing.
        let mut expect = match want {
            true => it.size_hint().0,
            false => 0,
        };
        loop {
            chunk.clear();
            chunk.extend(it.by_ref().take(CHUNK));
            if chunk.is_empty() {
                return Ok(());
            }
            for c in &chunk {
                too_long(c.as_ref())?;
            }
            order.clear();
            order.extend(
                chunk
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (lane_of(c.as_ref()) as u32, i as u32)),
            );
            order.sort_unstable();
            let spread = order.chunk_by(|a, b| a.0 == b.0).count();
            if 2 * spread < self.registry.lanes().min(8) {
                expect = 0;
            }
            for run in order.chunk_by(|a, b| a.0 == b.0) {
                let lane = run[0].0 as usize;
                let Some(mut l) = self.registry.lane(lane) else {
                    continue;
                };
                if expect >= RESERVE_FROM && run.len() >= RESERVE_RUN {
                    let share = expect.saturating_mul(run.len()) / chunk.len();
                    let held = l.len();
                    l.reserve(share.saturating_sub(held));
                }
                let mut queued = false;
                for &(_, i) in run {
                    if let Some(ch) = chunk.get(i as usize) {
                        queued |= l.set_wanted(ch.as_ref(), want);
                    }
                }
                drop(l);
                if queued {
                    dirty(lane);
                }
            }
            expect = 0;
        }
    }

    /// Blocks until every channel is active, one is refused, the instance
    /// closes (`check_open` fails) or `timeout` passes.
    pub(crate) fn wait_active<C: AsRef<[u8]>>(
        &self,
        channels: &[C],
        timeout: Duration,
        check_open: impl Fn() -> Result<(), Error>,
        active_prefix: impl Fn(&[C]) -> usize,
        lane_of: impl Fn(&[u8]) -> usize,
    ) -> Result<(), Error> {
        self.active
            .wait_all(channels, timeout, check_open, active_prefix, |c| {
                self.refusal(lane_of(c), c)
            })
    }

    /// Why the server refused `channel` (of `lane`), while it stands
    /// refused.
    pub(crate) fn refusal(&self, lane: usize, channel: &[u8]) -> Option<Error> {
        let flags = self.registry.flags(lane, channel);
        self.refusals.error(flags, channel, false)
    }

    /// What a refusal touches.
    pub(crate) fn refusal_targets(&self) -> Targets<'_> {
        Targets {
            registry: &self.registry,
            queues: &self.queues,
            homes: &self.homes,
            counters: &self.counters,
            active: &self.active,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::registry::{QUEUED, WANT};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// A front of `lanes` lanes, no workers.
    fn front(lanes: usize) -> Front {
        Front::new(
            Registry::new(lanes, 7),
            Vec::new(),
            Arc::default(),
            ActiveWait::new(true, Duration::from_secs(1)),
            false,
        )
    }

    #[test]
    fn a_large_call_reserves_each_lane_its_share_and_keeps_each_lanes_order() {
        let lanes = 3;
        let front = front(lanes);
        let n = RESERVE_FROM + 3 * CHUNK + 17;
        let names: Vec<Vec<u8>> = (0..n).map(|i| format!("c{i}").into_bytes()).collect();
        let lane_of = |c: &[u8]| c.iter().map(|&b| usize::from(b)).sum::<usize>() % lanes;
        let dirtied = AtomicUsize::new(0);
        front
            .set_wanted(
                &names,
                true,
                |_| Ok(()),
                lane_of,
                |_| {
                    dirtied.fetch_add(1, Relaxed);
                },
            )
            .expect("set");
        assert!(dirtied.load(Relaxed) >= lanes);
        let mut total = 0;
        for lane in 0..lanes {
            let l = front.registry.lane(lane).expect("lane");
            let want: Vec<&[u8]> = names
                .iter()
                .map(Vec::as_slice)
                .filter(|c| lane_of(c) == lane)
                .collect();
            let dirty: Vec<&[u8]> = l.dirty.iter().map(|c| c.as_bytes()).collect();
            assert_eq!(
                dirty, want,
                "lane {lane}: every name once, in the call's order"
            );
            assert!(want.iter().all(|c| l.flags(c) == Some(WANT | QUEUED)));
            // Reserved for its share, not for the whole call.
            assert!(
                l.map.capacity() < 4 * l.map.len(),
                "lane {lane}: {} slots for {} names",
                l.map.capacity(),
                l.map.len()
            );
            total += l.map.len();
        }
        assert_eq!(total, n);
        // The same names again: no room is made for them twice.
        let before: Vec<usize> = (0..lanes)
            .map(|i| front.registry.lane(i).expect("lane").map.capacity())
            .collect();
        front
            .set_wanted(&names, true, |_| Ok(()), lane_of, |_| {})
            .expect("set");
        let after: Vec<usize> = (0..lanes)
            .map(|i| front.registry.lane(i).expect("lane").map.capacity())
            .collect();
        assert_eq!(before, after);
    }

    #[test]
    fn a_large_call_sorted_by_lane_reserves_nothing_from_its_first_chunk() {
        let lanes = 4;
        let front = front(lanes);
        let lane_of = |c: &[u8]| c.iter().map(|&b| usize::from(b)).sum::<usize>() % lanes;
        let mut names: Vec<Vec<u8>> = (0..RESERVE_FROM + 4 * CHUNK)
            .map(|i| format!("c{i}").into_bytes())
            .collect();
        // The first chunk is all one lane's: no fair sample of the call.
        names.sort_by_key(|c| lane_of(c));
        front
            .set_wanted(&names, true, |_| Ok(()), lane_of, |_| {})
            .expect("set");
        for lane in 0..lanes {
            let l = front.registry.lane(lane).expect("lane");
            assert!(
                l.map.capacity() < 4 * l.map.len(),
                "lane {lane}: {} slots for {} names",
                l.map.capacity(),
                l.map.len()
            );
        }
    }
}
