//! The core's state, its application-facing inputs and its outputs.

use alloc::collections::btree_map::Entry;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use topology::{Layout, NodeAddr, NodeKey, SlotMap, TopologyCommand};

use crate::backoff::{Backoff, Jitter};
use crate::command::{Channel, Command, ConnId};
use crate::config::{Config, ConfigError};
use crate::stats::{Counters, Trigger};
use crate::time::Time;

/// The sans-IO control core of the cluster subscribe side (node-grouped,
/// per-partition or classic connections, [`ConnLayout`](crate::ConnLayout)): it
/// decides which connections exist, which channels each
/// carries, when to fetch the slot map and probe slots, and which channels
/// get a gap event. It never blocks, never reads a clock and sends nothing
/// itself.
///
/// # How to drive it
///
/// 1. [`Core::new`] at time `now` (it asks for the first slot map at once).
/// 2. Feed every input as it happens, with the current time:
///    [`handle_want`](Core::handle_want) / [`handle_unwant`](Core::handle_unwant)
///    from the application; [`handle_conn_up`](Core::handle_conn_up),
///    [`handle_conn_down`](Core::handle_conn_down),
///    [`handle_subscribe_reply`](Core::handle_subscribe_reply) (per
///    connection, in the order the subscribes were sent),
///    [`handle_sunsubscribe`](Core::handle_sunsubscribe),
///    [`handle_pong`](Core::handle_pong) and
///    [`handle_activity`](Core::handle_activity) (messages arrived; once
///    per read is enough) from the subscribe connections;
///    [`handle_topology`](Core::handle_topology) and
///    [`handle_probe`](Core::handle_probe) for the requests it made;
///    [`handle_refresh`](Core::handle_refresh) when the application asks
///    for a reread and [`handle_redirect`](Core::handle_redirect) when a
///    publish gets `MOVED`. Before handing a `sunsubscribe` push to
///    [`handle_sunsubscribe`](Core::handle_sunsubscribe) the dispatch may
///    drop one from a connection that is not
///    [`conn_of`](Core::conn_of) its partition (the core ignores those
///    too).
/// 3. After each input, drain [`poll_command`](Core::poll_command) until it
///    gives `None` and carry the commands out in that order.
/// 4. Then arm a timer for [`poll_timeout`](Core::poll_timeout); when it
///    fires call [`handle_timeout`](Core::handle_timeout) and go to 3. The
///    timeout is always later than the last `now` given, so a driver that
///    follows this order never spins.
/// 5. Read [`stats`](Core::stats) whenever the metrics are asked for (a
///    `Copy` snapshot; cheap), and [`is_settled`](Core::is_settled) for
///    readiness.
///
/// Layout changes go through [`topology::plan_rewire`]: the core carries
/// out the plan's `open`, `resubscribe`, `unowned` and `close` lists, in
/// that order. Resubscribes are whole partitions per command, split only
/// past the batch size ([`shardcore::plan_resubscribe`]).
#[derive(Debug)]
pub struct Core {
    pub(crate) cfg: Config,
    /// Slot of each partition.
    pub(crate) slots: Vec<u16>,
    pub(crate) map: SlotMap,
    pub(crate) layout: Layout,
    pub(crate) parts: Vec<Part>,
    /// The subscribe connections of each primary by index: `multiplier`
    /// of them (node-grouped), or one per partition it owns.
    pub(crate) nodes: BTreeMap<NodeKey, BTreeMap<usize, ConnId>>,
    pub(crate) conns: BTreeMap<ConnId, Conn>,
    pub(crate) next_conn: u64,
    pub(crate) next_id: u64,
    pub(crate) out: VecDeque<Command>,
    /// The reconnect schedule (no jitter: the core is exact); each
    /// connection keeps its own count of failures.
    pub(crate) reconnect: Backoff,
    pub(crate) fetch: Fetch,
    pub(crate) probes: BTreeMap<u64, Probe>,
    /// Refreshes in a row that left lost partitions in place.
    pub(crate) stale_rounds: u32,
    pub(crate) next_poll: Time,
    /// The latest time seen (timers are never armed before it).
    pub(crate) now: Time,
    pub(crate) counters: Counters,
    /// Bumped whenever `map` is replaced (every fetch, probe or adopted id).
    pub(crate) map_epoch: u64,
    /// Replica mode: replicas whose connection failed, not chosen to serve
    /// a shard before the time given.
    pub(crate) avoid: BTreeMap<NodeKey, Time>,
    /// Replica mode: serving replicas missing from the latest maps, and
    /// in how many maps in a row (see `Core::note_absent`).
    pub(crate) absent: BTreeMap<NodeKey, u32>,
}

/// One partition (lane) and its wanted channels.
#[derive(Debug, Default)]
pub(crate) struct Part {
    pub(crate) slot: u16,
    pub(crate) channels: BTreeMap<Channel, Chan>,
    /// The server dropped channels of it and the map has not moved it yet.
    pub(crate) lost: bool,
    /// Channels inserted one by one since the set was last built in bulk
    /// (see [`Part::inserted`]).
    pub(crate) loose: usize,
}

impl Part {
    /// Below this many new channels they are inserted one by one.
    const BULK: usize = 64;

    /// Adds channels not yet in the set (idle, no gap due). A batch at
    /// least as large as the set is merged in bulk, which fills the
    /// B-tree's nodes: names inserted one by one in ascending order (a
    /// numbered range, the common bulk subscribe) leave every node half
    /// full, about twice the memory. The merge rebuilds the whole set, so
    /// it is linear in the set and the batch, and taken only when the
    /// batch is the larger.
    pub(crate) fn add(&mut self, names: Vec<Channel>) {
        if names.len() >= Self::BULK.max(self.channels.len()) {
            let mut more: BTreeMap<Channel, Chan> =
                names.into_iter().map(|n| (n, Chan::default())).collect();
            self.channels.append(&mut more);
            self.loose = 0;
        } else {
            let n = names.len();
            for n in names {
                self.channels.entry(n).or_default();
            }
            self.inserted(n);
        }
    }

    /// `n` channels were inserted one by one. Once as many were since the
    /// set was last built in bulk as it held then, it is built again in
    /// bulk: a set that grows by many small batches (a large subscribe
    /// call the control thread takes a part at a time) keeps full nodes,
    /// at a cost linear in what it holds, paid once per doubling (and,
    /// while it is rebuilt, 16 bytes per channel more for a moment).
    pub(crate) fn inserted(&mut self, n: usize) {
        self.loose += n;
        if self.loose >= Self::BULK.max(self.channels.len() / 2) {
            let all = core::mem::take(&mut self.channels);
            self.channels = all.into_iter().collect();
            self.loose = 0;
        }
    }
}

/// A wanted channel: where it stands ([`Sub`]), whether its subscription
/// broke (a gap is due before the next subscribe) and whether an older
/// subscription of it may still be live, packed in one word, since a core
/// holds one per wanted channel (bits 0–1 the state, bit 2 the gap, bit 3
/// the lingering subscription, the rest the connection id).
#[derive(Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chan(u64);

impl Chan {
    const GAP: u64 = 4;
    /// Sent on a connection where the unsubscribe of its previous
    /// subscription may not have been answered (wanted again at once, or
    /// its partition moved away and back): that
    /// subscription may still deliver (and the application takes its
    /// messages, the channel being wanted) until the server reads the
    /// unsubscribe, unless the server drops it first. Such a drop owes a
    /// gap: when the new subscribe is turned away (`MOVED`, `ASK`,
    /// `TRYAGAIN`, `CLUSTERDOWN`), or pushed before its reply. (Our own
    /// unsubscribe ending it is no loss: the channel was given up, and its
    /// new subscription starts at its confirmation.) Kept while the
    /// channel is [`Sub::Sent`], cleared by any other state.
    const LINGER: u64 = 8;
    const CONN_SHIFT: u32 = 4;

    /// Where it stands.
    pub(crate) fn sub(self) -> Sub {
        let conn = ConnId(self.0 >> Self::CONN_SHIFT);
        match self.0 & 3 {
            0 => Sub::Idle,
            1 => Sub::Sent(conn),
            2 => Sub::Active(conn),
            _ => Sub::Refused,
        }
    }

    /// Sets where it stands (the gap flag is kept; the lingering flag only
    /// while it is sent).
    pub(crate) fn set_sub(&mut self, sub: Sub) {
        let keep = match sub {
            Sub::Sent(_) => Self::GAP | Self::LINGER,
            _ => Self::GAP,
        };
        let (tag, conn) = match sub {
            Sub::Idle => (0, 0),
            Sub::Sent(c) => (1, c.0),
            Sub::Active(c) => (2, c.0),
            Sub::Refused => (3, 0),
        };
        // Connection ids count connections opened by one core: far below
        // 2^60.
        debug_assert!(conn >> (64 - Self::CONN_SHIFT) == 0, "connection id {conn}");
        self.0 = (conn << Self::CONN_SHIFT) | (self.0 & keep) | tag;
    }

    /// Whether an older subscription of it may still be live (see
    /// [`Chan::LINGER`]).
    pub(crate) fn lingers(self) -> bool {
        self.0 & Self::LINGER != 0
    }

    /// Marks that an older subscription of it may still be live.
    pub(crate) fn set_linger(&mut self) {
        self.0 |= Self::LINGER;
    }

    /// The older subscription's end is known (and signalled).
    pub(crate) fn clear_linger(&mut self) {
        self.0 &= !Self::LINGER;
    }

    /// Whether a gap is due before its next subscribe.
    pub(crate) fn gap(self) -> bool {
        self.0 & Self::GAP != 0
    }

    /// Sets whether a gap is due.
    pub(crate) fn set_gap(&mut self, gap: bool) {
        if gap {
            self.0 |= Self::GAP;
        } else {
            self.0 &= !Self::GAP;
        }
    }

    /// Whether a gap was due, which it no longer is.
    pub(crate) fn take_gap(&mut self) -> bool {
        let was = self.gap();
        self.set_gap(false);
        was
    }

    /// Its subscription broke on its connection: not subscribed, a gap due.
    pub(crate) fn break_off(&mut self) {
        self.set_sub(Sub::Idle);
        self.set_gap(true);
    }
}

impl core::fmt::Debug for Chan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Chan")
            .field("sub", &self.sub())
            .field("gap", &self.gap())
            .finish()
    }
}

/// Where a wanted channel stands.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sub {
    /// Not sent anywhere.
    #[default]
    Idle,
    /// `SSUBSCRIBE` sent on the connection, reply pending.
    Sent(ConnId),
    /// Confirmed on the connection.
    Active(ConnId),
    /// The server refused it; left alone until wanted again.
    Refused,
}

impl Sub {
    /// The connection it is (being) subscribed on.
    pub(crate) fn conn(self) -> Option<ConnId> {
        match self {
            Sub::Sent(c) | Sub::Active(c) => Some(c),
            Sub::Idle | Sub::Refused => None,
        }
    }
}

/// A subscribe connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) node: NodeKey,
    /// Its index among the node's connections.
    pub(crate) index: usize,
    pub(crate) state: ConnState,
    /// Failed opens in a row.
    pub(crate) failures: u32,
    /// Subscribes sent, oldest first.
    pub(crate) pending: VecDeque<Pending>,
    /// When something last arrived on it (or it came up).
    pub(crate) last_rx: Time,
    /// The liveness `PING` in flight, and when it was sent.
    pub(crate) ping: Option<Time>,
    /// Channels given up on it whose unsubscribe may not have been
    /// answered yet (see [`Leaving`]).
    pub(crate) leaving: Leaving,
    /// Channels whose subscribe was unanswered when a connection in its
    /// place ended, sent one batch at a time (see [`crate::probes`]).
    pub(crate) probes: crate::probes::Probes,
}

/// Most names a connection's [`Leaving`] holds; past it every channel
/// wanted again while it is open counts as lingering, and every
/// `sunsubscribe` push as the server's own (more gaps, never fewer, and
/// bounded memory after a mass unsubscribe).
const LEAVING_MAX: usize = 4096;

/// The unsubscribes on a connection that the server may not have answered
/// yet. The server answers each channel of an unsubscribe with a
/// `sunsubscribe` push, and answers commands in order: once a reply
/// arrives to a command sent after an unsubscribe, every push for it has
/// arrived too (including those the driver did not pass on: it passes on
/// only pushes of channels wanted again), so its names are forgotten then,
/// each by the mark of its own last unsubscribe.
#[derive(Debug, Default)]
pub(crate) struct Leaving {
    /// Per name: answers still due, and the mark of its last unsubscribe.
    names: BTreeMap<Channel, (u32, u64)>,
    /// Every unsubscribed name with its mark, oldest first (forgotten in
    /// this order).
    order: VecDeque<(u64, Channel)>,
    /// Too many names to keep: every name counts, no push is ours.
    all: bool,
    /// When `all` was set: the mark it lasts to.
    all_mark: u64,
    /// Commands with a reply sent (subscribes and pings).
    sent: u64,
    /// Replies received.
    replied: u64,
}

impl Leaving {
    /// An unsubscribe of `names` leaves now (its mark: the commands with a
    /// reply sent before it).
    pub(crate) fn unsubscribed(&mut self, names: &[Channel]) {
        let mark = self.sent;
        if self.all || self.order.len() + names.len() > LEAVING_MAX {
            self.names.clear();
            self.order.clear();
            self.all = true;
            self.all_mark = mark;
            return;
        }
        for n in names {
            let e = self.names.entry(n.clone()).or_default();
            e.0 += 1;
            e.1 = mark;
            self.order.push_back((mark, n.clone()));
        }
    }

    /// A command with a reply leaves now.
    pub(crate) fn command(&mut self) {
        self.sent += 1;
    }

    /// A reply arrived: the unsubscribes sent before the command it answers
    /// have been answered.
    pub(crate) fn reply(&mut self) {
        self.replied += 1;
        if self.all && self.replied > self.all_mark {
            self.all = false;
        }
        while self.order.front().is_some_and(|o| o.0 < self.replied) {
            let Some((_, name)) = self.order.pop_front() else {
                break;
            };
            // Its last unsubscribe is answered: nothing more is due.
            if self.names.get(&name).is_some_and(|e| e.1 < self.replied) {
                self.names.remove(&name);
            }
        }
    }

    /// A `sunsubscribe` push for `name`, whose subscribe is in flight:
    /// whether it answers one of our own unsubscribes (each answers one; a
    /// push beyond them is the server's).
    pub(crate) fn answered(&mut self, name: &[u8]) -> bool {
        let Some(e) = self.names.get_mut(name) else {
            return false;
        };
        e.0 = e.0.saturating_sub(1);
        if e.0 == 0 {
            self.names.remove(name);
        }
        true
    }

    /// Whether an unsubscribe of `name` may not have been answered yet.
    pub(crate) fn holds(&self, name: &[u8]) -> bool {
        self.all || self.names.contains_key(name)
    }

    /// The connection is gone: nothing more will be answered on it.
    pub(crate) fn clear(&mut self) {
        self.names.clear();
        self.order.clear();
        self.all = false;
    }
}

/// A connection's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// `Open` sent; gives up at the deadline.
    Opening { deadline: Time },
    /// Up.
    Up,
    /// Down; reopened (with a new id) at `at`.
    Retry { at: Time },
}

/// A subscribe awaiting its reply.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) partition: u32,
    /// The channels it still speaks for (an unsubscribe since removes them).
    pub(crate) channels: Vec<Channel>,
    /// How many it carried (a refusal names the channel only when 1).
    pub(crate) carried: usize,
    pub(crate) sent: Time,
    /// A held batch (see [`crate::probes`]): whether it already ended a
    /// connection alone once.
    pub(crate) probe: Option<bool>,
}

/// The topology fetch state.
#[derive(Debug)]
pub(crate) struct Fetch {
    /// The request in flight: id, deadline.
    pub(crate) in_flight: Option<(u64, Time)>,
    /// When the next fetch starts (none in flight).
    pub(crate) next: Option<Time>,
    /// Delays after failed fetches in a row (no jitter).
    pub(crate) backoff: Backoff,
    /// Which candidate to ask next (an index into `Core::candidates`).
    pub(crate) cursor: usize,
    /// The node the fetch in flight asked.
    pub(crate) asked: Option<NodeAddr>,
    pub(crate) last_start: Option<Time>,
    /// While fetches fail: no fetch starts before this (the backoff holds
    /// against every trigger).
    pub(crate) hold_until: Time,
    /// What asked for the fetch at `next`.
    pub(crate) reason: Trigger,
    /// The topology command, once a node's version chose it.
    pub(crate) command: Option<TopologyCommand>,
}

/// A probe in flight.
#[derive(Debug)]
pub(crate) struct Probe {
    pub(crate) slot: u16,
    pub(crate) node: NodeAddr,
    pub(crate) deadline: Time,
}

impl Core {
    /// A core that knows no node yet; its first command fetches the slot
    /// map from the first seed.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for a setting out of range ([`Config::check`]).
    pub fn new(config: Config, now: Time) -> Result<Core, ConfigError> {
        config.check()?;
        let slots = Core::lane_slots(&config);
        let map = SlotMap::new();
        let layout = Layout::for_slots(&map, &slots);
        let parts = slots
            .iter()
            .map(|&slot| Part {
                slot,
                ..Part::default()
            })
            .collect();
        let reconnect = Backoff::new(config.reconnect_base, config.retry_max, Jitter::None, 0);
        let fetch_backoff = Backoff::new(config.degraded_retry, config.retry_max, Jitter::None, 0);
        let mut core = Core {
            next_poll: now + config.poll_interval,
            cfg: config,
            slots,
            map,
            layout,
            parts,
            nodes: BTreeMap::new(),
            conns: BTreeMap::new(),
            next_conn: 0,
            next_id: 0,
            out: VecDeque::new(),
            reconnect,
            fetch: Fetch {
                in_flight: None,
                next: None,
                backoff: fetch_backoff,
                cursor: 0,
                asked: None,
                last_start: None,
                hold_until: Time::ZERO,
                reason: Trigger::default(),
                command: None,
            },
            probes: BTreeMap::new(),
            stale_rounds: 0,
            now,
            counters: Counters::default(),
            map_epoch: 0,
            avoid: BTreeMap::new(),
            absent: BTreeMap::new(),
        };
        if core.cfg.mode == crate::ConnLayout::Fixed {
            // The servers are the map: open them at once, never fetch.
            let map = crate::classic::fixed_map(&core.cfg.seeds);
            core.apply_map(map, now);
        } else {
            core.fetch.next = Some(now);
        }
        core.handle_timeout(now);
        Ok(core)
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The next command to carry out, oldest first.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// When to call [`handle_timeout`](Core::handle_timeout) next: after the
    /// latest `now` given, once the commands are drained (`None` when
    /// nothing is scheduled).
    pub fn poll_timeout(&self) -> Option<Time> {
        let fixed = self.cfg.mode == crate::ConnLayout::Fixed;
        let mut t = (!fixed).then_some(self.next_poll);
        let mut take = |x: Time| t = Some(t.map_or(x, |t| t.min(x)));
        match self.fetch.in_flight {
            Some((_, deadline)) => take(deadline),
            None => {
                if let Some(n) = self.fetch.next {
                    take(n);
                }
            }
        }
        for p in self.probes.values() {
            take(p.deadline);
        }
        for c in self.conns.values() {
            if let Some(at) = self.conn_deadline(c) {
                take(at);
            }
        }
        t
    }

    /// The application wants `channels` (already wanted ones are left
    /// alone; a refused one is tried again). Names given as [`Channel`]s
    /// are kept as they are (no copy of the name); `&[u8]` names are
    /// copied once.
    pub fn handle_want<C>(&mut self, now: Time, channels: impl IntoIterator<Item = C>)
    where
        C: AsRef<[u8]> + Into<Channel>,
    {
        let mut by_lane: BTreeMap<u32, Vec<C>> = BTreeMap::new();
        for name in channels {
            by_lane
                .entry(self.lane_of(name.as_ref()))
                .or_default()
                .push(name);
        }
        self.tick(now);
        let mut fresh = BTreeMap::new();
        for (lane, names) in by_lane {
            let names = self.want_in(lane, names);
            if !names.is_empty() {
                fresh.insert(lane, names);
            }
        }
        // A channel sent on the connection its unsubscribe left on lingers
        // (see `send_subscribe`).
        self.subscribe_fresh(fresh, now);
    }

    /// [`handle_want`](Core::handle_want) for names of one lane, given:
    /// the channels of `lane` (each of which must be
    /// [`lane_of`](Core::lane_of) it), or patterns of a
    /// [`pattern_lane`](Core::pattern_lane).
    pub fn handle_want_in<C>(&mut self, now: Time, lane: u32, names: impl IntoIterator<Item = C>)
    where
        C: AsRef<[u8]> + Into<Channel>,
    {
        self.tick(now);
        let fresh = self.want_in(lane, names);
        if !fresh.is_empty() {
            self.subscribe_fresh(BTreeMap::from([(lane, fresh)]), now);
        }
    }

    /// Marks `names` wanted in lane `p`; returns those to subscribe. When
    /// they go out now (the lane is not lost and its connection is up),
    /// the gap events due for some of them go first.
    fn want_in<C>(&mut self, p: u32, names: impl IntoIterator<Item = C>) -> Vec<Channel>
    where
        C: AsRef<[u8]> + Into<Channel>,
    {
        let sending = self.parts.get(p as usize).is_some_and(|x| !x.lost)
            && self.conn_of(p).is_some_and(|c| self.is_up(c));
        let Some(part) = self.parts.get_mut(p as usize) else {
            return Vec::new();
        };
        let names: Vec<C> = names.into_iter().collect();
        let mut fresh = Vec::with_capacity(names.len());
        let mut gaps = Vec::new();
        // Idle or refused: sent again (a refused one is idle once more),
        // its gap first when due.
        let again = |key: &Channel, chan: &mut Chan, gaps: &mut Vec<Channel>| {
            if chan.sub() == Sub::Refused {
                chan.set_sub(Sub::Idle);
            }
            if sending && chan.take_gap() {
                gaps.push(key.clone());
            }
        };
        if names.len() >= Part::BULK.max(part.channels.len()) {
            // Many, into a small set: one lookup each, the new ones merged
            // in bulk (see `Part::add`).
            let mut added = Vec::new();
            for name in names {
                match part.channels.get_key_value(name.as_ref()) {
                    Some((k, c)) if matches!(c.sub(), Sub::Idle | Sub::Refused) => {
                        let k = k.clone();
                        if let Some(c) = part.channels.get_mut(name.as_ref()) {
                            again(&k, c, &mut gaps);
                        }
                        fresh.push(k);
                    }
                    Some(_) => {} // already sent or confirmed
                    None => {
                        let k: Channel = name.into();
                        added.push(k.clone());
                        fresh.push(k);
                    }
                }
            }
            if !added.is_empty() {
                part.add(added);
            }
        } else {
            // Into a larger set: one descent each, found or inserted.
            let mut inserted = 0;
            for name in names {
                match part.channels.entry(name.into()) {
                    Entry::Vacant(v) => {
                        fresh.push(v.key().clone());
                        v.insert(Chan::default());
                        inserted += 1;
                    }
                    Entry::Occupied(mut o) => {
                        if matches!(o.get().sub(), Sub::Idle | Sub::Refused) {
                            let k = o.key().clone();
                            again(&k, o.get_mut(), &mut gaps);
                            fresh.push(k);
                        }
                    }
                }
            }
            part.inserted(inserted);
        }
        if !gaps.is_empty() {
            self.emit(Command::Gap {
                partition: p,
                channels: gaps,
            });
        }
        fresh
    }

    /// The application no longer wants `channels`: each is unsubscribed
    /// from the connection that carries it (no gap is due for it any more).
    pub fn handle_unwant<'a>(&mut self, now: Time, channels: impl IntoIterator<Item = &'a [u8]>) {
        let mut by_lane: BTreeMap<u32, Vec<&'a [u8]>> = BTreeMap::new();
        for name in channels {
            by_lane.entry(self.lane_of(name)).or_default().push(name);
        }
        self.tick(now);
        for (lane, names) in by_lane {
            self.unwant_in(lane, names);
        }
        self.check_restored(now);
    }

    /// [`handle_unwant`](Core::handle_unwant) for names of one lane, given
    /// (see [`handle_want_in`](Core::handle_want_in)).
    pub fn handle_unwant_in<'a>(
        &mut self,
        now: Time,
        lane: u32,
        names: impl IntoIterator<Item = &'a [u8]>,
    ) {
        self.tick(now);
        self.unwant_in(lane, names);
        self.check_restored(now);
    }

    fn unwant_in<'a>(&mut self, p: u32, names: impl IntoIterator<Item = &'a [u8]>) {
        let Some(part) = self.parts.get_mut(p as usize) else {
            return;
        };
        let mut drop: BTreeMap<ConnId, Vec<Channel>> = BTreeMap::new();
        for name in names {
            let Some(chan) = part.channels.remove(name) else {
                continue;
            };
            if let Some(c) = chan.sub().conn() {
                drop.entry(c).or_default().push(name.into());
            }
        }
        for (conn, names) in drop {
            self.unsubscribe(conn, p, names);
        }
    }

    /// Runs what is due at `now`: fetches, probe and connection deadlines,
    /// pings, reconnects, the poll (every other input does too, first).
    pub fn handle_timeout(&mut self, now: Time) {
        self.tick(now);
    }

    /// Whether every wanted channel (not refused) is confirmed (readiness;
    /// the restore times are in [`stats`](Core::stats)). Walks every
    /// wanted channel.
    pub fn is_settled(&self) -> bool {
        self.parts.iter().all(|p| {
            p.channels
                .values()
                .all(|c| matches!(c.sub(), Sub::Active(_) | Sub::Refused))
        })
    }

    /// The connection `channel` is confirmed on, if any.
    pub fn subscribed_on(&self, channel: &[u8]) -> Option<ConnId> {
        let p = self.lane_of(channel);
        match self.parts.get(p as usize)?.channels.get(channel)?.sub() {
            Sub::Active(c) => Some(c),
            _ => None,
        }
    }

    /// The current layout (partition → node).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The slot map the layout comes from, with what probes and adopted
    /// node ids added (the driver routes publishes by it).
    pub fn map(&self) -> &SlotMap {
        &self.map
    }

    /// A number that changes whenever [`map`](Core::map) is replaced:
    /// after every fetch that gave a map (even an unchanged one), a probe
    /// that found an owner, or a node id learnt. A driver compares it with
    /// the last one it saw to know when to reroute.
    pub fn map_epoch(&self) -> u64 {
        self.map_epoch
    }

    /// Every input starts here: time moves to `now` and what is due by
    /// then runs first, so that after the input every deadline left lies
    /// after `now`.
    pub(crate) fn tick(&mut self, now: Time) {
        self.now = self.now.max(now);
        if now >= self.next_poll {
            self.next_poll = now + self.cfg.poll_interval;
            self.request_refresh(now, core::time::Duration::ZERO, Trigger::Poll);
        }
        self.fetch_timers(now);
        self.conn_timers(now);
    }

    pub(crate) fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}
