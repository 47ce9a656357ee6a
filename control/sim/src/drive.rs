//! The simulator loop: carries the core's commands to the cluster and the
//! cluster's answers back, with delays, under a schedule of faults.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;
use core::time::Duration;

use shardcore::Partitions;
use topology::{NodeAddr, SlotMap};

use crate::check::Checker;
use crate::cluster::Cluster;
use crate::pubside::{PubEv, PubSide, PublishTotals};
use crate::schedule::Schedule;
use control::Config;
use control::Core;
use control::Rng;
use control::Time;
use control::{Channel, Command, ConnId, FetchError, ProbeReply, SubscribeReply};

/// Partitions of every simulated run.
pub const PARTITIONS: u32 = 16;
/// Most steps of one run (a core that keeps itself busy fails).
const MAX_STEPS: u64 = 1_000_000;

#[derive(Debug)]
pub(crate) enum Ev {
    Server(ServerMsg),
    Core(Input),
    Fault(crate::schedule::Fault),
    /// Messages on a connection, and how many more rounds follow.
    Chatter(ConnId, u32),
    /// The publish side.
    Pub(PubEv),
}

#[derive(Debug)]
pub(crate) enum ServerMsg {
    Open(ConnId, NodeAddr),
    Close(ConnId),
    Ping(ConnId),
    Sub(ConnId, u16, Vec<Channel>),
    Unsub(ConnId, Vec<Channel>),
    Version(u64, NodeAddr),
    Fetch(u64, NodeAddr),
    Probe(u64, u16, NodeAddr),
}

#[derive(Debug)]
pub(crate) enum Input {
    Up(ConnId),
    Down(ConnId),
    Reply(ConnId, SubscribeReply),
    Push(ConnId, Channel),
    Pong(ConnId),
    Activity(ConnId),
    /// An `INFO server` answer.
    Version(u64, Result<&'static [u8], FetchError>),
    Topology(u64, Result<SlotMap, FetchError>),
    Probe(u64, ProbeReply),
    /// The service channel on a connection was dropped or refused.
    ServiceLost(ConnId),
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Virtual time at the end.
    pub end: Time,
    /// Events and timeouts handled.
    pub steps: u64,
    /// Commands the core gave.
    pub commands: u64,
    /// Gap events among them.
    pub gaps: u64,
    /// `SSUBSCRIBE`s among them.
    pub subscribes: u64,
    /// Probes among them.
    pub probes: u64,
    /// `SSUBSCRIBE` replies that were `MOVED`, `ASK`, `TRYAGAIN` or
    /// `CLUSTERDOWN`.
    pub redirects: u64,
    /// Activity reports (messages on a connection) given to the core.
    pub activity: u64,
    /// The publish side.
    pub publish: PublishTotals,
}

/// A core, a cluster, and the events between them.
pub struct Sim {
    /// The core under test.
    pub core: Core,
    /// The publish core under test, beside it.
    pub publ: PubSide,
    /// The simulated cluster.
    pub cluster: Cluster,
    pub(crate) rng: Rng,
    pub(crate) now: Time,
    pub(crate) queue: BTreeMap<(Time, u64), Ev>,
    seq: u64,
    to_core: BTreeMap<ConnId, Time>,
    to_server: BTreeMap<ConnId, Time>,
    pub(crate) conn_node: BTreeMap<ConnId, usize>,
    /// Every channel name of the run.
    pub names: Vec<Channel>,
    /// Channels the application wants.
    pub want: BTreeSet<Channel>,
    /// Per connection, the channels of each `SSUBSCRIBE` not answered yet.
    pub(crate) inflight: BTreeMap<ConnId, alloc::collections::VecDeque<BTreeSet<Channel>>>,
    /// The last connection a subscribe of each channel went to.
    pub(crate) last_sub: BTreeMap<Channel, ConnId>,
    pub(crate) acl: BTreeSet<Channel>,
    pub(crate) parts: Partitions,
    pub(crate) stale_until: Time,
    /// Slots mid-migration: the node they left, and until when it answers
    /// `ASK` (and the new owner `TRYAGAIN`) instead of serving.
    pub(crate) migrating: BTreeMap<u16, (usize, Time)>,
    /// How many nodes the core was seeded with (nodes `0..seeds`).
    pub(crate) seeds: usize,
    /// The property ledger.
    pub check: Checker,
    commands: u64,
    steps: u64,
    pub(crate) redirects: u64,
    /// When the core last heard anything on each connection (no `PING`
    /// before the ping interval has passed since).
    pub(crate) heard: BTreeMap<ConnId, Time>,
    /// Connections heard by the event being handled (they count once its
    /// commands are checked: a ping due at that very time goes first).
    heard_now: Vec<ConnId>,
    pub(crate) activity: u64,
    /// Valkey's pushes on a promotion and a re-point ([`Schedule::valkey`]).
    pub(crate) valkey: bool,
    /// Replicas a `Replicate` fault moved (each moves once).
    pub(crate) repointed: BTreeSet<usize>,
    /// Print every event and command (set by `CONTROL_SIM_TRACE`).
    pub trace: bool,
    /// A pushed `sunsubscribe` broke a confirmed subscription: the slot
    /// map must be read again by then (see [`Sim::refresh_bound`]).
    refresh_due: Option<Time>,
}

/// Runs `schedule` and checks every property; panics with the seed on a
/// violation.
pub fn run(schedule: &Schedule) -> Outcome {
    Sim::new(schedule).run(schedule)
}

/// Runs [`Schedule::random`] of `seed`.
pub fn run_seed(seed: u64) -> Outcome {
    run(&Schedule::random(seed))
}

impl Sim {
    /// A cluster and a core as `schedule` describes them, with half the
    /// channels wanted.
    pub fn new(s: &Schedule) -> Sim {
        let parts = Partitions::new(PARTITIONS).unwrap_or_else(|_| unreachable!());
        let mut cluster = Cluster::new(s.primaries);
        cluster.classic = s.classic;
        let seeds: Vec<NodeAddr> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
        let seed_count = seeds.len();
        let mut cfg = Config::new(parts.clone(), seeds);
        cfg.multiplier = s.multiplier.max(1);
        if s.per_partition {
            cfg.mode = control::ConnLayout::PerPartition;
        }
        if s.classic {
            cfg.mode = control::ConnLayout::Classic;
        }
        cfg.batch = s.batch.max(1);
        cfg.workers = s.workers.max(1);
        if s.split_channels {
            cfg.split = control::ResubscribeSplit::Channels;
        }
        if s.replicas {
            cfg.replicas = Some(s.seed);
        }
        let batch = cfg.batch;
        let core = Core::new(cfg, Time::ZERO).unwrap_or_else(|e| panic!("sim config: {e}"));
        let names: Vec<Channel> = (0..s.channels.max(1))
            .map(|i| alloc::format!("c{i}").into_bytes().into())
            .collect();
        let acl = names
            .iter()
            .enumerate()
            .filter(|(i, _)| s.acl && i % 11 == 7)
            .map(|(_, n)| n.clone())
            .collect();
        let publ = PubSide::new(s, parts.slots());
        let mut sim = Sim {
            core,
            publ,
            cluster,
            rng: Rng::new(s.seed),
            now: Time::ZERO,
            queue: BTreeMap::new(),
            seq: 0,
            to_core: BTreeMap::new(),
            to_server: BTreeMap::new(),
            conn_node: BTreeMap::new(),
            want: BTreeSet::new(),
            last_sub: BTreeMap::new(),
            inflight: BTreeMap::new(),
            acl,
            parts,
            stale_until: Time::ZERO,
            seeds: 0,
            migrating: BTreeMap::new(),
            check: Checker::new(s.seed, batch),
            commands: 0,
            steps: 0,
            redirects: 0,
            heard: BTreeMap::new(),
            heard_now: Vec::new(),
            activity: 0,
            valkey: s.valkey,
            repointed: BTreeSet::new(),
            trace: std::env::var_os("CONTROL_SIM_TRACE").is_some(),
            refresh_due: None,
            names,
        };
        sim.seeds = seed_count;
        let first: Vec<Channel> = sim.names.iter().step_by(2).cloned().collect();
        sim.want.extend(first.iter().cloned());
        sim.core
            .handle_want(Time::ZERO, first.iter().map(|c| c.as_ref()));
        for (t, f) in &s.faults {
            sim.push(*t, Ev::Fault(*f));
        }
        let last = s.faults.iter().map(|f| f.0).max().unwrap_or(Time::ZERO);
        if sim.publ.on {
            sim.push(PubSide::converged_at(last), Ev::Pub(PubEv::Converged));
        }
        for (seq, t) in sim.publ.times(last).into_iter().enumerate() {
            sim.push(t, Ev::Pub(PubEv::Publish(seq as u64 + 1)));
        }
        sim
    }

    /// Runs until `settle` after the last fault, then checks the end state.
    pub fn run(mut self, s: &Schedule) -> Outcome {
        let last = s.faults.iter().map(|f| f.0).max().unwrap_or(Time::ZERO);
        let end = last + s.settle;
        loop {
            self.drain();
            self.pub_drain();
            self.drain();
            let sub_timer = self.core.poll_timeout();
            // Due at once after an input that woke the control thread.
            let pub_timer = (self.publ.core.poll_timeout())
                .filter(|_| self.publ.on)
                .map(|t| t.max(self.now));
            let timer = match (sub_timer, pub_timer) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(t) = sub_timer {
                if t <= self.now {
                    self.check.fail(&alloc::format!(
                        "poll_timeout {t} does not advance past {}",
                        self.now
                    ));
                }
            }
            let event = self.queue.keys().next().map(|k| k.0);
            let next = match (timer, event) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if let Some(due) = self.refresh_due.filter(|&d| d < next.min(end)) {
                self.check.fail(&alloc::format!(
                    "no topology fetch by {due}, {:?} after a pushed sunsubscribe broke a subscription",
                    self.refresh_bound()
                ));
            }
            if next > end {
                break;
            }
            self.steps += 1;
            if self.steps > MAX_STEPS {
                self.check
                    .fail("too many steps: the core keeps itself busy");
            }
            self.now = next;
            if sub_timer == Some(next) {
                if self.trace {
                    std::eprintln!("{next} < timeout");
                }
                self.core.handle_timeout(next);
                continue;
            }
            if pub_timer == Some(next) {
                if self.trace {
                    std::eprintln!("{next} < publish timeout");
                }
                self.pub_timeout();
                continue;
            }
            if let Some((_, ev)) = self.queue.pop_first() {
                self.event(ev);
            }
        }
        self.now = end;
        self.final_check();
        self.pub_final_check();
        Outcome {
            end,
            steps: self.steps,
            commands: self.commands,
            gaps: self.check.gaps,
            subscribes: self.check.subscribes,
            probes: self.check.probe_count,
            redirects: self.redirects,
            activity: self.activity,
            publish: self.publ.totals,
        }
    }

    /// How soon a pushed `sunsubscribe` that breaks a confirmed
    /// subscription must be followed by a topology fetch: a fetch in
    /// flight may run to its timeout, then the fetch backoff may hold the
    /// next one up to its longest delay (the poll would come only after
    /// [`Config::poll_interval`](control::Config::poll_interval)).
    fn refresh_bound(&self) -> Duration {
        let c = self.core.config();
        c.fetch_timeout + c.retry_max + c.min_refresh_gap + Duration::from_millis(500)
    }

    pub(crate) fn push(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    /// A one-way delay: mostly under 2 ms, now and then up to 300 ms.
    fn latency(&mut self) -> Duration {
        if self.rng.chance(3) {
            Duration::from_millis(20 + self.rng.below(280))
        } else {
            Duration::from_micros(50 + self.rng.below(1950))
        }
    }

    /// Sends `ev` to `node` on subscribe connection `conn`, in order with
    /// its earlier requests.
    pub(crate) fn send_conn(&mut self, node: Option<usize>, conn: ConnId, ev: Ev) {
        let mut at = self.now + self.latency();
        if let Some(n) = node.and_then(|n| self.cluster.nodes.get(n)) {
            at = at.max(n.hole_until);
        }
        let last = self.to_server.entry(conn).or_default();
        at = at.max(*last);
        *last = at;
        self.push(at, ev);
    }

    /// Sends `msg` to `node` (on `conn`, in order with its earlier ones).
    fn send_node(&mut self, node: Option<usize>, conn: Option<ConnId>, msg: ServerMsg) {
        let mut at = self.now + self.latency();
        if let Some(n) = node.and_then(|n| self.cluster.nodes.get(n)) {
            at = at.max(n.hole_until);
        }
        if let Some(c) = conn {
            let last = self.to_server.entry(c).or_default();
            at = at.max(*last);
            *last = at;
        }
        self.push(at, Ev::Server(msg));
    }

    /// Sends `input` from `node` to the core (on `conn`, in order).
    pub(crate) fn send_core(&mut self, node: Option<usize>, conn: Option<ConnId>, input: Input) {
        let mut at = self.now + self.latency();
        if let Some(n) = node.and_then(|n| self.cluster.nodes.get(n)) {
            if n.alive {
                at = at.max(n.hole_until);
            }
        }
        if let Some(c) = conn {
            let last = self.to_core.entry(c).or_default();
            at = at.max(*last);
            *last = at;
        }
        self.push(at, Ev::Core(input));
    }

    /// Carries out every command the core has, checking each.
    fn drain(&mut self) {
        while let Some(cmd) = self.core.poll_command() {
            self.commands += 1;
            if self.trace {
                std::eprintln!("{} > {cmd}", self.now);
            }
            let parts = &self.parts;
            let core = &self.core;
            let classic = self.cluster.classic;
            let lanes = core.config().multiplier;
            self.check.command(
                self.now,
                &cmd,
                |c| core.lane_of(c),
                |p| match classic {
                    true => (p < lanes).then_some(0),
                    false => parts.slots().get(p as usize).copied(),
                },
            );
            self.execute(cmd);
        }
        for c in core::mem::take(&mut self.heard_now) {
            self.heard.insert(c, self.now);
        }
    }

    fn execute(&mut self, cmd: Command) {
        match cmd {
            Command::Open { conn, node } => {
                let n = self.cluster.node_at(&node.addr);
                if let Some(n) = n {
                    self.conn_node.insert(conn, n);
                }
                self.send_node(n, Some(conn), ServerMsg::Open(conn, node.addr));
            }
            Command::Close { conn } => {
                // Closed here: nothing of its subscriptions reaches the
                // application any more, so the server dropping one later
                // is no loss (the core owes the gaps of the close itself).
                self.last_sub.retain(|_, c| *c != conn);
                let n = self.conn_node.get(&conn).copied();
                self.send_node(n, Some(conn), ServerMsg::Close(conn));
            }
            Command::Ping { conn } => {
                let every = self.core.config().ping_interval;
                if let Some(&t) = self.heard.get(&conn) {
                    if self.now.since(t) < every {
                        self.check.fail(&alloc::format!(
                            "{conn} pinged {:?} after it was last heard",
                            self.now.since(t)
                        ));
                    }
                }
                let n = self.conn_node.get(&conn).copied();
                self.send_node(n, Some(conn), ServerMsg::Ping(conn));
            }
            Command::Subscribe {
                conn,
                slot,
                channels,
                ..
            } => {
                let inflight = self.inflight.entry(conn).or_default();
                if let Some(c) = channels
                    .iter()
                    .find(|c| inflight.iter().any(|f| f.contains(*c)))
                {
                    let name = alloc::string::String::from_utf8_lossy(c).into_owned();
                    self.check.fail(&alloc::format!(
                        "{name} sent twice on {conn} before a reply"
                    ));
                }
                inflight.push_back(channels.iter().cloned().collect());
                for c in &channels {
                    self.last_sub.insert(c.clone(), conn);
                }
                let n = self.conn_node.get(&conn).copied();
                self.send_node(n, Some(conn), ServerMsg::Sub(conn, slot, channels));
            }
            Command::Unsubscribe { conn, channels, .. } => {
                for f in self.inflight.entry(conn).or_default() {
                    f.retain(|c| !channels.contains(c));
                }
                let n = self.conn_node.get(&conn).copied();
                self.send_node(n, Some(conn), ServerMsg::Unsub(conn, channels));
            }
            Command::AskVersion { id, node } => {
                self.refresh_due = None;
                let n = self.cluster.node_at(&node);
                self.send_node(n, None, ServerMsg::Version(id, node));
            }
            Command::FetchTopology { id, node, .. } => {
                self.refresh_due = None;
                let n = self.cluster.node_at(&node);
                self.send_node(n, None, ServerMsg::Fetch(id, node));
            }
            Command::ProbeSlot { id, slot, node } => {
                let n = self.cluster.node_at(&node);
                self.send_node(n, None, ServerMsg::Probe(id, slot, node));
            }
            Command::Gap { .. } | Command::Refused { .. } => {}
        }
    }

    fn event(&mut self, ev: Ev) {
        if self.trace {
            std::eprintln!("{} < {ev:?}", self.now);
        }
        match ev {
            Ev::Server(m) => self.server(m),
            Ev::Fault(f) => self.fault(f),
            Ev::Chatter(conn, left) => self.chatter(conn, left),
            Ev::Pub(e) => self.pub_event(e),
            Ev::Core(i) => {
                let now = self.now;
                if let Input::Up(c)
                | Input::Reply(c, _)
                | Input::Push(c, _)
                | Input::Pong(c)
                | Input::Activity(c) = &i
                {
                    self.heard_now.push(*c);
                }
                if let Input::Push(c, ch) = &i {
                    // A drop of a confirmed subscription (not the answer
                    // to our own unsubscribe): its slot probably moved.
                    if self.core.subscribed_on(ch) == Some(*c) && self.refresh_due.is_none() {
                        self.refresh_due = Some(now + self.refresh_bound());
                    }
                }
                if let Input::Up(_) = &i {
                    self.publ.services_due = true;
                }
                let core = &mut self.core;
                match i {
                    Input::ServiceLost(c) => self.service_lost(c),
                    Input::Up(c) => core.handle_conn_up(now, c),
                    Input::Down(c) => core.handle_conn_down(now, c),
                    Input::Reply(c, r) => {
                        if let Some(f) = self.inflight.get_mut(&c) {
                            f.pop_front();
                        }
                        core.handle_subscribe_reply(now, c, r);
                    }
                    Input::Push(c, ch) => core.handle_sunsubscribe(now, c, &ch),
                    Input::Pong(c) => core.handle_pong(now, c),
                    Input::Activity(c) => {
                        self.activity += 1;
                        core.handle_activity(now, c);
                    }
                    Input::Version(id, r) => {
                        if r.is_err() {
                            self.check.fetch_reply(now, false);
                        }
                        core.handle_version(now, id, r);
                    }
                    Input::Topology(id, r) => {
                        self.check.fetch_reply(now, r.is_ok());
                        core.handle_topology(now, id, r);
                    }
                    Input::Probe(id, r) => core.handle_probe(now, id, r),
                }
            }
        }
    }
}
