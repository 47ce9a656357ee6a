//! Carrying out the control core's commands: each becomes a non-blocking
//! call on a connection (or a gap or refusal for the workers), whose answer
//! comes back through the inbox as the core's next input.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use control::{Channel, Command, ConnId, FetchError, ProbeReply, SubscribeReply};
use topology::NodeKey;

use crate::addr::ServerAddr;
use crate::conn::{ReplyKind, Role, SubscribeKind};
use crate::control_loop::dispatch::SubObserver;
use crate::control_loop::driver::{Driver, SubConn};
use crate::control_loop::shared::{ConnRead, ConnState, Fetched};
use crate::control_loop::topo::{resolve, resolve_nth};
use crate::error::Error;
use crate::front::registry::ACTIVE;
use crate::metrics::add;
use crate::workers::ChannelList;

/// How soon the control thread looks again at a lookup that runs.
const LOOKUP_POLL: std::time::Duration = std::time::Duration::from_millis(5);

impl Driver {
    /// After an input: publish routes follow a new map first (so publishes
    /// move before the subscribe side rewires), the core's counters are
    /// published, then every command the core has is carried out, in
    /// order.
    pub(crate) fn drain(&mut self) {
        self.sync_routes();
        *self.s.core_stats.lock() = self.core.stats();
        while let Some(cmd) = self.core.poll_command() {
            self.execute(cmd);
        }
        self.flush_gaps();
    }

    fn execute(&mut self, cmd: Command) {
        log::trace!("control {:?}: {cmd}", self.s.config.mode);
        // Gaps gathered so far reach the workers before anything else
        // happens: before the resubscribe that follows them, so every
        // message after it comes after its gap.
        if !matches!(cmd, Command::Gap { .. }) {
            self.flush_gaps();
        }
        match cmd {
            Command::Open { conn, node } => self.open(conn, &node),
            Command::Close { conn } => {
                self.lookups.retain(|(c, _, _)| *c != conn);
                if let Some(c) = self.subs.remove(&conn) {
                    self.retire(c);
                }
                if self.core.is_retrying(conn) {
                    // It stopped answering: a failure, reopened later.
                    let why = "stopped answering (a reply or a liveness PING timed out)";
                    let edge = self.s.health.lock().failed(self.now(), conn, why.into());
                    self.tell_health(edge);
                } else {
                    self.s.health.lock().closed(self.now(), conn);
                }
            }
            Command::Ping { conn } => self.ping(conn),
            Command::Subscribe {
                conn,
                partition,
                channels,
                ..
            } => {
                // From now on the lane takes messages from `conn` only.
                debug_assert!(
                    self.s.is_pattern_lane(partition as usize)
                        || channels
                            .iter()
                            .all(|c| self.s.lane_of(c) == partition as usize),
                    "a core partition is an engine lane"
                );
                self.place(partition, conn);
                self.move_lane(partition, Some(conn));
                self.subscribe(conn, partition, &channels)
            }
            Command::Unsubscribe {
                conn,
                partition,
                channels,
                ..
            } => self.unsubscribe(conn, partition, &channels),
            Command::Gap {
                partition,
                channels,
            } => self.gap(partition, channels),
            Command::Refused {
                partition,
                channel,
                message,
            } => {
                let s = &self.s;
                let lane = partition as usize;
                let message: Arc<str> = message.into();
                let pattern = s.is_pattern_lane(lane);
                s.refusals
                    .refuse(&s.refusal_targets(), lane, &channel, &message, pattern);
            }
            Command::AskVersion { id, node } => self.start_fetch(id, &node, None),
            Command::FetchTopology { id, node, command } => {
                self.start_fetch(id, &node, Some(command))
            }
            Command::ProbeSlot { id, slot, node } => self.probe(id, slot, &node),
        }
    }

    /// Opens subscribe connection `conn` to `node` without waiting: it
    /// reports up or down through its observer. A node given by name is
    /// looked up first, on a helper thread (the control thread never
    /// waits for a lookup): the open is taken up again once it answers.
    fn open(&mut self, conn: ConnId, node: &NodeKey) {
        let name = node.addr.to_string();
        if node.addr.port == 0 && !self.s.fixed() {
            // Port 0 names a Unix socket or a Sentinel master, which only
            // the configured servers may be; a cluster node announced so
            // (by the wire) is not connected to.
            let why: Arc<str> = format!(
                "node {}:0 announced with port 0: not connected",
                node.addr.host
            )
            .into();
            self.s.post(|inbox| inbox.downs.push((conn, why)));
            return;
        }
        // A name is looked up again at every open; after failures, its
        // next address.
        let tried = self.s.health.lock().failures_of(&name);
        let looked_up = match self.names.get(&name) {
            Some(named) => Some(named.clone()),
            None => {
                let named = crate::engine::resolve::Named::of(&name, &self.s.resolver);
                if let Some(n) = &named {
                    self.names.insert(name.clone(), n.clone());
                }
                named
            }
        };
        // A master found through Sentinel, opened at the address looked
        // up: its connection checks that it is one (`ROLE`).
        let sentinel_master = looked_up.as_ref().is_some_and(|n| n.is_sentinel_master());
        let (addr, why) = match looked_up {
            // An IP address or a Unix socket: nothing to wait for.
            None => (
                resolve_nth(&*self.s.resolver, &node.addr, tried as usize),
                None,
            ),
            Some(named) => {
                match named.poll(u32::try_from(tried).unwrap_or(u32::MAX).saturating_add(1)) {
                    None => {
                        let again = self.now() + LOOKUP_POLL;
                        self.lookups.push((conn, node.clone(), again));
                        return;
                    }
                    Some(Ok(a)) => (Some(ServerAddr::from(a)), None),
                    Some(Err(e)) => (None, Some(e)),
                }
            }
        };
        self.s.health.lock().opened(self.now(), conn, &name, addr);
        let Some(addr) = addr else {
            let why: Arc<str> = match why {
                Some(e) => format!("cannot resolve {name}: {e}").into(),
                None => format!("cannot resolve {name}").into(),
            };
            self.s.post(|inbox| inbox.downs.push((conn, why)));
            return;
        };
        let state = Arc::new(ConnState {
            id: conn,
            rx: Default::default(),
            ready: Default::default(),
            connects: Default::default(),
            received: Default::default(),
            dropped: Default::default(),
            unenveloped: Default::default(),
            lanes_lost: Default::default(),
            home: self.next_home(),
        });
        let service_lost = Arc::new(AtomicBool::new(false));
        let observer = Arc::new(SubObserver {
            shared: self.s.clone(),
            state: state.clone(),
            service_lost: service_lost.clone(),
            stage: parking_lot::Mutex::new(crate::workers::Stage::new(
                self.s.front.queues.len(),
                self.origin(conn, node, &state),
            )),
            pattern_lane: self.s.pattern_lane_of(node),
        });
        // Resubscribing 1M channels stages ~30 MB of commands at once: let
        // it through instead of applying backpressure.
        let engine = self
            .s
            .config
            .nodes
            .engine(addr, Role::Subscribe, 1)
            .max_buffered_bytes(64 << 20)
            .require_primary(sentinel_master)
            .observer(observer)
            .build_detached();
        let engine = match engine {
            Ok(e) => Arc::new(e),
            Err(e) => {
                let why: Arc<str> = format!("cannot open a connection: {e}").into();
                self.s.post(|inbox| inbox.downs.push((conn, why)));
                return;
            }
        };
        self.subs.insert(
            conn,
            SubConn {
                engine,
                server: name,
                addr,
                state,
                service_lost,
                rx_seen: 0,
            },
        );
    }

    /// Takes up the opens whose node's lookup was running when they were
    /// asked for, once it is time to look again.
    pub(crate) fn open_looked_up(&mut self) {
        let now = self.now();
        if !self.lookups.iter().any(|(_, _, at)| *at <= now) {
            return;
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.lookups)
            .into_iter()
            .partition(|(_, _, at)| *at <= now);
        self.lookups = later;
        for (conn, node, _) in due {
            self.open(conn, &node);
        }
    }

    fn ping(&mut self, conn: ConnId) {
        let Some(c) = self.subs.get(&conn) else {
            return;
        };
        let s = self.s.clone();
        let r = c.engine.submit_to_then(
            0,
            0,
            |buf| resp::encode_command(buf, [b"PING"]),
            ReplyKind::Single,
            move |r| {
                if r.is_ok() {
                    s.post(|inbox| inbox.read.push((conn, ConnRead::Pong)));
                }
            },
        );
        if r.is_ok() {
            add(&self.s.counters.probes_sent, 1);
        }
    }

    /// The subscribe and unsubscribe commands of `lane`'s names.
    fn commands(&self, lane: u32) -> (&'static [u8], &'static [u8], SubscribeKind) {
        if self.s.sharded() {
            (b"SSUBSCRIBE", b"SUNSUBSCRIBE", SubscribeKind::Shard)
        } else if self.s.is_pattern_lane(lane as usize) {
            (b"PSUBSCRIBE", b"PUNSUBSCRIBE", SubscribeKind::Pattern)
        } else {
            (b"SUBSCRIBE", b"UNSUBSCRIBE", SubscribeKind::Channel)
        }
    }

    /// Encodes `cmd` with the wire names of `names` into `self.enc`
    /// (patterns as they are: only classic mode has them, where names are
    /// not renamed).
    fn encode(&mut self, cmd: &[u8], names: &[Channel]) {
        self.enc.clear();
        resp::encode_command_header(&mut self.enc, names.len() + 1);
        resp::encode_bulk(&mut self.enc, cmd);
        for n in names {
            self.name.clear();
            self.s.wire_into(n, &mut self.name);
            resp::encode_bulk(&mut self.enc, &self.name);
        }
    }

    /// A subscribe command; its reply goes back to the core (a connection
    /// that fails instead reports down, which the core hears).
    fn subscribe(&mut self, conn: ConnId, lane: u32, channels: &[Channel]) {
        let (cmd, _, kind) = self.commands(lane);
        self.encode(cmd, channels);
        let Some(c) = self.subs.get(&conn) else {
            return;
        };
        add(&self.s.counters.subscribe_commands, 1);
        let s = self.s.clone();
        let enc = &self.enc;
        let r = c.engine.submit_to_then(
            0,
            0,
            |buf| buf.extend_from_slice(enc),
            ReplyKind::Subscribe {
                kind,
                confirmations: channels.len() as u32,
            },
            move |r| {
                let reply = match r {
                    Ok(_) => SubscribeReply::Ok,
                    Err(Error::Reply { addr, message }) => {
                        let host = addr.host();
                        match topology::parse_cluster_error(message.as_bytes(), host.as_deref()) {
                            Some(e) => {
                                log::info!("subscribe redirected by {addr}: {message}");
                                SubscribeReply::Routing(e)
                            }
                            None => {
                                log::warn!("subscribe refused by {addr}: {message}");
                                SubscribeReply::Refused(message.as_ref().into())
                            }
                        }
                    }
                    // The connection broke: its down report follows.
                    Err(_) => return,
                };
                s.post(|inbox| inbox.read.push((conn, ConnRead::Reply(reply))));
            },
        );
        if let Err(e) = r {
            log::debug!("subscribe not sent on {conn} ({e}); its down report follows");
        }
    }

    fn unsubscribe(&mut self, conn: ConnId, lane: u32, channels: &[Channel]) {
        let (_, cmd, _) = self.commands(lane);
        self.encode(cmd, channels);
        resp::encode_command(&mut self.enc, [b"PING"]);
        let Some(c) = self.subs.get(&conn) else {
            return;
        };
        add(&self.s.counters.unsubscribe_commands, 1);
        let enc = &self.enc;
        let r = c.engine.submit_to(
            0,
            0,
            |buf| buf.extend_from_slice(enc),
            ReplyKind::Unsubscribe,
        );
        if let Err(e) = r {
            log::debug!("unsubscribe not sent on {conn} ({e})");
        }
    }

    /// Channels that may have lost messages: no longer active, and a gap
    /// event for the lane's home worker gathered now, at the point the core
    /// decided it, and queued by [`Driver::flush_gaps`] before anything
    /// else the driver does (a message queued later is after it; one
    /// queued earlier, before). A worker takes its queue whole, so it finds
    /// an incident's events (one per partition) together and merges them
    /// (see `workers::merge`): one event per worker and server.
    fn gap(&mut self, partition: u32, channels: Vec<Channel>) {
        let s = self.s.clone();
        let server = self
            .core
            .layout()
            .node_of(partition)
            .and_then(|k| resolve_nth(&*s.resolver, &k.addr, 0));
        let lane = partition as usize;
        let patterns = s.is_pattern_lane(lane);
        if let Some(l) = s.registry.lane(lane) {
            for name in &channels {
                l.update(&name[..], |f| *f &= !ACTIVE);
            }
        }
        // The lane's channels are all handled on its home.
        let mut g = ChannelList::default();
        for name in &channels {
            g.push(name);
        }
        // A lane that moves takes no more messages from its old
        // connection: those would come after this gap's event, and after
        // the new connection's first messages (see `workers::stage`).
        self.move_lane(partition, self.core.conn_of(partition));
        add(&s.counters.gap_channels, channels.len() as u64);
        if let Some(pending) = self.gaps.get_mut(s.homes.home(lane)) {
            if !g.is_empty() {
                pending.push((server, g, patterns));
            }
        }
    }

    /// What a stage of connection `conn` checks its messages' lanes with.
    fn origin(&self, conn: ConnId, node: &NodeKey, state: &ConnState) -> crate::workers::Origin {
        let s = self.s.clone();
        crate::workers::Origin {
            conn: conn.0,
            pattern_lane: s.pattern_lane_of(node).map(|l| l as u32),
            owners: self.s.lane_owners.clone(),
            lost: state.lanes_lost.clone(),
            lane_of: Arc::new(move |channel: &[u8]| s.lane_of(channel)),
        }
    }

    /// The worker of a subscribe connection opened now: the runtime's
    /// next, round robin (see `Runtime::next_home`).
    fn next_home(&self) -> usize {
        let workers = self.s.queues.len();
        self.s
            .config
            .nodes
            .runtime
            .as_ref()
            .map_or(0, |r| r.next_home(workers))
    }

    /// A lane placed on `conn`: the first time, `conn`'s worker becomes
    /// its home for good (see `workers::home`).
    fn place(&self, lane: u32, conn: ConnId) {
        if let Some(c) = self.subs.get(&conn) {
            self.s.homes.set_once(lane as usize, c.state.home);
        }
    }

    /// Makes `conn` the only connection whose messages `lane` takes; the
    /// connection it leaves (if any) learns it lost a lane after the move
    /// is made, so its stage checks lanes from then on.
    fn move_lane(&self, lane: u32, conn: Option<ConnId>) {
        let s = &self.s;
        if let Some(old) = s.lane_owners.set(lane as usize, conn.map(|c| c.0)) {
            if let Some(c) = self.subs.get(&ConnId(old)) {
                c.state.lanes_lost.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// Queues the gap events gathered since the last flush, each worker's
    /// in one push (see [`Driver::gap`]).
    pub(crate) fn flush_gaps(&mut self) {
        for (q, pending) in self.s.queues.iter().zip(&mut self.gaps) {
            if !pending.is_empty() {
                q.push_gaps(pending.drain(..));
            }
        }
    }

    /// A step of topology fetch `id` from `node` (`command`: `None` asks
    /// its version): on the connection the fetch opened, else on its
    /// publish connection when it has one that is up, else on a connection
    /// opened for this fetch.
    fn start_fetch(
        &mut self,
        id: u64,
        node: &topology::NodeAddr,
        command: Option<topology::TopologyCommand>,
    ) {
        let Some(addr) = resolve(&*self.s.resolver, node) else {
            self.fetch_failed(id, FetchError::Unreachable);
            return;
        };
        let known = self.fetch_engines.get(&id).cloned().or_else(|| {
            self.publ
                .get(&addr)
                .map(|(_, e)| e)
                .filter(|e| e.is_connection_up(0, 0))
                .cloned()
        });
        let engine = match known {
            Some(e) => e,
            None => match self
                .s
                .config
                .nodes
                .engine(addr.into(), Role::Command, 1)
                .build_detached()
            {
                Ok(e) => {
                    let e = Arc::new(e);
                    self.fetch_engines.insert(id, e.clone());
                    e
                }
                Err(e) => {
                    log::warn!("cluster: cannot ask {addr} for the topology: {e}");
                    self.fetch_failed(id, FetchError::Unreachable);
                    return;
                }
            },
        };
        let s = self.s.clone();
        let post = move |reply| {
            s.post(|inbox| {
                inbox.fetched.push(Fetched {
                    id,
                    addr,
                    command,
                    reply,
                })
            })
        };
        match command {
            None => engine.command_then(0, [&b"INFO"[..], b"server"], post),
            Some(c) => engine.command_then(0, c.args(), post),
        }
    }

    /// After a version reply: the fetch went on under a topology command
    /// the version chose, or it ended, and lets go of the connection it
    /// opened.
    fn version_done(&mut self, id: u64) {
        if self.core.topology_command().is_none() {
            if let Some(e) = self.fetch_engines.remove(&id) {
                e.shutdown();
            }
        }
    }

    /// A fetch that gave no map: the core hears why (at once, as the next
    /// input).
    fn fetch_failed(&mut self, id: u64, why: FetchError) {
        if let Some(e) = self.fetch_engines.remove(&id) {
            e.shutdown();
        }
        let now = self.now();
        self.core.handle_topology(now, id, Err(why));
    }

    /// A step of a topology fetch answered.
    pub(crate) fn on_fetched(&mut self, f: Fetched) {
        let Fetched {
            id,
            addr,
            command,
            reply,
        } = f;
        let value = match reply {
            Ok(v) => v,
            Err(e) => {
                let e = not_a_cluster(e);
                log::warn!("cluster: topology request to {addr} failed: {e}");
                if self.fetch_engines.contains_key(&id) {
                    // What a failed start reports.
                    self.s.seed_errors.lock().insert(addr, e);
                }
                if command.is_none() {
                    self.input(|core, now| {
                        core.handle_version(now, id, Err(FetchError::Unreachable))
                    });
                    return self.version_done(id);
                }
                self.fetch_failed(id, FetchError::Unreachable);
                return self.drain();
            }
        };
        let Some(command) = command else {
            let text = value.as_bytes().unwrap_or_default();
            self.input(|core, now| core.handle_version(now, id, Ok(text)));
            match self.core.topology_command() {
                Some(c) => log::info!("cluster: {addr}'s version chose {}", c.name()),
                None => log::warn!("cluster: {addr} named no version in INFO server"),
            }
            return self.version_done(id);
        };
        if let Some(e) = self.fetch_engines.remove(&id) {
            e.shutdown();
        }
        let tls = self.s.config.nodes.tls.is_some();
        let result = crate::control_loop::topo::parse_map(command, &value, addr, tls);
        if log::log_enabled!(log::Level::Trace) {
            match &result {
                Ok(map) => log::trace!("control: map #{id} from {addr}: {}", brief(map)),
                Err(e) => log::trace!("control: map #{id} from {addr}: {e:?}"),
            }
        }
        self.input(|core, now| core.handle_topology(now, id, result));
    }

    /// A `GET` of a key in `slot` on `node`, to learn the slot's owner.
    fn probe(&mut self, id: u64, slot: u16, node: &topology::NodeAddr) {
        let engine = resolve(&*self.s.resolver, node)
            .and_then(|a| self.publish_engine(a).ok().and(self.publ.get(&a)))
            .map(|(_, e)| e.clone());
        let Some(engine) = engine else {
            self.s
                .post(|inbox| inbox.probed.push((id, ProbeReply::Failed)));
            return;
        };
        let s = self.s.clone();
        let key = topology::probe_key_for_slot(slot);
        engine.command_then(0, [&b"GET"[..], &key], move |r| {
            let reply = match r {
                Ok(_) => ProbeReply::Served,
                Err(Error::Reply { addr, message }) => {
                    let host = addr.host();
                    match topology::parse_cluster_error(message.as_bytes(), host.as_deref()) {
                        Some(topology::ClusterError::Moved { addr: Some(a), .. }) => {
                            ProbeReply::Moved(a)
                        }
                        _ => ProbeReply::Failed,
                    }
                }
                Err(_) => ProbeReply::Failed,
            };
            s.post(|inbox| inbox.probed.push((id, reply)));
        });
    }
}

/// What a server without cluster support answers the topology command
/// with (a plain server given as a cluster's seed) becomes a settings
/// error that says so; any other error is kept.
fn not_a_cluster(e: Error) -> Error {
    match &e {
        Error::Reply { addr, message } if message.contains("cluster support disabled") => {
            Error::Config(
                format!(
                    "{addr} is not a cluster node ({message}): place a single server \
                     with PubSubBuilder::address, or a URL without cluster=true"
                )
                .into(),
            )
        }
        _ => e,
    }
}

/// A slot map in one line, for the trace log: each shard's primary and
/// replicas by port (or id prefix), health and offset where known.
fn brief(map: &topology::SlotMap) -> String {
    let node = |n: &topology::Node| {
        let at = n
            .addr
            .as_ref()
            .map_or_else(|| n.id.chars().take(8).collect(), |a| a.port.to_string());
        let health = match n.health {
            topology::Health::Unknown => "",
            topology::Health::Online => "",
            topology::Health::Loading => " loading",
            topology::Health::Failed => " failed",
        };
        match n.replication_offset {
            Some(o) => format!("{at}{health} @{o}"),
            None => format!("{at}{health}"),
        }
    };
    let shards: Vec<String> = map
        .shards()
        .iter()
        .map(|s| {
            let replicas: Vec<String> = s.replicas.iter().map(node).collect();
            format!("{} [{}]", node(&s.primary), replicas.join(", "))
        })
        .collect();
    shards.join("; ")
}
