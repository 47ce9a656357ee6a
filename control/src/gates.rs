//! Route gates: publish order across a publish route change, decided
//! without I/O or a clock.
//!
//! When a slot's publish route moves (a new map, a `MOVED`), publishes the
//! old route accepted may still be on their way to the slot's subscribers.
//! The driver holds the slot's new publishes behind a gate
//! ([`Gates::close`]) and sends them to the new route only when
//! [`GateCommand::Open`] says so:
//!
//! 1. [`GateCommand::Barrier`]: a `PING` on the old route after every
//!    publish sent there; its reply means each of them was answered
//!    ([`Gates::handle_barrier`]).
//! 2. An answer is not a delivery when the old node became a replica of the
//!    new owner (a failover): a replica accepts `SPUBLISH` and forwards it
//!    over the cluster bus, which may take longer than a direct publish.
//!    So the barrier's reply starts [`GateCommand::Marker`]s, one every
//!    `marker_every`: a publish of a marker on the old route, which comes
//!    back on this instance's subscription at the new owner once every
//!    earlier publish was forwarded (the bus keeps their order). The
//!    marker's return, or its refusal (`MOVED`: the old node is still a
//!    primary and forwards nothing), opens the gate
//!    ([`Gates::handle_marker`]). A marker needs the new owner: a gate
//!    closed with none known ([`Gates::close`]'s `owner_known`: a map read
//!    mid-change that shows the slots unassigned) waits after its barrier
//!    until the driver learns one ([`Gates::handle_owner`]); the old node
//!    may meanwhile have become that owner's replica and forward.
//! 3. A barrier that fails (the old node is gone) opens the gate at once;
//!    a gate still closed `timeout` after it closed opens anyway, marked
//!    `timed_out` (the only way a later publish can overtake an earlier
//!    one: the driver counts it).
//!
//! ```
//! use control::{GateCommand, Gates, Time};
//! use core::time::Duration;
//! let ms = Duration::from_millis;
//! let mut gates = Gates::new(ms(1000), ms(20));
//! let token = gates.close(Time::ZERO, "old node", true);
//! assert_eq!(gates.poll_command(), Some(GateCommand::Barrier { token }));
//! assert_eq!(gates.route(token), Some(&"old node"));
//! gates.handle_barrier(Time::from_millis(3), token, true);
//! assert_eq!(gates.poll_command(), Some(GateCommand::Marker { token }));
//! gates.handle_marker(token);
//! assert_eq!(
//!     gates.poll_command(),
//!     Some(GateCommand::Open { token, timed_out: false })
//! );
//! assert!(gates.is_empty() && gates.poll_timeout().is_none());
//! ```

use alloc::collections::{BTreeMap, VecDeque};
use core::time::Duration;

use crate::time::Time;

/// What the driver does for the gates, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateCommand {
    /// Send the barrier (a `PING`) of gate `token` on its old route, after
    /// everything sent there; its answer goes to
    /// [`Gates::handle_barrier`].
    Barrier {
        /// The gate.
        token: u64,
    },
    /// Send a marker of gate `token` on its old route (where the new
    /// owner's service channel is known; skipped otherwise, the next one
    /// follows); its return or refusal goes to [`Gates::handle_marker`].
    Marker {
        /// The gate.
        token: u64,
    },
    /// Gate `token` is open: its slots' held publishes may go to the new
    /// route. It is gone from [`Gates`].
    Open {
        /// The gate.
        token: u64,
        /// It opened because its time ran out, not because the old route
        /// was drained.
        timed_out: bool,
    },
}

/// One closed gate.
#[derive(Debug)]
struct Gate<R> {
    route: R,
    since: Time,
    /// A new owner is known: markers can go out.
    owner_known: bool,
    /// The barrier was answered.
    barrier_answered: bool,
    /// When the next marker is due (set once the barrier was answered and
    /// the owner is known).
    marker_due: Option<Time>,
}

/// The closed gates of one instance's publish routes; `R` is what the
/// driver keeps of each gate's old route.
#[derive(Debug)]
pub struct Gates<R> {
    gates: BTreeMap<u64, Gate<R>>,
    next_token: u64,
    out: VecDeque<GateCommand>,
    timeout: Duration,
    marker_every: Duration,
}

impl<R> Gates<R> {
    /// No gate closed; a gate opens at the latest `timeout` after it
    /// closed, and its markers go out every `marker_every`.
    pub fn new(timeout: Duration, marker_every: Duration) -> Gates<R> {
        Gates {
            gates: BTreeMap::new(),
            next_token: 0,
            out: VecDeque::new(),
            timeout,
            marker_every,
        }
    }

    /// The longest a gate stays closed.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Closes a new gate for slots whose route leaves `route`, and returns
    /// its token (the driver gates the slots with it, then carries out the
    /// [`GateCommand::Barrier`] this queues). `owner_known`: the slots'
    /// new owner is known (markers can follow the barrier); if not, the
    /// driver says when it is ([`Gates::handle_owner`]).
    pub fn close(&mut self, now: Time, route: R, owner_known: bool) -> u64 {
        self.next_token += 1;
        let token = self.next_token;
        self.gates.insert(
            token,
            Gate {
                route,
                since: now,
                owner_known,
                barrier_answered: false,
                marker_due: None,
            },
        );
        self.out.push_back(GateCommand::Barrier { token });
        token
    }

    /// The old route of gate `token`, while it is closed.
    pub fn route(&self, token: u64) -> Option<&R> {
        self.gates.get(&token).map(|g| &g.route)
    }

    /// The old route of gate `token`, to update, while it is closed.
    pub fn route_mut(&mut self, token: u64) -> Option<&mut R> {
        self.gates.get_mut(&token).map(|g| &mut g.route)
    }

    /// Closed gates whose slots' new owner is not known yet.
    pub fn waiting_for_owner(&self) -> impl Iterator<Item = u64> + '_ {
        self.gates
            .iter()
            .filter(|(_, g)| !g.owner_known)
            .map(|(&t, _)| t)
    }

    /// The old routes of every closed gate.
    pub fn routes(&self) -> impl Iterator<Item = &R> {
        self.gates.values().map(|g| &g.route)
    }

    /// No gate is closed.
    pub fn is_empty(&self) -> bool {
        self.gates.is_empty()
    }

    /// Closed gates.
    pub fn len(&self) -> usize {
        self.gates.len()
    }

    /// The barrier of gate `token` was answered (`answered`) or failed.
    pub fn handle_barrier(&mut self, now: Time, token: u64, answered: bool) {
        let Some(g) = self.gates.get_mut(&token) else {
            return; // opened meanwhile (timed out)
        };
        if !answered {
            self.open(token, false);
            return;
        }
        g.barrier_answered = true;
        if g.owner_known {
            // Markers next: the old node may forward what it accepted.
            g.marker_due = Some(now + self.marker_every);
            self.out.push_back(GateCommand::Marker { token });
        }
    }

    /// The new owner of gate `token`'s slots is known now (the driver
    /// updated its route, see [`Gates::route_mut`]): markers follow its
    /// barrier.
    pub fn handle_owner(&mut self, now: Time, token: u64) {
        let Some(g) = self.gates.get_mut(&token) else {
            return;
        };
        if g.owner_known {
            return;
        }
        g.owner_known = true;
        if g.barrier_answered {
            g.marker_due = Some(now + self.marker_every);
            self.out.push_back(GateCommand::Marker { token });
        }
    }

    /// A marker of gate `token` came back at the new owner, or the old
    /// route refused it.
    pub fn handle_marker(&mut self, token: u64) {
        if self.gates.contains_key(&token) {
            self.open(token, false);
        }
    }

    /// Time passed: gates past their timeout open, due markers go out.
    pub fn handle_timeout(&mut self, now: Time) {
        let stale: alloc::vec::Vec<u64> = self
            .gates
            .iter()
            .filter(|(_, g)| now.since(g.since) >= self.timeout)
            .map(|(&t, _)| t)
            .collect();
        for token in stale {
            self.open(token, true);
        }
        for (&token, g) in self.gates.iter_mut() {
            if g.marker_due.is_some_and(|t| t <= now) {
                g.marker_due = Some(now + self.marker_every);
                self.out.push_back(GateCommand::Marker { token });
            }
        }
    }

    /// When [`Gates::handle_timeout`] is due next.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.gates
            .values()
            .map(|g| {
                let t = g.since + self.timeout;
                g.marker_due.map_or(t, |m| m.min(t))
            })
            .min()
    }

    /// The next thing to do.
    pub fn poll_command(&mut self) -> Option<GateCommand> {
        self.out.pop_front()
    }

    fn open(&mut self, token: u64, timed_out: bool) {
        self.gates.remove(&token);
        self.out.push_back(GateCommand::Open { token, timed_out });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn drain(g: &mut Gates<u8>) -> Vec<GateCommand> {
        core::iter::from_fn(|| g.poll_command()).collect()
    }

    #[test]
    fn a_gate_opens_on_its_marker_and_one_with_no_known_owner_waits_for_it() {
        let mut g = Gates::new(ms(1000), ms(20));
        let known = g.close(Time::ZERO, 1, true);
        let unknown = g.close(Time::ZERO, 2, false);
        let early = g.close(Time::ZERO, 3, false);
        assert_eq!(
            drain(&mut g),
            [
                GateCommand::Barrier { token: known },
                GateCommand::Barrier { token: unknown },
                GateCommand::Barrier { token: early }
            ]
        );
        assert_eq!(g.waiting_for_owner().collect::<Vec<_>>(), [unknown, early]);
        // The owner of `early` is known before its barrier is answered.
        g.handle_owner(Time::from_millis(1), early);
        assert!(drain(&mut g).is_empty());
        g.handle_barrier(Time::from_millis(5), known, true);
        g.handle_barrier(Time::from_millis(5), unknown, true);
        g.handle_barrier(Time::from_millis(5), early, true);
        // An answered barrier is no delivery: the old node may forward.
        // With no owner known, there is nothing to mark yet.
        assert_eq!(
            drain(&mut g),
            [
                GateCommand::Marker { token: known },
                GateCommand::Marker { token: early }
            ]
        );
        g.handle_marker(early);
        // No marker back yet: one every 20 ms.
        assert_eq!(g.poll_timeout(), Some(Time::from_millis(25)));
        g.handle_timeout(Time::from_millis(25));
        assert_eq!(
            drain(&mut g),
            [
                GateCommand::Open {
                    token: early,
                    timed_out: false
                },
                GateCommand::Marker { token: known }
            ]
        );
        g.handle_marker(known);
        g.handle_marker(known); // a second one back: nothing more
        assert_eq!(
            drain(&mut g),
            [GateCommand::Open {
                token: known,
                timed_out: false
            }]
        );
        // The gate with no owner still waits, until its timeout at most.
        assert_eq!(g.route(unknown), Some(&2));
        assert_eq!(g.poll_timeout(), Some(Time::from_millis(1000)));
        *g.route_mut(unknown).unwrap() = 20;
        g.handle_owner(Time::from_millis(40), unknown);
        g.handle_owner(Time::from_millis(41), unknown); // once is enough
        assert_eq!(drain(&mut g), [GateCommand::Marker { token: unknown }]);
        assert_eq!(g.waiting_for_owner().count(), 0);
        assert_eq!(g.poll_timeout(), Some(Time::from_millis(60)));
        g.handle_marker(unknown);
        assert_eq!(
            drain(&mut g),
            [GateCommand::Open {
                token: unknown,
                timed_out: false
            }]
        );
        assert!(g.is_empty());
    }

    #[test]
    fn a_failed_barrier_opens_at_once_and_a_silent_route_at_the_timeout() {
        let mut g = Gates::new(ms(1000), ms(20));
        let gone = g.close(Time::ZERO, 1, true);
        let silent = g.close(Time::from_millis(10), 2, true);
        drain(&mut g);
        g.handle_barrier(Time::from_millis(1), gone, false);
        assert_eq!(
            drain(&mut g),
            [GateCommand::Open {
                token: gone,
                timed_out: false
            }]
        );
        assert_eq!(g.route(silent), Some(&2));
        assert_eq!(g.poll_timeout(), Some(Time::from_millis(1010)));
        g.handle_timeout(Time::from_millis(1009));
        assert!(drain(&mut g).is_empty());
        g.handle_timeout(Time::from_millis(1010));
        assert_eq!(
            drain(&mut g),
            [GateCommand::Open {
                token: silent,
                timed_out: true
            }]
        );
        // Its late barrier reply finds nothing.
        g.handle_barrier(Time::from_millis(1200), silent, true);
        assert!(drain(&mut g).is_empty() && g.poll_timeout().is_none());
    }
}
