//! Admission, replies, refusals, due retries, releases and expiry of the
//! publish core.

use alloc::vec::Vec;

use super::{Failure, Output, PublishCore, Reply, Target, Verdict};
use crate::hold::{Due, Held, Offer, Refused};
use crate::time::Time;

/// The most batches one slot releases per look (publishes keep joining
/// while a batch is written).
const RELEASE_BATCHES: usize = 64;

impl<A: Clone + PartialEq, M: Held> PublishCore<A, M> {
    /// A publish the fast path did not send (something is held, or its
    /// slot has no owner in the table): behind the slot's held
    /// publishes, to its owner, held (no owner known, the hold on),
    /// refused for now (no owner, the hold off), or failed (closing).
    pub fn handle_publish(&mut self, now: Time, msg: M) -> Verdict<M> {
        let msg = if self.holds_any() {
            match self.hold.offer(now, msg) {
                Offer::Free(m) => m,
                offer => return self.offered(offer, false),
            }
        } else {
            msg
        };
        if self.routes.owner(msg.slot()).is_some() {
            return Verdict::Owner(msg);
        }
        if self.closing {
            return Verdict::Fail {
                msg,
                why: Failure::Shutdown,
            };
        }
        if self.hold_on() {
            return self.hold(now, msg);
        }
        // No owner known yet: retried after a backoff, with a (coalesced)
        // refresh.
        self.refused(now, msg)
    }

    /// What came back for a publish sent to a node (a probe's answer, or
    /// anything but a plain reply).
    pub fn handle_reply(&mut self, now: Time, mut msg: M, reply: Reply) -> Verdict<M> {
        match reply {
            Reply::Taken => {
                if msg.probe() {
                    msg.set_probe(false);
                    self.hold.unpark(msg.slot());
                }
                Verdict::Done(msg)
            }
            // Closed before it was written: nothing ran, so it goes again
            // wherever the slot lives now.
            Reply::NotWritten if !self.closing && *msg.redirects() < self.cfg.max_redirects => {
                *msg.redirects() += 1;
                self.handle_publish(now, msg)
            }
            // It may have run: sent again it could run twice. Never resent.
            Reply::Lost | Reply::NotWritten | Reply::Other => self.fail(msg, Failure::Reported),
            // Nothing was sent: held for the slot's next reachable owner.
            Reply::NotConnected if !self.closing && self.hold_on() => self.hold(now, msg),
            Reply::NotConnected => self.fail(msg, Failure::Reported),
            // A redirect or a refusal did not run, and nothing is retried
            // once closing.
            _ if self.closing => self.fail(msg, Failure::Shutdown),
            Reply::Moved { slot, to } => self.redirect(now, msg, slot, to, false),
            Reply::Ask { slot, to } => self.redirect(now, msg, slot, to, true),
            Reply::TryAgain | Reply::ClusterDown => self.refused(now, msg),
        }
    }

    /// A `MOVED` (`asking` false) moves the slot's route to `to`, and the
    /// publish follows it; an `ASK` sends it there once, the route kept.
    /// (A command's redirect takes the same route change:
    /// [`PublishCore::handle_command_reply`].)
    fn redirect(
        &mut self,
        now: Time,
        mut msg: M,
        slot: u16,
        to: Target,
        asking: bool,
    ) -> Verdict<M> {
        if let Err(e) = self.policy.redirect(msg.redirects()) {
            return self.fail(msg, e.into());
        }
        let node = match to {
            Target::Node(n) => n,
            // No usable address: refused for now, as with no owner
            // known; the refreshed map says where the slot lives.
            Target::NoAddress => return self.refused(now, msg),
            Target::CannotConnect => return self.fail(msg, Failure::CannotConnect),
        };
        if !asking {
            self.route_slot(now, slot, node);
        }
        // Its slot is parked for an earlier publish (refused for now, or a
        // probe out): sent now it could be taken before that one. It waits
        // behind it in the hold.
        if self.hold_on() && !msg.probe() && self.hold.is_parked(msg.slot()) {
            let (offer, new) = self.hold.hold(now, msg);
            return self.offered(offer, new);
        }
        Verdict::Send { node, msg, asking }
    }

    /// Holds `msg` (its owner is unreachable).
    fn hold(&mut self, now: Time, msg: M) -> Verdict<M> {
        if self.closing {
            return self.fail(msg, Failure::Shutdown);
        }
        let (offer, new) = self.hold.hold(now, msg);
        self.offered(offer, new)
    }

    /// What the hold made of a publish it was given (`new`: that opened
    /// an entry).
    fn offered(&mut self, offer: Offer<M>, new: bool) -> Verdict<M> {
        match offer {
            Offer::Held(evicted) => Verdict::Held { evicted, wake: new },
            Offer::Full(m) | Offer::Free(m) => {
                let why = self.hold_full();
                self.fail(m, why)
            }
        }
    }

    /// A publish refused for now (`TRYAGAIN`, `CLUSTERDOWN`, no owner
    /// known): kept for its retry (with a refresh soon), held behind an
    /// earlier parked one, or given up at the end of its window.
    fn refused(&mut self, now: Time, msg: M) -> Verdict<M> {
        match self.hold.refused(now, msg, &self.policy) {
            Refused::GiveUp(m, e) => self.fail(m, e.into()),
            Refused::Later { at, parked } => {
                self.out.push_back(Output::RefreshSoon);
                Verdict::Waiting {
                    at,
                    parked,
                    wake: true,
                }
            }
            Refused::Held(offer, new) => {
                self.out.push_back(Output::RefreshSoon);
                self.offered(offer, new)
            }
        }
    }

    fn fail(&mut self, msg: M, why: Failure) -> Verdict<M> {
        let (msg, why) = self.failed(msg, why);
        Verdict::Fail { msg, why }
    }

    /// A verdict reached on the control thread: queued as outputs.
    fn carry(&mut self, v: Verdict<M>) {
        let out = match v {
            Verdict::Owner(msg) => match self.owner(msg.slot()) {
                Some(node) => Output::Submit {
                    node,
                    msg,
                    asking: false,
                },
                None => return,
            },
            Verdict::Send { node, msg, asking } => Output::Submit { node, msg, asking },
            Verdict::Done(_) | Verdict::Waiting { .. } => return,
            Verdict::Held { evicted, .. } => {
                let why = self.hold_full();
                for msg in evicted {
                    self.out.push_back(Output::Fail { msg, why });
                }
                return;
            }
            Verdict::Fail { msg, why } => Output::Fail { msg, why },
        };
        self.out.push_back(out);
    }

    /// Time passed (or the control thread looks anyway): gates past their
    /// timeout open and due markers go out, due retries go (alone to an
    /// owner that is up when their slot is parked for them), held
    /// publishes go to owners that are up, and those held too long fail;
    /// commands due (a retry, or an owner known or their wait over) go or
    /// fail.
    pub fn handle_timeout(&mut self, now: Time) {
        self.looked = now;
        if self.gates.poll_timeout().is_some_and(|t| t <= now) {
            self.gates.handle_timeout(now);
            self.run_gates(now);
        }
        for (msg, parked) in self.hold.take_due(now) {
            let owner = self.owner(msg.slot()).filter(|&n| self.is_up(n));
            let v = match self.hold.due(now, msg, parked, owner.is_some()) {
                Due::Probe(msg) => match owner {
                    Some(node) => Verdict::Send {
                        node,
                        msg,
                        asking: false,
                    },
                    None => self.handle_publish(now, msg),
                },
                Due::Held(offer, new) => self.offered(offer, new),
                Due::Route(msg) => self.handle_publish(now, msg),
            };
            self.carry(v);
        }
        if self.holds_any() {
            self.release(now);
        }
        self.commands_due(now);
    }

    /// Held publishes: sends what an owner that is up can take (oldest
    /// first), fails what was held too long.
    fn release(&mut self, now: Time) {
        let hold_on = self.hold_on();
        for slot in self.hold.releasable() {
            for _ in 0..RELEASE_BATCHES {
                let owner = self.owner(slot).filter(|&n| !hold_on || self.is_up(n));
                let Some(node) = owner else {
                    // Unreachable (or none): a probe first once it is.
                    self.hold.probe_next(slot);
                    if !hold_on {
                        // A gate opened on a slot with no owner and no
                        // hold: refused for now, as with no owner known.
                        self.refuse_slot(now, slot);
                    }
                    break;
                };
                let Some(batch) = self.hold.take(slot) else {
                    break;
                };
                for msg in batch {
                    self.out.push_back(Output::Submit {
                        node,
                        msg,
                        asking: false,
                    });
                }
            }
        }
        if hold_on {
            for msg in self.hold.expired(now) {
                let held = msg
                    .held_since()
                    .map_or(core::time::Duration::ZERO, |t| now.since(t));
                let (msg, why) = self.failed(msg, Failure::Expired { held });
                self.out.push_back(Output::Fail { msg, why });
            }
        }
    }

    /// Everything `slot` holds is refused for now (no owner, no hold).
    fn refuse_slot(&mut self, now: Time, slot: u16) {
        let mut all: Vec<M> = Vec::new();
        while let Some(batch) = self.hold.take(slot) {
            all.extend(batch);
        }
        for msg in all {
            let v = self.refused(now, msg);
            self.carry(v);
        }
    }
}
