//! [`Sample`]: a publish that carries only what [`Held`] reads, for the
//! tests, simulators, golden transcripts and fuzzers that drive the hold
//! and the publish core without an engine.

use crate::hold::Held;
use crate::time::Time;

/// A publish with no payload: its sequence number, slot and cost, and the
/// state the hold and the publish core keep on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Its place in publish order.
    pub seq: u64,
    /// Its slot.
    pub slot: u16,
    /// What it counts against the hold's byte bound (name plus payload).
    pub cost: usize,
    /// When it was first held.
    pub since: Option<Time>,
    /// Sent alone, its slot parked until its outcome.
    pub probe: bool,
    /// Refusals so far.
    pub refusals: u32,
    /// When it was first refused.
    pub first: Option<Time>,
    /// Redirects followed.
    pub redirects: u32,
}

impl Sample {
    /// Publish `seq` to `slot`, costing `cost`, never held, refused or
    /// redirected yet.
    pub fn new(seq: u64, slot: u16, cost: usize) -> Sample {
        Sample {
            seq,
            slot,
            cost,
            since: None,
            probe: false,
            refusals: 0,
            first: None,
            redirects: 0,
        }
    }
}

impl Held for Sample {
    fn seq(&self) -> u64 {
        self.seq
    }
    fn slot(&self) -> u16 {
        self.slot
    }
    fn cost(&self) -> usize {
        self.cost
    }
    fn held_since(&self) -> Option<Time> {
        self.since
    }
    fn mark_held(&mut self, now: Time) {
        self.since.get_or_insert(now);
    }
    fn probe(&self) -> bool {
        self.probe
    }
    fn set_probe(&mut self, on: bool) {
        self.probe = on;
    }
    fn refusals(&mut self) -> &mut u32 {
        &mut self.refusals
    }
    fn first_refused(&mut self, now: Time) -> Time {
        *self.first.get_or_insert(now)
    }
    fn redirects(&mut self) -> &mut u32 {
        &mut self.redirects
    }
}
