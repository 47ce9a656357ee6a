//! State shared by the application threads, the I/O threads (through the
//! subscribe observers), the control thread and the workers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use shardcore::Partitions;

use crate::control_loop::hold::Publishing;
use crate::control_loop::message::PubMsg;
use crate::control_loop::settings::{Config, Mode};
use crate::engine::Engine;
use crate::front::mailbox::{DirtyLanes, Mailbox};
use crate::front::registry::ACTIVE;
use crate::front::Front;
use crate::workers::LaneOwners;

/// One subscribe connection, as every thread sees it.
#[derive(Debug)]
pub(crate) struct ConnState {
    pub(crate) id: control::ConnId,
    /// Pushes and probe replies seen: the liveness probe's sign of life.
    pub(crate) rx: AtomicU64,
    /// Set by the control thread when the connection came up (its lanes
    /// are resubscribed then); cleared by the observer when it drops.
    pub(crate) ready: AtomicBool,
    pub(crate) connects: AtomicU64,
    pub(crate) received: AtomicU64,
    pub(crate) dropped: AtomicU64,
    /// Messages without the envelope where one was expected.
    pub(crate) unenveloped: AtomicU64,
    /// Lanes moved away from this connection (its stage checks each
    /// message's lane once this is not zero; see `workers::stage`).
    pub(crate) lanes_lost: Arc<AtomicU64>,
    /// Its worker: the home of the lanes it is the first to carry (see
    /// `workers::home`).
    pub(crate) home: usize,
}

/// Where publishes go: slot → index into `engines`
/// ([`control::NO_ROUTE`] for unknown), derived from the publish core's
/// table (see `carry`) and written nowhere else.
pub(crate) struct Routes {
    pub(crate) owner: Vec<u16>,
    pub(crate) engines: Vec<Arc<Engine>>,
}

impl Routes {
    pub(crate) fn empty() -> Self {
        Routes {
            owner: vec![control::NO_ROUTE; usize::from(shardcore::SLOT_COUNT)],
            engines: Vec::new(),
        }
    }

    pub(crate) fn engine_of(&self, slot: u16) -> Option<Arc<Engine>> {
        self.engine_ref(slot).cloned()
    }

    /// [`Routes::engine_of`], borrowed (no reference count touched).
    pub(crate) fn engine_ref(&self, slot: u16) -> Option<&Arc<Engine>> {
        let i = *self.owner.get(usize::from(slot))?;
        self.engines.get(usize::from(i))
    }
}

/// A publish that must be retried by the control thread.
pub(crate) struct Retry {
    pub(crate) msg: Box<PubMsg>,
    pub(crate) error: topology::ClusterError,
    pub(crate) message: Arc<str>,
}

/// A command routed by key (`PubSub::command` on a cluster), for the
/// control thread, which keeps it while the publish core routes it (see
/// `keyed`). Dropped without an outcome (the loop closed), its caller
/// gets [`Error::Shutdown`](crate::Error::Shutdown).
pub(crate) struct Cmd {
    /// Its key's slot.
    pub(crate) slot: u16,
    pub(crate) args: Vec<Vec<u8>>,
    /// The server's words of its last redirect or refusal (a failure's
    /// reason).
    pub(crate) last: Option<Arc<str>>,
    done: Option<crate::engine::SlotRef<resp::Value>>,
}

impl Cmd {
    /// A command whose outcome completes `done`.
    pub(crate) fn new(
        slot: u16,
        args: Vec<Vec<u8>>,
        done: crate::engine::SlotRef<resp::Value>,
    ) -> Cmd {
        Cmd {
            slot,
            args,
            last: None,
            done: Some(done),
        }
    }

    /// Completes its caller's handle with `r`.
    pub(crate) fn finish(mut self, r: Result<resp::Value, crate::Error>) {
        if let Some(done) = self.done.take() {
            done.complete(r);
        }
    }
}

impl Drop for Cmd {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done.complete(Err(crate::Error::Shutdown));
        }
    }
}

/// One step of a topology fetch, answered.
pub(crate) struct Fetched {
    /// The core's request.
    pub(crate) id: u64,
    pub(crate) addr: std::net::SocketAddr,
    /// `None`: the `INFO server` reply; else the topology command's.
    pub(crate) command: Option<topology::TopologyCommand>,
    pub(crate) reply: Result<resp::Value, crate::Error>,
}

/// One thing a subscribe connection read, for the control core.
#[derive(Debug)]
pub(crate) enum ConnRead {
    /// The reply to a subscribe command (they come in the order sent).
    Reply(control::SubscribeReply),
    /// A `sunsubscribe` push of a wanted channel (user name): the answer to
    /// our own unsubscribe, or the server dropped it.
    Sunsubscribed(Box<[u8]>),
    /// The liveness `PING` was answered.
    Pong,
}

/// The control thread's inbox: what the I/O threads, the application and
/// the publish path report, each turned into an input of the control core
/// (or of the publish side) in the next round.
#[derive(Default)]
pub(crate) struct Inbox {
    /// Subscribe connections that came up.
    pub(crate) ups: Vec<control::ConnId>,
    /// Subscribe connections that went down (or never came up), and why.
    pub(crate) downs: Vec<(control::ConnId, Arc<str>)>,
    /// What subscribe connections read, each connection's in the order it
    /// read them (the core tells our own unsubscribe's answer from the
    /// server's drop by that order).
    pub(crate) read: Vec<(control::ConnId, ConnRead)>,
    /// Connections whose service channel the server dropped.
    pub(crate) services_lost: Vec<control::ConnId>,
    /// Topology fetch steps answered.
    pub(crate) fetched: Vec<Fetched>,
    /// Slot probes answered.
    pub(crate) probed: Vec<(u64, control::ProbeReply)>,
    pub(crate) dirty: Vec<usize>,
    pub(crate) retries: Vec<Retry>,
    /// Commands routed by key, posted by their callers.
    pub(crate) commands: Vec<Cmd>,
    /// What came back for commands sent.
    pub(crate) command_replies: Vec<(control::publish::CmdId, Result<resp::Value, crate::Error>)>,
    /// Route barriers: token, and whether the old route answered.
    pub(crate) barriers: Vec<(u64, bool)>,
    /// Our gate markers that came back (their tokens).
    pub(crate) markers: Vec<u64>,
    /// A slot started holding publishes.
    pub(crate) held: bool,
    /// The application asked for a topology reread.
    pub(crate) refresh: bool,
    /// Servers whose name leads elsewhere now (a Sentinel failover): their
    /// subscribe connections not at the new address are restarted.
    pub(crate) moved: Vec<(String, crate::addr::ServerAddr)>,
    /// An unsubscribe (or `wait_inactive`) wants a fence.
    pub(crate) fence: bool,
    /// The fence in flight completed.
    pub(crate) fence_done: bool,
    pub(crate) stop: bool,
    /// Set by the control loop's last turn: nothing posted after it is
    /// read, so a poster finishes what it would have posted itself.
    pub(crate) closed: bool,
}

impl Inbox {
    /// Whether anything waits to be handled.
    pub(crate) fn has_work(&self) -> bool {
        !self.dirty.is_empty() || !self.quiet_but_dirty() || self.fence || self.fence_done
    }

    /// Whether nothing but dirty lanes (if any) waits (a fence request
    /// aside: unsubscribes coalesce as subscribes do).
    pub(crate) fn quiet_but_dirty(&self) -> bool {
        self.ups.is_empty()
            && self.downs.is_empty()
            && self.read.is_empty()
            && self.services_lost.is_empty()
            && self.fetched.is_empty()
            && self.probed.is_empty()
            && self.retries.is_empty()
            && self.commands.is_empty()
            && self.command_replies.is_empty()
            && self.barriers.is_empty()
            && self.markers.is_empty()
            && !self.held
            && !self.refresh
            && self.moved.is_empty()
            && !self.stop
    }
}

impl DirtyLanes for Inbox {
    fn push_dirty(&mut self, lane: usize) {
        self.dirty.push(lane);
    }
}

pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) parts: Partitions,
    /// What every placement shares (registry, queues, counters, waits and
    /// refusals); its waits are also woken on topology changes.
    pub(crate) front: Front,
    /// Per partition, what precedes a channel in its server name
    /// (`<prefix>{TAG}.`; empty in classic mode): see [`wire_heads`].
    pub(crate) heads: Vec<Box<[u8]>>,
    /// The control core's counters, as of its last round.
    pub(crate) core_stats: parking_lot::Mutex<control::Stats>,
    /// Looks host names up (servers, seeds and nodes named by host).
    pub(crate) resolver: Arc<dyn crate::Resolver>,
    /// Each server's subscribe connections (the control thread writes).
    pub(crate) health: parking_lot::Mutex<crate::control_loop::health::Health>,
    pub(crate) routes: RwLock<Routes>,
    /// Per lane: the subscribe connection that carries it now.
    pub(crate) lane_conn: RwLock<Vec<Option<Arc<ConnState>>>>,
    /// Per lane, the subscribe connection whose messages it delivers: set
    /// by the control thread when a lane moves (at its gap, and before its
    /// subscribe goes out), checked where messages are queued, so a late
    /// message of the old connection cannot follow the new one's.
    pub(crate) lane_owners: Arc<LaneOwners>,
    /// The control thread's inbox.
    pub(crate) mail: Mailbox<Inbox>,
    /// Why each seed could not be asked for the topology (its connection
    /// or handshake failed).
    /// Per seed (or node asked), the last error: what a failed start
    /// reports.
    pub(crate) seed_errors:
        parking_lot::Mutex<std::collections::BTreeMap<std::net::SocketAddr, crate::Error>>,
    /// Set when the instance shuts down (node engines closing then is not
    /// a reason to re-route).
    pub(crate) closing: AtomicBool,
    /// The node engines the control thread closed once `closing` was set,
    /// which never waits for them there (it is shared with the other
    /// instances on the runtime): a shutdown called elsewhere waits for
    /// them (see `ClusterPubSub::shutdown`).
    pub(crate) engines_closing: parking_lot::Mutex<Vec<crate::engine::Closing>>,
    /// The publish core: routes, gates, and publishes held per slot
    /// (owner unreachable, a route change, behind a refused one).
    pub(crate) hold: Publishing,
    /// The next publish's order number.
    pub(crate) next_seq: AtomicU64,
    /// This instance's id in gate markers.
    pub(crate) instance: u64,
}

/// What precedes a channel of each partition in its server name, worked
/// out once, so a publish writes its name in two copies (no hashing of the
/// tag table, no pieces).
pub(crate) fn wire_heads(mode: Mode, parts: &Partitions) -> Vec<Box<[u8]>> {
    (0..parts.count())
        .map(|p| {
            let mut head = Vec::new();
            if !matches!(mode, Mode::Classic) {
                parts.redis_channel_at(p, b"", &mut head);
            }
            head.into_boxed_slice()
        })
        .collect()
}

impl Shared {
    /// Number of lanes: one per partition, or (classic) one per
    /// connection and a pattern lane per server after them (the control
    /// core's `pattern_lane`).
    pub(crate) fn lanes(config: &Config, parts: &Partitions) -> usize {
        match config.mode {
            Mode::Classic => (config.multiplier + 1) * config.fixed_servers.max(1),
            Mode::Sharded | Mode::PerPartition => parts.count() as usize,
        }
    }

    /// The lane of server `server`'s pattern subscriptions (classic mode
    /// only: sharded Pub/Sub has no patterns).
    pub(crate) fn pattern_lane(&self, server: usize) -> Option<usize> {
        let mult = u32::try_from(self.config.multiplier).unwrap_or(u32::MAX);
        control::pattern_lane(mult, self.pattern_servers(), server).map(|l| l as usize)
    }

    /// Whether `lane` is a pattern lane (they come last).
    pub(crate) fn is_pattern_lane(&self, lane: usize) -> bool {
        self.pattern_lane(0).is_some_and(|first| lane >= first)
    }

    /// The pattern lane of a subscribe connection to `node`: a fixed
    /// server's own (its node id is its index), or a classic cluster's one.
    pub(crate) fn pattern_lane_of(&self, node: &topology::NodeKey) -> Option<usize> {
        let server = match self.fixed() {
            true => node.id.parse().ok()?,
            false => 0,
        };
        self.pattern_lane(server)
    }

    /// The number of servers whose pattern lanes there are.
    pub(crate) fn pattern_servers(&self) -> usize {
        match self.config.mode {
            Mode::Classic => self.config.fixed_servers.max(1),
            Mode::Sharded | Mode::PerPartition => 0,
        }
    }

    /// Number of lanes of this instance.
    pub(crate) fn lanes_len(&self) -> usize {
        Shared::lanes(&self.config, &self.parts)
    }

    /// The lane of a user channel.
    #[inline]
    pub(crate) fn lane_of(&self, channel: &[u8]) -> usize {
        match self.config.mode {
            Mode::Classic => {
                let mult = self.config.multiplier.max(1);
                let lanes = u32::try_from(mult).unwrap_or(u32::MAX);
                let index = control::classic_lane(channel, lanes) as usize;
                self.server_of(channel) * mult + index
            }
            Mode::Sharded | Mode::PerPartition => self.parts.partition_of(channel) as usize,
        }
    }

    /// The server of a channel in a fixed placement
    /// ([`shardcore::shard_of`]; 0 with one server or on a cluster).
    #[inline]
    pub(crate) fn server_of(&self, channel: &[u8]) -> usize {
        match self.config.fixed_servers {
            0 | 1 => 0,
            n => shardcore::shard_of(channel, n as u32) as usize,
        }
    }

    /// Whether this is a fixed placement (servers, not a cluster).
    pub(crate) fn fixed(&self) -> bool {
        self.config.fixed_servers > 0
    }

    /// The lane and user channel of a channel name as the server sent it.
    #[inline]
    pub(crate) fn user_of<'a>(&self, wire: &'a [u8]) -> Option<(usize, &'a [u8])> {
        match self.config.mode {
            Mode::Classic => Some((self.lane_of(wire), wire)),
            Mode::Sharded | Mode::PerPartition => self
                .parts
                .user_channel(wire)
                .map(|(p, ch)| (p as usize, ch)),
        }
    }

    /// Appends the name the server knows `channel` by.
    pub(crate) fn wire_into(&self, channel: &[u8], out: &mut Vec<u8>) {
        match self.config.mode {
            Mode::Classic => out.extend_from_slice(channel),
            Mode::Sharded | Mode::PerPartition => self.parts.redis_channel_into(channel, out),
        }
    }

    /// What precedes a channel of partition `p` (which must be
    /// `parts.partition_of(channel)`) in its server name.
    pub(crate) fn wire_head(&self, p: u32) -> &[u8] {
        self.heads.get(p as usize).map_or(&[][..], |h| &h[..])
    }

    /// Whether commands use `SSUBSCRIBE`/`SPUBLISH`.
    pub(crate) fn sharded(&self) -> bool {
        !matches!(self.config.mode, Mode::Classic)
    }

    pub(crate) fn post(&self, f: impl FnOnce(&mut Inbox)) {
        self.mail.post(f);
    }

    pub(crate) fn mark_dirty(&self, lane: usize) {
        self.mail.mark_dirty(lane);
    }

    /// Asks the control thread for a topology reread (the application's
    /// `refresh`).
    pub(crate) fn request_refresh(&self) {
        self.post(|inbox| inbox.refresh = true);
    }

    /// Whether a channel's subscription is confirmed on a live connection.
    pub(crate) fn is_active(&self, channel: &[u8]) -> bool {
        self.is_active_in(self.lane_of(channel), channel)
    }

    /// Whether a pattern's subscription is confirmed on a live connection
    /// to every server (false without patterns).
    pub(crate) fn is_pattern_active(&self, pattern: &[u8]) -> bool {
        let servers = self.pattern_servers();
        servers > 0
            && (0..servers)
                .filter_map(|i| self.pattern_lane(i))
                .all(|lane| self.is_active_in(lane, pattern))
    }

    /// Why a server refused `pattern`, while it stands refused on one.
    pub(crate) fn pattern_refusal(&self, pattern: &[u8]) -> Option<crate::error::Error> {
        (0..self.pattern_servers())
            .filter_map(|i| self.pattern_lane(i))
            .find_map(|lane| {
                let flags = self.registry.flags(lane, pattern);
                self.refusals.error(flags, pattern, true)
            })
    }

    /// How many of `channels`, from the first, are active (as
    /// [`is_active`](Shared::is_active) says, up to the first that is
    /// not); it may look at only the first few hundred. They are looked up
    /// lane by lane: one lock of each lane they fall in, not one per
    /// channel.
    pub(crate) fn active_prefix<C: AsRef<[u8]>>(&self, channels: &[C]) -> usize {
        const LOOK: usize = 512;
        let look = &channels[..channels.len().min(LOOK)];
        let mut order: Vec<(usize, usize)> = look
            .iter()
            .enumerate()
            .map(|(i, c)| (self.lane_of(c.as_ref()), i))
            .collect();
        order.sort_unstable();
        let ready: Vec<bool> = {
            let conns = self.lane_conn.read();
            order
                .chunk_by(|a, b| a.0 == b.0)
                .map(|run| {
                    conns
                        .get(run[0].0)
                        .and_then(Option::as_ref)
                        .is_some_and(|c| c.ready.load(Ordering::Acquire))
                })
                .collect()
        };
        // The first inactive one so far: later ones need no look.
        let mut first = look.len();
        for (run, ready) in order.chunk_by(|a, b| a.0 == b.0).zip(ready) {
            if !ready {
                first = first.min(run[0].1);
                continue;
            }
            let Some(lane) = self.registry.lane(run[0].0) else {
                first = first.min(run[0].1);
                continue;
            };
            for &(_, i) in run {
                if i >= first {
                    break;
                }
                let active = look
                    .get(i)
                    .and_then(|c| lane.flags(c.as_ref()))
                    .is_some_and(|f| f & ACTIVE != 0);
                if !active {
                    first = i;
                }
            }
        }
        first
    }

    fn is_active_in(&self, lane: usize, name: &[u8]) -> bool {
        let ready = self
            .lane_conn
            .read()
            .get(lane)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.ready.load(Ordering::Acquire));
        ready && self.registry.flags(lane, name) & ACTIVE != 0
    }
}

impl std::ops::Deref for Shared {
    type Target = Front;

    fn deref(&self) -> &Front {
        &self.front
    }
}
