//! Following the cluster: fetch the slot map (`INFO server` once for the
//! version, then `CLUSTER SHARDS` or `CLUSTER SLOTS`), probe slots with no
//! known owner, compute the partition layout, and rewire: publish routes,
//! subscribe connections, moved partitions (with gap events).

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use resp::Value;
use topology::{Layout, NodeAddr, ParseOptions, SlotMap};

use crate::cluster::builder::Mode;
use crate::cluster::control::{Control, GroupKey};
use crate::cluster::shared::{Routes, Stage, Trigger, NONE};
use crate::conn::Role;
use crate::engine::Engine;
use crate::error::Error;
use crate::metrics::add;

/// How long one topology command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// Most slots probed per rebuild.
const MAX_PROBES: usize = 16;
/// Rebuilds in a row that may leave a lost lane in place before it is
/// resubscribed where the map says it lives.
const STALE_ROUNDS: u32 = 5;

/// A node address as a socket address.
pub(crate) fn resolve(addr: &NodeAddr) -> Option<SocketAddr> {
    addr.to_string().to_socket_addrs().ok()?.next()
}

fn text(v: &Value) -> Option<&[u8]> {
    match v {
        Value::Bulk(b) | Value::Simple(b) => Some(b),
        Value::Verbatim { text, .. } => Some(text),
        Value::Attributed { value, .. } => text(value),
        _ => None,
    }
}

impl Control {
    /// The publish (and topology command) engine of a node, opened on
    /// first use.
    pub(crate) fn publish_engine(&mut self, addr: SocketAddr) -> Result<Arc<Engine>, Error> {
        if let Some(e) = self.publ.get(&addr) {
            return Ok(e.clone());
        }
        let e = Arc::new(
            self.node
                .engine(addr, Role::Command, 1)
                .build()
                .inspect_err(|_| {
                    add(&self.s.cluster.errors[Stage::Connect as usize], 1);
                })?,
        );
        self.publ.insert(addr, e.clone());
        Ok(e)
    }

    /// Records a `MOVED` in the publish routes (the engine exists).
    pub(crate) fn route_slot(&mut self, slot: u16, addr: SocketAddr) {
        let Some(engine) = self.publ.get(&addr).cloned() else {
            return;
        };
        let shared = self.s.clone();
        let mut routes = shared.routes.write();
        let old = routes.engine_of(slot);
        let i = match routes.engines.iter().position(|e| Arc::ptr_eq(e, &engine)) {
            Some(i) => i,
            None => {
                routes.engines.push(engine.clone());
                routes.engines.len() - 1
            }
        };
        if let Some(o) = routes.owner.get_mut(usize::from(slot)) {
            *o = i as u16;
        }
        let old = old.filter(|o| !Arc::ptr_eq(o, &engine));
        if let Some(old) = old {
            let token = self.open_gate_record(old.clone(), Some(addr));
            self.s.hold.gate(slot, token, Instant::now());
            drop(routes);
            self.send_barrier(&old, token);
        }
    }

    pub(crate) fn new_token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    /// A `PING` on `old` after every publish sent there: its reply (or
    /// failure) opens the gates of `token`.
    pub(crate) fn send_barrier(&self, old: &Engine, token: u64) {
        add(&self.s.cluster.gates, 1);
        let s = self.s.clone();
        old.command_then(0, [&b"PING"[..]], move |r| {
            let ok = r.is_ok();
            s.post(|inbox| inbox.barriers.push((token, ok)));
        });
    }

    /// The address of a publish engine.
    pub(crate) fn addr_of(&self, engine: &Arc<Engine>) -> Option<SocketAddr> {
        self.publ
            .iter()
            .find(|(_, e)| Arc::ptr_eq(e, engine))
            .map(|(a, _)| *a)
    }

    /// Runs `args` on `engine` and waits (bounded).
    fn ask(engine: &Engine, args: &[&[u8]]) -> Result<Value, Error> {
        engine
            .command_pending(0, args.iter().copied())
            .wait_timeout(COMMAND_TIMEOUT)
    }

    /// The slot map as `engine` (at `addr`) sees it.
    fn fetch_from(&mut self, engine: &Engine, addr: SocketAddr) -> Result<SlotMap, Stage> {
        let command = match self.command {
            Some(c) => c,
            None => {
                let info = Self::ask(engine, &[b"INFO", b"server"]).map_err(|_| Stage::Version)?;
                let version = text(&info)
                    .and_then(topology::parse_info_version)
                    .ok_or(Stage::Version)?;
                let c = topology::choose_command(version);
                log::info!("cluster: {version:?} at {addr}: using {}", c.name());
                self.command = Some(c);
                c
            }
        };
        let reply = Self::ask(engine, &command.args()).map_err(|_| Stage::Fetch)?;
        let mut bytes = Vec::new();
        resp::encode_value(&mut bytes, &reply);
        let host = addr.ip().to_string();
        let options = ParseOptions {
            asked_host: Some(&host),
            prefer_hostname: false,
        };
        let map = topology::parse_topology_bytes(command, &bytes, &options).map_err(|e| {
            log::warn!("cluster: cannot parse {} from {addr}: {e}", command.name());
            Stage::Parse
        })?;
        if map.shards().is_empty() {
            return Err(Stage::Fetch);
        }
        Ok(map)
    }

    /// Asks the known primaries in turn, then the seeds.
    fn fetch_map(&mut self) -> Result<SlotMap, Stage> {
        let mut last = Stage::Fetch;
        let mut known: Vec<(SocketAddr, Arc<Engine>)> =
            self.publ.iter().map(|(a, e)| (*a, e.clone())).collect();
        // A node that dropped our service channel knows its slots moved.
        known.sort_by_key(|(a, _)| !self.service_lost(*a));
        for (addr, engine) in known {
            if !engine_up(&engine) {
                continue;
            }
            match self.fetch_from(&engine, addr) {
                Ok(m) => return Ok(m),
                Err(stage) => {
                    add(&self.s.cluster.errors[stage as usize], 1);
                    last = stage;
                }
            }
        }
        for addr in self.seeds.clone() {
            let engine = match self.node.engine(addr, Role::Command, 1).build() {
                Ok(e) => e,
                Err(e) => {
                    log::warn!("cluster: cannot ask seed {addr} for the topology: {e}");
                    *self.s.seed_error.lock() = Some(e);
                    add(&self.s.cluster.errors[Stage::Connect as usize], 1);
                    last = Stage::Connect;
                    continue;
                }
            };
            let r = self.fetch_from(&engine, addr);
            engine.shutdown();
            match r {
                Ok(m) => return Ok(m),
                Err(stage) => {
                    add(&self.s.cluster.errors[stage as usize], 1);
                    last = stage;
                }
            }
        }
        Err(last)
    }

    /// A throwaway `GET` of a key in each unowned slot, to learn its owner
    /// from the `MOVED` reply (or from the node answering it).
    fn probe(&mut self, map: &mut SlotMap, slots: &[u16]) {
        let engines: Vec<(SocketAddr, Arc<Engine>)> = self
            .publ
            .iter()
            .filter(|(_, e)| engine_up(e))
            .map(|(a, e)| (*a, e.clone()))
            .collect();
        let Some((addr, engine)) = engines.first().cloned() else {
            return;
        };
        for &slot in slots.iter().take(MAX_PROBES) {
            let key = topology::probe_key_for_slot(slot);
            match Self::ask(&engine, &[b"GET", &key]) {
                Ok(_) => map.apply_moved(
                    slot,
                    NodeAddr {
                        host: addr.ip().to_string(),
                        port: addr.port(),
                    },
                ),
                Err(Error::Reply { message, .. }) => {
                    let host = addr.ip().to_string();
                    match topology::parse_cluster_error(message.as_bytes(), Some(&host)) {
                        Some(topology::ClusterError::Moved {
                            slot: s,
                            addr: Some(a),
                        }) => map.apply_moved(s, a),
                        _ => add(&self.s.cluster.errors[Stage::Probe as usize], 1),
                    }
                }
                Err(_) => add(&self.s.cluster.errors[Stage::Probe as usize], 1),
            }
        }
    }

    /// Rebuilds the layout and rewires what changed.
    pub(crate) fn rebuild(&mut self, trigger: Trigger) {
        let s = self.s.clone();
        add(&s.cluster.rebuilds[trigger as usize], 1);
        let started = Instant::now();
        self.next_poll = started + s.config.poll_interval;
        let mut map = match self.fetch_map() {
            Ok(m) => m,
            Err(stage) => {
                log::warn!("cluster: topology refresh failed at {stage:?}; retrying");
                self.schedule_retry();
                return;
            }
        };
        self.ensure_publish_engines(&map);
        let first = Layout::compute(&map, &s.parts);
        let probe = first.slots_to_probe();
        let layout = if probe.is_empty() {
            first
        } else {
            self.probe(&mut map, &probe);
            self.ensure_publish_engines(&map);
            Layout::compute(&map, &s.parts)
        };
        s.cluster
            .unknown_owners
            .store(layout.unresolved().len() as u64, Ordering::Relaxed);
        self.set_routes(&map);
        let mut degraded = !layout.unresolved().is_empty();
        match self.mode() {
            Mode::Classic => degraded |= self.rewire_classic(&layout),
            Mode::Sharded | Mode::PerPartition => degraded |= self.rewire_sharded(&layout),
        }
        if self.mode() == Mode::Sharded {
            degraded |= self.ensure_services(&map);
        }
        self.map = map;
        self.layout = layout;
        // Primaries that own nothing any more keep no publish connection.
        let owners: std::collections::BTreeSet<SocketAddr> = self
            .map
            .shards()
            .iter()
            .filter_map(|sh| sh.primary.addr.as_ref().and_then(resolve))
            .collect();
        let gone: Vec<SocketAddr> = self
            .publ
            .keys()
            .filter(|a| !owners.contains(a))
            .copied()
            .collect();
        for a in gone {
            if let Some(e) = self.publ.remove(&a) {
                if self.gates.values().any(|g| Arc::ptr_eq(&g.old, &e)) {
                    self.retiring.push(e); // markers still go out on it
                } else {
                    e.shutdown();
                }
            }
        }
        s.cluster.nodes.store(self.publ.len(), Ordering::Relaxed);
        if degraded {
            self.schedule_retry();
        } else {
            self.stale_rounds = 0;
        }
        log::debug!(
            "cluster: rebuild ({trigger:?}) took {:?}",
            started.elapsed()
        );
        s.active.wake();
    }

    pub(crate) fn schedule_retry(&mut self) {
        let at = Instant::now() + self.s.config.degraded_retry;
        match self.next_rebuild {
            Some((t, _)) if t <= at => {}
            _ => self.next_rebuild = Some((at, Trigger::Retry)),
        }
    }

    /// Opens publish engines to every primary with an address.
    fn ensure_publish_engines(&mut self, map: &SlotMap) {
        let addrs: Vec<SocketAddr> = map
            .shards()
            .iter()
            .filter_map(|sh| sh.primary.addr.as_ref().and_then(resolve))
            .collect();
        for a in addrs {
            if let Err(e) = self.publish_engine(a) {
                log::warn!("cluster: cannot connect to primary {a}: {e}");
            }
        }
    }

    /// Publish routes from the slot map.
    fn set_routes(&mut self, map: &SlotMap) {
        let mut routes = Routes::empty();
        let mut index: Vec<Option<u16>> = Vec::with_capacity(map.shards().len());
        for sh in map.shards() {
            let e = sh
                .primary
                .addr
                .as_ref()
                .and_then(resolve)
                .and_then(|a| self.publ.get(&a));
            index.push(e.map(|e| {
                routes.engines.push(e.clone());
                (routes.engines.len() - 1) as u16
            }));
        }
        for (slot, o) in routes.owner.iter_mut().enumerate() {
            *o = map
                .owner_index(slot as u16)
                .and_then(|i| index.get(i).copied().flatten())
                .unwrap_or(NONE);
        }
        // Slots whose route moves are gated (under the write lock, so no
        // publish slips between) until the old route answers a barrier.
        let shared = self.s.clone();
        let mut current = shared.routes.write();
        let now = Instant::now();
        let mut barriers: Vec<(Arc<Engine>, Option<Arc<Engine>>, u64)> = Vec::new();
        for &slot in shared.parts.slots() {
            let Some(old) = current.engine_of(slot) else {
                continue;
            };
            let new = routes.engine_of(slot);
            if new.as_ref().is_some_and(|n| Arc::ptr_eq(n, &old)) {
                continue;
            }
            let same = |e: &Arc<Engine>, n: &Option<Arc<Engine>>| {
                Arc::ptr_eq(e, &old)
                    && match (n, &new) {
                        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                        (None, None) => true,
                        _ => false,
                    }
            };
            let token = match barriers.iter().find(|(e, n, _)| same(e, n)) {
                Some(&(_, _, t)) => t,
                None => {
                    let new_addr = new.as_ref().and_then(|n| self.addr_of(n));
                    let t = self.open_gate_record(old.clone(), new_addr);
                    barriers.push((old, new, t));
                    t
                }
            };
            shared.hold.gate(slot, token, now);
        }
        *current = routes;
        drop(current);
        for (old, _, token) in barriers {
            self.send_barrier(&old, token);
        }
    }

    /// Sharded modes: open what `plan_rewire(old, new)` opens, then
    /// reconcile every partition with the new layout (a partition whose
    /// connection differs from where the layout puts it is moved: the
    /// plan's moves, and any left behind by a connection that could not be
    /// opened earlier), then close what the plan closes. Returns true while
    /// degraded (a connection could not be opened, or lost lanes stayed).
    fn rewire_sharded(&mut self, layout: &Layout) -> bool {
        let s = self.s.clone();
        let per_partition = matches!(self.mode(), Mode::PerPartition);
        let mult = s.config.multiplier;
        let plan = topology::plan_rewire(&self.layout, layout);
        let mut degraded = false;
        if !per_partition {
            // Every node of the new layout needs a group: the plan's new
            // ones, and any whose opening failed before.
            let nodes: Vec<SocketAddr> = layout
                .nodes()
                .iter()
                .filter_map(|n| resolve(&n.key.addr))
                .collect();
            for addr in nodes {
                if let Err(e) = self.open_group((addr, None), mult) {
                    log::warn!("cluster: cannot open subscribe connections to {addr}: {e}");
                    add(&s.cluster.errors[Stage::Connect as usize], 1);
                    degraded = true;
                }
            }
        }
        let mut now_ready: std::collections::BTreeMap<(GroupKey, usize), Vec<usize>> =
            Default::default();
        let mut moved = 0u64;
        for p in 0..layout.partition_count() {
            let lane = p as usize;
            let addr = layout.node_of(p).and_then(|k| resolve(&k.addr));
            let target = addr.map(|a| {
                if per_partition {
                    ((a, Some(p)), 0)
                } else {
                    ((a, None), lane % mult)
                }
            });
            let current = self.lane_at.get(lane).copied().flatten();
            if current == target && target.is_some_and(|t| self.groups.contains_key(&t.0)) {
                continue;
            }
            moved += u64::from(target.is_some());
            if per_partition {
                if let Some((old, _)) = current {
                    self.close_group(&old);
                }
            }
            let Some(at) = target else {
                self.assign(lane, None); // unowned: counted, probed, retried
                continue;
            };
            if per_partition {
                if let Err(e) = self.open_group(at.0, 1) {
                    log::warn!(
                        "cluster: cannot connect partition {p} to {:?}: {e}",
                        at.0 .0
                    );
                    add(&s.cluster.errors[Stage::Connect as usize], 1);
                }
            }
            if !self.groups.contains_key(&at.0) {
                self.assign(lane, None);
                degraded = true;
                continue;
            }
            self.assign(lane, Some(at));
            if self.groups[&at.0].conns[at.1].ready.load(Ordering::Acquire) {
                now_ready.entry(at).or_default().push(lane);
            }
        }
        add(&s.cluster.moved_partitions, moved);
        // Lanes the server dropped that did not move: the map we read may
        // be stale; retry a few times, then resubscribe where they are.
        let lost: Vec<usize> = (0..s.lane_lost.len())
            .filter(|&l| s.lane_lost[l].load(Ordering::Acquire))
            .filter(|&l| !now_ready.values().any(|v| v.contains(&l)))
            .collect();
        if !lost.is_empty() {
            self.stale_rounds += 1;
            if self.stale_rounds >= STALE_ROUNDS {
                for l in lost {
                    if let Some(at) = self.lane_at.get(l).copied().flatten() {
                        now_ready.entry(at).or_default().push(l);
                    }
                }
                self.stale_rounds = 0;
            } else {
                degraded = true;
            }
        }
        for (at, lanes) in now_ready {
            self.resubscribe(at, &lanes);
        }
        if !per_partition {
            // Nodes that own no partition any more (the plan's `close`, and
            // any group left from an earlier failed round).
            let keep: std::collections::BTreeSet<SocketAddr> = layout
                .nodes()
                .iter()
                .filter_map(|n| resolve(&n.key.addr))
                .collect();
            let gone: Vec<GroupKey> = self
                .groups
                .keys()
                .filter(|k| !keep.contains(&k.0))
                .copied()
                .collect();
            for key in gone {
                self.close_group(&key);
            }
        }
        if !plan.is_empty() {
            log::info!(
                "cluster: rewire: {} nodes opened, {} closed, {} partitions moved, {} unowned",
                plan.open.len(),
                plan.close.len(),
                plan.resubscribe.len(),
                plan.unowned.len()
            );
        }
        // Any lane without a ready connection keeps the fast retry going.
        degraded |= self.lane_at.iter().any(|a| match a {
            Some(at) => !self.groups.get(&at.0).is_some_and(|g| {
                g.conns.get(at.1).is_some_and(|c| {
                    c.ready.load(Ordering::Acquire) || c.connects.load(Ordering::Relaxed) == 0
                })
            }),
            None => true,
        });
        degraded
    }

    /// Classic mode: every lane on one node; move them all when that node
    /// stops being a primary.
    fn rewire_classic(&mut self, layout: &Layout) -> bool {
        let current = self.classic_node;
        let primaries: Vec<SocketAddr> = layout
            .nodes()
            .iter()
            .filter_map(|n| resolve(&n.key.addr))
            .collect();
        if current.is_some_and(|c| primaries.contains(&c)) {
            return false;
        }
        let Some(&target) = primaries.first() else {
            return true;
        };
        let mult = self.s.config.multiplier;
        if let Err(e) = self.open_group((target, None), mult) {
            log::warn!("cluster: cannot open classic subscribe connections to {target}: {e}");
            return true;
        }
        for lane in 0..self.lane_at.len() {
            self.assign(lane, Some(((target, None), lane % mult)));
        }
        if let Some(old) = current {
            self.close_group(&(old, None));
        }
        self.classic_node = Some(target);
        false
    }
}

fn engine_up(e: &Engine) -> bool {
    e.is_connection_up(0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_announced_addresses() {
        let v4 = NodeAddr {
            host: "127.0.0.1".into(),
            port: 7000,
        };
        assert_eq!(resolve(&v4), Some("127.0.0.1:7000".parse().unwrap()));
        let v6 = NodeAddr {
            host: "::1".into(),
            port: 7001,
        };
        assert_eq!(resolve(&v6), Some("[::1]:7001".parse().unwrap()));
        let bad = NodeAddr {
            host: "not a host name".into(),
            port: 1,
        };
        assert_eq!(resolve(&bad), None);
    }

    #[test]
    fn reads_info_text_from_every_string_shape() {
        assert_eq!(text(&Value::Bulk(b"a".to_vec())), Some(&b"a"[..]));
        let verbatim = Value::Verbatim {
            format: *b"txt",
            text: b"b".to_vec(),
        };
        assert_eq!(text(&verbatim), Some(&b"b"[..]));
        let attributed = Value::Attributed {
            attributes: Vec::new(),
            value: Box::new(Value::Simple(b"c".to_vec())),
        };
        assert_eq!(text(&attributed), Some(&b"c"[..]));
        assert_eq!(text(&Value::Integer(1)), None);
    }

    #[test]
    fn empty_routes_know_no_owner() {
        let r = Routes::empty();
        assert_eq!(r.owner.len(), 16384);
        assert!(r.engine_of(0).is_none());
        assert!(r.engine_of(16383).is_none());
        assert!(r.engine_of(u16::MAX).is_none());
    }
}
