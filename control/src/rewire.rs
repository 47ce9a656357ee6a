//! Following the cluster: fetching the slot map (with bounded backoff),
//! running `topology::plan_rewire`'s plan, stale-map rounds, probes.

use alloc::vec::Vec;
use core::time::Duration;

use topology::{plan_rewire, Layout, NodeAddr, RewirePlan, SlotMap, TopologyCommand};

use crate::command::{Command, FetchError, ProbeReply};
use crate::config::ConnLayout;
use crate::core::{ConnState, Core, Probe};
use crate::stats::Trigger;
use crate::time::Time;

impl Core {
    /// The reply to [`Command::FetchTopology`] `id`: a parsed slot map, or
    /// why there is none. A late reply (its request timed out) is ignored.
    pub fn handle_topology(&mut self, now: Time, id: u64, result: Result<SlotMap, FetchError>) {
        self.tick(now);
        if self.fetch.in_flight.map(|f| f.0) != Some(id) {
            return;
        }
        self.fetch.in_flight = None;
        match result {
            Ok(map) if !map.shards().is_empty() => {
                self.fetch.backoff.reset();
                self.next_poll = now + self.cfg.poll_interval;
                self.note_absent(&map);
                self.apply_map(map, now);
                self.ask_again_who_answered();
                self.after_refresh(now);
            }
            Err(FetchError::BadReply) => {
                self.counters.stats.topology_errors.parse += 1;
                self.fetch_failed(now);
            }
            Ok(_) | Err(FetchError::Unreachable) => {
                self.counters.stats.topology_errors.fetch += 1;
                self.fetch_failed(now);
            }
        }
        self.fetch_timers(now);
    }

    /// The reply to [`Command::AskVersion`] `id`: the `INFO server` text,
    /// or why there is none. A version chooses the topology command, and
    /// the fetch goes on at once ([`Command::FetchTopology`], the same `id`
    /// and deadline); a reply without a version fails the fetch as a
    /// [`FetchError::BadReply`] (both count a version error). A late reply
    /// is ignored.
    pub fn handle_version(&mut self, now: Time, id: u64, info: Result<&[u8], FetchError>) {
        self.tick(now);
        if self.fetch.in_flight.map(|f| f.0) != Some(id) {
            return;
        }
        let version =
            info.and_then(|text| topology::parse_info_version(text).ok_or(FetchError::BadReply));
        match (version, self.fetch.asked.clone()) {
            (Ok(version), Some(node)) => {
                let command = topology::choose_command(version);
                self.fetch.command = Some(command);
                self.emit(Command::FetchTopology { id, node, command });
            }
            (Ok(_), None) => self.handle_topology(now, id, Err(FetchError::Unreachable)),
            (Err(why), _) => {
                self.counters.stats.topology_errors.version += 1;
                self.handle_topology(now, id, Err(why));
            }
        }
    }

    /// The topology command a node's version chose (none before the
    /// first version reply).
    pub fn topology_command(&self) -> Option<TopologyCommand> {
        self.fetch.command
    }

    /// The reply to [`Command::ProbeSlot`] `id`. An owner learnt this way
    /// goes into the slot map (as a `MOVED` would) and is rewired at once.
    pub fn handle_probe(&mut self, now: Time, id: u64, reply: ProbeReply) {
        self.tick(now);
        let Some(probe) = self.probes.remove(&id) else {
            return;
        };
        let owner = match reply {
            ProbeReply::Served => probe.node,
            ProbeReply::Moved(addr) => addr,
            ProbeReply::Failed => {
                self.counters.stats.topology_errors.probe += 1;
                return;
            }
        };
        let mut map = self.map.clone();
        map.apply_moved(probe.slot, owner);
        self.apply_map(map, now);
    }

    /// The application asked for a topology reread (`PubSub::refresh`): a
    /// fetch starts now, or as soon as the backoff and the least gap
    /// between fetches allow.
    pub fn handle_refresh(&mut self, now: Time) {
        self.tick(now);
        self.request_refresh(now, Duration::ZERO, Trigger::Manual);
    }

    /// A publish got `MOVED` for `slot` to `node`. When the core's slot map
    /// already names `node` as the slot's primary the redirect is old news
    /// (the publish took a route from before the last map) and nothing
    /// happens; otherwise a fetch starts as
    /// [`handle_refresh`](Core::handle_refresh) would, counted as
    /// [`Rebuilds::moved`](crate::Rebuilds::moved). The subscribe side is
    /// rewired from the fetched map, not from the redirect (the server also
    /// drops the slot's shard channels, which
    /// [`handle_sunsubscribe`](Core::handle_sunsubscribe) reports).
    pub fn handle_redirect(&mut self, now: Time, slot: u16, node: NodeAddr) {
        self.tick(now);
        let owner = self
            .map
            .owner_index(slot)
            .and_then(|i| self.map.shards().get(i))
            .and_then(|s| s.primary.addr.as_ref());
        if owner != Some(&node) {
            self.request_refresh(now, Duration::ZERO, Trigger::Moved);
        }
    }

    /// A publish got `TRYAGAIN` or `CLUSTERDOWN` (a slot in migration, or
    /// the cluster failing over): a fetch within the degraded-mode delay,
    /// counted as [`Rebuilds::retry`](crate::Rebuilds::retry); a burst of
    /// them costs one.
    pub fn handle_degraded(&mut self, now: Time) {
        self.tick(now);
        self.request_refresh(now, self.cfg.degraded_retry, Trigger::Retry);
    }

    /// A node dropped a channel the driver keeps on it for itself (a
    /// service channel in a slot it owned): the slot left the node, by a
    /// failover or a migration. A fetch starts now, counted as
    /// [`Rebuilds::sunsubscribe`](crate::Rebuilds::sunsubscribe).
    pub fn handle_slot_lost(&mut self, now: Time) {
        self.tick(now);
        self.request_refresh(now, Duration::ZERO, Trigger::Sunsubscribe);
    }

    /// Asks for a refresh `delay` from now (no sooner than
    /// [`Config::min_refresh_gap`](crate::Config::min_refresh_gap) after
    /// the last start); starts it now when due and none is in flight.
    pub(crate) fn request_refresh(&mut self, now: Time, delay: Duration, why: Trigger) {
        if self.cfg.mode == ConnLayout::Fixed {
            return; // fixed servers: nothing to reread
        }
        let mut at = (now + delay).max(self.fetch.hold_until);
        if let Some(last) = self.fetch.last_start {
            at = at.max(last + self.cfg.min_refresh_gap);
        }
        if self.fetch.next.is_none_or(|n| at < n) {
            self.fetch.reason = why;
        }
        self.fetch.next = Some(self.fetch.next.map_or(at, |n| n.min(at)));
        if self.fetch.in_flight.is_none() && at <= now {
            self.start_fetch(now);
        }
    }

    /// Fetch and probe deadlines, and a fetch that is due.
    pub(crate) fn fetch_timers(&mut self, now: Time) {
        if self.fetch.in_flight.is_some_and(|f| f.1 <= now) {
            self.fetch.in_flight = None;
            self.counters.stats.topology_errors.fetch += 1;
            self.fetch_failed(now);
        }
        if self.fetch.in_flight.is_none() && self.fetch.next.is_some_and(|n| n <= now) {
            self.start_fetch(now);
        }
        let before = self.probes.len();
        self.probes.retain(|_, p| p.deadline > now);
        self.counters.stats.topology_errors.probe += (before - self.probes.len()) as u64;
    }

    fn fetch_failed(&mut self, now: Time) {
        self.fetch.cursor = self.fetch.cursor.wrapping_add(1);
        let delay = self.fetch.backoff.next_delay();
        self.fetch.hold_until = now + delay;
        self.fetch.next = Some(self.fetch.hold_until);
        self.fetch.reason = Trigger::Retry;
    }

    /// The next fetch asks the node that answered this one, found again in
    /// the candidates of the map it gave (which reorders them; seeds stay
    /// among them, so a seed that answered stays the cursor's target).
    /// Without this the cursor kept its old index into a list that had
    /// changed, and a poll could start on a seed long gone while live
    /// primaries were known.
    fn ask_again_who_answered(&mut self) {
        let asked = self.fetch.asked.take();
        self.point_cursor_at(asked);
    }

    /// The candidate the cursor points at now.
    fn cursor_target(&self) -> Option<NodeAddr> {
        let c = self.candidates();
        c.get(self.fetch.cursor % c.len().max(1)).cloned()
    }

    /// Points the cursor at `node` among the candidates (the first one
    /// when it is not among them).
    fn point_cursor_at(&mut self, node: Option<NodeAddr>) {
        let c = self.candidates();
        self.fetch.cursor = node
            .and_then(|a| c.iter().position(|n| *n == a))
            .unwrap_or(0);
    }

    /// Known primaries (in map order), their replicas (which answer
    /// topology commands too, and are next in line), then the seeds.
    fn candidates(&self) -> Vec<NodeAddr> {
        let shards = self.map.shards();
        let primaries = shards.iter().filter_map(|s| s.primary.addr.clone());
        let replicas = shards
            .iter()
            .flat_map(|s| &s.replicas)
            .filter_map(|r| r.addr.clone());
        let mut c: Vec<NodeAddr> = primaries.chain(replicas).collect();
        c.extend(self.cfg.seeds.iter().cloned());
        c
    }

    fn start_fetch(&mut self, now: Time) {
        let c = self.candidates();
        let Some(node) = c.get(self.fetch.cursor % c.len().max(1)).cloned() else {
            return; // no seed: refused by Config::check
        };
        let id = self.fresh_id();
        self.fetch.in_flight = Some((id, now + self.cfg.fetch_timeout));
        self.fetch.asked = Some(node.clone());
        self.fetch.last_start = Some(now);
        self.fetch.next = None;
        let why = core::mem::replace(&mut self.fetch.reason, Trigger::Retry);
        self.count_rebuild(why);
        self.emit(match self.fetch.command {
            Some(command) => Command::FetchTopology { id, node, command },
            None => Command::AskVersion { id, node },
        });
    }

    /// Rewires from the current layout to the one of `map`.
    pub(crate) fn apply_map(&mut self, map: SlotMap, now: Time) {
        // A new map reorders the fetch candidates: the cursor stays on the
        // node it points at (a probe's owner or a renamed node changes the
        // map too).
        let target = self.cursor_target();
        let new = self.layout_for(&map);
        self.adopt_ids(&new);
        let plan = plan_rewire(&self.layout, &new);
        let stale = self.stale_on_replicas(&map, &new);
        self.map = map;
        self.map_epoch += 1;
        self.point_cursor_at(target);
        self.run_plan(&plan, new, now);
        self.restart_conns_of(&stale, now);
        self.send_probes(now);
    }

    /// Nodes known only from a `MOVED` (no id) that `new` names with an id
    /// at the same address take that id: their connections and
    /// subscriptions stay (the node did not change, only what we know of
    /// it). The current layout is renamed, not recomputed: in replica mode
    /// recomputing it would choose the serving nodes again (a replica
    /// avoided since, say), and the plan to `new` would then start from
    /// nodes that hold none of the connections (per-partition mode left the
    /// connection of a moved partition open).
    fn adopt_ids(&mut self, new: &Layout) {
        let mut renames = Vec::new();
        for key in self.layout.nodes().iter().map(|n| &n.key) {
            if !key.id.is_empty() || new.node(key).is_some() {
                continue;
            }
            let Some(named) = new
                .nodes()
                .iter()
                .map(|n| &n.key)
                .find(|k| k.addr == key.addr && !k.id.is_empty())
            else {
                continue;
            };
            if self.nodes.contains_key(named) {
                continue;
            }
            renames.push((key.clone(), named.clone()));
        }
        if renames.is_empty() {
            return;
        }
        for (key, named) in renames {
            self.map = renamed(&self.map, &key.addr, &named.id);
            self.layout = self.layout.renamed(&key, &named);
            if let Some(conns) = self.nodes.remove(&key) {
                for id in conns.values() {
                    if let Some(c) = self.conns.get_mut(id) {
                        c.node = named.clone();
                    }
                }
                self.nodes.insert(named, conns);
            }
        }
        self.map_epoch += 1;
    }

    /// Carries out `plan` (from the current layout to `new`): open its
    /// nodes; detach its moved and unowned partitions from their old
    /// connections (unsubscribe where that stays, gap due; per-partition:
    /// close the partition's connection); switch to `new`; close its nodes;
    /// subscribe the moved partitions (per-partition: on a new connection).
    pub(crate) fn run_plan(&mut self, plan: &RewirePlan, new: Layout, now: Time) {
        for key in &plan.open {
            self.open_node(key, now);
        }
        // An empty pattern lane is no partition the application has.
        let counts = |p: u32| {
            !self.is_pattern_lane(p)
                || self
                    .parts
                    .get(p as usize)
                    .is_some_and(|x| !x.channels.is_empty())
        };
        let moved_away = plan
            .resubscribe
            .iter()
            .filter(|m| m.from.is_some() && counts(m.partition))
            .count();
        self.counters.stats.moved_partitions += moved_away as u64;
        let closing = |c: &crate::core::Conn| plan.close.contains(&c.node);
        let moved = plan.resubscribe.iter().map(|m| m.partition);
        let orphans = plan.unowned.iter().map(|o| o.partition);
        let detach: Vec<u32> = moved.clone().chain(orphans).collect();
        let mut broke = false;
        for p in detach {
            let mut by_conn: alloc::collections::BTreeMap<_, Vec<_>> = Default::default();
            let Some(part) = self.parts.get_mut(p as usize) else {
                continue;
            };
            part.lost = false;
            for (name, chan) in &mut part.channels {
                if let Some(c) = chan.sub().conn() {
                    chan.break_off();
                    by_conn.entry(c).or_default().push(name.clone());
                }
            }
            broke |= !by_conn.is_empty();
            let per_partition = self.cfg.mode == ConnLayout::PerPartition;
            if per_partition {
                // Its own connection goes with it.
                if let Some(c) = self.conn_of(p) {
                    if !self.conns.get(&c).is_some_and(closing) {
                        self.close_conn(c);
                    }
                }
            }
            for (c, names) in by_conn {
                if !per_partition && !self.conns.get(&c).is_some_and(closing) {
                    self.unsubscribe(c, p, names);
                }
            }
        }
        if broke {
            self.disrupted(now);
        }
        self.layout = new;
        for key in &plan.close {
            self.close_node(key);
        }
        let moved: Vec<u32> = moved.collect();
        if self.cfg.mode == ConnLayout::PerPartition {
            for &p in &moved {
                self.ensure_conn(p, now);
            }
        }
        self.flush(&moved, true, now);
    }

    /// After a full refresh: stale-map rounds for lost partitions, and the
    /// fast retry while degraded.
    fn after_refresh(&mut self, now: Time) {
        let lost: Vec<u32> = (0u32..)
            .zip(&self.parts)
            .filter(|(_, p)| p.lost)
            .map(|(i, _)| i)
            .collect();
        let mut degraded = false;
        if lost.is_empty() {
            self.stale_rounds = 0;
        } else {
            self.stale_rounds += 1;
            if self.stale_rounds >= self.cfg.stale_rounds {
                // The map keeps saying they live where they are: believe it.
                for &p in &lost {
                    if let Some(part) = self.parts.get_mut(p as usize) {
                        part.lost = false;
                    }
                }
                self.flush(&lost, true, now);
                self.stale_rounds = 0;
            } else {
                degraded = true;
            }
        }
        degraded |= !self.layout.unresolved().is_empty();
        // A serving replica held while missing from the map: the next
        // maps say soon whether it was promoted or left.
        degraded |= self.absent.keys().any(|k| self.held(k));
        // A connection that failed and is being retried (a first open is
        // not a reason to hurry).
        degraded |= self
            .conns
            .values()
            .any(|c| c.state != ConnState::Up && c.failures > 0);
        if degraded {
            self.request_refresh(now, self.cfg.degraded_retry, Trigger::Retry);
        }
    }

    /// Probes slots with no known owner (at most `max_probes` in flight).
    fn send_probes(&mut self, now: Time) {
        if matches!(self.cfg.mode, ConnLayout::Classic | ConnLayout::Fixed) {
            // Any primary serves classic subscriptions; fixed servers own
            // every lane they have.
        }
        let Some(node) = self.candidates().into_iter().next() else {
            return;
        };
        for slot in self.layout.slots_to_probe() {
            if self.probes.len() >= self.cfg.max_probes {
                break;
            }
            if self.probes.values().any(|p| p.slot == slot) {
                continue;
            }
            let id = self.fresh_id();
            let deadline = now + self.cfg.fetch_timeout;
            self.probes.insert(
                id,
                Probe {
                    slot,
                    node: node.clone(),
                    deadline,
                },
            );
            self.emit(Command::ProbeSlot {
                id,
                slot,
                node: node.clone(),
            });
        }
    }
}

/// `map` with the id-less primary at `addr` named `id`.
fn renamed(map: &SlotMap, addr: &NodeAddr, id: &str) -> SlotMap {
    let mut out = SlotMap::new();
    let mut index = Vec::new();
    for shard in map.shards() {
        let mut shard = shard.clone();
        if shard.primary.id.is_empty() && shard.primary.addr.as_ref() == Some(addr) {
            shard.primary.id = id.into();
        }
        index.push(out.push_shard(shard));
    }
    for (range, owner) in map.ranges() {
        out.assign(range, owner.and_then(|i| index.get(i).copied().flatten()));
    }
    out
}
