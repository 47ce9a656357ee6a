//! Property 1 and the connection checks, at the end of a run.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use crate::check::{QUIET, QUIET_FETCHES};
use crate::drive::Sim;
use control::ConnLayout;
use control::{Channel, ConnId};

impl Sim {
    /// Property 1, at the end of the run.
    pub(crate) fn final_check(&mut self) {
        let mut on: BTreeMap<&Channel, Vec<ConnId>> = BTreeMap::new();
        for (id, c) in &self.cluster.conns {
            for ch in &c.subs {
                on.entry(ch).or_default().push(*id);
            }
        }
        for ch in &self.names {
            let name = alloc::string::String::from_utf8_lossy(ch);
            let conns = on.get(ch).cloned().unwrap_or_default();
            let wanted = self.want.contains(ch);
            if !wanted || self.acl.contains(ch) {
                if !conns.is_empty() {
                    self.check.fail(&alloc::format!(
                        "{name} (unwanted or refused) still on {conns:?}"
                    ));
                }
                if wanted && !self.check.refused.contains(ch) {
                    self.check
                        .fail(&alloc::format!("{name} refused but never reported"));
                }
                continue;
            }
            if self.check.owes_gap(ch) {
                self.check.fail(&alloc::format!(
                    "{name} lost with no gap by the end (silently)"
                ));
            }
            let [conn] = conns[..] else {
                self.check
                    .fail(&alloc::format!("{name} wanted, subscribed on {conns:?}"));
            };
            let slot = shardcore::key_slot(&self.parts.redis_channel(ch));
            let node = self.cluster.conns.get(&conn).map(|c| c.node);
            if self.cluster.classic {
                // Classic: on a live primary, the one every lane is on.
                let primary = node.is_some_and(|n| self.cluster.primaries().contains(&n));
                let lanes_on: BTreeSet<usize> =
                    self.cluster.conns.values().map(|c| c.node).collect();
                if !primary || lanes_on.len() != 1 {
                    self.check.fail(&alloc::format!(
                        "{name} on {conn} (node {node:?}), lanes on {lanes_on:?}"
                    ));
                }
                continue;
            }
            // On replicas: on any live node of the owner's shard (a
            // promoted or fallback primary keeps serving while its
            // subscriptions live).
            let replicas = self.core.config().replicas.is_some();
            let owner = self.cluster.owner(slot);
            let serves = match (node, owner) {
                (Some(n), Some(o)) if replicas => self.cluster.serves(n, o),
                (n, o) => n.is_some() && n == o,
            };
            if !serves {
                self.check.fail(&alloc::format!(
                    "{name} on {conn} (node {node:?}), owner of slot {slot} is {:?}",
                    self.cluster.owner(slot)
                ));
            }
        }
        let quiet = self
            .check
            .fetch_starts
            .iter()
            .filter(|&&t| self.now.since(t) < QUIET);
        let n = quiet.count();
        if n > QUIET_FETCHES {
            self.check.fail(&alloc::format!(
                "{n} fetches in the last {QUIET:?} of a healthy cluster"
            ));
        }
        // Connections: only to owners of partitions, no more than the mode
        // needs (a leaked connection fails here).
        let owners: BTreeSet<usize> = self
            .parts
            .slots()
            .iter()
            .filter_map(|&s| self.cluster.owner(s))
            .collect();
        let on_replicas = self.core.config().replicas.is_some();
        let serving = |n: usize| {
            owners.contains(&n)
                || (on_replicas && owners.iter().any(|&o| self.cluster.serves(n, o)))
        };
        let cfg = self.core.config();
        let most = match cfg.mode {
            ConnLayout::NodeGrouped => owners.len() * cfg.multiplier as usize,
            ConnLayout::PerPartition => self.parts.slots().len(),
            ConnLayout::Classic => cfg.multiplier as usize,
            // Not simulated: fixed servers have no cluster to follow.
            ConnLayout::Fixed => cfg.seeds.len() * cfg.multiplier as usize,
        };
        let open = self.cluster.conns.len();
        if open > most {
            self.check
                .fail(&alloc::format!("{open} connections open, {most} needed"));
        }
        if let Some((id, c)) = self.cluster.conns.iter().find(|(_, c)| !serving(c.node)) {
            let n = c.node;
            self.check.fail(&alloc::format!(
                "{id} open to node {n}, which owns no partition"
            ));
        }
        if !self.core.is_settled() {
            self.check.fail("the core does not consider itself settled");
        }
        self.check_stats();
    }

    /// The core's stats agree with what the simulator saw.
    fn check_stats(&self) {
        let s = self.core.stats();
        let c = &self.check;
        let counted = [
            ("fetches", s.rebuilds.total(), c.fetch_starts.len() as u64),
            ("subscribes", s.subscribe_commands, c.subscribes),
            ("unsubscribes", s.unsubscribe_commands, c.unsubscribes),
            ("gaps", s.gaps, c.gaps),
            ("gap channels", s.gap_channels, c.gap_channels),
            ("pings", s.pings, c.pings),
            ("unknown slot owners at the end", s.unknown_slot_owners, 0),
            (
                "connections up at the end",
                s.subscribe_connections as u64,
                self.cluster.conns.len() as u64,
            ),
        ];
        for (what, core, sim) in counted {
            if core != sim {
                c.fail(&alloc::format!(
                    "stats: {what} {core}, the simulator saw {sim}"
                ));
            }
        }
        // Every gap follows a loss, and every loss ends in a restore by now.
        if s.gaps > 0 && s.restores == 0 {
            c.fail(&alloc::format!(
                "{} gaps and no restore measured: {s:?}",
                s.gaps
            ));
        }
        if s.rebuilds.startup != 1 || s.last_restore > s.max_restore {
            c.fail(&alloc::format!("stats: {s:?}"));
        }
    }
}
