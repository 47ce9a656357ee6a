//! Subscribe commands: whole partitions through shardcore's planner, gap
//! events first, unsubscribes in batches.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use shardcore::plan::{plan_resubscribe, PlanOptions};

use crate::command::{Channel, Command, ConnId};
use crate::config::ResubscribeSplit;
use crate::core::{Core, Pending, Sub};
use crate::time::Time;

/// Names in one subscribe command, in bytes, beyond which it is split: a
/// name longer than this goes alone, after the others. A server closes a
/// connection whose subscribe reply is over its output buffer limit; a
/// name that large then ends its connection alone, where the probe rule
/// ([`crate::probes`]) refuses it after two more closes, instead of being
/// halved out of a batch of its neighbours one close at a time while no
/// subscribe completes (and the reconnect delay grows to its cap).
pub(crate) const LARGE_NAME: usize = 64 * 1024;

impl Core {
    /// Subscribes the idle channels of `parts` on their connections (those
    /// that are up); lost partitions wait unless `force`.
    pub(crate) fn flush(&mut self, parts: &[u32], force: bool, now: Time) {
        let mut parts = parts.to_vec();
        parts.sort_unstable();
        parts.dedup();
        let mut by_conn: BTreeMap<ConnId, Vec<u32>> = BTreeMap::new();
        for p in parts {
            let lost = self.parts.get(p as usize).is_none_or(|x| x.lost);
            if lost && !force {
                continue;
            }
            if let Some(c) = self.conn_of(p).filter(|&c| self.is_up(c)) {
                by_conn.entry(c).or_default().push(p);
            }
        }
        for (conn, ps) in by_conn {
            self.resubscribe(conn, &ps, now);
        }
    }

    /// Newly wanted (idle) channels of some partitions, sent where their
    /// connection is up and their partition is not lost (the others go with
    /// the partition's next resubscribe); the gap events due for them were
    /// emitted when they were wanted. A want costs what it names, not what
    /// its partition holds.
    pub(crate) fn subscribe_fresh(&mut self, fresh: BTreeMap<u32, Vec<Channel>>, now: Time) {
        let mut by_conn: BTreeMap<ConnId, Vec<(u32, Vec<Channel>)>> = BTreeMap::new();
        for (p, names) in fresh {
            if self.parts.get(p as usize).is_none_or(|x| x.lost) {
                continue;
            }
            let Some(conn) = self.conn_of(p).filter(|&c| self.is_up(c)) else {
                continue;
            };
            // Their gap events went out as they were wanted (`want_in`).
            by_conn.entry(conn).or_default().push((p, names));
        }
        for (conn, groups) in by_conn {
            for (p, channels) in self.plan_commands(&groups) {
                self.send_subscribe(conn, p, channels, now);
            }
        }
    }

    /// One connection's resubscribe: gap events for what broke, then whole
    /// partitions through shardcore's planner.
    fn resubscribe(&mut self, conn: ConnId, ps: &[u32], now: Time) {
        let mut groups: Vec<(u32, Vec<Channel>)> = Vec::new();
        let mut gap_events = Vec::new();
        let probes = self.conns.get(&conn).map(|c| &c.probes);
        for &p in ps {
            let Some(part) = self.parts.get_mut(p as usize) else {
                continue;
            };
            let mut gaps = Vec::new();
            let mut idle = Vec::new();
            for (name, chan) in &mut part.channels {
                if chan.sub() != Sub::Idle {
                    continue;
                }
                if chan.gap() {
                    chan.set_gap(false);
                    gaps.push(name.clone());
                }
                // Held apart, sent after the rest (see `crate::probes`).
                if !probes.is_some_and(|h| h.holds(p, name)) {
                    idle.push(name.clone());
                }
            }
            if !gaps.is_empty() {
                gap_events.push(Command::Gap {
                    partition: p,
                    channels: gaps,
                });
            }
            groups.push((p, idle));
        }
        for e in gap_events {
            self.emit(e);
        }
        for (p, channels) in self.plan_commands(&groups) {
            self.send_subscribe(conn, p, channels, now);
        }
        self.send_next_probe(conn, now);
    }

    /// The commands for `groups` (partition, idle channels), as
    /// [`Config::split`](crate::Config::split) says.
    fn plan_commands(&self, groups: &[(u32, Vec<Channel>)]) -> Vec<(u32, Vec<Channel>)> {
        let (workers, batch) = (self.cfg.workers.max(1), self.cfg.batch.max(1));
        match self.cfg.split {
            ResubscribeSplit::Partitions => {
                let options = PlanOptions::new(workers).batch(batch);
                let groups = groups.iter().map(|(p, c)| (*p, c.as_slice()));
                let Ok(plan) = plan_resubscribe(groups, |_| Some(()), options) else {
                    return Vec::new(); // settings are checked in Core::new
                };
                plan.nodes
                    .iter()
                    .flat_map(|n| n.commands())
                    .map(|c| (c.partition, c.channels.to_vec()))
                    .collect()
            }
            ResubscribeSplit::Channels => {
                let mut out = Vec::new();
                for worker in 0..workers {
                    for (p, names) in groups {
                        let share: Vec<Channel> = names
                            .iter()
                            .filter(|n| shardcore::worker_of(n, workers) == worker)
                            .cloned()
                            .collect();
                        for chunk in share.chunks(batch) {
                            out.push((*p, chunk.to_vec()));
                        }
                    }
                }
                out
            }
        }
    }

    /// Sends `channels` (partition `p`) on `conn`: in one command, but a
    /// name over [`LARGE_NAME`] bytes goes last, in a command of its own,
    /// and the others in commands of at most that many bytes of names.
    pub(crate) fn send_subscribe(
        &mut self,
        conn: ConnId,
        p: u32,
        channels: Vec<Channel>,
        now: Time,
    ) {
        if channels.iter().map(|n| n.len()).sum::<usize>() <= LARGE_NAME {
            return self.send_subscribe_batch(conn, p, channels, now);
        }
        let (large, small): (Vec<Channel>, Vec<Channel>) =
            channels.into_iter().partition(|n| n.len() > LARGE_NAME);
        let mut batch = Vec::new();
        let mut bytes = 0;
        for name in small {
            if bytes + name.len() > LARGE_NAME && !batch.is_empty() {
                self.send_subscribe_batch(conn, p, core::mem::take(&mut batch), now);
                bytes = 0;
            }
            bytes += name.len();
            batch.push(name);
        }
        if !batch.is_empty() {
            self.send_subscribe_batch(conn, p, batch, now);
        }
        for name in large {
            self.send_subscribe_batch(conn, p, alloc::vec![name], now);
        }
    }

    fn send_subscribe_batch(&mut self, conn: ConnId, p: u32, channels: Vec<Channel>, now: Time) {
        let Some(part) = self.parts.get_mut(p as usize) else {
            return;
        };
        // Sent on a connection where its unsubscribe may not have been
        // answered (wanted again, or its partition moved away and back):
        // that older subscription may still deliver until it is (see
        // `Chan::LINGER`).
        let leaving = self.conns.get(&conn).map(|c| &c.leaving);
        for name in &channels {
            if let Some(chan) = part.channels.get_mut(name) {
                chan.set_sub(Sub::Sent(conn));
                if leaving.is_some_and(|l| l.holds(name)) {
                    chan.set_linger();
                }
            }
        }
        let slot = part.slot;
        self.emit(Command::Subscribe {
            conn,
            partition: p,
            slot,
            channels: channels.clone(),
        });
        if let Some(c) = self.conns.get_mut(&conn) {
            c.leaving.command();
            c.pending.push_back(Pending {
                partition: p,
                carried: channels.len(),
                channels,
                sent: now,
                probe: None,
            });
        }
    }

    /// `SUNSUBSCRIBE` of `names` (partition `p`) on `conn`, when it is up;
    /// subscribes of them still awaiting their reply on `conn` no longer
    /// count for them.
    pub(crate) fn unsubscribe(&mut self, conn: ConnId, p: u32, names: Vec<Channel>) {
        if !self.is_up(conn) {
            return;
        }
        // A reply still due for them speaks of the subscription undone here:
        // it must not confirm a later subscribe of the same channel.
        if let Some(c) = self.conns.get_mut(&conn) {
            let gone: alloc::collections::BTreeSet<&Channel> = names.iter().collect();
            for pending in &mut c.pending {
                pending.channels.retain(|n| !gone.contains(n));
            }
            c.leaving.unsubscribed(&names);
        }
        let slot = self.parts.get(p as usize).map_or(0, |x| x.slot);
        for chunk in names.chunks(self.cfg.batch) {
            self.emit(Command::Unsubscribe {
                conn,
                partition: p,
                slot,
                channels: chunk.to_vec(),
            });
        }
    }
}
