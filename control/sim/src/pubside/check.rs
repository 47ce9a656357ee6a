//! The publish side's properties: each publish's end (P2, P3) as it
//! comes, order and routes (P1, P4) at the end of the run.

use alloc::format;
use alloc::vec::Vec;
use core::time::Duration;

use control::publish::Failure;
use control::Time;

use crate::drive::Sim;

impl Sim {
    /// Publish `seq` ends now (`taken`, or failed).
    pub(super) fn end(&mut self, seq: u64, taken: bool) {
        if let Some(e) = self.publ.ended.get(&seq) {
            self.pfail(&format!("{seq} ended twice ({e:?}, now taken {taken})"));
        }
        // P3: within its bound, plus its time on the wire, plus a gate's
        // timeout for each gate its slot went through meanwhile (gated
        // time is not the hold's: a route flipping back and forth, as
        // stale maps make it, gates the slot again each time).
        let made = self.publ.made.get(&seq).copied().unwrap_or(Time::ZERO);
        let wire: Duration = (self.publ.flights.get(&seq).into_iter().flatten())
            .map(|f| f.answer.map_or(self.now, |a| a.1).since(f.at))
            .sum();
        let slot = self.publ.slot_of.get(&seq).copied().unwrap_or_default();
        let gates = (self.publ.gate_closes.get(&slot).into_iter().flatten())
            .filter(|&&t| t >= made)
            .count()
            .max(1);
        let gated = self.publ.core.config().gate_timeout * gates as u32;
        let bound = self.publ.bound + gated;
        if self.now.since(made) > bound + wire + Duration::from_millis(1) {
            self.pfail(&format!(
                "{seq} made at {made} ended at {} ({wire:?} on the wire, {gates} gates, bound {bound:?})",
                self.now
            ));
        }
        self.publ.ended.insert(seq, (self.now, taken));
        if !taken {
            self.publ.totals.failed += 1;
        }
    }

    /// The core fails publish `seq`: never for closing (the sim does not
    /// close), and past the hold only after its limit.
    pub(super) fn failed(&mut self, seq: u64, why: Failure) {
        let early = match why {
            Failure::Shutdown => true,
            Failure::Expired { held } => held < self.publ.hold_limit,
            _ => false,
        };
        if early {
            self.pfail(&format!("{seq} failed with {why:?}"));
        }
        self.end(seq, false);
    }

    /// The publish side's checks at the end of the run.
    pub(crate) fn pub_final_check(&mut self) {
        if !self.publ.on {
            return;
        }
        // Every publish ended, and the core keeps nothing.
        let stats = self.publ.core.stats();
        if self.publ.ended.len() != self.publ.made.len()
            || self.publ.core.holds_any()
            || stats.waiting != 0
        {
            let open: Vec<&u64> = (self.publ.made.keys())
                .filter(|s| !self.publ.ended.contains_key(s))
                .collect();
            self.pfail(&format!(
                "{} of {} ended (open {open:?}), the core still keeps {stats:?}",
                self.publ.ended.len(),
                self.publ.made.len()
            ));
        }
        // P2: what was taken ended taken, unless it was lost.
        for seq in &self.publ.taken {
            let ok = self.publ.ended.get(seq).is_some_and(|e| e.1);
            if !ok && !self.publ.lost.contains(seq) {
                self.pfail(&format!(
                    "{seq} taken but ended {:?}",
                    self.publ.ended.get(seq)
                ));
            }
        }
        // P1: order per slot, with the hold on (with it off a refused
        // publish waits for its retry alone: nothing parks its slot).
        let delivered = core::mem::take(&mut self.publ.delivered);
        let hold_on = !self.publ.hold_limit.is_zero();
        for (slot, seqs) in delivered.iter().filter(|_| hold_on) {
            for (i, &b) in seqs.iter().enumerate() {
                for &a in seqs[i + 1..].iter().filter(|&&a| a < b) {
                    if self.publ.timed_out.contains(slot) {
                        self.publ.totals.timeout_reorders += 1;
                    } else if self.written_while_on_wire(b, a) {
                        self.publ.totals.inflight_reorders += 1;
                    } else {
                        self.pfail(&format!(
                            "slot {slot}: {a} reached subscribers after {b} \
                             ({b}'s writes {:?}; {a}'s writes {:?})",
                            self.publ.flights.get(&b),
                            self.publ.flights.get(&a)
                        ));
                    }
                }
            }
        }
        // P4: every watched slot routed to its live owner.
        if let Some(slot) = self.stale_slots().first() {
            let owner = self.cluster.owner(*slot);
            let route = self.publ.core.owner(*slot).and_then(|id| self.addr_of(id));
            self.pfail(&format!(
                "slot {slot} routed to {route:?} at the end, owned by node {owner:?}"
            ));
        }
    }

    /// P4, 10 s after the last fault (before the 30 s poll): a slot
    /// published to a second after the world last changed (a stale map
    /// reply may still be on its way until then) is routed to a node that
    /// takes its publishes: its owner, or a live replica of it, which
    /// forwards them (nothing tells a publisher that a failover demoted
    /// it).
    pub(super) fn converged(&mut self) {
        let last = self.publ.quiet + Duration::from_secs(1);
        for slot in self.stale_slots() {
            self.publ.totals.stale_routes += 1;
            let owner = self.cluster.owner(slot);
            let route = self.publ.core.owner(slot).and_then(|id| self.addr_of(id));
            let node = route.as_ref().and_then(|a| self.cluster.node_at(a));
            if node
                .zip(owner)
                .is_some_and(|(n, o)| self.cluster.serves(n, o))
            {
                self.publ.totals.forwarded_routes += 1;
                continue;
            }
            if self.publ.last_made.get(&slot).is_none_or(|&t| t < last) {
                continue;
            }
            if node.is_some_and(|n| !self.cluster.nodes[n].alive) {
                self.publ.totals.dead_routes += 1;
            } else {
                self.pfail(&format!(
                    "slot {slot}, published to after {last}, routed to node {node:?} at {}, \
                     owned by node {owner:?}",
                    self.now
                ));
            }
        }
    }

    /// Watched slots the core routes elsewhere than their live owner.
    pub(super) fn stale_slots(&self) -> Vec<u16> {
        let watched = &self.publ.core.config().watched;
        (watched.iter().copied())
            .filter(|&slot| {
                let owner = self
                    .cluster
                    .owner(slot)
                    .map(|o| &self.cluster.nodes[o].addr);
                let route = self.publ.core.owner(slot).and_then(|id| self.addr_of(id));
                owner != route.as_ref()
            })
            .collect()
    }

    /// Whether `b`'s last write went out while a write of `a` was on the
    /// wire (its answer not read yet).
    pub(super) fn written_while_on_wire(&self, b: u64, a: u64) -> bool {
        let Some(s) = (self.publ.flights.get(&b))
            .and_then(|f| f.last())
            .map(|f| f.step)
        else {
            return false;
        };
        self.publ.flights.get(&a).is_some_and(|f| {
            f.iter()
                .any(|w| w.step <= s && w.answer.is_none_or(|t| s < t.0))
        })
    }
}
